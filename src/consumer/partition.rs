//! One assigned partition: the worker task that takes its records from the partition's own
//! librdkafka queue and settles them in offset order, in batches when the handler takes
//! batches.

use std::collections::VecDeque;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rdkafka::consumer::stream_consumer::MessageStream;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{RebalanceContext, SharedQueue};
use super::dead_letters::DeadLetterWrites;
use crate::backoff::ExponentialBackoff;
use crate::breaker::{Breaker, BreakerState, CallOutcome, Permit};
use crate::dlq::DeadLetterPublisher;
use crate::failure::{self, decide, DeadLetterKind, Decision, FailureKind, HandlerError};
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
    pub batch_size: usize,
    pub batch_linger: Duration,
    /// `Some(n)`: key-ordered mode with at most `n` records in flight per partition.
    pub key_ordered: Option<usize>,
    /// The bytes that dead-letter writes in flight may hold, in KiB, for all partitions.
    pub dead_letter_budget: Arc<tokio::sync::Semaphore>,
}

/// A newly assigned partition, for the poll loop to start its worker.
pub(super) struct Assigned {
    pub topic: String,
    pub partition: i32,
    /// The partition's own librdkafka queue and its reader's lease; `None` when splitting it
    /// failed, and its records come through `stray_records`.
    pub queue: Option<SharedQueue>,
    pub stray_records: mpsc::Receiver<Record>,
    pub cancel: CancellationToken,
}

/// One topic's metric handles, looked up once per partition rather than once per record.
#[derive(Clone)]
pub(super) struct TopicHandles {
    succeeded: prometheus::IntCounter,
    handler_duration: prometheus::Histogram,
    settle_seconds: prometheus::Histogram,
}

impl TopicHandles {
    fn new(metrics: &Metrics, topic: &str) -> Self {
        Self {
            succeeded: metrics.succeeded.with_label_values(&[topic]),
            handler_duration: metrics.handler_duration.with_label_values(&[topic]),
            settle_seconds: metrics.settle_seconds.clone(),
        }
    }

    /// Metrics kept by one worker and added to the shared ones on [`TopicMetrics::flush`]:
    /// a worker settles hundreds of thousands of records a second, and shared atomics
    /// touched by every worker for every record would cost more than the records. The
    /// calls the downstream answered are counted the same way for `breaker`.
    fn local<'a>(&self, breaker: &'a Breaker) -> TopicMetrics<'a> {
        TopicMetrics {
            succeeded: self.succeeded.local(),
            handler_duration: self.handler_duration.local(),
            settle_seconds: self.settle_seconds.local(),
            breaker,
            answered: None,
        }
    }
}

/// A worker's own metrics; see [`TopicHandles::local`]. Flushed after each chunk of records
/// and before any wait, and when dropped.
pub(super) struct TopicMetrics<'a> {
    succeeded: prometheus::local::LocalIntCounter,
    handler_duration: prometheus::local::LocalHistogram,
    settle_seconds: prometheus::local::LocalHistogram,
    breaker: &'a Breaker,
    /// Calls made with [`Permit::Normal`] and answered, not yet told to the breaker, and when
    /// the last of them ended.
    answered: Option<(u32, Instant)>,
}

impl TopicMetrics<'_> {
    /// Counts a call for the breaker; tells it at once unless it was a normal call that the
    /// downstream answered. Returns the breaker's new state when it changed.
    fn record_call(
        &mut self,
        permit: Permit,
        outcome: CallOutcome,
        who: u64,
        ended: Instant,
    ) -> Option<BreakerState> {
        if permit == Permit::Normal && outcome == CallOutcome::Answered {
            let calls = self.answered.map_or(0, |(calls, _)| calls);
            self.answered = Some((calls + 1, ended));
            return None;
        }
        // The answered calls before this one first, so the window sees them in order.
        self.flush_answered();
        self.breaker
            .record_at(permit, outcome, who, tokio::time::Instant::from_std(ended))
    }

    fn flush_answered(&mut self) {
        if let Some((calls, at)) = self.answered.take() {
            self.breaker
                .record_answered(calls, tokio::time::Instant::from_std(at));
        }
    }

    fn flush(&mut self) {
        self.succeeded.flush();
        self.handler_duration.flush();
        self.settle_seconds.flush();
        self.flush_answered();
    }
}

