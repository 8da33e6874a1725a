//! The record's own Kafka headers as the target gets them, every one, in order, duplicates
//! kept, any bytes. Pure: headers in, text or JSON out, and back.
//!
//! - **One record per POST**: one HTTP header, `X-Kafka-Headers`, a comma-separated list of
//!   `name=value`, each percent-encoded byte for byte (every byte but `A-Z a-z 0-9 - . _ ~`
//!   as `%XX`), a header without a value (null) as `name` alone. One field whatever the number
//!   of headers (servers refuse requests of more than about 100 fields), exact whatever the
//!   case of a name (HTTP header names are not). Decoded in Python with
//!   `[tuple(unquote_to_bytes(p) for p in item.split("=", 1)) for item in value.split(",")]`.
//! - **Batches**: each item's `headers`, a JSON array of `{"name", "value"}`, with
//!   `"name_base64"` / `"value_base64"` for bytes that are not UTF-8 and `"value": null` for no
//!   value.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use crate::record::RecordHeader;

/// The HTTP header that carries the record's headers.
pub const HTTP_HEADER: &str = "X-Kafka-Headers";

/// The most the encoded headers of one record may take in [`HTTP_HEADER`] (servers refuse
/// longer header lines: nginx and Go at 8–16 KiB, hyper at 64 KiB in all).
pub const MAX_ENCODED_BYTES: usize = 16 * 1024;

/// `headers` as the value of [`HTTP_HEADER`]; `None` without headers. Too long for one
/// header line ([`MAX_ENCODED_BYTES`]): an error saying how long, for the record's permanent
/// failure.
pub fn encode(headers: &[RecordHeader]) -> Result<Option<String>, String> {
    if headers.is_empty() {
        return Ok(None);
    }
    let mut out = String::new();
    for (i, header) in headers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        percent(&mut out, &header.key);
        if let Some(value) = &header.value {
            out.push('=');
            percent(&mut out, value);
        }
    }
    if out.len() > MAX_ENCODED_BYTES {
        return Err(format!(
            "its {} headers take {} bytes encoded for {HTTP_HEADER}, more than the {MAX_ENCODED_BYTES} one HTTP header line may carry; \
             deliver it in batch mode (--batch-size, the headers travel in the body) or without them (--forward-headers false)",
            headers.len(),
            out.len()
        ));
    }
    Ok(Some(out))
}

/// The headers [`encode`] wrote, back; an error names what is not its encoding.
pub fn decode(text: &str) -> Result<Vec<RecordHeader>, String> {
    text.split(',')
        .map(|item| {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (item, None),
            };
            Ok(RecordHeader {
                key: unpercent(name)?,
                value: value.map(unpercent).transpose()?,
            })
        })
        .collect()
}

/// `headers` as a batch item's `headers`.
pub fn json(headers: &[RecordHeader]) -> Value {
    Value::Array(
        headers
            .iter()
            .map(|h| {
                let mut item = serde_json::Map::new();
                match std::str::from_utf8(&h.key) {
                    Ok(name) => item.insert("name".into(), json!(name)),
                    Err(_) => item.insert("name_base64".into(), json!(BASE64.encode(&h.key))),
                };
                match h.value.as_deref().map(std::str::from_utf8) {
                    None => item.insert("value".into(), Value::Null),
                    Some(Ok(value)) => item.insert("value".into(), json!(value)),
                    Some(Err(_)) => item.insert(
                        "value_base64".into(),
                        json!(BASE64.encode(h.value.as_deref().unwrap_or_default())),
                    ),
                };
                Value::Object(item)
            })
            .collect(),
    )
}

fn percent(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn unpercent(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("`{text}`: a `%` not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(key: &[u8], value: Option<&[u8]>) -> RecordHeader {
        RecordHeader {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn every_header_goes_in_order_with_duplicates_nulls_and_any_bytes() {
        let headers = vec![
            h(b"tenant-id", Some(b"acme")),
            h(b"Tenant-Id", Some(b"other case")),
            h(b"tenant-id", Some(b"again")),
            h(b"empty", Some(b"")),
            h(b"null", None),
            h(&[0xff, b',', b'='], Some(&[0x00, 0xfe, b'%'])),
        ];
        let text = encode(&headers).unwrap().unwrap();
        assert_eq!(
            text,
            "tenant-id=acme,Tenant-Id=other%20case,tenant-id=again,empty=,null,%FF%2C%3D=%00%FE%25"
        );
        assert!(reqwest::header::HeaderValue::from_str(&text).is_ok());
        assert_eq!(decode(&text).unwrap(), headers);
        assert_eq!(encode(&[]).unwrap(), None);
    }

    #[test]
    fn headers_too_long_for_one_line_are_refused_saying_what_to_do() {
        let big = vec![h(b"blob", Some(&[0u8; 8 * 1024]))];
        let error = encode(&big).unwrap_err();
        assert!(
            error.contains("24581 bytes") && error.contains("--batch-size"),
            "{error}"
        );
    }

    #[test]
    fn a_batch_item_names_bytes_that_are_not_text() {
        let out = json(&[
            h(b"ce_type", Some(b"order.created")),
            h(&[0xff], Some(&[0xfe])),
            h(b"null", None),
        ]);
        assert_eq!(
            out,
            json!([
                {"name": "ce_type", "value": "order.created"},
                {"name_base64": "/w==", "value_base64": "/g=="},
                {"name": "null", "value": null},
            ])
        );
    }

    proptest! {
        #[test]
        fn decoding_gives_back_the_headers_exactly(
            headers in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12))),
                1..20)
        ) {
            let headers: Vec<RecordHeader> = headers
                .into_iter()
                .map(|(key, value)| RecordHeader { key, value })
                .collect();
            let text = encode(&headers).unwrap().unwrap();
            prop_assert!(reqwest::header::HeaderValue::from_str(&text).is_ok());
            prop_assert_eq!(decode(&text).unwrap(), headers);
        }
    }
}
