//! A worker's intake: what it is given when its partition is assigned (the partition, its
//! stage, its metrics) and the one reader of the partition's records — the next record, the
//! ones ready now, or a chunk or batch taken at once, each cancel-safe, and none taken once
//! the worker is cancelled. The records come from the partition's [`Feed`]: its own
//! librdkafka queue, copied into records this intake settled before (their buffers reused);
//! once a record is handed out it is the worker's.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::consumer::client::Client;
use crate::consumer::poll::assignments::Assigned;
use crate::consumer::poll::feed::{footprint, Feed};
use crate::consumer::poll::queue_budget::QueuePart;
use crate::consumer::settle::TopicHandles;
use crate::metrics::Metrics;
use crate::record::retry::Stage;
use crate::record::Record;

/// A vector of records given back keeps its room for the next take up to this many records:
/// a chunk's, not a large batch's.
const KEPT_CAPACITY: usize = 256;

/// Settled records an intake keeps to copy the next messages into: a chunk's worth.
const KEPT_SPARES: usize = 256;

/// A record whose buffers hold more than this ([`held_bytes`]) is freed, not kept to copy
/// into: copying a record that large costs more than allocating it.
const SPARE_RECORD_BYTES: usize = 4 << 10;

/// The bytes a record's buffers hold (their capacity, not their length), plus the record
/// itself.
fn held_bytes(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|h| {
            std::mem::size_of_val(h) + h.key.capacity() + h.value.as_ref().map_or(0, Vec::capacity)
        })
        .sum();
    std::mem::size_of::<Record>()
        + record.id.capacity()
        + record.topic.capacity()
        + record.key.as_ref().map_or(0, Vec::capacity)
        + record.payload.as_ref().map_or(0, Vec::capacity)
        + headers
}

/// A newly assigned partition as its worker sees it, and the reader of its records.
pub(crate) struct Intake {
    pub(super) topic: String,
    pub(super) partition: i32,
    /// Of a source, a retry tier's or the redrive topic: the records of the last two are
    /// restored to the originals they carry ([`crate::retry_tier::restore`]).
    pub(super) stage: Stage,
    pub(super) metrics: TopicHandles,
    /// Cancelled once this assignment is revoked ([`Assigned::revoked`]).
    pub(super) revoked: CancellationToken,
    /// A record taken while waiting for something else; the next to hand out.
    pub(super) peeked: Option<Record>,
    /// The partition's reader lease, shared by the workers of its successive assignments.
    reader: Arc<tokio::sync::Mutex<()>>,
    /// Where the partition's records come from.
    feed: Arc<dyn Feed>,
    /// What the queue holds, counted in the consumer's budget for its queues: an overshot
    /// queue is dropped only while they hold more ([`overshot`]). Given back when the
    /// worker ends.
    part: QueuePart,
    /// The consumer, to pause and resume the partition's fetches with.
    client: Arc<dyn Client>,
    /// Settled records, to copy the next messages into.
    spares: Vec<Record>,
    consumed: prometheus::IntCounter,
    consumed_messages: prometheus::IntCounter,
    trims: prometheus::IntCounter,
    /// Records a [`Intake::take`] took and has not handed over yet: kept here, not in the
    /// take's future, so that a take dropped before its end (in a `select!`, when tokio's
    /// budget runs out between two records) loses nothing; the next take hands them over.
    taking: Vec<Record>,
    /// When the first of `taking` was taken.
    taking_since: Instant,
    /// The footprint of `taking` beyond its first record.
    taking_bytes: usize,
    /// A one-record vector for [`Intake::next`], kept for its room.
    taking_one: Vec<Record>,
    /// What [`Intake::alongside`] copies, before it is held for the next take: kept for its
    /// room.
    copied: Vec<Record>,
    /// Whether a take stops at the partition's share of bytes ([`Intake::bounded_by_share`]).
    share_bound: bool,
    /// Whether the partition's fetches are paused since a take found its queue overshot
    /// ([`overshot`]) or [`Intake::alongside`] filled its hands, until the next take.
    trimmed: bool,
    /// The most records the last take asked for: what [`Intake::alongside`] takes at most.
    last_max: usize,
}

/// The bytes a partition's queue holds, roughly, `waiting` messages after a take of `taken`
/// records of `bytes`: as many as waiting of the take's mean footprint.
fn queued_bytes(waiting: usize, taken: usize, bytes: usize) -> usize {
    waiting.saturating_mul(bytes.checked_div(taken).unwrap_or(0))
}

