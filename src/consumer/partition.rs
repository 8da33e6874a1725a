//! One assigned partition: a bounded queue of fetched records and the worker task that settles
//! them in offset order.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::FutureExt;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::TopicPartitionList;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::RebalanceContext;
use crate::backoff::ExponentialBackoff;
use crate::dlq::DeadLetterPublisher;
use crate::failure::{self, decide, Decision};
use crate::handler::Handler;
use crate::metrics::{GaugeGuard, Metrics};
use crate::record::Record;

/// What the workers of all partitions share.
pub(super) struct Shared<H> {
    pub handler: H,
    pub dlq: DeadLetterPublisher,
    pub backoff: ExponentialBackoff,
    pub consumer: Arc<StreamConsumer<RebalanceContext>>,
    pub metrics: Metrics,
}

/// The fetched, not yet settled records of one partition. The partition is paused in the
/// consumer when `high` records wait, and resumed when no more than `low` do, so memory stays
/// bounded however slow the handler is while the consumer keeps polling.
pub(super) struct PartitionQueue {
    topic: String,
    partition: i32,
    high: usize,
    low: usize,
    state: Mutex<QueueState>,
    notify: Notify,
    buffered: prometheus::IntGauge,
}

struct QueueState {
    records: VecDeque<Record>,
    paused: bool,
}

impl PartitionQueue {
    pub fn new(topic: &str, partition: i32, high: usize, buffered: prometheus::IntGauge) -> Self {
        Self {
            topic: topic.to_string(),
            partition,
            high,
            low: high / 2,
            state: Mutex::new(QueueState {
                records: VecDeque::new(),
                paused: false,
            }),
            notify: Notify::new(),
            buffered,
        }
    }

    fn tpl(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, self.partition);
        tpl
    }

    /// Adds a fetched record; pauses the partition when the queue is full.
    pub fn push(&self, record: Record, consumer: &StreamConsumer<RebalanceContext>) {
        let mut state = self.state.lock().expect("partition queue lock");
        state.records.push_back(record);
        self.buffered.inc();
        if !state.paused && state.records.len() >= self.high {
            match consumer.pause(&self.tpl()) {
                Ok(()) => {
                    state.paused = true;
                    tracing::debug!(event = "partition_paused", topic = %self.topic,
                        partition = self.partition, buffered = state.records.len());
                }
                Err(e) => tracing::warn!(event = "partition_pause_failed", topic = %self.topic,
                    partition = self.partition, error = %e),
            }
        }
        drop(state);
        self.notify.notify_one();
    }

    /// The next record in offset order, waiting for one; `None` once `cancel` fires while the
    /// queue is empty. Resumes the partition when the queue has drained to `low`.
    async fn pop(
        &self,
        consumer: &StreamConsumer<RebalanceContext>,
        cancel: &CancellationToken,
    ) -> Option<Record> {
        loop {
            {
                let mut state = self.state.lock().expect("partition queue lock");
                if let Some(record) = state.records.pop_front() {
                    self.buffered.dec();
                    if state.paused && state.records.len() <= self.low {
                        match consumer.resume(&self.tpl()) {
                            Ok(()) => {
                                state.paused = false;
                                tracing::debug!(event = "partition_resumed", topic = %self.topic,
                                    partition = self.partition);
                            }
                            Err(e) => tracing::debug!(event = "partition_resume_failed",
                                topic = %self.topic, partition = self.partition, error = %e),
                        }
                    }
                    return Some(record);
                }
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                _ = self.notify.notified() => {}
            }
        }
    }
}

impl Drop for PartitionQueue {
    fn drop(&mut self) {
        let left = self.state.get_mut().map(|s| s.records.len()).unwrap_or(0);
        self.buffered.sub(left as i64);
    }
}

/// How a record ended.
enum Outcome {
    /// Handled, or acknowledged by the dead-letter topic: its offset may be stored.
    Settled,
    /// Given up because the partition was revoked or the service is stopping: its offset must
    /// not be stored, so it is consumed again.
    Abandoned,
}

