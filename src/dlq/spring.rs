//! Spring Kafka's dead-letter headers, written byte for byte as Spring Kafka's
//! `DeadLetterPublishingRecoverer` writes them (spring-kafka 4.1, `DeadLetterRecordManager`),
//! so that a Spring application reading our dead-letter topic with
//! `KafkaHeaders.DLT_ORIGINAL_*` gets every field right:
//!
//! | header | encoding |
//! |---|---|
//! | `kafka_dlt-original-topic` | UTF-8 |
//! | `kafka_dlt-original-partition` | 4-byte big-endian int (`ByteBuffer.putInt`) |
//! | `kafka_dlt-original-offset` | 8-byte big-endian long (`ByteBuffer.putLong`) |
//! | `kafka_dlt-original-timestamp` | 8-byte big-endian long, epoch ms; `-1` when the record had none |
//! | `kafka_dlt-original-timestamp-type` | UTF-8: `CreateTime`, `LogAppendTime` or `NoTimestampType` |
//! | `kafka_dlt-original-consumer-group` | UTF-8 |
//! | `kafka_dlt-exception-fqcn` | UTF-8: the error's class, here [`exception_class`] |
//! | `kafka_dlt-exception-message` | UTF-8: the failure message (at most 1024 bytes) |
//! | `kafka_dlt-exception-stacktrace` | UTF-8: `<class>: <message>` and the attempts (Rust has no Java stack) |
//!
//! A dead letter in the reference form (too large for the DLT otherwise) carries all of them
//! but the stack trace, which repeats the message. The same module reads these headers back
//! from a dead letter Spring wrote (see [`crate::dlq_reader::foreign`]).

use crate::failure::DeadLetterKind;

use super::Envelope;

/// The prefix of every Spring dead-letter header.
pub const PREFIX: &str = "kafka_dlt-";
/// Header: the source topic (UTF-8).
pub const ORIGINAL_TOPIC: &str = "kafka_dlt-original-topic";
/// Header: the source partition (4-byte big-endian int).
pub const ORIGINAL_PARTITION: &str = "kafka_dlt-original-partition";
/// Header: the source offset (8-byte big-endian long).
pub const ORIGINAL_OFFSET: &str = "kafka_dlt-original-offset";
/// Header: the source timestamp in epoch milliseconds (8-byte big-endian long; `-1` for none).
pub const ORIGINAL_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
/// Header: the source timestamp's type (UTF-8: Kafka's `TimestampType` names).
pub const ORIGINAL_TIMESTAMP_TYPE: &str = "kafka_dlt-original-timestamp-type";
/// Header: the consumer group that dead-lettered the record (UTF-8).
pub const ORIGINAL_CONSUMER_GROUP: &str = "kafka_dlt-original-consumer-group";
/// Header: the failure's class name (UTF-8).
pub const EXCEPTION_FQCN: &str = "kafka_dlt-exception-fqcn";
/// Header: the class name of the failure's root cause (UTF-8; Spring only, read not written).
pub const EXCEPTION_CAUSE_FQCN: &str = "kafka_dlt-exception-cause-fqcn";
/// Header: the failure message (UTF-8).
pub const EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";
/// Header: the failure's stack trace (UTF-8).
pub const EXCEPTION_STACKTRACE: &str = "kafka_dlt-exception-stacktrace";

/// Kafka's name of a record's timestamp type, as Spring writes it: `CreateTime`,
/// `LogAppendTime`, or `NoTimestampType` when the record had no timestamp.
pub fn timestamp_type_name(envelope: &Envelope) -> &'static str {
    match (envelope.source.timestamp, envelope.source.timestamp_type) {
        (None, _) => "NoTimestampType",
        (Some(_), Some(t)) => t.as_str(),
        // An envelope from before `timestamp_type` was recorded: Kafka's default.
        (Some(_), None) => "CreateTime",
    }
}

/// The class name written in `kafka_dlt-exception-fqcn` for a dead letter of `kind`:
/// `kafka_dlq.PermanentFailure`, `kafka_dlq.RetriesExhausted` or
/// `kafka_dlq.DeserializationFailure` (no Java class threw it; a
/// Spring application can branch on the name as on an exception class).
pub fn exception_class(kind: DeadLetterKind) -> &'static str {
    match kind {
        DeadLetterKind::Permanent => "kafka_dlq.PermanentFailure",
        DeadLetterKind::RetriesExhausted => "kafka_dlq.RetriesExhausted",
        DeadLetterKind::Deserialization => "kafka_dlq.DeserializationFailure",
        DeadLetterKind::Unclassified => "kafka_dlq.Unclassified",
        DeadLetterKind::Parked => "kafka_dlq.ParkedTooLong",
    }
}