impl Drop for TopicMetrics<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Where a partition's worker takes its records from: the partition's own librdkafka queue,
/// which librdkafka keeps bounded (it stops fetching the partition while
/// `max_buffered_records` records or 1.5 MB wait there), and the rare records that arrived on
/// the main queue.
pub(super) struct PartitionInput {
    pub topic: String,
    pub partition: i32,
    queue: Option<SharedQueue>,
    strays: mpsc::Receiver<Record>,
    id_header: Option<String>,
    consumed: prometheus::IntCounter,
    metrics: TopicHandles,
}

impl PartitionInput {
    pub fn new(assigned: Assigned, id_header: Option<String>, metrics: &Metrics) -> Self {
        Self {
            consumed: metrics.consumed.with_label_values(&[&assigned.topic]),
            metrics: TopicHandles::new(metrics, &assigned.topic),
            topic: assigned.topic,
            partition: assigned.partition,
            queue: assigned.queue,
            strays: assigned.stray_records,
            id_header,
        }
    }

    /// Reads the partition's records, through one message stream for the worker's life (a
    /// stream per read would register and unregister a waker for every record).
    fn records(&mut self) -> Records<'_> {
        Records {
            peeked: None,
            topic: &self.topic,
            partition: self.partition,
            stream: self.queue.as_ref().map(|shared| shared.queue.stream()),
            strays: &mut self.strays,
            id_header: self.id_header.as_deref(),
            consumed: &self.consumed,
        }
    }
}

/// A worker's reader of its partition's records; see [`PartitionInput::records`].
struct Records<'a> {
    /// A record taken while waiting for something else; the next to hand out.
    peeked: Option<Record>,
    topic: &'a str,
    partition: i32,
    stream: Option<MessageStream<'a, RebalanceContext>>,
    strays: &'a mut mpsc::Receiver<Record>,
    id_header: Option<&'a str>,
    consumed: &'a prometheus::IntCounter,
}

impl Records<'_> {
    /// The next record: waits for it. `None` once `cancel` fires: from then on nothing more
    /// is taken from the partition's queue, which the next assignment's worker reads.
    async fn next(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if let Some(record) = self.peeked.take() {
            return Some(record);
        }
        if cancel.is_cancelled() {
            return None;
        }
        if let Ok(record) = self.strays.try_recv() {
            return Some(record);
        }
        loop {
            let polled = tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                Some(record) = self.strays.recv() => return Some(record),
                Some(polled) = next_message(&mut self.stream) => polled,
            };
            match polled {
                Ok(message) => return Some(Record::from_message(&message, self.id_header)),
                Err(e) => crate::kafka::warn_gated(
                    "partition_poll_failed",
                    &e,
                    &format!("{}-{}", self.topic, self.partition),
                ),
            }
        }
    }

    /// The next record if one is ready, without waiting; `None` once `cancel` fired.
    fn ready(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if cancel.is_cancelled() {
            return None;
        }
        if let Ok(record) = self.strays.try_recv() {
            return Some(record);
        }
        match next_message(&mut self.stream).now_or_never()?? {
            Ok(message) => Some(Record::from_message(&message, self.id_header)),
            Err(_) => None,
        }
    }

    /// Takes up to `max` records in offset order, with the time they were taken: waits for
    /// the first, takes what else is ready, and waits up to `linger` for more. `None` once
    /// `cancel` fires while none was taken.
    async fn take(
        &mut self,
        max: usize,
        linger: Duration,
        cancel: &CancellationToken,
    ) -> Option<(Vec<Record>, Instant)> {
        let first = self.next(cancel).await?;
        let taken = Instant::now();
        let mut records = Vec::with_capacity(max.min(256));
        records.push(first);
        while records.len() < max {
            // librdkafka's queue is not part of tokio's cooperative scheduling: without this, a
            // worker whose records are always ready would not let other tasks run.
            tokio::task::coop::consume_budget().await;
            match self.ready(cancel) {
                Some(record) => records.push(record),
                None => break,
            }
        }
        if records.len() < max && !linger.is_zero() {
            let until = tokio::time::Instant::now() + linger;
            while records.len() < max {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(until) => break,
                    next = self.next(cancel) => match next {
                        Some(record) => records.push(record),
                        None => break,
                    },
                }
            }
        }
        self.consumed.inc_by(records.len() as u64);
        Some((records, taken))
    }
}

