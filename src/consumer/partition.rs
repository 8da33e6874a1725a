//! One assigned partition: a bounded queue of fetched records and the worker task that settles
//! them in offset order, in batches when the handler takes batches.

use std::collections::VecDeque;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::TopicPartitionList;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{Partitions, RebalanceContext};
use crate::backoff::ExponentialBackoff;
use crate::breaker::{Breaker, BreakerState, CallOutcome, Permit};
use crate::dlq::DeadLetterPublisher;
use crate::failure::{self, decide, Decision, FailureKind, HandlerError};
use crate::handler::BatchHandler;
use crate::metrics::{GaugeGuard, Metrics};
use crate::record::Record;

/// What the workers of all partitions share.
pub(super) struct Shared<H> {
    pub handler: H,
    pub dlq: DeadLetterPublisher,
    pub backoff: ExponentialBackoff,
    pub consumer: Arc<StreamConsumer<RebalanceContext>>,
    pub metrics: Metrics,
    pub breaker: Breaker,
    pub partitions: Partitions,
    pub batch_size: usize,
    pub batch_linger: Duration,
    /// `Some(n)`: key-ordered mode with at most `n` records in flight per partition.
    pub key_ordered: Option<usize>,
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
    /// Woken when the queue drained to `low`.
    space: Notify,
    buffered: prometheus::IntGauge,
}

struct QueueState {
    /// Each record with the time it was fetched.
    records: VecDeque<(Instant, Record)>,
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
            space: Notify::new(),
            buffered,
        }
    }

    fn tpl(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, self.partition);
        tpl
    }

    /// Whether the queue holds the partition paused because it is full.
    pub fn is_full(&self) -> bool {
        self.state.lock().expect("partition queue lock").paused
    }

    /// Adds a fetched record. When the queue is full, gives the worker `grace` to drain it
    /// (a fast worker does, and the partition keeps flowing), then pauses the partition.
    pub async fn push(
        &self,
        record: Record,
        consumer: &StreamConsumer<RebalanceContext>,
        grace: Duration,
    ) {
        let full = {
            let mut state = self.state.lock().expect("partition queue lock");
            state.records.push_back((Instant::now(), record));
            self.buffered.inc();
            state.records.len() >= self.high && !state.paused
        };
        self.notify.notify_one();
        if !full {
            return;
        }
        let _ = tokio::time::timeout(grace, async {
            loop {
                let drained = self.space.notified();
                if self
                    .state
                    .lock()
                    .expect("partition queue lock")
                    .records
                    .len()
                    <= self.low
                {
                    return;
                }
                drained.await;
            }
        })
        .await;
        let mut state = self.state.lock().expect("partition queue lock");
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
    }

    /// Takes up to `max` records in offset order, with the times they were fetched: waits for
    /// the first, then up to `linger` for more. `None` once `cancel` fires while the queue is
    /// empty. Resumes the partition when
    /// the queue has drained to `low` (unless the outage breaker holds it paused).
    async fn pop_batch(
        &self,
        max: usize,
        linger: Duration,
        shared_consumer: &StreamConsumer<RebalanceContext>,
        breaker: &Breaker,
        cancel: &CancellationToken,
    ) -> Option<(Vec<Record>, Vec<Instant>)> {
        let mut batch = Vec::with_capacity(max.min(64));
        let mut fetched = Vec::with_capacity(max.min(64));
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            {
                let mut state = self.state.lock().expect("partition queue lock");
                while batch.len() < max {
                    let Some((at, record)) = state.records.pop_front() else {
                        break;
                    };
                    self.buffered.dec();
                    batch.push(record);
                    fetched.push(at);
                }
                if state.records.len() <= self.low {
                    self.space.notify_waiters();
                }
                if state.paused && state.records.len() <= self.low {
                    if breaker.is_open() {
                        // The breaker pauses every partition; it resumes this one on closing.
                        state.paused = false;
                    } else {
                        match shared_consumer.resume(&self.tpl()) {
                            Ok(()) => {
                                state.paused = false;
                                tracing::debug!(event = "partition_resumed", topic = %self.topic,
                                    partition = self.partition);
                            }
                            Err(e) => tracing::debug!(event = "partition_resume_failed",
                                topic = %self.topic, partition = self.partition, error = %e),
                        }
                    }
                }
            }
            if batch.len() >= max {
                return Some((batch, fetched));
            }
            if !batch.is_empty() {
                let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + linger);
                if linger.is_zero() || tokio::time::Instant::now() >= until {
                    return Some((batch, fetched));
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Some((batch, fetched)),
                    _ = self.notify.notified() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            } else {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return None,
                    _ = self.notify.notified() => {}
                }
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

/// The partition was revoked or the service is stopping: the record was given up unsettled,
/// its offset not stored, so it will be consumed again.
struct Abandoned;

/// Settles the records of one partition in offset order, storing offsets as records settle,
/// until `cancel` fires (revocation or shutdown). A handler call in progress when `cancel`
/// fires runs to its end; a backoff wait, a wait for the breaker or a dead-letter retry does
/// not.
pub(super) async fn run_worker<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    queue: Arc<PartitionQueue>,
    cancel: CancellationToken,
) {
    if let Some(max_in_flight) = shared.key_ordered {
        return run_key_ordered(shared, queue, cancel, max_in_flight).await;
    }
    // A record handler takes the queue's records in chunks (one lock and wake-up per chunk,
    // not per record) and handles them one by one; a batch handler takes one batch at a time.
    let (take, linger) = if shared.batch_size == 1 {
        (256, Duration::ZERO)
    } else {
        (shared.batch_size, shared.batch_linger)
    };
    let mut settled = Settled::default();
    'work: while !cancel.is_cancelled() {
        let Some((records, fetched)) = queue
            .pop_batch(take, linger, &shared.consumer, &shared.breaker, &cancel)
            .await
        else {
            break;
        };
        for (unit, times) in records
            .chunks(shared.batch_size)
            .zip(fetched.chunks(shared.batch_size))
        {
            if cancel.is_cancelled()
                || settle_batch(&shared, unit, times, &mut settled, &cancel)
                    .await
                    .is_err()
            {
                break 'work;
            }
        }
        settled.store(&shared);
    }
    settled.store(&shared);
}

