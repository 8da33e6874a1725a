//! What a retry record carries, and the record a handler gets back from it.
//!
//! A record written to retry tier `n` keeps its key and value, and its headers (less earlier
//! `kafka_dlt-*`, `retry_topic-*` and `kafka_dlq-retry` ones), and gains:
//!
//! | header | encoding |
//! |---|---|
//! | `kafka_dlt-original-*`, `kafka_dlt-exception-*` | Spring's dead-letter headers ([`crate::dlq::spring`]), less the stack trace; the class is `kafka_dlq.TransientFailure` |
//! | `retry_topic-attempts`, `retry_topic-backoff-timestamp`, `retry_topic-original-timestamp` | Spring's retry headers ([`super::spring`]) |
//! | `kafka_dlq-retry` | JSON: `id`, `source` (topic, partition, offset, timestamp, timestamp_type), `tier`, `due`, `attempts` (handler calls so far), `history` (each stage left: topic, attempts, error, at) |
//!
//! [`restore`] reads `kafka_dlq-retry` back, or Spring's headers when a Spring application
//! wrote the retry record (`super::spring::account`).

use chrono::{DateTime, SubsecRound, Utc};

use super::account::{Origin, RetryHeader};
use crate::dlq::{spring, truncate_message, Envelope};
use crate::failure::DeadLetterKind;
use crate::record::retry::{RetryDelivery, RetryStage};
use crate::record::{Record, RecordHeader};

/// Header: kafka-dlq's account of a retry record (JSON, see the module docs).
pub const HEADER_RETRY: &str = "kafka_dlq-retry";

/// The class written in `kafka_dlt-exception-fqcn` of a retry record.
const TRANSIENT_CLASS: &str = "kafka_dlq.TransientFailure";

/// Whether a header is one this module writes (or Spring's dead-letter ones), dropped from
/// the original headers.
pub(crate) fn is_ours(key: &[u8]) -> bool {
    key == HEADER_RETRY.as_bytes()
        || key.starts_with(b"retry_topic-")
        || key.starts_with(spring::PREFIX.as_bytes())
}

/// The headers of `record` (the handler's view of it) written to retry tier `tier`, due at
/// `due`, having left the stage `left` (its last failure and its handler calls there), in
/// consumer group `group`. See the module docs.
pub fn retry_headers(
    record: &Record,
    tier: u32,
    due: DateTime<Utc>,
    left: RetryStage,
    group: &str,
) -> Vec<RecordHeader> {
    let before = record.retry.as_ref();
    let attempts = before
        .map_or(0, |r| r.attempts)
        .saturating_add(left.attempts);
    let mut history = before.map_or_else(Vec::new, |r| r.history.clone());
    let error = truncate_message(&left.error);
    history.push(RetryStage { error, ..left });
    account_headers(record, tier, due, attempts, history, group)
}

/// The headers of a dead letter that `dlq replay` puts back on its group's redrive topic
/// ([`crate::record::retry::redrive_topic`]): `envelope` is the dead letter and `headers` its
/// original record's headers (the replay adds its own). Due at `due`, with the dead letter's
/// handler calls and its history (for one dead-lettered from its source topic, that stage), so
/// that the group's consumer hands its handler the original record — coordinates, id,
/// timestamp, headers — with [`Record::retry`] saying what went before.
pub fn redrive_headers(
    envelope: &Envelope,
    headers: Vec<RecordHeader>,
    due: DateTime<Utc>,
) -> Vec<RecordHeader> {
    let source = &envelope.source;
    let mut original =
        Record::new(&source.topic, source.partition, source.offset).with_id(&envelope.id);
    original.timestamp = source.timestamp;
    original.timestamp_type = source.timestamp_type;
    original.headers = headers;
    let mut history = envelope.history.clone();
    if history.is_empty() {
        history.push(RetryStage {
            topic: envelope.source.topic.clone(),
            attempts: envelope.error.attempts,
            error: envelope.error.message.clone(),
            at: envelope.timestamp,
        });
    }
    account_headers(
        &original,
        0,
        due,
        envelope.error.attempts,
        history,
        &envelope.source.group,
    )
}

/// `at` rounded up to the next millisecond (unchanged when it is on one).
fn ceil_to_millis(at: DateTime<Utc>) -> DateTime<Utc> {
    let down = at.trunc_subsecs(3);
    if down < at {
        down + chrono::TimeDelta::milliseconds(1)
    } else {
        down
    }
}