/// Settles the records of one partition one after another, storing each offset once its record
/// is settled, until `cancel` fires (revocation or shutdown). A handler call in progress when
/// `cancel` fires runs to its end; a backoff wait or dead-letter retry does not.
pub(super) async fn run_worker<H: Handler>(
    shared: Arc<Shared<H>>,
    queue: Arc<PartitionQueue>,
    cancel: CancellationToken,
) {
    while !cancel.is_cancelled() {
        let Some(record) = queue.pop(&shared.consumer, &cancel).await else {
            break;
        };
        let span = tracing::info_span!(
            "record",
            topic = %record.topic,
            partition = record.partition,
            offset = record.offset,
            id = %record.id,
            key = %record.key_for_logs(),
        );
        match settle(&shared, &record, &cancel).instrument(span).await {
            Outcome::Settled => {
                if let Err(e) =
                    shared
                        .consumer
                        .store_offset(&record.topic, record.partition, record.offset)
                {
                    tracing::debug!(event = "offset_store_failed", topic = %record.topic,
                        partition = record.partition, offset = record.offset, error = %e,
                        "partition no longer assigned; the new owner consumes it again");
                }
            }
            Outcome::Abandoned => break,
        }
    }
}

/// Calls the handler until the record succeeds, is dead-lettered, or is abandoned.
async fn settle<H: Handler>(
    shared: &Shared<H>,
    record: &Record,
    cancel: &CancellationToken,
) -> Outcome {
    let mut delays = shared.backoff.delays();
    let mut attempts: u32 = 0;
    loop {
        attempts += 1;
        let started = Instant::now();
        let result = AssertUnwindSafe(shared.handler.handle(record))
            .catch_unwind()
            .await;
        let elapsed = started.elapsed().as_secs_f64();
        shared
            .metrics
            .handler_duration
            .with_label_values(&[record.topic.as_str()])
            .observe(elapsed);
        let elapsed_ms = elapsed * 1000.0;
        let error = match result {
            Ok(Ok(())) => {
                tracing::debug!(event = "record_handled", attempts, elapsed_ms);
                shared
                    .metrics
                    .succeeded
                    .with_label_values(&[record.topic.as_str()])
                    .inc();
                return Outcome::Settled;
            }
            Ok(Err(error)) => error,
            Err(panic) => {
                let error = failure::from_panic(panic);
                tracing::error!(event = "handler_panicked", attempts, error = %error.message());
                error
            }
        };
        match decide(&error, &mut delays) {
            Decision::Retry { delay } => {
                tracing::warn!(event = "record_retry_scheduled", attempts,
                    retry_in_ms = delay.as_millis() as u64, error = %error);
                shared
                    .metrics
                    .retried
                    .with_label_values(&[record.topic.as_str()])
                    .inc();
                let _in_backoff = GaugeGuard::inc(&shared.metrics.partitions_in_backoff);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = cancel.cancelled() => {
                        tracing::info!(event = "record_abandoned", attempts,
                            "stopped during backoff; the record will be consumed again");
                        return Outcome::Abandoned;
                    }
                }
            }
            Decision::DeadLetter(kind) => {
                match shared
                    .dlq
                    .publish(record, kind, error.message(), attempts, cancel)
                    .await
                {
                    Ok(to) => {
                        tracing::warn!(event = "record_dead_lettered", kind = kind.as_str(),
                            attempts, dlq_topic = %to.topic, dlq_partition = to.partition,
                            dlq_offset = to.offset, error = %error.message());
                        shared
                            .metrics
                            .dead_lettered
                            .with_label_values(&[record.topic.as_str(), kind.as_str()])
                            .inc();
                        return Outcome::Settled;
                    }
                    Err(_) => {
                        tracing::info!(event = "record_abandoned", attempts,
                            "stopped before the dead-letter write succeeded; the record will be consumed again");
                        return Outcome::Abandoned;
                    }
                }
            }
        }
    }
}
