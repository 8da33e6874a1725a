//! How bytes are written in an envelope's JSON: embedded JSON, UTF-8 text or base64.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{EnvelopeDecodeError, EnvelopeHeader};
use crate::record::RecordHeader;

/// How a value is written in the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Encoding {
    /// Embedded as JSON, byte for byte (only a value that is valid JSON with no surrounding
    /// white space).
    Json,
    /// A JSON string holding the UTF-8 text.
    Utf8,
    /// A JSON string holding the standard base64 of the bytes.
    Base64,
    /// The record had no value (a tombstone); `payload` is `null`.
    None,
    /// The envelope did not fit the broker's size limit, so the dead letter's value is the
    /// original value itself, byte for byte, and this envelope (`payload` `null`) is in its
    /// [`HEADER_ENVELOPE`](super::HEADER_ENVELOPE) header. [`DlqReader`](crate::dlq_reader::DlqReader)
    /// puts the value back into the envelope, so readers see one of the other encodings.
    Detached,
    /// The record did not fit the broker's size limit even in the detached form, so the dead
    /// letter is a reference: this envelope with no payload and no source headers (the error,
    /// the coordinates `source.topic`/`partition`/`offset`, the key). [`DlqReader`](crate::dlq_reader::DlqReader)
    /// (super::DlqReader) reads the value and headers back from the source topic while it
    /// still retains the record, so `dlq show` and `dlq replay` work the same; once the
    /// source topic's retention has removed it, the value is gone.
    Reference,
}

/// A value as JSON for embedding: itself when it is one JSON value with nothing around it,
/// else a UTF-8 string, else base64; `null` for none.
pub(crate) fn encode_payload(payload: Option<&[u8]>) -> (Box<RawValue>, Encoding) {
    let Some(bytes) = payload else {
        return (raw("null"), Encoding::None);
    };
    if let Ok(text) = std::str::from_utf8(bytes) {
        // Embedded as JSON only when the text is one JSON value with nothing around it, so
        // that the embedded text is byte for byte the original.
        if let Ok(value) = serde_json::from_str::<Box<RawValue>>(text) {
            if value.get().len() == text.len() {
                return (value, Encoding::Json);
            }
        }
    }
    let (text, encoding) = encode_text(bytes);
    (
        RawValue::from_string(serde_json::to_string(&text).expect("a string serializes"))
            .expect("a serialized string is valid JSON"),
        encoding,
    )
}

pub(super) fn encode_text(bytes: &[u8]) -> (String, Encoding) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), Encoding::Utf8),
        Err(_) => (BASE64.encode(bytes), Encoding::Base64),
    }
}

pub(super) fn encode_header(header: &RecordHeader) -> EnvelopeHeader {
    let (key, key_encoding) = match encode_text(&header.key) {
        (key, Encoding::Utf8) => (key, None),
        (key, encoding) => (key, Some(encoding)),
    };
    match header.value.as_deref() {
        None => EnvelopeHeader {
            key,
            key_encoding,
            value: None,
            encoding: Encoding::Utf8,
        },
        Some(v) => {
            let (value, encoding) = encode_text(v);
            EnvelopeHeader {
                key,
                key_encoding,
                value: Some(value),
                encoding,
            }
        }
    }
}

pub(super) fn decode_text(
    field: &'static str,
    text: &str,
    encoding: Encoding,
) -> Result<Vec<u8>, EnvelopeDecodeError> {
    match encoding {
        Encoding::Utf8 | Encoding::Json => Ok(text.as_bytes().to_vec()),
        Encoding::Base64 => BASE64
            .decode(text)
            .map_err(|e| EnvelopeDecodeError::BadField {
                field,
                encoding,
                reason: e.to_string(),
            }),
        Encoding::None => Ok(Vec::new()),
        Encoding::Detached | Encoding::Reference => Err(EnvelopeDecodeError::BadField {
            field,
            encoding,
            reason: "`detached` and `reference` are only payload encodings".into(),
        }),
    }
}

pub(super) fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_string()).expect("valid JSON literal")
}