/// Whether a partition's queue holding `queued` bytes is dropped: when it holds more than
/// librdkafka alone lets it, its `bound` ([`Feed::bound`]: the share it stops fetching at, and
/// one fetch beyond it), while the consumer's queues together are `over_budget`
/// ([`QueuePart::count`]). Only a record batch larger than a fetch puts a queue there (a
/// broker never splits a batch), and pausing the partition drops it; the worker then holds its
/// chunk alone, and the partition is fetched again from the chunk's end when the worker comes
/// back for more. So a member owning many partitions of large batches holds about its buffer
/// and a fetch per partition, not a batch per partition, and one whose other queues hold less
/// keeps a large batch instead of fetching it again at every chunk.
fn overshot(queued: usize, bound: usize, over_budget: bool) -> bool {
    over_budget && queued > bound
}

impl Intake {
    /// The intake of a newly assigned partition at `stage` (`tiers`: how many retry tiers a
    /// source topic has).
    pub(crate) fn new(
        assigned: Assigned,
        client: Arc<dyn Client>,
        metrics: &Metrics,
        stage: Stage,
        tiers: usize,
    ) -> Self {
        let tiers = if stage.is_retry() { 0 } else { tiers };
        let topic = assigned.topic;
        series_at_zero(metrics, &topic, tiers);
        Self {
            consumed: metrics.consumed.with_label_values(&[&topic]),
            consumed_messages: metrics.consumed_messages.with_label_values(&[&topic]),
            trims: metrics.queue_trims.with_label_values(&[&topic]),
            metrics: TopicHandles::new(metrics, &topic),
            topic,
            partition: assigned.partition,
            stage,
            revoked: assigned.revoked,
            peeked: None,
            reader: assigned.reader,
            feed: assigned.feed,
            part: assigned.part,
            client,
            spares: Vec::new(),
            taking: Vec::new(),
            taking_since: Instant::now(),
            taking_bytes: 0,
            taking_one: Vec::with_capacity(1),
            copied: Vec::new(),
            share_bound: false,
            trimmed: false,
            last_max: 1,
        }
    }

    /// The lease of the partition's reader: the workers of successive assignments of one
    /// partition run one at a time.
    pub(super) fn reader(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.reader.clone()
    }

    /// From now on takes stop once what they took beyond the first record comes to the
    /// partition's share of the consumer's buffer: the records a worker holds are then within
    /// its share too (a chunk the worker settles one by one, not a batch the handler asked
    /// for).
    pub(super) fn bounded_by_share(&mut self) {
        self.share_bound = true;
    }

    /// `record` as the worker settles it: from a retry or redrive topic, the original it
    /// carries. A retry or redrive topic's record always counts as its source topic's (the one that
    /// topic belongs to), whatever topic it claims.
    fn restored(&self, record: Record) -> Record {
        if !self.stage.is_retry() {
            return record;
        }
        let (mut record, error) = crate::retry_tier::restore(record, self.stage.tier());
        if let Some(error) = error {
            tracing::warn!(event = "retry_record_unreadable", topic = %self.topic,
                partition = self.partition, offset = record.delivered_offset(),
                %error, "handled as it is, at once");
        }
        // Whoever can write a retry or redrive topic writes the claim: the partition's own
        // source topic is what the handler, the metric labels and the sidecar's headers see.
        let source = match &self.stage {
            Stage::Redrive { source } => Some(source.as_str()),
            Stage::Tier(_) => crate::record::retry::parse_topic(&self.topic).map(|(s, _)| s),
            Stage::Source => None,
        };
        if let Some(source) = source.filter(|s| record.topic != *s) {
            tracing::warn!(event = "retry_record_claims_another_topic", topic = %self.topic,
                partition = self.partition, offset = record.delivered_offset(),
                claimed = %record.topic, %source,
                "handled as a record of the source topic this retry or redrive topic belongs to");
            record.topic = source.to_string();
        }
        record
    }

    /// The next record: waits for it. `None` once `cancel` fires: from then on nothing more
    /// is taken from the partition's feed.
    /// Cancel-safe.
    pub(super) async fn next(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if let Some(record) = self.peeked.take() {
            return Some(record);
        }
        if !self.taking.is_empty() {
            // Taken before (by a take dropped before its end, or a trim): the next in order.
            let record = self.taking.remove(0);
            self.taking_bytes = self
                .taking_bytes
                .saturating_sub(self.taking.first().map_or(0, footprint));
            return Some(record);
        }
        self.next_fetched(cancel).await
    }

