//! How the console shows a payload: pretty JSON when it is JSON, text when it is UTF-8, else
//! hex and base64 with the reason it is neither — and the schema id when it is in the
//! Confluent wire format (a zero byte, then the schema id as four bytes, big-endian).

use base64::Engine as _;
use serde::Serialize;

/// Bytes shown as hex at most; base64 holds them all.
pub const HEX_BYTES: usize = 4096;

/// A payload, decoded as far as it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum PayloadView {
    /// No payload (a tombstone).
    None,
    /// JSON, pretty-printed.
    Json {
        /// The JSON, indented.
        pretty: String,
        /// The Confluent schema id in front of it, when it had one.
        #[serde(skip_serializing_if = "Option::is_none")]
        schema_id: Option<u32>,
    },
    /// UTF-8 text that is not JSON.
    Text {
        /// The text.
        text: String,
        /// Why it is not shown as JSON.
        why: String,
    },
    /// Bytes.
    Binary {
        /// The first [`HEX_BYTES`] bytes, as hex pairs separated by spaces.
        hex: String,
        /// Every byte, base64.
        base64: String,
        /// Why it is not shown as text.
        why: String,
        /// The Confluent schema id, when it is in the Confluent wire format.
        #[serde(skip_serializing_if = "Option::is_none")]
        schema_id: Option<u32>,
        /// Its length in bytes.
        length: usize,
    },
}

impl PayloadView {
    /// The view of `payload`.
    pub fn of(payload: Option<&[u8]>) -> PayloadView {
        let Some(bytes) = payload else {
            return PayloadView::None;
        };
        let (schema_id, body) = match bytes {
            [0, a, b, c, d, rest @ ..] => (Some(u32::from_be_bytes([*a, *b, *c, *d])), rest),
            _ => (None, bytes),
        };
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
            if let Ok(pretty) = serde_json::to_string_pretty(&value) {
                return PayloadView::Json { pretty, schema_id };
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(text) if schema_id.is_none() => {
                let why = match serde_json::from_str::<serde_json::Value>(text) {
                    Err(e) => format!("not JSON: {e}"),
                    Ok(_) => "not JSON".into(),
                };
                PayloadView::Text {
                    text: text.to_string(),
                    why,
                }
            }
            utf8 => PayloadView::Binary {
                hex: bytes
                    .iter()
                    .take(HEX_BYTES)
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                base64: base64::engine::general_purpose::STANDARD.encode(bytes),
                why: match (schema_id, utf8) {
                    (Some(id), _) => format!(
                        "Confluent wire format, schema id {id}: the body is not JSON (Avro or Protobuf needs its schema)"
                    ),
                    (None, Err(e)) => format!("not UTF-8: {e}"),
                    (None, Ok(_)) => "not JSON".into(),
                },
                schema_id,
                length: bytes.len(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_pretty_printed() {
        assert_eq!(
            PayloadView::of(Some(br#"{"a":[1,2]}"#)),
            PayloadView::Json {
                pretty: "{\n  \"a\": [\n    1,\n    2\n  ]\n}".into(),
                schema_id: None
            }
        );
    }

    #[test]
    fn text_that_is_not_json_says_why() {
        match PayloadView::of(Some(b"<script>alert(1)</script>")) {
            PayloadView::Text { text, why } => {
                assert_eq!(text, "<script>alert(1)</script>");
                assert!(why.starts_with("not JSON: expected value"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bytes_are_hex_and_base64_with_the_reason() {
        match PayloadView::of(Some(&[0xff, 0xfe, 0x1b])) {
            PayloadView::Binary {
                hex,
                base64,
                why,
                schema_id,
                length,
            } => {
                assert_eq!(hex, "ff fe 1b");
                assert_eq!(base64, "//4b");
                assert!(why.starts_with("not UTF-8"), "{why}");
                assert_eq!((schema_id, length), (None, 3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_confluent_wire_format_names_its_schema_id() {
        let mut json = vec![0, 0, 0, 1, 0x2c];
        json.extend_from_slice(br#"{"sku":"x"}"#);
        assert!(matches!(
            PayloadView::of(Some(&json)),
            PayloadView::Json {
                schema_id: Some(300),
                ..
            }
        ));
        let avro = [0, 0, 0, 0, 7, 0x02, 0x06, 0xc3];
        match PayloadView::of(Some(&avro)) {
            PayloadView::Binary { schema_id, why, .. } => {
                assert_eq!(schema_id, Some(7));
                assert!(why.contains("schema id 7"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(PayloadView::of(None), PayloadView::None);
    }
}
