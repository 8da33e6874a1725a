//! What is written for a record leaving its stage ([`ExitWrite::new`], from the decision
//! `settle` made, [`Exit`]), the seam the write goes through ([`ExitWriter`]; [`KafkaExits`]
//! the real one, each write in a PRODUCER `send` span when traced), shared by group workers
//! and share members, and how a write that ended is logged and counted ([`exited`]).

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::consumer::settle::Exit;
use crate::dlq::DeadLetterPublisher;
use crate::failure::DeadLetterKind;
use crate::metrics::Metrics;
use crate::record::retry::RetryStage;
use crate::record::Record;
use crate::retry_tier::{RetryTiers, RetryWriter, RetryWritten};
use crate::stopped::Stopped;

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
    /// Whether each write runs in a PRODUCER `send` span ([`send_span`]).
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
        let send = send_span(&topic);
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

/// The PRODUCER span `send {topic}` of a write to `topic` (a dead-letter or retry topic),
/// a child of the current span (the record's process span).
fn send_span(topic: &str) -> tracing::Span {
    tracing::info_span!(
        "send",
        otel.name = %format_args!("send {topic}"),
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "kafka",
        messaging.operation.name = "send",
        messaging.operation.type = "send",
        messaging.destination.name = %topic,
        messaging.destination.partition.id = tracing::field::Empty,
        messaging.kafka.offset = tracing::field::Empty,
    )
}
