//! How the console shows a payload: pretty JSON when it is JSON, text when it is UTF-8, else
//! hex and base64 with the reason it is neither — and the schema id when it is in the
//! Confluent wire format (a zero byte, then the schema id as four bytes, big-endian).
//!
//! And how it is edited before a redrive ([`Editable`], [`edited`]): the **original bytes**,
//! never the view — the text exactly as it failed (no re-serialised JSON: key order, big
//! numbers and duplicate keys stay as they were), a payload that is not UTF-8 as base64, a
//! schema-framed payload's 5-byte prefix kept outside the text and put back in front, a
//! tombstone not at all. Text left unchanged sends the original bytes.

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

/// The Confluent wire format's prefix of `bytes` (a zero byte and a 4-byte schema id) and the
/// body after it, when `bytes` has one.
fn schema_framed(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    match bytes {
        [0, _, _, _, _, ..] => Some(bytes.split_at(5)),
        _ => None,
    }
}

/// How a payload is edited before a redrive, as the page pre-fills its editor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum Editable {
    /// As text: exactly the payload's text (after the schema prefix, when it has one); sent
    /// as `payload`.
    Text {
        /// The text, byte for byte the original.
        text: String,
        /// The schema prefix kept in front of the edited text (base64 of its 5 bytes).
        #[serde(skip_serializing_if = "Option::is_none")]
        schema_prefix: Option<String>,
    },
    /// As base64: a payload that is not UTF-8; sent as `payload_base64`.
    Base64 {
        /// Every byte, base64.
        base64: String,
    },
    /// Not at all.
    None {
        /// Why not.
        why: String,
    },
}

impl Editable {
    /// How `payload` (the dead letter's record's value; `None` for a tombstone) is edited.
    pub fn of(payload: Option<&[u8]>) -> Editable {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let Some(bytes) = payload else {
            return Editable::None {
                why: "a tombstone (no value) has nothing to edit; redrive it unchanged and it stays a tombstone".into(),
            };
        };
        if let Some((prefix, body)) = schema_framed(bytes) {
            return match std::str::from_utf8(body) {
                Ok(text) => Editable::Text {
                    text: text.to_string(),
                    schema_prefix: Some(b64(prefix)),
                },
                Err(_) => Editable::None {
                    why: format!(
                        "Confluent wire format, schema id {}: Avro or Protobuf is edited only decoded with its schema; redrive it unchanged",
                        u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]])
                    ),
                },
            };
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Editable::Text {
                text: text.to_string(),
                schema_prefix: None,
            },
            Err(_) => Editable::Base64 { base64: b64(bytes) },
        }
    }
}

/// The bytes an edit of `original` sends: `text` (an edit as text, [`Editable::Text`]) or
/// `base64` (one as base64, [`Editable::Base64`]), exactly one of them; or why the edit is
/// refused (the API answers 400 with it).
pub fn edited(
    original: Option<&[u8]>,
    text: Option<&str>,
    base64: Option<&str>,
) -> Result<Vec<u8>, String> {
    let editable = Editable::of(original);
    match (editable, text, base64) {
        (_, Some(_), Some(_)) => Err("payload and payload_base64: give one of them".into()),
        (_, None, None) => Err("payload or payload_base64: the edited payload is missing".into()),
        (Editable::None { why }, _, _) => Err(format!("payload: cannot be edited: {why}")),
        (Editable::Text { schema_prefix, .. }, Some(text), None) => {
            let mut bytes = Vec::with_capacity(text.len() + 5);
            if schema_prefix.is_some() {
                let (prefix, _) = schema_framed(original.unwrap_or_default())
                    .expect("a schema prefix was found");
                bytes.extend_from_slice(prefix);
            }
            bytes.extend_from_slice(text.as_bytes());
            Ok(bytes)
        }
        (Editable::Text { .. }, None, Some(_)) => Err(
            "payload_base64: this payload is text; edit it as payload (its schema prefix, if any, is kept)".into(),
        ),
        (Editable::Base64 { .. }, Some(_), None) => Err(
            "payload: this payload is not UTF-8 text; edit it as payload_base64".into(),
        ),
        (Editable::Base64 { .. }, None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("payload_base64: not base64: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_starts_from_the_exact_text_and_unchanged_sends_the_original_bytes() {
        let json = br#"{"b":1,"a":123456789012345678901234,"a":2}"#;
        let Editable::Text {
            text,
            schema_prefix,
        } = Editable::of(Some(json))
        else {
            panic!("text");
        };
        assert_eq!((text.as_bytes(), schema_prefix), (&json[..], None));
        assert_eq!(
            edited(Some(json), Some(&text), None).unwrap(),
            json.to_vec()
        );
        assert_eq!(
            edited(Some(json), Some(r#"{"b":2}"#), None).unwrap(),
            br#"{"b":2}"#.to_vec()
        );
    }

    #[test]
    fn a_schema_prefix_is_kept_in_front_of_the_edited_text() {
        let mut framed = vec![0, 0, 0, 0, 7];
        framed.extend_from_slice(br#"{"x":1}"#);
        let editable = Editable::of(Some(&framed));
        assert_eq!(
            editable,
            Editable::Text {
                text: r#"{"x":1}"#.into(),
                schema_prefix: Some("AAAAAAc=".into())
            }
        );
        assert_eq!(
            edited(Some(&framed), Some(r#"{"x":1}"#), None).unwrap(),
            framed
        );
        let changed = edited(Some(&framed), Some(r#"{"x":2}"#), None).unwrap();
        assert_eq!(&changed[..5], &[0, 0, 0, 0, 7]);
        let avro = [0, 0, 0, 0, 7, 0x02, 0xff, 0xc3];
        assert!(matches!(Editable::of(Some(&avro)), Editable::None { .. }));
        let refused = edited(Some(&avro), Some("x"), None).unwrap_err();
        assert!(refused.contains("schema id 7"), "{refused}");
    }

    #[test]
    fn bytes_are_edited_as_base64_and_a_tombstone_not_at_all() {
        let binary = [0xff, 0xfe, 0x00, 0x01];
        assert_eq!(
            Editable::of(Some(&binary)),
            Editable::Base64 {
                base64: "//4AAQ==".into()
            }
        );
        assert_eq!(
            edited(Some(&binary), None, Some("//4AAQ==")).unwrap(),
            binary
        );
        assert!(edited(Some(&binary), Some("x"), None)
            .unwrap_err()
            .contains("payload_base64"));
        assert!(edited(Some(&binary), None, Some("!!"))
            .unwrap_err()
            .contains("not base64"));
        assert!(matches!(Editable::of(None), Editable::None { .. }));
        assert!(edited(None, Some(""), None)
            .unwrap_err()
            .contains("tombstone"));
        assert!(edited(Some(b"t"), Some("a"), Some("b")).is_err());
        assert!(edited(Some(b"t"), None, None).is_err());
    }

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
