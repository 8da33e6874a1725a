//! Dead letters that other tools wrote, read as envelopes so that `dlq list/show/replay` and
//! the monitor treat them like ours:
//!
//! - **Spring Kafka** (`DeadLetterPublishingRecoverer`): the original value, key and headers,
//!   plus `kafka_dlt-*` headers with binary numbers ([`crate::dlq::spring`]);
//! - **Kafka Connect** (`errors.deadletterqueue.context.headers.enable=true`): the original
//!   value, key and headers, plus `__connect.errors.*` headers, all text;
//! - **Kafka share groups** (KIP-1191, Kafka 4.4): the original value and key, and only
//!   `__dlq.errors.*` headers, all text;
//! - **Kafka Streams** (KIP-1034, Kafka 4.2: `errors.dead.letter.queue.topic.name`): the
//!   original key and value bytes, not its headers, and `__streams.errors.*` headers, all text
//!   (the exception, its message and stack trace, the source topic, partition and offset);
//! - **Confluent data contracts** (a rule's `DLQ` action): the original key, value and headers
//!   and `__rule.*` headers naming the rule, its mode, the subject and the topic, and the
//!   exception's message. The record has no partition or offset (a rule on the producer
//!   fails before it is written): the source says -1 for both, and the id is the DLQ record's
//!   own, `<topic>-rule-<dlq partition>-<dlq offset>`.
//!
//! The envelope built for such a record has the source coordinates and the error those
//! headers give, the record id `<topic>-<partition>-<offset>`, the value, key and the other
//! headers byte for byte (so a replay writes the original record back), and `attempts` 0 when
//! the writer did not record them. Nothing here does I/O.

use chrono::{DateTime, TimeZone, Utc};

use crate::dlq::{spring, Envelope};
use crate::failure::DeadLetterKind;
use crate::record::{fallback_id, Record, RecordHeader, TimestampType};

/// The tool that wrote a foreign dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForeignFormat {
    /// Spring Kafka's `DeadLetterPublishingRecoverer`.
    Spring,
    /// Kafka Connect's dead-letter queue reporter.
    Connect,
    /// A Kafka share group's dead-letter queue (KIP-1191).
    ShareGroup,
    /// Kafka Streams' dead-letter queue (KIP-1034).
    KafkaStreams,
    /// A Confluent data contract rule's `DLQ` action.
    DataContract,
    /// Not a dead letter: a record waiting in one of kafka-dlq's retry topics
    /// ([`crate::retry_tier`]), read with `dlq list --topic <topic>-retry-<n>`.
    RetryTopic,
}

impl ForeignFormat {
    /// A name for people: `Spring Kafka`, `Kafka Connect`, `Kafka share group`.
    pub fn as_str(self) -> &'static str {
        match self {
            ForeignFormat::Spring => "Spring Kafka",
            ForeignFormat::Connect => "Kafka Connect",
            ForeignFormat::ShareGroup => "Kafka share group",
            ForeignFormat::KafkaStreams => "Kafka Streams",
            ForeignFormat::DataContract => "data contract rule",
            ForeignFormat::RetryTopic => "kafka-dlq retry topic",
        }
    }
}

/// Kafka Connect's header prefix.
pub const CONNECT_PREFIX: &str = "__connect.errors.";
/// A share group's header prefix (KIP-1191).
pub const SHARE_GROUP_PREFIX: &str = "__dlq.errors.";
/// Kafka Streams' header prefix (KIP-1034).
pub const STREAMS_PREFIX: &str = "__streams.errors.";
/// A data contract rule's header prefix (Confluent's `DlqAction`).
pub const RULE_PREFIX: &str = "__rule.";

/// The message a share group writes for a record a consumer rejected.
const SHARE_REJECTED: &str = "Offset rejected by client.";
/// The message a share group writes for a record that used up its deliveries.
const SHARE_EXHAUSTED: &str = "Offset delivery count exceeded the threshold.";

/// One DLQ record as it was read.
#[derive(Debug, Clone, Copy)]
pub struct DlqRecord<'a> {
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value.
    pub value: Option<&'a [u8]>,
    /// Its headers.
    pub headers: &'a [RecordHeader],
    /// Its timestamp (when it was dead-lettered, for most writers).
    pub timestamp: Option<DateTime<Utc>>,
    /// Where it is in the DLQ: its topic, partition and offset (the id of a dead letter whose
    /// writer recorded no source coordinates).
    pub at: (&'a str, i32, i64),
}