/// The headers of `record` as a retry record (see the module docs): due at `due`, after
/// `attempts` handler calls in the stages `history`, written by `group`.
fn account_headers(
    record: &Record,
    tier: u32,
    due: DateTime<Utc>,
    attempts: u32,
    history: Vec<RetryStage>,
    group: &str,
) -> Vec<RecordHeader> {
    // Both headers keep milliseconds: rounded up, so that no reader finds it due early.
    let due = ceil_to_millis(due);
    let mut headers: Vec<RecordHeader> = record
        .headers
        .iter()
        .filter(|h| !is_ours(&h.key))
        .cloned()
        .collect();
    let last = &history[history.len() - 1];
    let envelope = Envelope::new(
        &Record {
            payload: None,
            ..record.clone()
        },
        DeadLetterKind::RetriesExhausted,
        &last.error,
        attempts,
        group,
    );
    for (key, value) in spring::headers(&envelope) {
        let value = match key {
            spring::EXCEPTION_STACKTRACE => continue,
            spring::EXCEPTION_FQCN => TRANSIENT_CLASS.as_bytes().to_vec(),
            _ => value,
        };
        headers.push(header(key, value));
    }
    for (key, value) in super::spring::retry_headers(tier, due, record.timestamp) {
        headers.push(header(key, value));
    }
    let account = RetryHeader {
        id: record.id.clone(),
        source: Origin {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp,
            timestamp_type: record.timestamp_type,
        },
        tier,
        due,
        attempts,
        history,
    };
    let json = serde_json::to_vec(&account).expect("a retry header always serializes");
    headers.push(header(HEADER_RETRY, json));
    headers
}

pub(super) fn header(key: &str, value: Vec<u8>) -> RecordHeader {
    RecordHeader {
        key: key.as_bytes().to_vec(),
        value: Some(value),
    }
}

/// Why a retry record's account could not be read; the record is then handled as it is
/// (its own coordinates, due at once, no history).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// Neither `kafka_dlq-retry` nor Spring's headers are there.
    #[error("the record has neither a kafka_dlq-retry header nor Spring's retry headers")]
    Missing,
    /// `kafka_dlq-retry` is not the JSON kafka-dlq writes.
    #[error("its kafka_dlq-retry header does not decode: {0}")]
    Malformed(String),
}