/// The next message of the partition's stream; never ready when it has none.
async fn next_message<'a>(
    stream: &mut Option<MessageStream<'a, RebalanceContext>>,
) -> Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'a>>> {
    use futures_util::StreamExt;
    match stream {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// The partition was revoked or the service is stopping: the record was given up unsettled,
/// its offset not stored, so it will be consumed again.
pub(super) struct Abandoned;

/// Settles the records of one partition in offset order, storing offsets as records settle,
/// until `cancel` fires (revocation or shutdown). A handler call in progress when `cancel`
/// fires runs to its end; a backoff wait, a wait for the breaker or a dead-letter retry does
/// not.
pub(super) async fn run_worker<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    mut input: PartitionInput,
    cancel: CancellationToken,
) {
    // The partition's queue is read by one worker at a time: a worker of an earlier
    // assignment of this partition may still be finishing its handler call.
    let reader = input.queue.as_ref().map(|shared| shared.reader.clone());
    let _lease = match reader {
        Some(reader) => tokio::select! {
            lease = reader.lock_owned() => Some(lease),
            _ = cancel.cancelled() => return,
        },
        None => None,
    };
    if let Some(max_in_flight) = shared.key_ordered {
        return run_key_ordered(shared, input, cancel, max_in_flight).await;
    }
    // A record handler takes what is ready in chunks and handles the records one by one,
    // storing the offset once per chunk; a batch handler takes one batch at a time.
    let (take, linger) = if shared.batch_size == 1 {
        (256, Duration::ZERO)
    } else {
        (shared.batch_size, shared.batch_linger)
    };
    let mut metrics = input.metrics.local(&shared.breaker);
    let mut source = input.records();
    let mut settled = Settled {
        writes: (shared.batch_size == 1).then(DeadLetterWrites::default),
        ..Settled::default()
    };
    'work: while !cancel.is_cancelled() {
        let Some((records, taken)) = source.take(take, linger, &cancel).await else {
            break;
        };
        if shared.batch_size == 1 {
            for record in &records {
                if cancel.is_cancelled()
                    || settle_record(&shared, &mut metrics, record, taken, &mut settled, &cancel)
                        .await
                        .is_err()
                {
                    break 'work;
                }
            }
        } else if settle_batch(
            &shared,
            &mut metrics,
            &records,
            taken,
            &mut settled,
            &cancel,
        )
        .await
        .is_err()
        {
            break;
        }
        settled.store(&shared);
        metrics.flush();
        // Until the next record comes, store the offsets of the dead letters as they are
        // acknowledged (an idle partition's last dead letters get committed too).
        while settled.writes.as_ref().is_some_and(|w| !w.is_empty()) {
            if source.peeked.is_none() {
                source.peeked = source.ready(&cancel);
            }
            let Some(writes) = settled.writes.as_mut().filter(|_| source.peeked.is_none()) else {
                break;
            };
            tokio::select! {
                biased;
                _ = writes.wait_first() => settled.store(&shared),
                next = source.next(&cancel) => {
                    match next {
                        Some(record) => source.peeked = Some(record),
                        None => break 'work,
                    }
                    break;
                }
            }
        }
    }
    settled.finish(&shared).await;
}