/// Spring's dead-letter headers for `envelope`, in Spring's order and encodings.
pub fn headers(envelope: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
    let source = &envelope.source;
    let class = exception_class(envelope.error.kind);
    let message = &envelope.error.message;
    let timestamp = source.timestamp.map_or(-1, |t| t.timestamp_millis());
    let stacktrace = format!(
        "{class}: {message}\n\tafter {} attempt(s) in consumer group {} (kafka-dlq)",
        envelope.error.attempts, source.group
    );
    vec![
        (ORIGINAL_TOPIC, source.topic.as_bytes().to_vec()),
        (ORIGINAL_PARTITION, source.partition.to_be_bytes().to_vec()),
        (ORIGINAL_OFFSET, source.offset.to_be_bytes().to_vec()),
        (ORIGINAL_TIMESTAMP, timestamp.to_be_bytes().to_vec()),
        (
            ORIGINAL_TIMESTAMP_TYPE,
            timestamp_type_name(envelope).as_bytes().to_vec(),
        ),
        (ORIGINAL_CONSUMER_GROUP, source.group.as_bytes().to_vec()),
        (EXCEPTION_FQCN, class.as_bytes().to_vec()),
        (EXCEPTION_MESSAGE, message.as_bytes().to_vec()),
        (EXCEPTION_STACKTRACE, stacktrace.into_bytes()),
    ]
}

/// A 4-byte big-endian int, as Spring writes the partition; `None` for any other length.
pub fn read_int(bytes: &[u8]) -> Option<i32> {
    <[u8; 4]>::try_from(bytes).ok().map(i32::from_be_bytes)
}

/// An 8-byte big-endian long, as Spring writes the offset and timestamp; `None` for any other
/// length.
pub fn read_long(bytes: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(bytes).ok().map(i64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Record, TimestampType};
    use chrono::TimeZone;

    fn envelope(timestamp: Option<i64>) -> Envelope {
        let record = {
            let mut record = Record::new("orders", 3, 1_234_567_890_123)
                .with_id("orders-3-1234567890123")
                .with_payload(b"{}");
            record.timestamp = timestamp.map(|ms| chrono::Utc.timestamp_millis_opt(ms).unwrap());
            record.timestamp_type = timestamp.map(|_| TimestampType::LogAppendTime);
            record
        };
        Envelope::new(
            &record,
            DeadLetterKind::RetriesExhausted,
            "timeout",
            11,
            "billing",
        )
    }

    #[test]
    fn writes_numbers_as_spring_does_big_endian() {
        let headers = headers(&envelope(Some(1_700_000_000_123)));
        let get = |name: &str| headers.iter().find(|(k, _)| *k == name).unwrap().1.clone();
        assert_eq!(get(ORIGINAL_PARTITION), vec![0, 0, 0, 3]);
        assert_eq!(get(ORIGINAL_OFFSET), 1_234_567_890_123_i64.to_be_bytes());
        assert_eq!(get(ORIGINAL_TIMESTAMP), 1_700_000_000_123_i64.to_be_bytes());
        assert_eq!(get(ORIGINAL_TIMESTAMP_TYPE), b"LogAppendTime");
        assert_eq!(get(ORIGINAL_TOPIC), b"orders");
        assert_eq!(get(ORIGINAL_CONSUMER_GROUP), b"billing");
        assert_eq!(get(EXCEPTION_FQCN), b"kafka_dlq.RetriesExhausted");
        assert_eq!(get(EXCEPTION_MESSAGE), b"timeout");
        assert!(String::from_utf8(get(EXCEPTION_STACKTRACE))
            .unwrap()
            .starts_with("kafka_dlq.RetriesExhausted: timeout\n\tafter 11 attempt(s)"));
    }

    #[test]
    fn a_record_without_timestamp_gets_minus_one_and_no_timestamp_type() {
        let headers = headers(&envelope(None));
        let get = |name: &str| headers.iter().find(|(k, _)| *k == name).unwrap().1.clone();
        assert_eq!(get(ORIGINAL_TIMESTAMP), (-1_i64).to_be_bytes());
        assert_eq!(get(ORIGINAL_TIMESTAMP_TYPE), b"NoTimestampType");
    }

    #[test]
    fn reads_only_the_binary_form() {
        assert_eq!(read_int(&7_i32.to_be_bytes()), Some(7));
        assert_eq!(read_long(&(-1_i64).to_be_bytes()), Some(-1));
        assert_eq!(read_int(b"12"), None);
        assert_eq!(read_long(&[1, 2, 3]), None);
    }
}