/// Reads `record` as a dead letter of Spring, Connect or a share group; `None` when it has
/// none of their headers (or not the source topic, partition and offset in their encoding).
pub fn decode(record: DlqRecord<'_>) -> Option<(ForeignFormat, Envelope)> {
    let text = |name: &str| -> Option<String> {
        let h = record.headers.iter().find(|h| h.key == name.as_bytes())?;
        Some(String::from_utf8_lossy(h.value.as_deref()?).into_owned())
    };
    let bytes = |name: &str| -> Option<&[u8]> {
        let h = record.headers.iter().find(|h| h.key == name.as_bytes())?;
        h.value.as_deref()
    };
    if let Some(topic) = text(spring::ORIGINAL_TOPIC) {
        let partition = spring::read_int(bytes(spring::ORIGINAL_PARTITION)?)?;
        let offset = spring::read_long(bytes(spring::ORIGINAL_OFFSET)?)?;
        let timestamp = bytes(spring::ORIGINAL_TIMESTAMP)
            .and_then(spring::read_long)
            .filter(|ms| *ms >= 0)
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
        let timestamp_type =
            timestamp.map(|_| match text(spring::ORIGINAL_TIMESTAMP_TYPE).as_deref() {
                Some("LogAppendTime") => TimestampType::LogAppendTime,
                _ => TimestampType::CreateTime,
            });
        let kind = spring_kind(text(spring::EXCEPTION_FQCN).as_deref());
        let class = text(spring::EXCEPTION_CAUSE_FQCN).or_else(|| text(spring::EXCEPTION_FQCN));
        let message = describe(class, text(spring::EXCEPTION_MESSAGE));
        let source = Source {
            topic,
            partition,
            offset,
            timestamp,
            timestamp_type,
            group: text(spring::ORIGINAL_CONSUMER_GROUP).unwrap_or_default(),
        };
        let envelope = source.envelope(record, spring::PREFIX, kind, &message, 0);
        return Some((ForeignFormat::Spring, envelope));
    }
    if let Some(topic) = text("__connect.errors.topic") {
        let source = Source {
            topic,
            partition: text("__connect.errors.partition")?.parse().ok()?,
            offset: text("__connect.errors.offset")?.parse().ok()?,
            timestamp: None,
            timestamp_type: None,
            group: text("__connect.errors.connector.name")
                .map(|name| format!("connect-{name}"))
                .unwrap_or_default(),
        };
        let mut message = describe(
            text("__connect.errors.exception.class.name"),
            text("__connect.errors.exception.message"),
        );
        if let Some(stage) = text("__connect.errors.stage") {
            message = format!("{message} (stage {stage})");
        }
        let envelope = source.envelope(
            record,
            CONNECT_PREFIX,
            DeadLetterKind::Unclassified,
            &message,
            0,
        );
        return Some((ForeignFormat::Connect, envelope));
    }
    if let Some(topic) = text("__dlq.errors.topic") {
        let source = Source {
            topic,
            partition: text("__dlq.errors.partition")?.parse().ok()?,
            offset: text("__dlq.errors.offset")?.parse().ok()?,
            timestamp: None,
            timestamp_type: None,
            group: text("__dlq.errors.group").unwrap_or_default(),
        };
        let message = text("__dlq.errors.message").unwrap_or_default();
        let kind = match message.as_str() {
            SHARE_REJECTED => DeadLetterKind::Permanent,
            SHARE_EXHAUSTED => DeadLetterKind::RetriesExhausted,
            _ => DeadLetterKind::Unclassified,
        };
        let attempts = text("__dlq.errors.delivery.count")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let envelope = source.envelope(record, SHARE_GROUP_PREFIX, kind, &message, attempts);
        return Some((ForeignFormat::ShareGroup, envelope));
    }
    if let Some(topic) = text("__streams.errors.topic") {
        let source = Source {
            topic,
            partition: text("__streams.errors.partition")?.parse().ok()?,
            offset: text("__streams.errors.offset")?.parse().ok()?,
            // Kafka Streams writes the failed record's own timestamp on the DLQ record.
            timestamp: record.timestamp,
            timestamp_type: record.timestamp.map(|_| TimestampType::CreateTime),
            group: String::new(),
        };
        // `exception` is the exception's class (Kafka Streams 4.2; its `toString()`, the class
        // and the message, in KIP-1034's first form), `message` its message.
        let exception = text("__streams.errors.exception").filter(|e| !e.is_empty());
        let detail = text("__streams.errors.message").filter(|m| !m.is_empty());
        let message = match (exception, detail) {
            (Some(e), Some(m)) if e.ends_with(&m) => e,
            (e, m) => describe(e, m),
        };
        let envelope = source.envelope(
            record,
            STREAMS_PREFIX,
            DeadLetterKind::Unclassified,
            &message,
            0,
        );
        return Some((ForeignFormat::KafkaStreams, envelope));
    }
    if let (Some(topic), Some(rule)) = (text("__rule.topic"), text("__rule.name")) {
        let (dlq_topic, dlq_partition, dlq_offset) = record.at;
        let source = Source {
            topic,
            partition: -1,
            offset: -1,
            timestamp: None,
            timestamp_type: None,
            group: String::new(),
        };
        let mut message = format!("data contract rule `{rule}`");
        if let Some(mode) = text("__rule.mode") {
            message = format!("{message} ({mode})");
        }
        if let Some(subject) = text("__rule.subject") {
            message = format!("{message} of subject {subject}");
        }
        message = match text("__rule.exception") {
            Some(e) => format!("{message} failed: {e}"),
            None => format!("{message} failed"),
        };
        let mut envelope =
            source.envelope(record, RULE_PREFIX, DeadLetterKind::Permanent, &message, 0);
        envelope.id = format!("{dlq_topic}-rule-{dlq_partition}-{dlq_offset}");
        return Some((ForeignFormat::DataContract, envelope));
    }
    None
}

