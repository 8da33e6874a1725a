//! The JSON envelope written as the value of every dead-letter record.

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use thiserror::Error;

use super::encoding::{decode_text, encode_header, encode_payload, encode_text, raw};
use super::error_message::truncate_message;
use super::Encoding;
use crate::failure::DeadLetterKind;
use crate::record::retry::RetryStage;
use crate::record::{Record, RecordHeader, TimestampType};

/// The failure that sent a record to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeError {
    /// `permanent` or `retries_exhausted`.
    pub kind: DeadLetterKind,
    /// The last failure's message, cut to [`MAX_ERROR_MESSAGE_BYTES`](super::MAX_ERROR_MESSAGE_BYTES).
    pub message: String,
    /// How many times the handler was called for the record (in a share group: in the
    /// delivery that dead-lettered it).
    pub attempts: u32,
    /// In a share group (KIP-932): the delivery that dead-lettered it, 1 for the first (the
    /// broker's delivery count). Absent for a consumer group's dead letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_count: Option<u16>,
}

/// A header of the source record: `value` is `null` for a null value, else text in `encoding`
/// (`utf8` or `base64`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeHeader {
    /// The header key, as text in `key_encoding`.
    pub key: String,
    /// `base64` when the key is not UTF-8; absent (`utf8`) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_encoding: Option<Encoding>,
    /// The value, encoded; `null` when the header had no value.
    pub value: Option<String>,
    /// `utf8` or `base64`.
    pub encoding: Encoding,
}

/// Where the record came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSource {
    /// The source topic: the topic the consumer read it from, or for a record delivered from
    /// a retry or redrive topic, the source topic that topic belongs to — never a topic the
    /// retry record merely claims, so that a replay sends it back where this group reads.
    pub topic: String,
    /// The source partition.
    pub partition: i32,
    /// The source offset.
    pub offset: i64,
    /// The record key, encoded as `key_encoding` says; `null` when there was none.
    pub key: Option<String>,
    /// `utf8` or `base64`; `null` when there was no key.
    pub key_encoding: Option<Encoding>,
    /// The record's timestamp, RFC 3339 UTC; `null` when it had none.
    pub timestamp: Option<DateTime<Utc>>,
    /// `create_time` or `log_append_time`; absent when the record had no timestamp (and in
    /// envelopes written before kafka-dlq recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_type: Option<TimestampType>,
    /// The record's headers, in order.
    pub headers: Vec<EnvelopeHeader>,
    /// The consumer group that gave up on it.
    pub group: String,
}

/// The value of a dead-letter record. Field names are fixed: other tools read them. The JSON
/// Schema is `schema/dlq-envelope.schema.json` in the repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The record id (id header, else `<topic>-<partition>-<offset>`).
    pub id: String,
    /// The original value: JSON, a string or base64, as `payload_encoding` says.
    pub payload: Box<RawValue>,
    /// `json`, `utf8`, `base64` or `none`.
    pub payload_encoding: Encoding,
    /// Why it was dead-lettered.
    pub error: EnvelopeError,
    /// When it was dead-lettered, RFC 3339 UTC (milliseconds).
    pub timestamp: DateTime<Utc>,
    /// Where it came from.
    pub source: EnvelopeSource,
    /// The W3C trace id of the record's `traceparent` header (32 hex digits), to find the
    /// request that produced it in a tracing system; absent when the record had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The stages the record went through with retry topics (see [`crate::retry_tier`]), the
    /// source topic first and the last retry topic last, each with its handler calls and last
    /// error; absent for a record dead-lettered from its source topic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RetryStage>,
    /// For a record delivered from a retry or redrive topic: its copy there, the record the
    /// consumer last read. A reference ([`Encoding::Reference`]) is filled in from this copy
    /// first — it is younger than the source record, on a topic whose retention covers its
    /// delay — and from the source record when the copy is gone. Absent for a record
    /// dead-lettered from its source topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_copy: Option<RetryCopy>,
}

/// Where a retry or redrive topic held a copy of the record: see [`Envelope::retry_copy`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCopy {
    /// The retry or redrive topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// A value in an envelope that does not decode as its encoding says.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EnvelopeDecodeError {
    /// The bytes are not an envelope at all.
    #[error("not a kafka-dlq envelope: {0}")]
    NotAnEnvelope(#[from] serde_json::Error),
    /// A field does not decode with its encoding.
    #[error("envelope field `{field}` does not decode as {encoding:?}: {reason}")]
    BadField {
        /// The field's name.
        field: &'static str,
        /// The encoding it claimed.
        encoding: Encoding,
        /// What went wrong.
        reason: String,
    },
}

