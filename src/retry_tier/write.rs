//! Writing a record to its next retry topic (see [`crate::retry_tier`]), with the same
//! producer and the same patience as a dead letter: retried with backoff until the broker
//! acknowledges it.

use chrono::{DateTime, Utc};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use super::retry_headers;
use crate::backoff::ExponentialBackoff;
use crate::dlq::{DeadLetterPublisher, DeadLettered};
use crate::failure::DeadLetterKind;
use crate::kafka::send::{is_too_large, send_until_acknowledged, Failed, Sent, Written};
use crate::kafka::LogContext;
use crate::metrics::Metrics;
use crate::record::retry::RetryStage;
use crate::record::Record;
use crate::stopped::Stopped;

/// Where a record sent to a retry topic ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryWritten {
    /// In the retry topic, at this partition and offset.
    RetryTopic(DeadLettered),
    /// In the dead-letter topic instead: the record was too large for the retry topic.
    DeadLettered(DeadLettered),
}

/// Writes records to their retry topics, on the producer of the dead letters it falls back
/// to. Clones share the producer.
#[derive(Clone)]
pub struct RetryWriter {
    producer: FutureProducer<LogContext>,
    /// The consumer group, named in each retry record: another group's records are passed over.
    group: String,
    /// The backoff between two writes of one record.
    retry: ExponentialBackoff,
    metrics: Metrics,
    /// Where a record too large for its retry topic goes instead.
    dead_letters: DeadLetterPublisher,
}

impl RetryWriter {
    /// A writer for `dead_letters`' consumer group, on its producer, counting failed writes in
    /// its metrics.
    pub fn new(dead_letters: &DeadLetterPublisher) -> Self {
        Self {
            producer: dead_letters.producer().clone(),
            group: dead_letters.group().to_string(),
            retry: ExponentialBackoff::infrastructure(),
            metrics: dead_letters.metrics().clone(),
            dead_letters: dead_letters.clone(),
        }
    }

    /// Hands `record` (the handler's view of it) to the producer for its retry topic of tier
    /// `tier` (`<topic>-retry-<tier>`), due at `due`, having left the stage `left` (see
    /// [`retry_headers`]); the future waits for the acknowledgement, writing again with backoff
    /// after a failure, until `cancel` ([`Stopped`]). A record too large for the retry topic
    /// is dead-lettered instead (retries exhausted, with its history).
    pub fn start(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Result<RetryWritten, Stopped>> + Send + 'static {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 12);
        for h in retry_headers(record, tier, due, left.clone(), &self.group) {
            headers = crate::kafka::headers::add(headers, &h.key, h.value.as_deref());
        }
        let this = self.clone();
        let record = record.clone();
        let topic = crate::record::retry::topic_name(record.source_topic(), tier);
        // Handed to the producer now, so that retry records keep the partition's order.
        let first = send(&this, &topic, &headers, &record);
        async move {
            let (this_ref, record_ref) = (&this, &record);
            let on_wait = |_: (), error: &KafkaError, delay: std::time::Duration| {
                tracing::error!(event = "retry_topic_write_failed", error = %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "write to the retry topic failed; the partition does not advance past the record until it succeeds");
                this_ref
                    .metrics
                    .dlq_write_failures
                    .with_label_values(&[record_ref.topic.as_str()])
                    .inc();
            };
            let written = send_until_acknowledged(
                &cancel,
                &this.retry,
                (),
                first,
                |()| send(this_ref, &topic, &headers, record_ref),
                // A record too large for its retry topic is dead-lettered instead, below.
                |(), error| {
                    if is_too_large(error) {
                        Failed::GiveUp
                    } else {
                        Failed::Later
                    }
                },
                on_wait,
            )
            .await?;
            match written {
                Written::Acknowledged((), at) => Ok(RetryWritten::RetryTopic(DeadLettered {
                    topic,
                    partition: at.partition,
                    offset: at.offset,
                })),
                Written::GaveUp => {
                    tracing::error!(
                        event = "retry_record_too_large",
                        tier,
                        "the record is too large for its retry topic; it is dead-lettered instead"
                    );
                    let attempts = record
                        .retry
                        .as_ref()
                        .map_or(0, |r| r.attempts)
                        .saturating_add(left.attempts);
                    this.dead_letters
                        .start(
                            &record,
                            DeadLetterKind::RetriesExhausted,
                            &left.error,
                            attempts,
                            cancel,
                        )
                        .await
                        .map(RetryWritten::DeadLettered)
                }
            }
        }
    }
}

impl RetryWriter {
    /// Hands `record` to the producer once for its retry topic of tier `tier`, as
    /// [`RetryWriter::start`] writes it, and returns at once: a transaction's commit waits for
    /// it. Returns the retry topic.
    pub(crate) fn send_once(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
    ) -> (String, Sent) {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 12);
        for h in retry_headers(record, tier, due, left, &self.group) {
            headers = crate::kafka::headers::add(headers, &h.key, h.value.as_deref());
        }
        let topic = crate::record::retry::topic_name(record.source_topic(), tier);
        let sent = send(self, &topic, &headers, record);
        (topic, sent)
    }
}

/// Hands one retry record to the producer.
fn send(writer: &RetryWriter, topic: &str, headers: &OwnedHeaders, record: &Record) -> Sent {
    let mut out = FutureRecord::<[u8], [u8]>::to(topic).headers(headers.clone());
    if let Some(value) = record.payload.as_deref() {
        out = out.payload(value);
    }
    if let Some(key) = record.key.as_deref() {
        out = out.key(key);
    }
    writer.producer.send_result(out).map_err(|(error, _)| error)
}
