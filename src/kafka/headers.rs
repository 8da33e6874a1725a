//! Kafka record headers with names as bytes.
//!
//! A header name is bytes on the wire, and other clients send any bytes; rdkafka's `Headers`
//! iterator unwraps every name as UTF-8 and panics on the first one that is not, and its
//! `Header` type takes names as `&str`. These functions read and build headers through
//! librdkafka's C API instead, so that a record with such a header reaches the handler, the
//! dead-letter topic and a replay intact.
//!
//! librdkafka hands names out as NUL-terminated strings, so a name is read up to its first NUL
//! byte (Kafka's own clients cannot read past one either).
#![allow(unsafe_code)]

use std::ffi::CStr;

use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedHeaders, OwnedHeaders};

use crate::record::RecordHeader;

/// Header sets that can be read as librdkafka's (both of rdkafka's header types).
pub trait RawHeaders {
    /// The headers as librdkafka's.
    fn as_raw(&self) -> &BorrowedHeaders;
}

impl RawHeaders for BorrowedHeaders {
    fn as_raw(&self) -> &BorrowedHeaders {
        self
    }
}

impl RawHeaders for OwnedHeaders {
    fn as_raw(&self) -> &BorrowedHeaders {
        self.as_borrowed()
    }
}

fn native(headers: &BorrowedHeaders) -> *const rdsys::rd_kafka_headers_t {
    // `BorrowedHeaders` is librdkafka's header list seen through a reference (rdkafka makes
    // it by casting the native pointer the same way).
    headers as *const BorrowedHeaders as *const rdsys::rd_kafka_headers_t
}

/// Every header of `headers`, in order: its name (up to its first NUL byte) and its value,
/// borrowed from the header list.
fn entries(headers: &BorrowedHeaders) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
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

/// Every header, in order, with its name as bytes.
pub fn read(headers: &impl RawHeaders) -> Vec<RecordHeader> {
    entries(headers.as_raw())
        .map(|(key, value)| RecordHeader {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        })
        .collect()
}

/// The value of the first header named `name`: `Some(None)` for a header with a null value,
/// `None` when there is no such header.
pub fn find<'a>(headers: &'a impl RawHeaders, name: &[u8]) -> Option<Option<&'a [u8]>> {
    entries(headers.as_raw())
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
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
    fn names_that_are_not_utf8_are_read_and_written_as_bytes() {
        let headers = OwnedHeaders::new();
        let headers = add(headers, b"trace", Some(b"t1"));
        let headers = add(headers, &[0xff, 0xfe, b'x'], Some(&[0x80]));
        let headers = add(headers, b"empty", None);
        let read = read(&headers);
        assert_eq!(
            read,
            vec![
                RecordHeader {
                    key: b"trace".to_vec(),
                    value: Some(b"t1".to_vec())
                },
                RecordHeader {
                    key: vec![0xff, 0xfe, b'x'],
                    value: Some(vec![0x80])
                },
                RecordHeader {
                    key: b"empty".to_vec(),
                    value: None
                },
            ]
        );
        assert_eq!(find(&headers, &[0xff, 0xfe, b'x']), Some(Some(&[0x80][..])));
        assert_eq!(find(&headers, b"empty"), Some(None));
        assert_eq!(find(&headers, b"missing"), None);
    }
}
