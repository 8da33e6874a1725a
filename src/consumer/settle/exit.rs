//! Where a record goes when its calls in its stage (its source topic or a retry topic) end
//! unhandled — [`Exit::after`] decides, [`ExitWrite::new`] says what is written — and the seam
//! the write goes through ([`ExitWriter`]; [`KafkaExits`] the real one), shared by group
//! workers and share members, and how a write that ended is logged and counted ([`exited`]).

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::dlq::DeadLetterPublisher;
use crate::failure::DeadLetterKind;
use crate::metrics::Metrics;
use crate::record::retry::RetryStage;
use crate::record::Record;
use crate::retry_tier::RetryTiers;
use crate::retry_tier::{RetryWriter, RetryWritten};
use crate::stopped::Stopped;

/// Where a record goes when it leaves its stage (its source topic or a retry topic)
/// unhandled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// To the dead-letter topic, after `attempts` handler calls in all its stages.
    DeadLetter { kind: DeadLetterKind, attempts: u32 },
    /// To retry tier `tier`, after `attempts` handler calls in this stage.
    RetryTier { tier: u32, attempts: u32 },
}

impl Exit {
    /// Where `record` goes whose calls in this stage ended in `kind` after `attempts` calls:
    /// its next retry tier when its retries are used up and a tier follows this stage, else
    /// the dead-letter topic.
    pub(crate) fn after(
        tiers: &RetryTiers,
        record: &Record,
        kind: DeadLetterKind,
        attempts: u32,
    ) -> Exit {
        let retry = record.retry.as_ref();
        match (kind, tiers.next(retry.and_then(|r| r.tier))) {
            (DeadLetterKind::RetriesExhausted, Some(tier)) => Exit::RetryTier { tier, attempts },
            _ => Exit::DeadLetter {
                kind,
                attempts: retry.map_or(0, |r| r.attempts).saturating_add(attempts),
            },
        }
    }
}

/// A write of a record to where it exits, handed to the producer: resolves once the broker
/// acknowledged it, or with [`Stopped`] when `cancel` fired between two tries.
pub(crate) type PendingExit = Pin<Box<dyn Future<Output = Result<RetryWritten, Stopped>> + Send>>;

/// What an [`ExitWriter`] writes for a record.
#[derive(Debug, Clone)]
pub(crate) enum ExitWrite {
    /// Its dead letter, after `attempts` handler calls in all its stages, `message` the last
    /// failure.
    DeadLetter {
        kind: DeadLetterKind,
        message: String,
        attempts: u32,
    },
    /// The record to retry tier `tier`'s topic, due at `due`, having left the stage `left`.
    Retry {
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
    },
}

impl ExitWrite {
    /// What is written for `record` leaving its stage for `exit` at `now`, `message` its last
    /// failure: a retry record is due its tier's delay after `now`.
    pub(crate) fn new(
        record: &Record,
        exit: Exit,
        message: &str,
        tiers: &RetryTiers,
        now: DateTime<Utc>,
    ) -> Self {
        match exit {
            Exit::DeadLetter { kind, attempts } => ExitWrite::DeadLetter {
                kind,
                message: message.to_string(),
                attempts,
            },
            Exit::RetryTier { tier, attempts } => ExitWrite::Retry {
                tier,
                due: now + tiers.delay(tier).unwrap_or_default(),
                left: RetryStage {
                    topic: record
                        .retry
                        .as_ref()
                        .map_or_else(|| record.topic.clone(), |r| r.topic.clone()),
                    attempts,
                    error: message.to_string(),
                    at: now,
                },
            },
        }
    }
}

/// Where records that exit their stage are written: the dead-letter topic and the retry
/// topics. A trait so that the worker runs against simulated writes in tests (acknowledged
/// late, failing, out of order); [`KafkaExits`] is the real one.
pub(crate) trait ExitWriter: Send + Sync + 'static {
    /// Hands `record`'s `write` to the producer now (so writes started one after another
    /// keep their order); the future waits for the acknowledgement, writing again after a
    /// failure until `cancel`.
    fn write(&self, record: &Record, write: &ExitWrite, cancel: CancellationToken) -> PendingExit;
}