impl Envelope {
    /// Builds the envelope for `record`, dead-lettered now by consumer group `group` after
    /// `attempts` handler calls in all. A record from a retry topic gets its
    /// [`history`](Self::history): the stages it left, then the retry topic it was
    /// dead-lettered from, with the calls made there and `message`.
    pub fn new(
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        group: &str,
    ) -> Envelope {
        let (payload, payload_encoding) = encode_payload(record.payload.as_deref());
        let (key, key_encoding) = match record.key.as_deref() {
            None => (None, None),
            Some(k) => {
                let (text, enc) = encode_text(k);
                (Some(text), Some(enc))
            }
        };
        Envelope {
            id: record.id.clone(),
            payload,
            payload_encoding,
            error: EnvelopeError {
                kind,
                message: truncate_message(message),
                attempts,
                delivery_count: record.delivery_count,
            },
            timestamp: Utc::now().trunc_subsecs(3),
            source: EnvelopeSource {
                topic: record.source_topic().to_string(),
                partition: record.partition,
                offset: record.offset,
                key,
                key_encoding,
                timestamp: record.timestamp,
                timestamp_type: record.timestamp_type,
                headers: record.headers.iter().map(encode_header).collect(),
                group: group.to_string(),
            },
            trace_id: record.trace_context().map(|t| t.trace_id),
            history: match &record.retry {
                None => Vec::new(),
                Some(retry) => {
                    let mut history = retry.history.clone();
                    history.push(RetryStage {
                        topic: retry.topic.clone(),
                        attempts: attempts.saturating_sub(retry.attempts),
                        error: truncate_message(message),
                        at: Utc::now().trunc_subsecs(3),
                    });
                    history
                }
            },
            retry_copy: record.retry.as_ref().map(|retry| RetryCopy {
                topic: retry.topic.clone(),
                partition: retry.partition,
                offset: retry.offset,
            }),
        }
    }

