//! The record a handler receives: an owned copy of one Kafka message plus its id.
//!
//! The id identifies the record in logs, the dead-letter envelope and the sidecar's HTTP
//! headers. It is the value of a configurable header when the record has it (as UTF-8), else
//! `<topic>-<partition>-<offset>`, which is unique within a cluster.

use std::borrow::Cow;

use chrono::{DateTime, TimeZone, Utc};
use rdkafka::message::Message;

use crate::kafka::headers::RawHeaders;
use serde::de::DeserializeOwned;

use crate::failure::HandlerError;

pub mod retry;
mod trace;
pub use trace::{TraceContext, TRACEPARENT, TRACESTATE};

/// One header of a record. Kafka allows repeated keys and a missing value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// The header's key (its name), as bytes: Kafka allows any bytes, and clients send names
    /// that are not UTF-8. Read up to its first NUL byte (see [`crate::kafka::headers`]).
    pub key: Vec<u8>,
    /// The header's value; `None` for a null value.
    pub value: Option<Vec<u8>>,
}

impl RecordHeader {
    /// Every header of a message, in order, with its name as bytes (read through librdkafka's
    /// C API, see [`crate::kafka::headers`], so that no name is refused).
    pub fn read_all(headers: &impl RawHeaders) -> Vec<RecordHeader> {
        let mut all = Vec::new();
        RecordHeader::copy_all(headers, &mut all);
        all
    }

    /// Makes `into` the headers of a message, as [`RecordHeader::read_all`] reads them,
    /// copying into the buffers of the headers `into` holds already.
    fn copy_all(headers: &impl RawHeaders, into: &mut Vec<RecordHeader>) {
        let mut count = 0;
        for (key, value) in rdkafka_header_bytes::entries(headers.as_raw()) {
            match into.get_mut(count) {
                Some(header) => {
                    copy_bytes(&mut header.key, key);
                    copy_optional_bytes(&mut header.value, value);
                }
                None => into.push(RecordHeader {
                    key: key.to_vec(),
                    value: value.map(<[u8]>::to_vec),
                }),
            }
            count += 1;
        }
        into.truncate(count);
    }
}

/// Makes `into` a copy of `bytes`, in the buffer it has when that is large enough.
fn copy_bytes(into: &mut Vec<u8>, bytes: &[u8]) {
    into.clear();
    into.extend_from_slice(bytes);
}

/// Makes `into` a copy of `bytes` (or none), in the buffer it has when that is large enough.
fn copy_optional_bytes(into: &mut Option<Vec<u8>>, bytes: Option<&[u8]>) {
    match (into.as_mut(), bytes) {
        (Some(buffer), Some(bytes)) => copy_bytes(buffer, bytes),
        (None, Some(bytes)) => *into = Some(bytes.to_vec()),
        (_, None) => *into = None,
    }
}

/// One consumed record, owned, as given to a [`Handler`](crate::handler::Handler).
///
/// Records come from the consumer ([`Record::from_message`]); to make one yourself (in a
/// test of your handler), start from [`Record::new`] and set what the test needs:
/// ```
/// # use kafka_dlq::Record;
/// let record = Record::new("parcel-events", 0, 42)
///     .with_key("P-1")
///     .with_payload(r#"{"parcel":"P-1"}"#)
///     .with_header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
/// assert_eq!(record.id, "parcel-events-0-42");
/// assert_eq!(record.key.as_deref(), Some(&b"P-1"[..]));
/// ```
/// The type is `#[non_exhaustive]`: fields may be added without breaking code that builds
/// records this way. Every field is public, to read and to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Record {
    /// The record id: the id header's value, else `<topic>-<partition>-<offset>`.
    pub id: String,
    /// The topic it was consumed from.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key, `None` when the record had none.
    pub key: Option<Vec<u8>>,
    /// Its value, `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<RecordHeader>,
    /// Its timestamp (create or log-append time), when the broker gave one.
    pub timestamp: Option<DateTime<Utc>>,
    /// Which time `timestamp` is; `None` exactly when `timestamp` is.
    pub timestamp_type: Option<TimestampType>,
    /// Set when the record was delivered from a retry topic (see [`crate::retry_tier`]): the
    /// fields above are then the original record's, this says where it was delivered from
    /// and what went before. `None` for a record of its source topic. (Boxed: a record of its
    /// source topic pays one pointer for it.)
    pub retry: Option<Box<retry::RetryDelivery>>,
    /// How many times a share group has delivered this record, this delivery included (1 the
    /// first time; KIP-932's delivery count, see `kafka_dlq::consumer::share`). `None` for a
    /// record of a consumer group.
    pub delivery_count: Option<u16>,
}