/// The real [`ExitWriter`]: dead letters through a [`DeadLetterPublisher`], retry records
/// through a [`RetryWriter`] on the same producer.
pub(crate) struct KafkaExits {
    dead_letters: DeadLetterPublisher,
    retries: RetryWriter,
    /// Whether each write runs in a PRODUCER `send` span ([`super::Spans::send`]).
    traced: bool,
}

impl KafkaExits {
    /// Writes through `dead_letters`' producer, each write in a `send` span when `traced`.
    pub(crate) fn new(dead_letters: DeadLetterPublisher, traced: bool) -> Self {
        Self {
            retries: RetryWriter::new(&dead_letters),
            dead_letters,
            traced,
        }
    }

    fn untraced(
        &self,
        record: &Record,
        write: &ExitWrite,
        cancel: CancellationToken,
    ) -> PendingExit {
        match write {
            ExitWrite::DeadLetter {
                kind,
                message,
                attempts,
            } => Box::pin(
                self.dead_letters
                    .start(record, *kind, message, *attempts, cancel)
                    .map(|written| written.map(RetryWritten::DeadLettered)),
            ),
            ExitWrite::Retry { tier, due, left } => {
                Box::pin(
                    self.retries
                        .start(record, *tier, *due, left.clone(), cancel),
                )
            }
        }
    }
}

impl ExitWriter for KafkaExits {
    fn write(&self, record: &Record, write: &ExitWrite, cancel: CancellationToken) -> PendingExit {
        if !self.traced {
            return self.untraced(record, write, cancel);
        }
        let topic = match write {
            ExitWrite::DeadLetter { .. } => self.dead_letters.topic_of(record),
            ExitWrite::Retry { tier, .. } => {
                crate::record::retry::topic_name(record.source_topic(), *tier)
            }
        };
        // A child of the current span, the record's `process` span; the dead letter is built
        // in it, and so carries its trace context.
        let send = super::Spans::send(&topic);
        let pending = send.in_scope(|| self.untraced(record, write, cancel));
        Box::pin(
            async move {
                let written = pending.await;
                let span = tracing::Span::current();
                match &written {
                    Ok(RetryWritten::RetryTopic(to) | RetryWritten::DeadLettered(to)) => {
                        span.record("messaging.destination.partition.id", to.partition);
                        span.record("messaging.kafka.offset", to.offset);
                    }
                    Err(_) => {
                        span.record("otel.status_code", "error");
                    }
                }
                written
            }
            .instrument(send),
        )
    }
}

/// Logs `write` of a record handed to an exactly-once transaction (where it lands is known
/// only once the transaction commits, and the transaction counts it then: an aborted one is
/// done again).
pub(crate) fn exited_in_transaction(write: &ExitWrite) {
    match write {
        ExitWrite::Retry { tier, left, .. } => {
            tracing::warn!(event = "record_sent_to_retry_topic", tier, attempts = left.attempts,
                error = %left.error, "in the transaction");
        }
        ExitWrite::DeadLetter {
            kind,
            message,
            attempts,
        } => {
            tracing::warn!(event = "record_dead_lettered", kind = kind.as_str(), attempts,
                error = %message, "in the transaction");
        }
    }
}