/// `<class>: <message>`, or whichever of the two there is.
fn describe(class: Option<String>, message: Option<String>) -> String {
    match (class, message) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c,
        (None, Some(m)) => m,
        (None, None) => "(no error recorded)".into(),
    }
}

/// Where a foreign dead letter came from, as its headers say.
struct Source {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: Option<DateTime<Utc>>,
    timestamp_type: Option<TimestampType>,
    group: String,
}

impl Source {
    /// The envelope of `record`: its value, key and headers less those starting with
    /// `prefix`, dead-lettered at the DLQ record's time.
    fn envelope(
        self,
        record: DlqRecord<'_>,
        prefix: &str,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
    ) -> Envelope {
        let original = Record {
            id: fallback_id(&self.topic, self.partition, self.offset),
            key: record.key.map(<[u8]>::to_vec),
            payload: record.value.map(<[u8]>::to_vec),
            headers: record
                .headers
                .iter()
                .filter(|h| !h.key.starts_with(prefix.as_bytes()))
                .cloned()
                .collect(),
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            topic: self.topic,
            partition: self.partition,
            offset: self.offset,
            retry: None,
            delivery_count: None,
        };
        let mut envelope = Envelope::new(&original, kind, message, attempts, &self.group);
        envelope.timestamp = record
            .timestamp
            .or(self.timestamp)
            .unwrap_or(DateTime::UNIX_EPOCH);
        envelope
    }
}