/// Key-ordered mode: records with the same key one after another, in offset order; records of
/// different keys concurrently, at most `max_in_flight` at once. Each record goes through the
/// usual retry and dead-letter policy. The stored offset advances only over the longest prefix
/// of settled records, so it never passes a record that is still running or waiting.
async fn run_key_ordered<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    mut input: PartitionInput,
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
    let (topic, partition) = (input.topic.clone(), input.partition);
    let metrics = input.metrics.clone();
    let mut source = input.records();

    let start = |record: Record, at: Instant, running: &mut FuturesUnordered<Running>| {
        let (shared, metrics, cancel) = (shared.clone(), metrics.clone(), cancel.clone());
        running.push(Box::pin(async move {
            let result = settle_record(
                &shared,
                &mut metrics.local(&shared.breaker),
                &record,
                at,
                &mut Settled::default(),
                &cancel,
            )
            .await;
            (record.offset, record.key, result.is_ok())
        }));
    };

    // Once `cancel` fires (or a record is abandoned), nothing more is taken or started, and
    // the handler calls in flight run to their end: a dropped call would leave its work half
    // done and, as a probe, the breaker waiting for it forever.
    let mut stopping = false;
    loop {
        if stopping && running.is_empty() {
            break;
        }
        // Taken but not yet stored: bounded, so a stuck key cannot pile records up in memory
        // (librdkafka's queue for the partition fills instead, and fetching stops).
        let room = !stopping && running.len() < max_in_flight && pending.len() < max_in_flight * 4;
        let free = max_in_flight.saturating_sub(running.len()).max(1);
        tokio::select! {
            done = running.next(), if !running.is_empty() => {
                let Some((offset, key, settled)) = done else { continue };
                busy.remove(&key);
                if !settled {
                    // Abandoned (revoked or stopping): it stays unsettled in `pending`, so
                    // no stored offset passes it.
                    stopping = true;
                    continue;
                }
                pending.insert(offset, true);
                if let Some(queue) = waiting.get_mut(&key).filter(|_| !stopping) {
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
                if let Some(offset) = stored {
                    if let Err(e) = shared.consumer.store_offset(&topic, partition, offset) {
                        tracing::debug!(event = "offset_store_failed", %topic, partition, offset,
                            error = %e, "partition no longer assigned; the new owner consumes it again");
                    }
                }
            }
            _ = cancel.cancelled(), if !stopping => stopping = true,
            taken = source.take(free, Duration::ZERO, &cancel), if room => {
                let Some((records, at)) = taken else {
                    stopping = true;
                    continue;
                };
                for record in records {
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
    // Records still waiting for their key were never started: their offsets are not stored,
    // so they are consumed again.
}

/// The last settled record whose offset is not stored yet. Storing is deferred to the end of a
/// chunk, and done before any wait (a retry, the breaker, a dead-letter write), so a stored
/// offset never passes an unsettled record and a waiting partition has its progress stored.
/// With `writes`, dead letters are written while the partition goes on, and no offset is
/// stored past a dead letter that is not acknowledged yet.
#[derive(Default)]
struct Settled {
    last: Option<(String, i32, i64)>,
    writes: Option<DeadLetterWrites>,
}

impl Settled {
    fn set(&mut self, record: &Record) {
        match &mut self.last {
            Some((_, p, o)) if *p == record.partition => *o = record.offset,
            _ => self.last = Some((record.topic.clone(), record.partition, record.offset)),
        }
    }

    fn store(&mut self, shared: &Shared<impl BatchHandler>) {
        let limit = self.writes.as_mut().and_then(DeadLetterWrites::unsettled);
        let Some((topic, partition, last)) = &self.last else {
            return;
        };
        let offset = match limit {
            Some(unsettled) => (*last).min(unsettled - 1),
            None => *last,
        };
        if offset < 0 {
            return; // the partition's first record is not settled yet
        }
        if let Err(e) = shared.consumer.store_offset(topic, *partition, offset) {
            tracing::debug!(event = "offset_store_failed", %topic, partition, offset,
                error = %e, "partition no longer assigned; the new owner consumes it again");
        }
        if offset == *last {
            self.last = None;
        }
    }

    /// Waits for every dead-letter write in flight, then stores what is settled.
    async fn finish(&mut self, shared: &Shared<impl BatchHandler>) {
        if let Some(writes) = self.writes.as_mut() {
            writes.wait_all().await;
        }
        self.store(shared);
    }
}

/// Calls the handler with `records`, catching a panic as a permanent failure, and tells the
/// breaker how it went. Also returns when the call ended.
async fn call<H: BatchHandler>(
    shared: &Shared<H>,
    metrics: &mut TopicMetrics<'_>,
    records: &[Record],
    permit: Permit,
) -> (Result<(), HandlerError>, Instant) {
    // A probe whose call is dropped before it ends (revocation, shutdown deadline) is given
    // back, or the breaker would wait for it forever.
    let probe = (permit == Permit::Probe).then(|| ProbeGuard(&shared.breaker));
    let started = Instant::now();
    let result = AssertUnwindSafe(shared.handler.handle_batch(records))
        .catch_unwind()
        .await;
    let ended = Instant::now();
    metrics
        .handler_duration
        .observe((ended - started).as_secs_f64());
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
        metrics.succeeded.inc_by(records.len() as u64);
    }
    let outcome = match &result {
        Err(e) if e.kind() == FailureKind::Transient => CallOutcome::Transient,
        _ => CallOutcome::Answered,
    };
    // Calls are told apart by their first record: partition and offset.
    let who = (records[0].partition as u64) << 48 ^ records[0].offset as u64;
    if let Some(state) = metrics.record_call(permit, outcome, who, ended) {
        on_breaker_change(shared, state, result.as_ref().err());
    }
    std::mem::forget(probe); // recorded
    (result, ended)
}

/// Gives a granted probe back to the breaker when dropped; forgotten once the probe's outcome
/// is recorded.
struct ProbeGuard<'a>(&'a Breaker);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        self.0.abandon_probe();
    }
}