/// Which time a record's timestamp is (Kafka's `TimestampType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampType {
    /// Set by the producer (`message.timestamp.type=CreateTime`, Kafka's default).
    CreateTime,
    /// Set by the broker when it appended the record (`LogAppendTime`).
    LogAppendTime,
}

impl TimestampType {
    /// Kafka's name: `CreateTime` or `LogAppendTime`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }

    /// The type of an rdkafka timestamp; `None` when there is none.
    pub fn of(timestamp: rdkafka::Timestamp) -> Option<TimestampType> {
        match timestamp {
            rdkafka::Timestamp::NotAvailable => None,
            rdkafka::Timestamp::CreateTime(_) => Some(TimestampType::CreateTime),
            rdkafka::Timestamp::LogAppendTime(_) => Some(TimestampType::LogAppendTime),
        }
    }
}

impl Record {
    /// A record of `topic` at `partition` and `offset`, with the id the consumer would give it
    /// (`<topic>-<partition>-<offset>`), no key, no value (a tombstone), no headers, no
    /// timestamp, not from a retry topic.
    pub fn new(topic: impl Into<String>, partition: i32, offset: i64) -> Record {
        let topic = topic.into();
        Record {
            id: fallback_id(&topic, partition, offset),
            topic,
            partition,
            offset,
            key: None,
            payload: None,
            headers: Vec::new(),
            timestamp: None,
            timestamp_type: None,
            retry: None,
            delivery_count: None,
        }
    }

    /// The record with this id instead.
    pub fn with_id(mut self, id: impl Into<String>) -> Record {
        self.id = id.into();
        self
    }

    /// The record with this key.
    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Record {
        self.key = Some(key.into());
        self
    }

    /// The record with this value.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Record {
        self.payload = Some(payload.into());
        self
    }

    /// The record with one more header, after the others (Kafka allows repeated keys).
    pub fn with_header(mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Record {
        self.headers.push(RecordHeader {
            key: key.into(),
            value: Some(value.into()),
        });
        self
    }

    /// The record with this timestamp, set by the producer (`CreateTime`).
    pub fn with_timestamp(mut self, timestamp: DateTime<Utc>) -> Record {
        self.timestamp = Some(timestamp);
        self.timestamp_type = Some(TimestampType::CreateTime);
        self
    }

    /// Copies a message into a record. `id_header` names the header that holds the record id;
    /// a missing, null or non-UTF-8 header falls back to `<topic>-<partition>-<offset>`.
    pub fn from_message<M: Message>(message: &M, id_header: Option<&str>) -> Record
    where
        M::Headers: RawHeaders,
    {
        let mut record = Record::blank();
        record.copy_from_message(message, id_header);
        record
    }

    /// A record with every field empty: no id, no topic, offset 0, allocating nothing.
    pub(crate) fn blank() -> Record {
        Record {
            id: String::new(),
            topic: String::new(),
            partition: 0,
            offset: 0,
            key: None,
            payload: None,
            headers: Vec::new(),
            timestamp: None,
            timestamp_type: None,
            retry: None,
            delivery_count: None,
        }
    }

    /// Makes this record what [`Record::from_message`] makes of `message`, every field
    /// overwritten, copying into the buffers it holds already (a settled record reused, see
    /// `consumer::poll::spare_records`).
    pub(crate) fn copy_from_message<M: Message>(&mut self, message: &M, id_header: Option<&str>)
    where
        M::Headers: RawHeaders,
    {
        // Every field named, so that a field added to `Record` cannot be left over from the
        // record this one was before.
        let Record {
            id,
            topic,
            partition,
            offset,
            key,
            payload,
            headers,
            timestamp,
            timestamp_type,
            retry,
            delivery_count,
        } = self;
        match message.headers() {
            Some(read) => RecordHeader::copy_all(read, headers),
            None => headers.clear(),
        }
        topic.clear();
        topic.push_str(message.topic());
        *partition = message.partition();
        *offset = message.offset();
        copy_optional_bytes(key, message.key());
        copy_optional_bytes(payload, message.payload());
        let at = message.timestamp();
        *timestamp = at
            .to_millis()
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
        *timestamp_type = TimestampType::of(at);
        *retry = None;
        *delivery_count = None;
        write_record_id(id, headers, id_header, topic, *partition, *offset);
    }

    /// Parses the value as JSON. A missing or malformed value is a **permanent** failure whose
    /// message says what was wrong, so `record.json::<T>()?` dead-letters malformed records.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        let payload = self
            .payload
            .as_deref()
            .ok_or_else(|| HandlerError::permanent("malformed record: no value (tombstone)"))?;
        serde_json::from_slice(payload)
            .map_err(|e| HandlerError::permanent(format!("malformed JSON: {e}")))
    }

    /// The key for logs: UTF-8 (lossy), at most 128 characters, empty when there is none.
    pub fn key_for_logs(&self) -> Cow<'_, str> {
        match &self.key {
            None => Cow::Borrowed(""),
            Some(key) => {
                let text = String::from_utf8_lossy(key);
                if text.chars().count() > 128 {
                    Cow::Owned(text.chars().take(128).collect::<String>() + "…")
                } else {
                    text
                }
            }
        }
    }

    /// The offset of the message this record was delivered in, which the consumer commits: its
    /// own offset, or its offset in the retry topic it came from.
    pub(crate) fn delivered_offset(&self) -> i64 {
        self.retry.as_ref().map_or(self.offset, |r| r.offset)
    }

    /// The topic the record was first consumed from, where its dead letter and retry records
    /// go: its own topic, or for a record delivered from a retry tier's topic, the source topic
    /// that topic's name gives (`<source>-retry-<n>`) — never the topic the retry record
    /// itself claims (`record.topic`, written by whoever wrote the retry record): the consumer
    /// reads only its own sources' retry topics, so a claim naming another topic, one that
    /// does not exist or an invalid name cannot route the record elsewhere. A record from a
    /// redrive topic has its topic set from the partition's stage already, so its name is never
    /// parsed: a group id ending in `-retry-<n>` cannot make it look like a tier.
    pub(crate) fn source_topic(&self) -> &str {
        self.retry
            .as_ref()
            .filter(|r| r.tier.is_some())
            .and_then(|r| retry::parse_topic(&r.topic))
            .map_or(self.topic.as_str(), |(source, _)| source)
    }

    /// The value of the first header named `key` that has a value.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.key == key.as_bytes())
            .and_then(|h| h.value.as_deref())
    }
}