/// Key-ordered mode: records with the same key one after another, in offset order; records of
/// different keys concurrently, at most `max_in_flight` at once. Each record goes through the
/// usual retry and dead-letter policy. The stored offset advances only over the longest prefix
/// of settled records, so it never passes a record that is still running or waiting.
async fn run_key_ordered<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    queue: Arc<PartitionQueue>,
    cancel: CancellationToken,
    max_in_flight: usize,
) {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    use std::collections::{BTreeMap, HashMap, HashSet};

    type Key = Option<Vec<u8>>;
    // Offset → settled? for every record taken from the queue and not yet stored.
    let mut pending: BTreeMap<i64, bool> = BTreeMap::new();
    // Records waiting for an earlier record of their key.
    let mut waiting: HashMap<Key, VecDeque<(Instant, Record)>> = HashMap::new();
    let mut busy: HashSet<Key> = HashSet::new();
    type Running = std::pin::Pin<Box<dyn std::future::Future<Output = (i64, Key, bool)> + Send>>;
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    let mut last: Option<(String, i32)> = None;

    let start = |record: Record, at: Instant, running: &mut FuturesUnordered<Running>| {
        let (shared, cancel) = (shared.clone(), cancel.clone());
        running.push(Box::pin(async move {
            let result = settle_batch(
                &shared,
                std::slice::from_ref(&record),
                &[at],
                &mut Settled::default(),
                &cancel,
            )
            .await;
            (record.offset, record.key, result.is_ok())
        }));
    };

    loop {
        // Taken but not yet stored: bounded, so a stuck key cannot pile records up in memory
        // (the queue fills instead and the partition is paused).
        let room = running.len() < max_in_flight && pending.len() < max_in_flight * 4;
        let free = max_in_flight.saturating_sub(running.len()).max(1);
        tokio::select! {
            done = running.next(), if !running.is_empty() => {
                let Some((offset, key, settled)) = done else { continue };
                if !settled {
                    break; // abandoned: revoked or stopping
                }
                pending.insert(offset, true);
                busy.remove(&key);
                if let Some(queue) = waiting.get_mut(&key) {
                    if let Some((at, next)) = queue.pop_front() {
                        busy.insert(key.clone());
                        start(next, at, &mut running);
                    }
                    if queue.is_empty() {
                        waiting.remove(&key);
                    }
                }
                let mut stored = None;
                while let Some((&o, &true)) = pending.iter().next() {
                    pending.remove(&o);
                    stored = Some(o);
                }
                if let (Some(offset), Some((topic, partition))) = (stored, &last) {
                    if let Err(e) = shared.consumer.store_offset(topic, *partition, offset) {
                        tracing::debug!(event = "offset_store_failed", %topic, partition, offset,
                            error = %e, "partition no longer assigned; the new owner consumes it again");
                    }
                }
            }
            popped = queue.pop_batch(
                free,
                Duration::ZERO,
                &shared.consumer,
                &shared.breaker,
                &cancel,
            ), if room => {
                let Some((records, fetched)) = popped else { break };
                for (record, at) in records.into_iter().zip(fetched) {
                    last.get_or_insert_with(|| (record.topic.clone(), record.partition));
                    pending.insert(record.offset, false);
                    if busy.contains(&record.key) {
                        waiting.entry(record.key.clone()).or_default().push_back((at, record));
                    } else {
                        busy.insert(record.key.clone());
                        start(record, at, &mut running);
                    }
                }
            }
        }
    }
    // Records still running finish their handler call only if they get there before the
    // futures are dropped; their offsets are not stored, so they are consumed again.
}