    /// The next record from the feed: waits for it. `None` once `cancel` fires.
    async fn next_fetched(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if cancel.is_cancelled() {
            return None;
        }
        self.fetch_again();
        let record = tokio::select! {
            biased;
            _ = cancel.cancelled() => return None,
            record = std::future::poll_fn(|cx| self.poll_record(cx)) => record,
        };
        Some(self.restored(record))
    }

    /// Takes up to `max` records in offset order, with the time they were taken: waits for
    /// the first, takes what else is ready (up to the partition's share of bytes beyond the
    /// first when [`Intake::bounded_by_share`]), and waits up to `linger` for more. `None` once
    /// `cancel` fires while none was taken. Cancel-safe: records taken by a take that is
    /// dropped before its end are handed over by the next.
    pub(super) async fn take(
        &mut self,
        max: usize,
        linger: Duration,
        cancel: &CancellationToken,
    ) -> Option<(Vec<Record>, Instant)> {
        self.fetch_again();
        self.last_max = max;
        if let Some(peeked) = self.peeked.take() {
            // Taken before the records kept for this take: the first of them.
            if let Some(first) = self.taking.first() {
                self.taking_bytes += footprint(first);
            }
            self.taking_since = Instant::now();
            self.taking.insert(0, peeked);
        }
        if self.taking.is_empty() {
            let first = self.next(cancel).await?;
            self.taking_since = Instant::now();
            self.taking.push(first);
        }
        // What is ready now. Each record counts against tokio's cooperative budget, so a
        // worker whose records are always ready still lets other tasks run: once the budget is
        // spent, the take yields and goes on (a take dropped there keeps what it took in
        // `taking`). Cancelled now or not, what is ready belongs to this assignment: a revoked
        // partition's worker calls no handler once cancelled.
        let max_bytes = if self.share_bound {
            self.feed.share()
        } else {
            usize::MAX
        };
        while self.taking.len() < max && self.taking_bytes < max_bytes {
            let from = self.taking.len();
            // Synchronous: no take is dropped while the records are out of `taking`.
            let mut taking = std::mem::take(&mut self.taking);
            self.taking_bytes +=
                self.ready_records(max - from, max_bytes - self.taking_bytes, &mut taking);
            self.taking = taking;
            if self.stage.is_retry() {
                let delivered: Vec<Record> = self.taking.drain(from..).collect();
                for record in delivered {
                    let record = self.restored(record);
                    self.taking.push(record);
                }
            }
            if self.taking.len() == max || tokio::task::coop::has_budget_remaining() {
                break;
            }
            tokio::task::coop::consume_budget().await;
        }
        if self.taking.len() < max && !linger.is_zero() {
            let until = tokio::time::Instant::now() + linger;
            while self.taking.len() < max {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(until) => break,
                    next = self.next_fetched(cancel) => match next {
                        Some(record) => self.taking.push(record),
                        None => break,
                    },
                }
            }
        }
        let records = std::mem::take(&mut self.taking);
        // The take's footprint, roughly (what the linger added is left out): not counted again
        // record by record.
        let bytes = self.taking_bytes + records.first().map_or(0, footprint);
        self.taking_bytes = 0;
        let queued = queued_bytes(self.feed.waiting(), records.len(), bytes);
        let over_budget = self.part.count(queued);
        if !self.revoked.is_cancelled() && overshot(queued, self.feed.bound(), over_budget) {
            self.trim();
        }
        self.consumed.inc_by(records.len() as u64);
        self.consumed_messages.inc_by(records.len() as u64);
        Some((records, self.taking_since))
    }

    /// Runs `work` (a record's settling) while copying what reaches the partition's queue
    /// into this intake's hands for the next take, up to the partition's share beyond the
    /// first record and as many records as the last take asked for; once they hold the share
    /// the partition is paused, and what its queue holds dropped ([`Feed::trim`]), until the
    /// next take. librdkafka keeps each fetch response whole while any of its messages waits
    /// in a queue: copied out at once, a slow handler's records free it.
    pub(super) async fn alongside<F: std::future::Future>(
        &mut self,
        work: F,
        cancel: &CancellationToken,
    ) -> F::Output {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            biased;
            out = &mut work => out,
            _ = std::future::poll_fn(|cx| self.poll_refill(cx, cancel)) => unreachable!("never ready"),
        }
    }

    /// Copies what is ready into the hands for the next take (see [`Intake::alongside`]);
    /// never ready: `cx` is woken when more reaches the queue.
    fn poll_refill(&mut self, cx: &mut Context<'_>, cancel: &CancellationToken) -> Poll<()> {
        if self.trimmed || cancel.is_cancelled() || self.revoked.is_cancelled() {
            return Poll::Pending;
        }
        let share = self.feed.share();
        loop {
            let held = self.taking_bytes;
            if self.taking.len() >= self.last_max {
                // A chunk of small records is ready: nothing held that the share does not
                // bound, and the worker takes it as soon as its call ends (a fast handler's
                // calls pend too, once tokio's budget runs out).
                return Poll::Pending;
            }
            if !self.taking.is_empty() && held >= share {
                self.trim();
                return Poll::Pending;
            }
            let room = if self.taking.is_empty() {
                1
            } else {
                self.last_max - self.taking.len()
            };
            let mut copied = std::mem::take(&mut self.copied);
            let max_bytes = share.saturating_sub(held).max(1);
            let polled = self
                .feed
                .poll_take(cx, room, max_bytes, &mut copied, &mut self.spares);
            for record in copied.drain(..) {
                let record = self.restored(record);
                self.hold_for_next_take(record);
            }
            self.copied = copied;
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => self.partition_failed(&error),
                Poll::Ready(Ok(_)) => {}
            }
        }
    }

    /// Holds the partition's fetches paused until the returned guard drops (a retry record
    /// waiting until it is due): librdkafka fetches no records that would only wait.
    pub(super) fn hold_fetches(&self) -> FetchesHeld<'_> {
        self.feed.hold(&|| self.pause());
        FetchesHeld { intake: self }
    }

    /// Pauses the partition's fetches.
    fn pause(&self) {
        let (topic, partition) = (&self.topic, self.partition);
        if let Err(error) = self.client.pause(&[(topic.clone(), partition)]) {
            tracing::debug!(event = "partition_pause_failed", %topic, partition, %error);
        }
    }

    /// Pauses the partition and drops what its queue holds ([`overshot`], [`Feed::trim`]), until
    /// the worker wants more. A record that comes out all the same is the next handed over.
    fn trim(&mut self) {
        let (mut kept, mut spares) = (Vec::new(), std::mem::take(&mut self.spares));
        if let Err(error) = self.feed.trim(&|| self.pause(), &mut kept, &mut spares) {
            self.partition_failed(&error);
        }
        self.spares = spares;
        self.part.count(0);
        self.trimmed = true;
        self.trims.inc();
        for record in kept {
            let record = self.restored(record);
            self.hold_for_next_take(record);
        }
    }

    /// Keeps `record` for the next take, after those kept before.
    fn hold_for_next_take(&mut self, record: Record) {
        if self.taking.is_empty() {
            self.taking_since = Instant::now();
        } else {
            self.taking_bytes += footprint(&record);
        }
        self.taking.push(record);
    }

    /// Fetches the partition again if a take paused it ([`overshot`]): its worker wants more.
    fn fetch_again(&mut self) {
        if std::mem::take(&mut self.trimmed) {
            self.feed
                .release(&|| resume(self.client.as_ref(), &(self.topic.clone(), self.partition)));
        }
    }

    /// Gives `records` back once settled, to copy the next messages into (up to a chunk of
    /// them, none larger than [`SPARE_RECORD_BYTES`], and only as many of a record's size as
    /// the partition's share of the buffer holds: a thousand partitions keep no more than
    /// twelve do); their vector becomes the next take's (unless it has room for more than a
    /// chunk: a large batch's is freed).
    pub(super) fn give_back(&mut self, mut records: Vec<Record>) {
        let share = self.feed.share();
        for mut record in records.drain(..) {
            if self.spares.len() >= KEPT_SPARES {
                break;
            }
            let held = held_bytes(&record);
            if held <= SPARE_RECORD_BYTES && (self.spares.len() + 1) * held <= share {
                // A retry record's account is not a buffer the next message is copied into.
                record.retry = None;
                self.spares.push(record);
            }
        }
        records.clear();
        // Records copied while the chunk was settled wait in `taking`, in a vector grown
        // from nothing: they move into the chunk's, which has the room (or the next take
        // grows that one again, a fresh allocator page at a time).
        if records.capacity() <= KEPT_CAPACITY && records.capacity() > self.taking.capacity() {
            records.append(&mut self.taking);
            self.taking = records;
        }
    }
}

