//! Spring Kafka's retry-topic headers, as spring-kafka 4.1's
//! `DeadLetterPublishingRecovererFactory` writes them (read off its bytecode), so that a Spring
//! application's retry topics and ours can be read by either:
//!
//! | header | encoding |
//! |---|---|
//! | `retry_topic-attempts` | 4-byte big-endian int: the delivery this is, Spring's count (the source topic's is 1, tier 0's is 2); Spring also reads a 1-byte form |
//! | `retry_topic-backoff-timestamp` | when it is due, epoch ms, as Java's `BigInteger.valueOf(ms).toByteArray()` |
//! | `retry_topic-original-timestamp` | the original record's timestamp, epoch ms, the same way (`-1` for none) |
//!
//! With them go the `kafka_dlt-original-*` headers of a dead letter ([`crate::dlq::spring`]).

use chrono::{DateTime, TimeZone, Utc};

use super::account::{Origin, RetryHeader};
use crate::dlq::spring;
use crate::record::{Record, TimestampType};

/// Header: Spring's delivery count (4-byte big-endian int).
pub const SPRING_ATTEMPTS: &str = "retry_topic-attempts";
/// Header: Spring's due time (epoch ms, `BigInteger.toByteArray`).
pub const SPRING_BACKOFF_TIMESTAMP: &str = "retry_topic-backoff-timestamp";
/// Header: Spring's original timestamp (epoch ms, `BigInteger.toByteArray`).
pub const SPRING_ORIGINAL_TIMESTAMP: &str = "retry_topic-original-timestamp";

/// Spring's retry headers of a record written to tier `tier`, due at `due`, whose original
/// timestamp is `original`.
pub(super) fn retry_headers(
    tier: u32,
    due: DateTime<Utc>,
    original: Option<DateTime<Utc>>,
) -> [(&'static str, Vec<u8>); 3] {
    let original_ms = original.map_or(-1, |t| t.timestamp_millis());
    [
        (SPRING_ATTEMPTS, (tier as i32 + 2).to_be_bytes().to_vec()),
        (
            SPRING_BACKOFF_TIMESTAMP,
            big_integer(due.timestamp_millis()),
        ),
        (SPRING_ORIGINAL_TIMESTAMP, big_integer(original_ms)),
    ]
}

/// The account of a retry record a Spring application wrote: its `kafka_dlt-original-*` and
/// `retry_topic-*` headers.
pub(super) fn account(record: &Record) -> Option<RetryHeader> {
    let topic = std::str::from_utf8(record.header(spring::ORIGINAL_TOPIC)?).ok()?;
    let partition = spring::read_int(record.header(spring::ORIGINAL_PARTITION)?)?;
    let offset = spring::read_long(record.header(spring::ORIGINAL_OFFSET)?)?;
    let due = read_big_integer(record.header(SPRING_BACKOFF_TIMESTAMP)?)?;
    let due = Utc.timestamp_millis_opt(due).single()?;
    let timestamp = record
        .header(spring::ORIGINAL_TIMESTAMP)
        .and_then(spring::read_long)
        .or_else(|| {
            record
                .header(SPRING_ORIGINAL_TIMESTAMP)
                .and_then(read_big_integer)
        })
        .filter(|ms| *ms >= 0)
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
    // Spring counts deliveries: the one before this was its last handler call.
    let attempts = match record.header(SPRING_ATTEMPTS) {
        Some([one]) => u32::from(*one),
        Some(four) => spring::read_int(four).map_or(0, |n| n.max(0) as u32),
        None => 0,
    };
    Some(RetryHeader {
        id: crate::record::fallback_id(topic, partition, offset),
        source: Origin {
            topic: topic.to_string(),
            partition,
            offset,
            timestamp,
            timestamp_type: timestamp.map(|_| TimestampType::CreateTime),
        },
        tier: 0,
        due,
        attempts: attempts.saturating_sub(1),
        history: Vec::new(),
    })
}

/// `value` as Java's `BigInteger.valueOf(value).toByteArray()`: big-endian two's complement
/// in the fewest bytes that keep the sign.
pub(super) fn big_integer(value: i64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut start = 0;
    while start < 7 {
        let (this, next) = (bytes[start], bytes[start + 1]);
        let redundant = (this == 0x00 && next & 0x80 == 0) || (this == 0xff && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    bytes[start..].to_vec()
}

/// Reads what [`big_integer`] writes (1 to 8 bytes).
pub(super) fn read_big_integer(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 8 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0x00 };
    let mut full = [fill; 8];
    full[8 - bytes.len()..].copy_from_slice(bytes);
    Some(i64::from_be_bytes(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_integers_are_encoded_as_java_does() {
        // BigInteger.valueOf(x).toByteArray() for these x.
        assert_eq!(big_integer(0), [0x00]);
        assert_eq!(big_integer(127), [0x7f]);
        assert_eq!(big_integer(128), [0x00, 0x80]);
        assert_eq!(big_integer(-1), [0xff]);
        assert_eq!(big_integer(-129), [0xff, 0x7f]);
        assert_eq!(
            big_integer(1_700_000_000_123),
            [0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x7b]
        );
        for x in [0, 1, -1, 128, -129, i64::MAX, i64::MIN, 1_700_000_000_123] {
            assert_eq!(read_big_integer(&big_integer(x)), Some(x), "{x}");
        }
    }
}