/// A record's id: the value of the header `id_header` names, else
/// `<topic>-<partition>-<offset>` (also when that header is missing, null, empty or not
/// UTF-8).
#[cfg(feature = "share")]
pub(crate) fn record_id(
    headers: &[RecordHeader],
    id_header: Option<&str>,
    topic: &str,
    partition: i32,
    offset: i64,
) -> String {
    let mut id = String::new();
    write_record_id(&mut id, headers, id_header, topic, partition, offset);
    id
}

/// Makes `id` the record id [`record_id`] gives, in the buffer it has.
fn write_record_id(
    id: &mut String,
    headers: &[RecordHeader],
    id_header: Option<&str>,
    topic: &str,
    partition: i32,
    offset: i64,
) {
    id.clear();
    match id_header
        .and_then(|name| headers.iter().find(|h| h.key == name.as_bytes()))
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|v| !v.is_empty())
    {
        Some(from_header) => id.push_str(from_header),
        None => write_fallback_id(id, topic, partition, offset),
    }
}

/// `<topic>-<partition>-<offset>`, built without the formatting machinery: it is made for
/// nearly every record.
pub(crate) fn fallback_id(topic: &str, partition: i32, offset: i64) -> String {
    let mut id = String::with_capacity(topic.len() + 32);
    write_fallback_id(&mut id, topic, partition, offset);
    id
}