/// Resumes `tp`'s fetches through `client`.
fn resume(client: &dyn Client, tp: &(String, i32)) {
    if let Err(error) = client.resume(std::slice::from_ref(tp)) {
        tracing::warn!(event = "partition_resume_failed", topic = %tp.0, partition = tp.1, %error);
    }
}

/// Records [`Intake::ready_records`] takes per unit of tokio's cooperative budget (a worker
/// whose records are always ready still yields to its thread's other tasks every 128 units).
const READY_PER_BUDGET_UNIT: usize = 32;

impl Intake {
    /// The next record; `Pending`, with `cx`'s waker registered, while none is ready. Counts
    /// against tokio's cooperative budget. An error of the partition's is logged, and the
    /// partition read on.
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        // A worker whose records are always ready still yields to its thread's other tasks.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let mut one = std::mem::take(&mut self.taking_one);
        loop {
            match self
                .feed
                .poll_take(cx, 1, usize::MAX, &mut one, &mut self.spares)
            {
                Poll::Pending => {
                    self.taking_one = one;
                    return Poll::Pending;
                }
                Poll::Ready(result) => {
                    if let Err(error) = result {
                        self.partition_failed(&error);
                    }
                    if let Some(record) = one.pop() {
                        self.taking_one = one;
                        coop.made_progress();
                        return Poll::Ready(record);
                    }
                }
            }
        }
    }

    /// Up to `max` records that are ready now, into `into`, without waiting, stopping once
    /// they come to `max_bytes` or more; returns their footprint. Takes them in runs of up to
    /// 32 a unit of tokio's cooperative budget, and none once the budget is spent.
    fn ready_records(&mut self, max: usize, max_bytes: usize, into: &mut Vec<Record>) -> usize {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut taken, mut bytes) = (0, 0);
        while taken < max && bytes < max_bytes {
            let Poll::Ready(coop) = tokio::task::coop::poll_proceed(&mut cx) else {
                break;
            };
            let before = into.len();
            let want = (max - taken).min(READY_PER_BUDGET_UNIT);
            let size =
                match self
                    .feed
                    .poll_take(&mut cx, want, max_bytes - bytes, into, &mut self.spares)
                {
                    Poll::Ready(Ok(size)) => size,
                    Poll::Ready(Err(error)) => {
                        self.partition_failed(&error);
                        0
                    }
                    Poll::Pending => 0,
                };
            let got = into.len() - before;
            if got == 0 {
                break;
            }
            coop.made_progress();
            taken += got;
            bytes += size;
            if got < want && bytes < max_bytes {
                break;
            }
        }
        bytes
    }

    /// An error of the partition's own (an offset out of range, a batch librdkafka cannot
    /// decode: the context has placed and reported that one): logged, and the partition read
    /// on.
    fn partition_failed(&self, error: &rdkafka::error::KafkaError) {
        crate::kafka::warn_gated("partition_poll_failed", error, "reading the partition on");
    }
}