/// Logs and counts how `write` of a record of `topic` ended: `Ok` when it was acknowledged,
/// [`Stopped`] (logged: the record is consumed or delivered again) when it was given up.
pub(crate) fn exited(
    metrics: &Metrics,
    topic: &str,
    write: &ExitWrite,
    written: Result<RetryWritten, Stopped>,
) -> Result<(), Stopped> {
    let (kind, message, attempts) = match write {
        ExitWrite::DeadLetter {
            kind,
            message,
            attempts,
        } => (*kind, message, *attempts),
        ExitWrite::Retry { left, .. } => {
            (DeadLetterKind::RetriesExhausted, &left.error, left.attempts)
        }
    };
    match (write, written) {
        (ExitWrite::Retry { tier, .. }, Ok(RetryWritten::RetryTopic(to))) => {
            tracing::warn!(event = "record_sent_to_retry_topic", tier, attempts,
                retry_topic = %to.topic, retry_partition = to.partition, retry_offset = to.offset,
                error = %message);
            metrics
                .retry_tier_sent
                .with_label_values(&[topic, &tier.to_string()])
                .inc();
            Ok(())
        }
        (_, Ok(RetryWritten::DeadLettered(to))) => {
            tracing::warn!(event = "record_dead_lettered", kind = kind.as_str(), attempts,
                dlq_topic = %to.topic, dlq_partition = to.partition, dlq_offset = to.offset,
                error = %message);
            metrics
                .dead_lettered
                .with_label_values(&[topic, kind.as_str()])
                .inc();
            Ok(())
        }
        (_, Ok(_)) => Ok(()),
        (_, Err(_)) => {
            tracing::info!(
                event = "record_abandoned",
                "stopped before the write succeeded; the record will be consumed again"
            );
            Err(Stopped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::retry::RetryDelivery;

    fn record(tier: Option<u32>) -> Record {
        Record {
            id: "t-0-1".into(),
            topic: "t".into(),
            partition: 0,
            offset: 1,
            key: None,
            payload: None,
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
            retry: tier.map(|tier| {
                Box::new(RetryDelivery {
                    group: None,
                    tier: Some(tier),
                    topic: format!("t-retry-{tier}"),
                    partition: 0,
                    offset: 0,
                    due: chrono::Utc::now(),
                    attempts: 4,
                    history: vec![],
                })
            }),
            delivery_count: None,
        }
    }

    #[test]
    fn exhausted_retries_go_to_the_next_tier_then_the_dead_letter_topic() {
        let tiers = RetryTiers::new([1_000, 2_000]);
        let exhausted = DeadLetterKind::RetriesExhausted;
        assert_eq!(
            Exit::after(&tiers, &record(None), exhausted, 3),
            Exit::RetryTier {
                tier: 0,
                attempts: 3
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(0)), exhausted, 3),
            Exit::RetryTier {
                tier: 1,
                attempts: 3
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(1)), exhausted, 3),
            Exit::DeadLetter {
                kind: exhausted,
                attempts: 7
            },
            "after the last tier, with every stage's calls"
        );
        assert_eq!(
            Exit::after(&RetryTiers::default(), &record(None), exhausted, 11),
            Exit::DeadLetter {
                kind: exhausted,
                attempts: 11
            }
        );
    }

    #[test]
    fn a_forged_call_count_saturates_instead_of_overflowing() {
        let mut forged = record(Some(1));
        forged.retry.as_mut().unwrap().attempts = u32::MAX;
        assert_eq!(
            Exit::after(
                &RetryTiers::new([1_000, 2_000]),
                &forged,
                DeadLetterKind::RetriesExhausted,
                3
            ),
            Exit::DeadLetter {
                kind: DeadLetterKind::RetriesExhausted,
                attempts: u32::MAX
            }
        );
    }

    #[test]
    fn a_redriven_record_starts_its_stages_again() {
        let tiers = RetryTiers::new([1_000]);
        let mut redriven = record(Some(0));
        redriven.retry.as_mut().unwrap().tier = None;
        assert_eq!(
            Exit::after(&tiers, &redriven, DeadLetterKind::RetriesExhausted, 2),
            Exit::RetryTier {
                tier: 0,
                attempts: 2
            }
        );
        assert_eq!(
            Exit::after(
                &RetryTiers::default(),
                &redriven,
                DeadLetterKind::Permanent,
                1
            ),
            Exit::DeadLetter {
                kind: DeadLetterKind::Permanent,
                attempts: 5
            },
            "with the calls before the replay"
        );
    }

    #[test]
    fn a_permanent_failure_skips_the_tiers() {
        let tiers = RetryTiers::new([1_000]);
        let permanent = DeadLetterKind::Permanent;
        assert_eq!(
            Exit::after(&tiers, &record(None), permanent, 1),
            Exit::DeadLetter {
                kind: permanent,
                attempts: 1
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(0)), permanent, 1),
            Exit::DeadLetter {
                kind: permanent,
                attempts: 5
            }
        );
    }
}