/// Pauses every assigned partition when the breaker opens; resumes them when it closes.
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
    // A closed breaker answers at once: no cancellation future to set up for every record.
    if let Some(permit) = breaker.permit().now_or_never() {
        return Ok(permit);
    }
    tokio::select! {
        permit = breaker.permit() => Ok(permit),
        _ = cancel.cancelled() => Err(Abandoned),
    }
}

/// Settles one record: one handler call and, when it fails, [`settle_one`]'s retries or
/// dead letter. Stores the progress made so far before any wait.
async fn settle_record<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    fetched: Instant,
    settled: &mut Settled,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    if settled
        .writes
        .as_ref()
        .is_some_and(|w| w.too_far_behind(record.offset))
    {
        // A dead letter is not acknowledged yet (the dead-letter topic may be down): stop here
        // rather than handle ever more records that a restart would deliver again.
        settled.store(shared);
        if let Some(writes) = settled.writes.as_mut() {
            writes.catch_up(record.offset).await;
        }
    }
    let granted = permit(&shared.breaker, cancel).await?;
    let (result, ended) = call(shared, metrics, std::slice::from_ref(record), granted).await;
    let mut ended = Some(ended);
    match result {
        Ok(()) => {
            tracing::debug!(event = "record_handled", topic = %record.topic,
                partition = record.partition, offset = record.offset, id = %record.id);
        }
        Err(first) => {
            // Waits may follow: store and count the progress made so far first. A permanent
            // failure goes straight to a pipelined dead-letter write, which waits only when
            // the most writes are in flight.
            let no_wait = first.kind() == FailureKind::Permanent
                && settled.writes.as_ref().is_some_and(|w| !w.is_full());
            if !no_wait {
                settled.store(shared);
                metrics.flush();
            }
            let span = record_span(record);
            ended = None; // retries and waits follow
            let outcome = settle_one(shared, metrics, record, first, cancel)
                .instrument(span.clone())
                .await?;
            if let Outcome::DeadLetter {
                kind,
                message,
                attempts,
            } = outcome
            {
                match settled.writes.as_mut() {
                    Some(writes) => {
                        // The partition goes on while the write is acknowledged; offsets
                        // stop short of it until then.
                        writes
                            .start(
                                shared, record, kind, message, attempts, fetched, cancel, span,
                            )
                            .await;
                        settled.set(record);
                        return Ok(());
                    }
                    None => {
                        dead_letter(shared, record, kind, &message, attempts, cancel)
                            .instrument(span)
                            .await?
                    }
                }
            }
        }
    }
    settled.set(record);
    metrics.settle_seconds.observe(
        ended
            .map_or_else(|| fetched.elapsed(), |e| e - fetched)
            .as_secs_f64(),
    );
    Ok(())
}