/// Fetches held paused by [`Intake::hold_fetches`], released when dropped, whichever way the
/// wait ends.
pub(super) struct FetchesHeld<'i> {
    intake: &'i Intake,
}

impl Drop for FetchesHeld<'_> {
    fn drop(&mut self) {
        let intake = self.intake;
        intake.feed.release(&|| {
            resume(
                intake.client.as_ref(),
                &(intake.topic.clone(), intake.partition),
            )
        });
    }
}

/// Makes every per-topic series of `topic` (with `tiers` retry tiers) exist, at 0, from the
/// topic's first assignment: a rate or an alert on a counter that never moved still has a
/// series to read.
fn series_at_zero(metrics: &Metrics, topic: &str, tiers: usize) {
    metrics.consumed.with_label_values(&[topic]);
    metrics.consumed_messages.with_label_values(&[topic]);
    metrics.process_duration.with_label_values(&[topic, ""]);
    metrics.retried.with_label_values(&[topic]);
    metrics.dlq_write_failures.with_label_values(&[topic]);
    metrics.batch_splits.with_label_values(&[topic]);
    for tier in 0..tiers {
        metrics
            .retry_tier_sent
            .with_label_values(&[topic, &tier.to_string()]);
    }
    for kind in [
        crate::failure::DeadLetterKind::Permanent,
        crate::failure::DeadLetterKind::RetriesExhausted,
        crate::failure::DeadLetterKind::Deserialization,
    ] {
        metrics
            .dead_lettered
            .with_label_values(&[topic, kind.as_str()]);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::consumer::client::RecordingClient;
    use crate::consumer::poll::queue_budget::QueueBudget;

    fn record(offset: i64) -> Record {
        Record::new("t", 0, offset).with_id(format!("t-0-{offset}"))
    }

    /// A partition's records in memory, as its feed.
    #[derive(Default)]
    struct Records {
        queue: Mutex<VecDeque<Record>>,
        share: usize,
        /// What a hold dropped (as librdkafka's pause drops what its queue holds), and the
        /// holds and releases so far.
        dropped: Mutex<Vec<Record>>,
        holds: std::sync::atomic::AtomicUsize,
        releases: std::sync::atomic::AtomicUsize,
    }

    impl Records {
        fn with_share(share: usize) -> Arc<Self> {
            Arc::new(Self {
                share,
                ..Self::default()
            })
        }

        fn push(&self, record: Record) {
            self.queue.lock().unwrap().push_back(record);
        }

        fn len(&self) -> usize {
            self.queue.lock().unwrap().len()
        }
    }

    impl Feed for Records {
        fn poll_take(
            &self,
            _: &mut Context<'_>,
            max: usize,
            max_bytes: usize,
            into: &mut Vec<Record>,
            _: &mut Vec<Record>,
        ) -> Poll<Result<usize, rdkafka::error::KafkaError>> {
            let mut queue = self.queue.lock().unwrap();
            if queue.is_empty() {
                return Poll::Pending;
            }
            let (mut taken, mut bytes) = (0, 0);
            while taken < max && bytes < max_bytes {
                let Some(record) = queue.pop_front() else {
                    break;
                };
                bytes += footprint(&record);
                taken += 1;
                into.push(record);
            }
            Poll::Ready(Ok(bytes))
        }

        fn share(&self) -> usize {
            self.share
        }

        fn bound(&self) -> usize {
            self.share.saturating_mul(2)
        }

        fn waiting(&self) -> usize {
            self.len()
        }

        fn hold(&self, pause: &dyn Fn()) {
            self.holds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut queue = self.queue.lock().unwrap();
            self.dropped.lock().unwrap().extend(queue.drain(..));
            pause();
        }

        fn trim(
            &self,
            pause: &dyn Fn(),
            _: &mut Vec<Record>,
            _: &mut Vec<Record>,
        ) -> Result<(), rdkafka::error::KafkaError> {
            self.hold(pause);
            Ok(())
        }

        fn release(&self, resume: &dyn Fn()) {
            self.releases
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Fetched again from where the worker stopped.
            let mut dropped = self.dropped.lock().unwrap();
            self.queue.lock().unwrap().extend(dropped.drain(..));
            resume();
        }
    }

    /// The intake of `feed`, partition `topic`/`partition` at `stage`.
    fn intake(feed: &Arc<Records>, topic: &str, partition: i32, stage: Stage) -> Intake {
        // The consumer's other queues holding more than its budget: an overshot queue is
        // dropped.
        intake_within(feed, topic, partition, stage, 0)
    }

    /// [`intake`] in a consumer whose queues may hold `budget` bytes together.
    fn intake_within(
        feed: &Arc<Records>,
        topic: &str,
        partition: i32,
        stage: Stage,
        budget: usize,
    ) -> Intake {
        let assigned = Assigned {
            topic: topic.into(),
            partition,
            feed: feed.clone(),
            part: QueueBudget::new(budget).part(),
            reader: Arc::default(),
            cancel: CancellationToken::new(),
            revoked: CancellationToken::new(),
        };
        let client = Arc::new(RecordingClient::default());
        Intake::new(assigned, client, &Metrics::new(), stage, 0)
    }

    #[tokio::test]
    async fn a_retry_record_claiming_another_topic_counts_as_its_partitions_source() {
        // Written to `t-retry-0` by someone who can write there, claiming `payments`.
        let claimed = Record::new("payments", 3, 5).with_id("p-1");
        let left = crate::record::retry::RetryStage {
            topic: "payments".into(),
            attempts: 1,
            error: "e".into(),
            at: chrono::Utc::now(),
        };
        let headers = crate::retry_tier::retry_headers(&claimed, 0, chrono::Utc::now(), left, "g");
        let mut delivered = Record::new("t-retry-0", 0, 9).with_id("t-retry-0-0-9");
        delivered.headers = headers;
        let feed = Records::with_share(usize::MAX);
        feed.push(delivered);
        let mut records = intake(&feed, "t-retry-0", 0, Stage::Tier(0));
        let record = records.next(&CancellationToken::new()).await.unwrap();
        assert_eq!(
            record.topic, "t",
            "the handler and the labels see the partition's source"
        );
        assert_eq!(record.source_topic(), "t");
        assert_eq!(record.delivered_offset(), 9);
    }

    #[tokio::test]
    async fn a_cancelled_reader_takes_no_more_records_from_its_partition() {
        let feed = Records::with_share(usize::MAX);
        let mut records = intake(&feed, "t", 0, Stage::Source);
        let cancel = CancellationToken::new();
        feed.push(record(7));
        assert_eq!(records.next(&cancel).await.map(|r| r.offset), Some(7));

        // After the revocation nothing more is taken.
        feed.push(record(8));
        cancel.cancel();
        assert!(records.next(&cancel).await.is_none(), "next takes nothing");
        assert!(
            records.take(10, Duration::ZERO, &cancel).await.is_none(),
            "take takes nothing"
        );
        drop(records);
        assert_eq!(feed.len(), 1, "the record is still in its queue");
    }

    #[tokio::test]
    async fn a_chunk_stops_at_the_partitions_share() {
        let size = footprint(&record(0));
        let feed = Records::with_share(size * 3);
        for offset in 0..10 {
            feed.push(record(offset));
        }
        let mut records = intake(&feed, "t", 0, Stage::Source);
        records.bounded_by_share();
        let cancel = CancellationToken::new();
        let mut chunks = Vec::new();
        for _ in 0..3 {
            let (taken, _) = records.take(256, Duration::ZERO, &cancel).await.unwrap();
            chunks.push(taken.iter().map(|r| r.offset).collect::<Vec<_>>());
        }
        assert_eq!(
            chunks,
            [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]],
            "the first record and a share beyond it"
        );
    }

    #[tokio::test]
    async fn a_take_dropped_when_the_budget_runs_out_loses_no_record() {
        // The queue holds more than a take wants, and more than tokio's budget lets one poll
        // take (128 units of 32 records).
        let feed = Records::with_share(usize::MAX);
        for offset in 0..60_000 {
            feed.push(record(offset));
        }
        let mut records = intake(&feed, "t", 0, Stage::Source);
        let cancel = CancellationToken::new();
        let mut handed = Vec::new();
        // A take of 10,000 runs out of tokio's budget before its end; a `select!` that finds
        // another branch ready then drops it.
        let mut dropped = 0;
        for _ in 0..5 {
            let take = records.take(10_000, Duration::ZERO, &cancel);
            match futures_util::FutureExt::now_or_never(take) {
                Some(Some((taken, _))) => handed.extend(taken.into_iter().map(|r| r.offset)),
                _ => dropped += 1,
            }
            tokio::task::yield_now().await;
        }
        assert!(dropped > 0, "a take was dropped");
        let (taken, _) = records.take(10_000, Duration::ZERO, &cancel).await.unwrap();
        handed.extend(taken.into_iter().map(|r| r.offset));
        let expected: Vec<i64> = (0..handed.len() as i64).collect();
        assert_eq!(handed, expected, "every record handed over once, in order");
    }

    #[test]
    fn settled_records_are_kept_to_copy_into_up_to_a_chunk_and_none_large() {
        let feed = Records::with_share(usize::MAX);
        let mut records = intake(&feed, "t", 0, Stage::Source);
        let large = record(0).with_payload(vec![0; SPARE_RECORD_BYTES]);
        let mut settled = vec![large];
        settled.extend((1..=300).map(|o| record(o).with_payload("v")));
        records.give_back(settled);
        assert_eq!(records.spares.len(), KEPT_SPARES);
        assert!(records
            .spares
            .iter()
            .all(|r| held_bytes(r) <= SPARE_RECORD_BYTES));
    }

    #[test]
    fn records_copied_while_a_chunk_settled_move_into_its_vector() {
        let feed = Records::with_share(usize::MAX);
        let mut records = intake(&feed, "t", 0, Stage::Source);
        records.taking.push(record(7));
        records.taking.push(record(8));
        let mut chunk = Vec::with_capacity(KEPT_CAPACITY);
        chunk.push(record(6));
        records.give_back(chunk);
        assert_eq!(records.taking.capacity(), KEPT_CAPACITY, "the chunk's room");
        assert_eq!(
            records.taking.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [7, 8],
            "in order"
        );
    }

    /// A partition whose queue holds one large batch (far more than its share of three
    /// records and a fetch beyond it), its consumer's other queues holding little enough for
    /// it or not, and its in-order intake.
    fn large_batch(within_budget: bool) -> (Arc<Records>, Intake) {
        let feed = Records::with_share(footprint(&record(0)) * 3);
        for offset in 0..20 {
            feed.push(record(offset));
        }
        let budget = if within_budget { usize::MAX } else { 0 };
        let mut records = intake_within(&feed, "t", 0, Stage::Source, budget);
        records.bounded_by_share();
        (feed, records)
    }

    #[tokio::test]
    async fn a_queue_overshot_by_a_large_batch_is_dropped_until_the_worker_wants_more() {
        use std::sync::atomic::Ordering::SeqCst;
        let (feed, mut records) = large_batch(false);
        let cancel = CancellationToken::new();
        let (first, _) = records.take(256, Duration::ZERO, &cancel).await.unwrap();
        assert_eq!(first.len(), 4, "the first record and a share beyond it");
        assert_eq!(
            (feed.holds.load(SeqCst), feed.len()),
            (1, 0),
            "the partition paused, which drops what its queue holds"
        );
        let (next, _) = records.take(256, Duration::ZERO, &cancel).await.unwrap();
        assert_eq!(
            feed.releases.load(SeqCst),
            1,
            "fetched again for the next take"
        );
        assert_eq!(
            next.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [4, 5, 6, 7],
            "from where the chunk ended"
        );
    }

    #[tokio::test]
    async fn a_queue_overshot_while_the_others_hold_little_is_kept() {
        use std::sync::atomic::Ordering::SeqCst;
        let (feed, mut records) = large_batch(true);
        let cancel = CancellationToken::new();
        let (first, _) = records.take(256, Duration::ZERO, &cancel).await.unwrap();
        assert_eq!(first.len(), 4);
        assert_eq!(feed.holds.load(SeqCst), 0, "not dropped: within the budget");
        assert_eq!(
            feed.len(),
            16,
            "the batch waits in the queue, not fetched again"
        );
        let (next, _) = records.take(256, Duration::ZERO, &cancel).await.unwrap();
        assert_eq!(next[0].offset, 4);
        assert_eq!(feed.releases.load(SeqCst), 0);
    }

    #[tokio::test]
    async fn a_queue_within_its_share_and_a_fetch_is_left_alone() {
        use std::sync::atomic::Ordering::SeqCst;
        let size = footprint(&record(0));
        let feed = Records::with_share(size * 3);
        for offset in 0..10 {
            feed.push(record(offset));
        }
        let mut records = intake(&feed, "t", 0, Stage::Source);
        records.bounded_by_share();
        let cancel = CancellationToken::new();
        records.take(256, Duration::ZERO, &cancel).await.unwrap();
        assert_eq!(feed.holds.load(SeqCst), 0, "six records wait: the bound");
        assert_eq!(feed.len(), 6);
    }

    #[test]
    fn a_queue_holds_what_waits_by_the_takes_record_size() {
        assert_eq!(queued_bytes(7, 0, 0), 0, "nothing taken");
        assert_eq!(queued_bytes(4, 2, 10), 20);
        assert_eq!(queued_bytes(usize::MAX, 1, 2), usize::MAX, "no overflow");
    }

    #[test]
    fn overshot_means_more_than_the_bound_while_the_queues_are_over_budget() {
        assert!(!overshot(20, 20, true), "the bound");
        assert!(overshot(25, 20, true));
        assert!(!overshot(25, 20, false), "the others hold less: kept");
    }

    #[test]
    fn settled_records_kept_to_copy_into_stay_within_the_partitions_share() {
        let one = held_bytes(&record(0).with_payload(vec![0; 1_000]));
        let feed = Records::with_share(10 * one + 50);
        let mut records = intake(&feed, "t", 0, Stage::Source);
        records.give_back(
            (0..100)
                .map(|o| record(o).with_payload(vec![0; 1_000]))
                .collect(),
        );
        assert_eq!(records.spares.len(), 10, "as many as the share holds");
    }
}