/// The kind of a dead letter in Spring's format, by its exception class: kafka-dlq's own
/// ([`spring::exception_class`]) say theirs, and a record Spring's `ErrorHandlingDeserializer`
/// could not deserialize is one whose bytes did not decode; any other class does not say.
fn spring_kind(class: Option<&str>) -> DeadLetterKind {
    match class {
        Some("kafka_dlq.PermanentFailure") => DeadLetterKind::Permanent,
        Some("kafka_dlq.RetriesExhausted") => DeadLetterKind::RetriesExhausted,
        Some("kafka_dlq.ParkedTooLong") => DeadLetterKind::Parked,
        Some(
            "kafka_dlq.DeserializationFailure"
            | "org.springframework.kafka.support.serializer.DeserializationException",
        ) => DeadLetterKind::Deserialization,
        _ => DeadLetterKind::Unclassified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_kafka_dlq_writes_in_springs_layout_reads_back_as_itself() {
        for kind in [
            DeadLetterKind::Permanent,
            DeadLetterKind::RetriesExhausted,
            DeadLetterKind::Deserialization,
            DeadLetterKind::Parked,
        ] {
            let class = crate::dlq::spring::exception_class(kind);
            assert_eq!(spring_kind(Some(class)), kind, "{class}");
        }
    }

    #[test]
    fn a_spring_dead_letters_class_says_its_kind_when_it_can() {
        assert_eq!(
            spring_kind(Some("kafka_dlq.RetriesExhausted")),
            DeadLetterKind::RetriesExhausted
        );
        assert_eq!(
            spring_kind(Some(
                "org.springframework.kafka.support.serializer.DeserializationException"
            )),
            DeadLetterKind::Deserialization
        );
        assert_eq!(
            spring_kind(Some("java.lang.IllegalStateException")),
            DeadLetterKind::Unclassified
        );
        assert_eq!(spring_kind(None), DeadLetterKind::Unclassified);
    }

    fn h(key: &str, value: &[u8]) -> RecordHeader {
        RecordHeader {
            key: key.as_bytes().to_vec(),
            value: Some(value.to_vec()),
        }
    }

    fn read(headers: &[RecordHeader]) -> Option<(ForeignFormat, Envelope)> {
        decode(DlqRecord {
            key: Some(b"k1"),
            value: Some(&[0xff, 0x00, b'x']),
            headers,
            timestamp: Some(Utc.timestamp_millis_opt(1_700_000_001_000).unwrap()),
            at: ("orders-dlq", 0, 9),
        })
    }

    #[test]
    fn reads_a_spring_dead_letter_with_binary_numbers() {
        let headers = [
            h("trace", b"t-1"),
            h(spring::ORIGINAL_TOPIC, b"orders"),
            h(spring::ORIGINAL_PARTITION, &5_i32.to_be_bytes()),
            h(spring::ORIGINAL_OFFSET, &42_i64.to_be_bytes()),
            h(
                spring::ORIGINAL_TIMESTAMP,
                &1_700_000_000_000_i64.to_be_bytes(),
            ),
            h(spring::ORIGINAL_TIMESTAMP_TYPE, b"CreateTime"),
            h(spring::ORIGINAL_CONSUMER_GROUP, b"billing"),
            h(
                spring::EXCEPTION_FQCN,
                b"org.springframework.kafka.listener.ListenerExecutionFailedException",
            ),
            h(
                spring::EXCEPTION_CAUSE_FQCN,
                b"java.lang.IllegalStateException",
            ),
            h(spring::EXCEPTION_MESSAGE, b"bad row 7"),
            h(spring::EXCEPTION_STACKTRACE, b"java.lang..."),
        ];
        let (format, env) = read(&headers).unwrap();
        assert_eq!(format, ForeignFormat::Spring);
        assert_eq!(env.id, "orders-5-42");
        assert_eq!(
            (
                env.source.topic.as_str(),
                env.source.partition,
                env.source.offset
            ),
            ("orders", 5, 42)
        );
        assert_eq!(env.source.group, "billing");
        assert_eq!(
            env.source.timestamp.unwrap().timestamp_millis(),
            1_700_000_000_000
        );
        assert_eq!(env.error.kind, DeadLetterKind::Unclassified);
        assert_eq!(
            env.error.message,
            "java.lang.IllegalStateException: bad row 7"
        );
        assert_eq!(
            env.payload_bytes().unwrap().unwrap(),
            vec![0xff, 0x00, b'x']
        );
        assert_eq!(env.key_bytes().unwrap().unwrap(), b"k1");
        assert_eq!(env.headers().unwrap(), vec![h("trace", b"t-1")]);
        assert_eq!(env.timestamp.timestamp_millis(), 1_700_000_001_000);
    }

    #[test]
    fn a_spring_header_with_a_text_partition_is_not_a_spring_dead_letter() {
        let headers = [
            h(spring::ORIGINAL_TOPIC, b"orders"),
            h(spring::ORIGINAL_PARTITION, b"5"),
            h(spring::ORIGINAL_OFFSET, &42_i64.to_be_bytes()),
        ];
        assert!(read(&headers).is_none());
    }

    #[test]
    fn reads_a_connect_dead_letter() {
        let headers = [
            h("app", b"a"),
            h("__connect.errors.topic", b"orders"),
            h("__connect.errors.partition", b"1"),
            h("__connect.errors.offset", b"77"),
            h("__connect.errors.connector.name", b"jdbc-sink"),
            h("__connect.errors.stage", b"VALUE_CONVERTER"),
            h(
                "__connect.errors.exception.class.name",
                b"org.apache.kafka.connect.errors.DataException",
            ),
            h("__connect.errors.exception.message", b"not JSON"),
        ];
        let (format, env) = read(&headers).unwrap();
        assert_eq!(format, ForeignFormat::Connect);
        assert_eq!(env.id, "orders-1-77");
        assert_eq!(env.source.group, "connect-jdbc-sink");
        assert_eq!(
            env.error.message,
            "org.apache.kafka.connect.errors.DataException: not JSON (stage VALUE_CONVERTER)"
        );
        assert_eq!(env.headers().unwrap(), vec![h("app", b"a")]);
    }

    #[test]
    fn reads_a_share_group_dead_letter_and_its_cause() {
        let headers = |message: &[u8]| {
            vec![
                h("__dlq.errors.topic", b"orders"),
                h("__dlq.errors.partition", b"2"),
                h("__dlq.errors.offset", b"41"),
                h("__dlq.errors.group", b"workers"),
                h("__dlq.errors.delivery.count", b"5"),
                h("__dlq.errors.message", message),
            ]
        };
        let (format, env) = read(&headers(SHARE_EXHAUSTED.as_bytes())).unwrap();
        assert_eq!(format, ForeignFormat::ShareGroup);
        assert_eq!(env.id, "orders-2-41");
        assert_eq!(env.error.kind, DeadLetterKind::RetriesExhausted);
        assert_eq!(env.error.attempts, 5);
        assert!(env.headers().unwrap().is_empty());
        let (_, rejected) = read(&headers(SHARE_REJECTED.as_bytes())).unwrap();
        assert_eq!(rejected.error.kind, DeadLetterKind::Permanent);
    }

    #[test]
    fn reads_a_kafka_streams_dead_letter() {
        let headers = [
            h(
                "__streams.errors.exception",
                b"org.apache.kafka.common.errors.SerializationException",
            ),
            h(
                "__streams.errors.message",
                b"Size of data received by IntegerDeserializer is not 4",
            ),
            h(
                "__streams.errors.stacktrace",
                b"org.apache.kafka...\n\tat ...",
            ),
            h("__streams.errors.topic", b"orders"),
            h("__streams.errors.partition", b"3"),
            h("__streams.errors.offset", b"1234"),
        ];
        let (format, env) = read(&headers).unwrap();
        assert_eq!(format, ForeignFormat::KafkaStreams);
        assert_eq!(env.id, "orders-3-1234");
        assert_eq!(
            (
                env.source.topic.as_str(),
                env.source.partition,
                env.source.offset
            ),
            ("orders", 3, 1234)
        );
        assert_eq!(
            env.error.message,
            "org.apache.kafka.common.errors.SerializationException: Size of data received by IntegerDeserializer is not 4"
        );
        assert!(
            env.headers().unwrap().is_empty(),
            "none of its own headers kept"
        );
        assert_eq!(
            env.payload_bytes().unwrap().unwrap(),
            vec![0xff, 0x00, b'x']
        );
        // KIP-1034's first form: `exception` is the class and the message already.
        let mut older = headers.to_vec();
        older[0] = h(
            "__streams.errors.exception",
            b"org.apache.kafka.common.errors.SerializationException: Size of data received by IntegerDeserializer is not 4",
        );
        assert_eq!(read(&older).unwrap().1.error.message, env.error.message);
        let no_offset = [
            h("__streams.errors.topic", b"orders"),
            h("__streams.errors.partition", b"3"),
        ];
        assert!(read(&no_offset).is_none(), "no source offset: not one");
    }

    #[test]
    fn reads_a_data_contract_rule_dead_letter() {
        let headers = [
            h(
                "traceparent",
                b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            h("__rule.name", b"checkSsnLen"),
            h("__rule.mode", b"WRITE"),
            h("__rule.subject", b"orders-value"),
            h("__rule.topic", b"orders"),
            h("__rule.exception", b"Expr failed: 'size(message.ssn) == 9'"),
        ];
        let (format, env) = read(&headers).unwrap();
        assert_eq!(format, ForeignFormat::DataContract);
        assert_eq!(
            env.id, "orders-dlq-rule-0-9",
            "the DLQ record's own coordinates"
        );
        assert_eq!(
            (
                env.source.topic.as_str(),
                env.source.partition,
                env.source.offset
            ),
            ("orders", -1, -1)
        );
        assert_eq!(env.error.kind, DeadLetterKind::Permanent);
        assert_eq!(
            env.error.message,
            "data contract rule `checkSsnLen` (WRITE) of subject orders-value failed: Expr failed: 'size(message.ssn) == 9'"
        );
        assert_eq!(
            env.headers().unwrap(),
            vec![h(
                "traceparent",
                b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            )],
            "the record's own headers kept, the rule's dropped"
        );
    }

    #[test]
    fn a_plain_record_is_not_foreign() {
        assert!(read(&[h("trace", b"t")]).is_none());
    }
}