/// Appends `<topic>-<partition>-<offset>` to `id`.
fn write_fallback_id(id: &mut String, topic: &str, partition: i32, offset: i64) {
    let mut numbers = itoa::Buffer::new();
    id.push_str(topic);
    id.push('-');
    id.push_str(numbers.format(partition));
    id.push('-');
    id.push_str(numbers.format(offset));
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    fn message(headers: Option<OwnedHeaders>) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{\"a\":1}".to_vec()),
            Some(b"k1".to_vec()),
            "orders".into(),
            Timestamp::CreateTime(1_700_000_000_000),
            3,
            42,
            headers,
        )
    }

    #[test]
    fn id_falls_back_to_topic_partition_offset() {
        let record = Record::from_message(&message(None), Some("event-id"));
        assert_eq!(record.id, "orders-3-42");
        assert_eq!(record.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(
            record.timestamp.unwrap().to_rfc3339(),
            "2023-11-14T22:13:20+00:00"
        );
    }

    #[test]
    fn id_comes_from_the_configured_header() {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "event-id",
                value: Some("evt-9"),
            })
            .insert(Header {
                key: "empty",
                value: None::<&[u8]>,
            });
        let record = Record::from_message(&message(Some(headers)), Some("event-id"));
        assert_eq!(record.id, "evt-9");
        assert_eq!(record.headers.len(), 2);
        assert_eq!(record.headers[1].value, None);
        assert_eq!(record.header("event-id"), Some(&b"evt-9"[..]));
    }

    mod reuse {
        use super::*;
        use proptest::prelude::*;

        /// A header name: the id header's sometimes, else any bytes (no NUL).
        fn header_name() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(b"event-id".to_vec()),
                proptest::collection::vec(1..=255_u8, 1..8),
            ]
        }

        /// A message's key, value, headers, timestamp, topic, partition and offset.
        type Parts = (
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Vec<(Vec<u8>, Option<Vec<u8>>)>,
            Option<i64>,
            String,
            i32,
            i64,
        );

        fn parts() -> impl Strategy<Value = Parts> {
            (
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                proptest::collection::vec(
                    (
                        header_name(),
                        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                    ),
                    0..4,
                ),
                proptest::option::of(0_i64..4_000_000_000_000),
                "[a-z.]{1,12}",
                0_i32..100,
                0_i64..i64::MAX,
            )
        }

        proptest! {
            /// A record copied into again and again, as the consumer reuses settled records,
            /// is each time exactly what `from_message` makes of the message: nothing of the
            /// record it was before is left (its headers, key, value, timestamp, id, retry
            /// account, delivery count).
            #[test]
            fn a_reused_record_is_a_fresh_copy_of_each_message(
                messages in proptest::collection::vec(parts(), 1..12),
                id_header in proptest::option::of(Just("event-id")),
            ) {
                let mut reused = Record::blank();
                reused.retry = Some(Box::new(retry::RetryDelivery {
                    group: None,
                    tier: Some(0),
                    topic: "orders-retry-0".into(),
                    partition: 0,
                    offset: 1,
                    due: Utc::now(),
                    attempts: 2,
                    history: vec![],
                }));
                reused.delivery_count = Some(3);
                for (key, value, headers, timestamp, topic, partition, offset) in messages {
                    let mut owned = OwnedHeaders::new();
                    for (name, value) in &headers {
                        owned = crate::kafka::headers::add(owned, name, value.as_deref());
                    }
                    let message = OwnedMessage::new(
                        value,
                        key,
                        topic,
                        timestamp.map_or(Timestamp::NotAvailable, Timestamp::CreateTime),
                        partition,
                        offset,
                        // A message without headers has none, or an empty set, in librdkafka.
                        (!headers.is_empty() || offset % 2 == 0).then_some(owned),
                    );
                    reused.copy_from_message(&message, id_header);
                    prop_assert_eq!(&reused, &Record::from_message(&message, id_header));
                    prop_assert_eq!(reused.headers.len(), headers.len());
                }
            }
        }
    }

    #[test]
    fn malformed_json_is_a_permanent_failure() {
        let mut record = Record::from_message(&message(None), None);
        assert_eq!(
            record.json::<serde_json::Value>().unwrap(),
            serde_json::json!({"a": 1})
        );
        record.payload = Some(b"{oops".to_vec());
        let error = record.json::<serde_json::Value>().unwrap_err();
        assert_eq!(error.kind(), crate::failure::FailureKind::Permanent);
        assert!(error.message().starts_with("malformed JSON"), "{error}");
    }

    #[test]
    fn a_retry_record_is_routed_by_its_retry_topic_not_by_the_topic_it_claims() {
        let mut record = Record::from_message(&message(None), None);
        assert_eq!(record.source_topic(), "orders", "a source topic's record");
        record.topic = "payments".into(); // what the retry record's account says
        record.retry = Some(Box::new(retry::RetryDelivery {
            group: None,
            tier: Some(0),
            topic: "orders-retry-0".into(),
            partition: 0,
            offset: 7,
            due: Utc::now(),
            attempts: 3,
            history: vec![],
        }));
        assert_eq!(record.source_topic(), "orders");
        record.topic = "no such topic!".into();
        assert_eq!(record.source_topic(), "orders");
    }
}
