//! Kafka record headers with names as bytes.
//!
//! A header name is bytes on the wire, and other clients send any bytes; rdkafka's `Headers`
//! iterator unwraps every name as UTF-8 and panics on the first one that is not, and its
//! `Header` type takes names as `&str`. These functions read and build headers through
//! librdkafka's C API instead (the crate `rdkafka-header-bytes`, beside this one, holds that
//! unsafe code), so that a record with such a header reaches the handler, the dead-letter
//! topic and a replay intact.
//!
//! librdkafka hands names out as NUL-terminated strings, so a name is read up to its first NUL
//! byte (Kafka's own clients cannot read past one either).
use rdkafka::message::{BorrowedHeaders, OwnedHeaders};
use rdkafka_header_bytes::entries;

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

/// The value of the first header named `name`: `Some(None)` for a header with a null value,
/// `None` when there is no such header.
pub fn find<'a>(headers: &'a impl RawHeaders, name: &[u8]) -> Option<Option<&'a [u8]>> {
    entries(headers.as_raw())
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Appends a header whose name is any bytes.
pub fn add(headers: OwnedHeaders, name: &[u8], value: Option<&[u8]>) -> OwnedHeaders {
    rdkafka_header_bytes::add(headers, name, value)
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
        let read: Vec<(&[u8], Option<&[u8]>)> = entries(headers.as_raw()).collect();
        assert_eq!(
            read,
            vec![
                (&b"trace"[..], Some(&b"t1"[..])),
                (&[0xff, 0xfe, b'x'][..], Some(&[0x80][..])),
                (&b"empty"[..], None),
            ]
        );
        assert_eq!(find(&headers, &[0xff, 0xfe, b'x']), Some(Some(&[0x80][..])));
        assert_eq!(find(&headers, b"empty"), Some(None));
        assert_eq!(find(&headers, b"missing"), None);
    }
}