    /// Parses an envelope from a dead-letter record's value.
    pub fn from_slice(bytes: &[u8]) -> Result<Envelope, EnvelopeDecodeError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The envelope as JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        // Room for the payload and what surrounds it, so that the buffer is rarely grown (and
        // copied) while it is written: once per dead letter.
        let mut out = Vec::with_capacity(self.payload.get().len() + 1024);
        serde_json::to_writer(&mut out, self).expect("an envelope always serializes");
        out
    }

    /// The envelope in the detached form: no payload, `payload_encoding` `detached`; the
    /// original value travels as the dead letter's value.
    pub fn into_detached(mut self) -> Envelope {
        self.payload = raw("null");
        self.payload_encoding = Encoding::Detached;
        self
    }

    /// The envelope as a reference: no payload and no source headers, `payload_encoding`
    /// `reference` (see [`Encoding::Reference`]).
    pub fn reference(&self) -> Envelope {
        Envelope {
            id: self.id.clone(),
            payload: raw("null"),
            payload_encoding: Encoding::Reference,
            error: self.error.clone(),
            timestamp: self.timestamp,
            source: EnvelopeSource {
                headers: Vec::new(),
                ..self.source.clone()
            },
            trace_id: self.trace_id.clone(),
            history: self.history.clone(),
            retry_copy: self.retry_copy.clone(),
        }
    }

    /// Fills a reference in with the source record's `value` and `headers`, read from the
    /// source topic. Other envelopes are returned as they are.
    pub fn resolve(self, value: Option<&[u8]>, headers: &[RecordHeader]) -> Envelope {
        if self.payload_encoding != Encoding::Reference {
            return self;
        }
        let (payload, payload_encoding) = encode_payload(value);
        Envelope {
            payload,
            payload_encoding,
            source: EnvelopeSource {
                headers: headers.iter().map(encode_header).collect(),
                ..self.source
            },
            ..self
        }
    }

    /// Puts a detached envelope's value (the dead letter's value) back in, encoded as usual.
    /// Other envelopes are returned as they are.
    pub fn attach(self, value: Option<&[u8]>) -> Envelope {
        if self.payload_encoding != Encoding::Detached {
            return self;
        }
        let (payload, payload_encoding) = encode_payload(value);
        Envelope {
            payload,
            payload_encoding,
            ..self
        }
    }

    /// The original value's bytes, exactly as consumed; `None` for a tombstone. A detached
    /// envelope has none until [`attach`](Self::attach)ed: that is an error.
    pub fn payload_bytes(&self) -> Result<Option<Vec<u8>>, EnvelopeDecodeError> {
        let raw = self.payload.get();
        match self.payload_encoding {
            Encoding::None => Ok(None),
            Encoding::Detached => Err(EnvelopeDecodeError::BadField {
                field: "payload",
                encoding: Encoding::Detached,
                reason: "the value is the dead letter's own value; read it with DlqReader".into(),
            }),
            Encoding::Reference => Err(EnvelopeDecodeError::BadField {
                field: "payload",
                encoding: Encoding::Reference,
                reason: format!(
                    "the dead letter holds no value: it refers to {} partition {} offset {}, \
                     which is no longer in that topic (retention) or could not be read",
                    self.source.topic, self.source.partition, self.source.offset
                ),
            }),
            Encoding::Json => Ok(Some(raw.as_bytes().to_vec())),
            enc => {
                let text: String =
                    serde_json::from_str(raw).map_err(|e| EnvelopeDecodeError::BadField {
                        field: "payload",
                        encoding: enc,
                        reason: e.to_string(),
                    })?;
                decode_text("payload", &text, enc).map(Some)
            }
        }
    }

    /// The original key's bytes; `None` when the record had no key.
    pub fn key_bytes(&self) -> Result<Option<Vec<u8>>, EnvelopeDecodeError> {
        match (&self.source.key, self.source.key_encoding) {
            (Some(key), Some(enc)) => decode_text("source.key", key, enc).map(Some),
            (Some(key), None) => Ok(Some(key.as_bytes().to_vec())),
            (None, _) => Ok(None),
        }
    }

    /// The original headers, decoded.
    pub fn headers(&self) -> Result<Vec<RecordHeader>, EnvelopeDecodeError> {
        self.source
            .headers
            .iter()
            .map(|h| {
                Ok(RecordHeader {
                    key: match h.key_encoding {
                        Some(enc) => decode_text("source.headers.key", &h.key, enc)?,
                        None => h.key.as_bytes().to_vec(),
                    },
                    value: match &h.value {
                        None => None,
                        Some(v) => Some(decode_text("source.headers", v, h.encoding)?),
                    },
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: Option<&[u8]>, key: Option<&[u8]>) -> Record {
        Record {
            id: "orders-0-7".into(),
            topic: "orders".into(),
            partition: 0,
            offset: 7,
            key: key.map(<[u8]>::to_vec),
            payload: payload.map(<[u8]>::to_vec),
            headers: vec![
                RecordHeader {
                    key: "trace".into(),
                    value: Some(b"abc".to_vec()),
                },
                RecordHeader {
                    key: "bin".into(),
                    value: Some(vec![0xff, 0x00]),
                },
                RecordHeader {
                    key: "null".into(),
                    value: None,
                },
            ],
            timestamp: None,
            timestamp_type: None,
            retry: None,
            delivery_count: None,
        }
    }

    fn round_trip(payload: Option<&[u8]>) -> (Envelope, Encoding) {
        let env = Envelope::new(
            &record(payload, Some(b"k")),
            DeadLetterKind::Permanent,
            "x",
            1,
            "g",
        );
        let parsed = Envelope::from_slice(&env.to_vec()).unwrap();
        assert_eq!(parsed.payload_bytes().unwrap().as_deref(), payload);
        let enc = parsed.payload_encoding;
        (parsed, enc)
    }

    #[test]
    fn a_dead_letter_names_the_topic_it_was_read_from_not_what_its_retry_record_claims() {
        let mut claimed = record(Some(b"x"), None);
        claimed.topic = "payments".into();
        claimed.retry = Some(Box::new(crate::record::retry::RetryDelivery {
            tier: Some(0),
            topic: "orders-retry-0".into(),
            partition: 0,
            offset: 3,
            due: Utc::now(),
            attempts: 1,
            history: vec![],
            group: Some("g".into()),
        }));
        let envelope = Envelope::new(&claimed, DeadLetterKind::Permanent, "x", 1, "g");
        assert_eq!(envelope.source.topic, "orders");
    }

    #[test]
    fn payload_encodings_round_trip_byte_for_byte() {
        assert_eq!(
            round_trip(Some(br#"{"b": 1, "a":[1.50]}"#)).1,
            Encoding::Json
        );
        assert_eq!(round_trip(Some(b"42")).1, Encoding::Json);
        assert_eq!(round_trip(Some(b" {\"a\":1}\n")).1, Encoding::Utf8);
        assert_eq!(round_trip(Some(b"{not json")).1, Encoding::Utf8);
        assert_eq!(round_trip(Some(b"")).1, Encoding::Utf8);
        assert_eq!(
            round_trip(Some(&[0xde, 0xad, 0xbe, 0xef])).1,
            Encoding::Base64
        );
        assert_eq!(round_trip(None).1, Encoding::None);
    }

    #[test]
    fn json_payload_is_embedded_not_quoted() {
        let (env, _) = round_trip(Some(br#"{"parcel":"P-1"}"#));
        let value: serde_json::Value = serde_json::from_slice(&env.to_vec()).unwrap();
        assert_eq!(value["payload"]["parcel"], "P-1");
    }

    #[test]
    fn keys_and_headers_round_trip() {
        let env = Envelope::new(
            &record(Some(b"x"), Some(&[0x80, 0x81])),
            DeadLetterKind::RetriesExhausted,
            "y",
            11,
            "g",
        );
        let parsed = Envelope::from_slice(&env.to_vec()).unwrap();
        assert_eq!(parsed.source.key_encoding, Some(Encoding::Base64));
        assert_eq!(parsed.key_bytes().unwrap(), Some(vec![0x80, 0x81]));
        assert_eq!(parsed.headers().unwrap(), record(None, None).headers);
        let json: serde_json::Value = serde_json::from_slice(&env.to_vec()).unwrap();
        assert_eq!(json["error"]["kind"], "retries_exhausted");
        assert_eq!(json["error"]["attempts"], 11);
    }

    #[test]
    fn garbage_is_not_an_envelope() {
        assert!(matches!(
            Envelope::from_slice(b"hello"),
            Err(EnvelopeDecodeError::NotAnEnvelope(_))
        ));
    }
}