/// The last settled record whose offset is not stored yet. Storing is deferred to the end of a
/// chunk, and done before any wait (a retry, the breaker, a dead-letter write), so a stored
/// offset never passes an unsettled record and a waiting partition has its progress stored.
#[derive(Default)]
struct Settled {
    last: Option<(String, i32, i64)>,
}

impl Settled {
    fn set(&mut self, record: &Record) {
        match &mut self.last {
            Some((_, p, o)) if *p == record.partition => *o = record.offset,
            _ => self.last = Some((record.topic.clone(), record.partition, record.offset)),
        }
    }

    fn store(&mut self, shared: &Shared<impl BatchHandler>) {
        if let Some((topic, partition, offset)) = self.last.take() {
            if let Err(e) = shared.consumer.store_offset(&topic, partition, offset) {
                tracing::debug!(event = "offset_store_failed", %topic, partition, offset,
                    error = %e, "partition no longer assigned; the new owner consumes it again");
            }
        }
    }
}

/// Calls the handler with `records`, catching a panic as a permanent failure, and tells the
/// breaker how it went.
async fn call<H: BatchHandler>(
    shared: &Shared<H>,
    records: &[Record],
    permit: Permit,
) -> Result<(), HandlerError> {
    let started = Instant::now();
    let result = AssertUnwindSafe(shared.handler.handle_batch(records))
        .catch_unwind()
        .await;
    let topic = records[0].topic.as_str();
    shared
        .metrics
        .handler_duration
        .with_label_values(&[topic])
        .observe(started.elapsed().as_secs_f64());
    let result = match result {
        Ok(result) => result,
        Err(panic) => {
            let error = failure::from_panic(panic);
            tracing::error!(event = "handler_panicked", first_offset = records[0].offset,
                records = records.len(), error = %error.message());
            Err(error)
        }
    };
    if result.is_ok() {
        shared
            .metrics
            .succeeded
            .with_label_values(&[topic])
            .inc_by(records.len() as u64);
    }
    let outcome = match &result {
        Err(e) if e.kind() == FailureKind::Transient => CallOutcome::Transient,
        _ => CallOutcome::Answered,
    };
    // Calls are told apart by their first record: partition and offset.
    let who = (records[0].partition as u64) << 48 ^ records[0].offset as u64;
    if let Some(state) = shared.breaker.record(permit, outcome, who) {
        on_breaker_change(shared, state, result.as_ref().err());
    }
    result
}

/// Pauses every assigned partition when the breaker opens; resumes them when it closes (except
/// partitions whose queue is full).
fn on_breaker_change<H: BatchHandler>(
    shared: &Shared<H>,
    state: BreakerState,
    error: Option<&HandlerError>,
) {
    let assignment = match shared.consumer.assignment() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(event = "breaker_assignment_failed", error = %e);
            return;
        }
    };
    match state {
        BreakerState::Open => {
            shared.metrics.breaker_open.set(1);
            shared.metrics.breaker_opened.inc();
            if let Err(e) = shared.consumer.pause(&assignment) {
                tracing::warn!(event = "breaker_pause_failed", error = %e);
            }
            tracing::error!(event = "breaker_opened", partitions = assignment.count(),
                last_error = %error.map(|e| e.message()).unwrap_or_default(),
                "the downstream looks down: consumption paused, probing with one record; nothing is dead-lettered for the outage");
        }
        BreakerState::Closed => {
            shared.metrics.breaker_open.set(0);
            if let Err(e) = shared.consumer.resume(&assignment) {
                tracing::warn!(event = "breaker_resume_failed", error = %e);
            }
            let partitions = shared.partitions.lock().expect("partitions lock");
            for slot in partitions.values() {
                if slot.queue.is_full() {
                    let _ = shared.consumer.pause(&slot.queue.tpl());
                }
            }
            tracing::warn!(
                event = "breaker_closed",
                partitions = assignment.count(),
                "the downstream answers again: consumption resumed"
            );
        }
    }
}

/// Waits for the breaker's permission to call the handler, or for `cancel`.
async fn permit(breaker: &Breaker, cancel: &CancellationToken) -> Result<Permit, Abandoned> {
    tokio::select! {
        permit = breaker.permit() => Ok(permit),
        _ = cancel.cancelled() => Err(Abandoned),
    }
}