/// Settles a batch: one call for all of it; on failure, halves in order, recursively, until
/// the failing records stand alone and go through [`settle_record`].
async fn settle_batch<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    batch: &[Record],
    taken: Instant,
    settled: &mut Settled,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let mut todo: VecDeque<Range<usize>> = VecDeque::from([0..batch.len()]);
    while let Some(range) = todo.pop_front() {
        let records = &batch[range.clone()];
        if records.len() == 1 {
            settle_record(shared, metrics, &records[0], taken, settled, cancel).await?;
            continue;
        }
        let granted = permit(&shared.breaker, cancel).await?;
        match call(shared, metrics, records, granted).await.0 {
            Ok(()) => {
                tracing::debug!(event = "batch_handled", topic = %records[0].topic,
                    partition = records[0].partition, first_offset = records[0].offset,
                    records = records.len());
                settled.set(&records[records.len() - 1]);
                let elapsed = taken.elapsed().as_secs_f64();
                for _ in records {
                    metrics.settle_seconds.observe(elapsed);
                }
            }
            Err(error) => {
                // Waits or more calls follow: store and count the progress made so far first.
                settled.store(shared);
                metrics.flush();
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

/// Writes `record` to the dead-letter topic and waits for the acknowledgement (retrying failed
/// writes until `cancel`).
async fn dead_letter<H: BatchHandler>(
    shared: &Shared<H>,
    record: &Record,
    kind: DeadLetterKind,
    message: &str,
    attempts: u32,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let written = shared
        .dlq
        .publish(record, kind, message, attempts, cancel)
        .await;
    dead_lettered(
        &shared.metrics,
        &record.topic,
        kind,
        message,
        attempts,
        written,
    )
}

/// Logs and counts how a dead-letter write ended.
pub(super) fn dead_lettered(
    metrics: &Metrics,
    topic: &str,
    kind: DeadLetterKind,
    message: &str,
    attempts: u32,
    written: Result<crate::dlq::DeadLettered, crate::dlq::Abandoned>,
) -> Result<(), Abandoned> {
    match written {
        Ok(to) => {
            tracing::warn!(event = "record_dead_lettered", kind = kind.as_str(), attempts,
                dlq_topic = %to.topic, dlq_partition = to.partition, dlq_offset = to.offset,
                error = %message);
            metrics
                .dead_lettered
                .with_label_values(&[topic, kind.as_str()])
                .inc();
            Ok(())
        }
        Err(_) => {
            tracing::info!(
                event = "record_abandoned",
                attempts,
                "stopped before the dead-letter write succeeded; the record will be consumed again"
            );
            Err(Abandoned)
        }
    }
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

/// How a record's calls ended.
enum Outcome {
    Handled,
    /// Permanent failure or retries exhausted: the record goes to the dead-letter topic.
    DeadLetter {
        kind: DeadLetterKind,
        message: String,
        attempts: u32,
    },
}

/// Settles one record's calls after its first attempt: retries transient failures with
/// backoff (not counting attempts made while the breaker is open against its retries); says
/// when the record is to be dead-lettered (permanent failure, retries exhausted).
async fn settle_one<H: BatchHandler>(
    shared: &Shared<H>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    first: HandlerError,
    cancel: &CancellationToken,
) -> Result<Outcome, Abandoned> {
    let topic = record.topic.as_str();
    let mut delays = shared.backoff.delays();
    let mut attempts: u32 = 1;
    let mut result = Err(first);
    loop {
        let error = match result {
            Ok(()) => {
                tracing::debug!(event = "record_handled", attempts);
                return Ok(Outcome::Handled);
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
                    return Ok(Outcome::DeadLetter {
                        kind,
                        message: error.message().to_string(),
                        attempts,
                    });
                }
            }
        }
        let granted = permit(&shared.breaker, cancel).await?;
        attempts += 1;
        result = call(shared, metrics, std::slice::from_ref(record), granted)
            .await
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64) -> Record {
        Record {
            id: format!("t-0-{offset}"),
            topic: "t".into(),
            partition: 0,
            offset,
            key: None,
            payload: None,
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
        }
    }

    #[tokio::test]
    async fn a_cancelled_reader_takes_no_more_records_from_its_partition() {
        let (tx, mut strays) = mpsc::channel(4);
        let consumed = prometheus::IntCounter::new("c", "c").unwrap();
        let mut records = Records {
            peeked: None,
            topic: "t",
            partition: 0,
            stream: None,
            strays: &mut strays,
            id_header: None,
            consumed: &consumed,
        };
        let cancel = CancellationToken::new();
        tx.send(record(7)).await.unwrap();
        assert_eq!(records.ready(&cancel).map(|r| r.offset), Some(7));

        // After the revocation the records waiting belong to the partition's next reader.
        tx.send(record(8)).await.unwrap();
        cancel.cancel();
        assert!(records.ready(&cancel).is_none(), "ready takes nothing");
        assert!(records.next(&cancel).await.is_none(), "next takes nothing");
        assert!(
            records.take(10, Duration::ZERO, &cancel).await.is_none(),
            "take takes nothing"
        );
        drop(records);
        assert_eq!(
            strays.try_recv().map(|r| r.offset).ok(),
            Some(8),
            "the record is still there for the next reader"
        );
    }
}