/// The record a handler gets for `delivered`, consumed from retry tier `tier` (`None`: from
/// a redrive topic): the original
/// record (topic, partition, offset, id, timestamp, headers less the retry ones) with
/// [`Record::retry`] set. When its account cannot be read, `delivered` itself with `retry` set
/// (due now, no history), and the reason.
pub fn restore(delivered: Record, tier: Option<u32>) -> (Record, Option<RestoreError>) {
    let account = match delivered.header(HEADER_RETRY) {
        Some(json) => serde_json::from_slice::<RetryHeader>(json)
            .map_err(|e| RestoreError::Malformed(e.to_string())),
        None => super::spring::account(&delivered).ok_or(RestoreError::Missing),
    };
    let group = delivered
        .header(spring::ORIGINAL_CONSUMER_GROUP)
        .and_then(|g| std::str::from_utf8(g).ok())
        .map(str::to_string);
    let delivery = |due, attempts, history| RetryDelivery {
        group: group.clone(),
        tier,
        topic: delivered.topic.clone(),
        partition: delivered.partition,
        offset: delivered.offset,
        due,
        attempts,
        history,
    };
    match account {
        Ok(account) => {
            let retry = delivery(account.due, account.attempts, account.history);
            let headers = delivered
                .headers
                .into_iter()
                .filter(|h| !is_ours(&h.key))
                .collect();
            let record = Record {
                id: account.id,
                topic: account.source.topic,
                partition: account.source.partition,
                offset: account.source.offset,
                key: delivered.key,
                payload: delivered.payload,
                headers,
                timestamp: account.source.timestamp,
                timestamp_type: account.source.timestamp_type,
                retry: Some(Box::new(retry)),
                delivery_count: delivered.delivery_count,
            };
            (record, None)
        }
        Err(error) => {
            let retry = delivery(Utc::now(), 0, Vec::new());
            let record = Record {
                retry: Some(Box::new(retry)),
                ..delivered
            };
            (record, Some(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::spring::{
        big_integer, read_big_integer, SPRING_ATTEMPTS, SPRING_BACKOFF_TIMESTAMP,
    };
    use super::*;
    use crate::record::TimestampType;
    use chrono::TimeZone;

    fn original() -> Record {
        Record {
            id: "orders-3-42".into(),
            topic: "orders".into(),
            partition: 3,
            offset: 42,
            key: Some(vec![0xff, 0x00]),
            payload: Some(b"{\"n\":1}".to_vec()),
            headers: vec![
                header("trace", b"t1".to_vec()),
                header(spring::ORIGINAL_TOPIC, b"older".to_vec()),
            ],
            timestamp: Utc.timestamp_millis_opt(1_700_000_000_123).single(),
            timestamp_type: Some(TimestampType::CreateTime),
            retry: None,
            delivery_count: None,
        }
    }

    fn stage(topic: &str, attempts: u32, error: &str) -> RetryStage {
        RetryStage {
            topic: topic.into(),
            attempts,
            error: error.into(),
            at: Utc
                .timestamp_millis_opt(1_800_000_000_000)
                .single()
                .unwrap(),
        }
    }

    /// `record` as written to `tier`'s topic and consumed from it at `offset`.
    fn delivered(record: &Record, tier: u32, headers: Vec<RecordHeader>, offset: i64) -> Record {
        Record {
            id: format!("orders-retry-{tier}-0-{offset}"),
            topic: format!("orders-retry-{tier}"),
            partition: 0,
            offset,
            headers,
            timestamp: Utc.timestamp_millis_opt(1_800_000_000_001).single(),
            retry: None,
            ..record.clone()
        }
    }

    #[test]
    fn a_due_time_is_written_rounded_up_to_the_millisecond_so_it_is_never_early() {
        let due = Utc.timestamp_nanos(1_800_000_000_123_400_000);
        let record = original();
        let headers = retry_headers(&record, 0, due, stage("orders", 3, "db down"), "g1");
        let (restored, _) = restore(delivered(&record, 0, headers, 5), Some(0));
        let written = restored.retry.unwrap().due;
        assert_eq!(
            written,
            Utc.timestamp_millis_opt(1_800_000_000_124).unwrap()
        );
        assert!(written >= due);
        let on_a_milli = Utc.timestamp_millis_opt(1_800_000_000_123).unwrap();
        assert_eq!(ceil_to_millis(on_a_milli), on_a_milli);
    }

    #[test]
    fn a_redriven_dead_letter_restores_the_original_with_its_calls_and_group() {
        let record = original();
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "bad sku", 1, "billing");
        let headers = redrive_headers(&envelope, record.headers.clone(), Utc::now());
        let mut redriven = delivered(&record, 0, headers, 5);
        redriven.topic = "orders-redrive-billing".into();
        let (restored, error) = restore(redriven, None);
        assert_eq!(error, None);
        assert_eq!(
            (
                restored.id.as_str(),
                restored.topic.as_str(),
                restored.offset
            ),
            ("orders-3-42", "orders", 42)
        );
        assert_eq!(restored.headers, vec![header("trace", b"t1".to_vec())]);
        let retry = restored.retry.as_deref().unwrap();
        assert_eq!(retry.tier, None);
        assert_eq!(retry.topic, "orders-redrive-billing");
        assert_eq!(retry.offset, 5);
        assert_eq!(retry.attempts, 1);
        assert_eq!(retry.group.as_deref(), Some("billing"));
        assert!(retry.is_for("billing") && !retry.is_for("shipping"));
        assert_eq!(retry.history.len(), 1);
        assert_eq!(
            (
                retry.history[0].topic.as_str(),
                retry.history[0].error.as_str()
            ),
            ("orders", "bad sku")
        );
    }

    #[test]
    fn a_retry_record_restores_the_original_with_its_history() {
        let record = original();
        let due = Utc
            .timestamp_millis_opt(1_800_000_002_000)
            .single()
            .unwrap();
        let headers = retry_headers(&record, 0, due, stage("orders", 3, "db down"), "g1");
        let find = |key: &str| headers.iter().find(|h| h.key == key.as_bytes()).unwrap();
        assert_eq!(
            find(SPRING_ATTEMPTS).value.as_deref(),
            Some(&[0, 0, 0, 2][..])
        );
        assert_eq!(
            read_big_integer(find(SPRING_BACKOFF_TIMESTAMP).value.as_deref().unwrap()),
            Some(1_800_000_002_000)
        );
        assert_eq!(
            find(spring::ORIGINAL_PARTITION).value.as_deref(),
            Some(&[0, 0, 0, 3][..])
        );
        assert_eq!(
            find(spring::EXCEPTION_FQCN).value.as_deref(),
            Some(TRANSIENT_CLASS.as_bytes())
        );
        assert!(
            !headers.iter().any(|h| h.value.as_deref() == Some(b"older")),
            "an earlier kafka_dlt- header is dropped"
        );

        let (restored, error) = restore(delivered(&record, 0, headers.clone(), 7), Some(0));
        assert_eq!(error, None);
        assert_eq!(restored.source_topic(), "orders");
        // From the redrive topic of a group whose id ends like a tier's topic: its source is
        // the record's topic (set from the partition's stage), not a parse of that name.
        let mut redriven = delivered(&record, 0, headers, 7);
        redriven.topic = "orders-redrive-billing-retry-1".into();
        let (mut redriven, _) = restore(redriven, None);
        redriven.retry.as_mut().unwrap().topic = "orders-redrive-billing-retry-1".into();
        redriven.topic = "orders".into();
        assert_eq!(redriven.source_topic(), "orders");
        let retry = restored.retry.clone().unwrap();
        assert_eq!(
            retry.group.as_deref(),
            Some("g1"),
            "the group that wrote it"
        );
        assert_eq!(
            Record {
                retry: None,
                ..restored.clone()
            },
            Record {
                headers: vec![header("trace", b"t1".to_vec())],
                ..record
            },
            "the handler sees the original record"
        );
        assert_eq!(
            (retry.tier, retry.topic.as_str(), retry.offset, retry.due),
            (Some(0), "orders-retry-0", 7, due)
        );
        assert_eq!(retry.attempts, 3);
        assert_eq!(retry.history, [stage("orders", 3, "db down")]);

        // On to the next tier: the history grows, the original stays.
        let headers = retry_headers(&restored, 1, due, stage("orders-retry-0", 2, "still"), "g1");
        let (again, _) = restore(delivered(&restored, 1, headers, 0), Some(1));
        let retry = again.retry.unwrap();
        assert_eq!((again.topic.as_str(), again.offset), ("orders", 42));
        assert_eq!(retry.attempts, 5);
        assert_eq!(
            retry.history,
            [
                stage("orders", 3, "db down"),
                stage("orders-retry-0", 2, "still")
            ]
        );
    }

    #[test]
    fn a_spring_retry_record_is_restored_from_springs_headers() {
        let mut headers = vec![
            header(spring::ORIGINAL_TOPIC, b"orders".to_vec()),
            header(spring::ORIGINAL_PARTITION, 3i32.to_be_bytes().to_vec()),
            header(spring::ORIGINAL_OFFSET, 42i64.to_be_bytes().to_vec()),
            header(
                spring::ORIGINAL_TIMESTAMP,
                1_700_000_000_123i64.to_be_bytes().to_vec(),
            ),
            header(SPRING_ATTEMPTS, 2i32.to_be_bytes().to_vec()),
            header(SPRING_BACKOFF_TIMESTAMP, big_integer(1_800_000_002_000)),
        ];
        headers.push(header("app", b"x".to_vec()));
        let (restored, error) = restore(delivered(&original(), 0, headers, 9), Some(0));
        assert_eq!(error, None);
        assert_eq!(
            (
                restored.id.as_str(),
                restored.topic.as_str(),
                restored.offset
            ),
            ("orders-3-42", "orders", 42)
        );
        assert_eq!(restored.headers, [header("app", b"x".to_vec())]);
        let retry = restored.retry.unwrap();
        assert_eq!(retry.attempts, 1);
        assert_eq!(
            retry.group, None,
            "Spring's record did not say; any group handles it"
        );
    }

    #[test]
    fn an_unreadable_retry_record_is_handled_as_it_is() {
        let headers = vec![header(HEADER_RETRY, b"{not json".to_vec())];
        let (restored, error) = restore(delivered(&original(), 1, headers.clone(), 4), Some(1));
        assert!(
            matches!(error, Some(RestoreError::Malformed(_))),
            "{error:?}"
        );
        assert_eq!(
            (restored.topic.as_str(), restored.offset),
            ("orders-retry-1", 4)
        );
        assert_eq!(restored.retry.unwrap().offset, 4);
        let (_, error) = restore(delivered(&original(), 1, vec![], 4), Some(1));
        assert_eq!(error, Some(RestoreError::Missing));
    }
}