/// Settles a batch: one call for all of it; on failure, halves in order, recursively, until
/// the failing records stand alone and go through [`settle_one`].
async fn settle_batch<H: BatchHandler>(
    shared: &Shared<H>,
    batch: &[Record],
    fetched: &[Instant],
    settled: &mut Settled,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let mut todo: VecDeque<Range<usize>> = VecDeque::from([0..batch.len()]);
    while let Some(range) = todo.pop_front() {
        let records = &batch[range.clone()];
        let granted = permit(&shared.breaker, cancel).await?;
        let result = if records.len() == 1 {
            let record = &records[0];
            match call(shared, records, granted).await {
                Ok(()) => {
                    tracing::debug!(event = "record_handled", topic = %record.topic,
                        partition = record.partition, offset = record.offset, id = %record.id);
                    Ok(())
                }
                Err(first) => {
                    // Waits may follow: store the progress made so far first.
                    settled.store(shared);
                    settle_one(shared, record, first, cancel)
                        .instrument(record_span(record))
                        .await?;
                    Ok(())
                }
            }
        } else {
            call(shared, records, granted).await
        };
        match result {
            Ok(()) => {
                if records.len() > 1 {
                    tracing::debug!(event = "batch_handled", topic = %records[0].topic,
                        partition = records[0].partition, first_offset = records[0].offset,
                        records = records.len());
                }
                settled.set(&records[records.len() - 1]);
                for at in &fetched[range] {
                    shared
                        .metrics
                        .settle_seconds
                        .observe(at.elapsed().as_secs_f64());
                }
            }
            Err(error) => {
                // Waits or more calls follow: store the progress made so far first.
                settled.store(shared);
                if error.kind() == FailureKind::Transient && shared.breaker.is_open() {
                    // The downstream is down, not these records: try the same part again once
                    // the breaker lets us.
                    todo.push_front(range);
                    continue;
                }
                let mid = range.start + records.len() / 2;
                tracing::warn!(event = "batch_split", topic = %records[0].topic,
                    partition = records[0].partition, first_offset = records[0].offset,
                    records = records.len(), error = %error,
                    "batch failed; retrying its halves to isolate the failing records");
                shared
                    .metrics
                    .batch_splits
                    .with_label_values(&[records[0].topic.as_str()])
                    .inc();
                todo.push_front(mid..range.end);
                todo.push_front(range.start..mid);
            }
        }
    }
    Ok(())
}

fn record_span(record: &Record) -> tracing::Span {
    tracing::info_span!(
        "record",
        topic = %record.topic,
        partition = record.partition,
        offset = record.offset,
        id = %record.id,
        key = %record.key_for_logs(),
    )
}

/// Settles one record after its first attempt: retries transient failures with backoff (not
/// counting attempts made while the breaker is open against its retries), dead-letters
/// permanent failures and exhausted retries.
async fn settle_one<H: BatchHandler>(
    shared: &Shared<H>,
    record: &Record,
    first: HandlerError,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let topic = record.topic.as_str();
    let mut delays = shared.backoff.delays();
    let mut attempts: u32 = 1;
    let mut result = Err(first);
    loop {
        let error = match result {
            Ok(()) => {
                tracing::debug!(event = "record_handled", attempts);
                return Ok(());
            }
            Err(error) => error,
        };
        if error.kind() == FailureKind::Transient && shared.breaker.is_open() {
            tracing::info!(event = "record_waiting_for_breaker", attempts, error = %error,
                "the downstream is down; this record waits without using up its retries");
            // Failures during an outage say nothing about the record: its retries start over.
            delays.reset();
        } else {
            match decide(&error, &mut delays) {
                Decision::Retry { delay } => {
                    tracing::warn!(event = "record_retry_scheduled", attempts,
                        retry_in_ms = delay.as_millis() as u64, error = %error);
                    shared.metrics.retried.with_label_values(&[topic]).inc();
                    let _in_backoff = GaugeGuard::inc(&shared.metrics.partitions_in_backoff);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = cancel.cancelled() => {
                            tracing::info!(event = "record_abandoned", attempts,
                                "stopped during backoff; the record will be consumed again");
                            return Err(Abandoned);
                        }
                    }
                }
                Decision::DeadLetter(kind) => {
                    return match shared
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
                                .with_label_values(&[topic, kind.as_str()])
                                .inc();
                            Ok(())
                        }
                        Err(_) => {
                            tracing::info!(event = "record_abandoned", attempts,
                                "stopped before the dead-letter write succeeded; the record will be consumed again");
                            Err(Abandoned)
                        }
                    };
                }
            }
        }
        let granted = permit(&shared.breaker, cancel).await?;
        attempts += 1;
        result = call(shared, std::slice::from_ref(record), granted).await;
    }
}
