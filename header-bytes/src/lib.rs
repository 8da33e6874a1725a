//! Kafka record headers whose names are any bytes.
//!
//! A header name is bytes on the wire, and other clients send any bytes; rdkafka's `Headers`
//! iterator unwraps every name as UTF-8 and panics on the first one that is not, and its
//! `Header` type takes names as `&str`. These two functions read and build headers through
//! librdkafka's C API instead. librdkafka hands names out as NUL-terminated strings, so a name
//! is read up to its first NUL byte (Kafka's own clients cannot read past one either).
//!
//! This crate holds, with `rdkafka-oauth-token`, kafka-dlq's `unsafe` code, so that the
//! library can `#![forbid(unsafe_code)]`.

use std::ffi::CStr;

use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedHeaders, OwnedHeaders};

fn native(headers: &BorrowedHeaders) -> *const rdsys::rd_kafka_headers_t {
    // `BorrowedHeaders` is librdkafka's header list seen through a reference (rdkafka makes
    // it by casting the native pointer the same way).
    headers as *const BorrowedHeaders as *const rdsys::rd_kafka_headers_t
}

/// Every header of `headers`, in order: its name (up to its first NUL byte) and its value,
/// borrowed from the header list.
pub fn entries(headers: &BorrowedHeaders) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
    let ptr = native(headers);
    // SAFETY: `ptr` is a live header list for the lifetime of `headers`.
    let count = unsafe { rdsys::rd_kafka_header_cnt(ptr) };
    (0..count).map_while(move |idx| {
        let mut name = std::ptr::null();
        let mut value = std::ptr::null();
        let mut size = 0;
        // SAFETY: librdkafka returns a NUL-terminated name and a value of `size` bytes (or
        // null), both owned by the list, which outlives the borrow.
        unsafe {
            let err = rdsys::rd_kafka_header_get_all(ptr, idx, &mut name, &mut value, &mut size);
            if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                return None;
            }
            Some((
                CStr::from_ptr(name).to_bytes(),
                (!value.is_null()).then(|| std::slice::from_raw_parts(value as *const u8, size)),
            ))
        }
    })
}

/// Appends a header whose name is any bytes.
pub fn add(headers: OwnedHeaders, name: &[u8], value: Option<&[u8]>) -> OwnedHeaders {
    let ptr = native(headers.as_borrowed()) as *mut rdsys::rd_kafka_headers_t;
    let (value_ptr, value_len) = match value {
        Some(v) => (v.as_ptr() as *const std::ffi::c_void, v.len() as isize),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `headers` is owned here, so nothing else reads the list while librdkafka
    // appends to it; librdkafka copies the name (`name.len()` bytes) and the value.
    unsafe {
        rdsys::rd_kafka_header_add(
            ptr,
            name.as_ptr() as *const std::ffi::c_char,
            name.len() as isize,
            value_ptr,
            value_len,
        );
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_utf8_are_written_and_read_as_bytes() {
        let headers = OwnedHeaders::new();
        let headers = add(headers, b"trace", Some(b"t1"));
        let headers = add(headers, &[0xff, 0xfe, b'x'], Some(&[0x80]));
        let headers = add(headers, b"empty", None);
        let read: Vec<(&[u8], Option<&[u8]>)> = entries(headers.as_borrowed()).collect();
        assert_eq!(
            read,
            vec![
                (&b"trace"[..], Some(&b"t1"[..])),
                (&[0xff, 0xfe, b'x'][..], Some(&[0x80][..])),
                (&b"empty"[..], None),
            ]
        );
    }
}
