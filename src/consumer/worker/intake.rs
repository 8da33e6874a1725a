//! A worker's intake: what it is given when its partition is assigned (the partition, its
//! stage, its metrics) and the one reader of the partition's inbox — the next record, the
//! ones ready now, or a chunk or batch taken at once, each cancel-safe, and none taken once
//! the worker is cancelled. The consumer's poll loop fills the inbox and keeps it within the
//! partition's share of `max_buffered_bytes` (see `consumer::poll::inbox`); once a record is
//! handed out it is the worker's.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::consumer::client::Client;
use crate::consumer::poll::assignments::Assigned;
use crate::consumer::poll::inbox::Inbox;
use crate::consumer::poll::spare_records::SpareRecords;
use crate::consumer::settle::TopicHandles;
use crate::metrics::Metrics;
use crate::record::retry::Stage;
use crate::record::Record;

/// A vector of records given back keeps its room for the next take up to this many records:
/// a chunk's, not a large batch's.
const KEPT_CAPACITY: usize = 256;

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
    inbox: Arc<Inbox>,
    /// The consumer, to pause and resume the partition's fetches with.
    client: Arc<dyn Client>,
    /// The bytes every inbox of the consumer holds.
    buffered: prometheus::IntGauge,
    /// Where settled records go back to, for the poll loop to reuse.
    spares: Arc<SpareRecords>,
    consumed: prometheus::IntCounter,
    consumed_messages: prometheus::IntCounter,
    /// Records a [`Intake::take`] took and has not handed over yet: kept here, not in the
    /// take's future, so that a take dropped before its end (in a `select!`, when tokio's
    /// budget runs out between two records) loses nothing; the next take hands them over.
    taking: Vec<Record>,
    /// When the first of `taking` was taken.
    taking_since: Instant,
    /// The footprint of `taking` beyond its first record.
    taking_bytes: usize,
    /// Whether a take stops at the partition's share of bytes ([`Intake::bounded_by_share`]).
    share_bound: bool,
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
            metrics: TopicHandles::new(metrics, &topic),
            topic,
            partition: assigned.partition,
            stage,
            revoked: assigned.revoked,
            peeked: None,
            reader: assigned.reader,
            inbox: assigned.inbox,
            client,
            buffered: metrics.buffered_bytes.clone(),
            spares: assigned.spares,
            taking: Vec::new(),
            taking_since: Instant::now(),
            taking_bytes: 0,
            share_bound: false,
        }
    }

    /// The lease of the partition's reader: the workers of successive assignments of one
    /// partition run one at a time.
    pub(super) fn reader(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.reader.clone()
    }

    /// From now on takes stop once what they took beyond the first record comes to the
    /// partition's share of the inboxes' budget: the records a worker holds out of its inbox
    /// are then within its share too (a chunk the worker settles one by one, not a batch the
    /// handler asked for).
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
    /// is taken from the partition's inbox.
    /// Cancel-safe.
    pub(super) async fn next(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if let Some(record) = self.peeked.take() {
            return Some(record);
        }
        if cancel.is_cancelled() {
            return None;
        }
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
        if self.taking.is_empty() {
            let first = self.next(cancel).await?;
            self.taking_since = Instant::now();
            self.taking.push(first);
        }
        // What is ready now. Each record counts against tokio's cooperative budget, so a
        // worker whose records are always ready still lets other tasks run: once the budget is
        // spent, the take yields and goes on (a take dropped there keeps what it took in
        // `taking`). Cancelled now or not, what is ready belongs to this assignment: a revoked
        // partition's inbox is closed, and no handler is called once cancelled.
        let max_bytes = if self.share_bound {
            self.inbox.share()
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
                    next = self.next(cancel) => match next {
                        Some(record) => self.taking.push(record),
                        None => break,
                    },
                }
            }
        }
        let records = std::mem::take(&mut self.taking);
        self.taking_bytes = 0;
        self.consumed.inc_by(records.len() as u64);
        self.consumed_messages.inc_by(records.len() as u64);
        Some((records, self.taking_since))
    }

    /// Holds the partition's fetches paused until the returned guard drops (a retry record
    /// waiting until it is due): librdkafka fetches no records that would only wait. The
    /// inbox's own pause and this hold never undo each other ([`crate::consumer::poll::inbox`]).
    pub(super) fn hold_fetches(&self) -> FetchesHeld<'_> {
        self.inbox.hold(|| {
            let (topic, partition) = (&self.topic, self.partition);
            if let Err(error) = self.client.pause(&[(topic.clone(), partition)]) {
                tracing::debug!(event = "retry_partition_pause_failed", %topic, partition, %error);
            }
        });
        FetchesHeld { intake: self }
    }

    /// Gives `records` back once settled, for the poll loop to copy the next messages into
    /// (see `consumer::poll::spare_records`); their vector becomes the next take's (unless it has
    /// room for more than a chunk: a large batch's is freed).
    pub(super) fn give_back(&mut self, mut records: Vec<Record>) {
        self.spares.give_back(&mut records);
        if self.taking.capacity() == 0 && records.capacity() <= KEPT_CAPACITY {
            self.taking = records;
        }
    }
}

/// Records [`Intake::ready_records`] takes per unit of tokio's cooperative budget (one
/// lock of the inbox for many records; a worker whose inbox is never empty still yields to
/// its thread's other tasks every 128 units).
const READY_PER_BUDGET_UNIT: usize = 32;

impl Intake {
    /// Resumes the partition's fetches.
    fn resume(&self) {
        let (topic, partition) = (&self.topic, self.partition);
        if let Err(error) = self.client.resume(&[(topic.clone(), partition)]) {
            tracing::warn!(event = "partition_resume_failed", %topic, partition, %error);
        }
    }

    /// The next record; `Pending`, with `cx`'s waker registered, while none is ready (and
    /// for ever once the inbox is closed). Counts against tokio's cooperative budget.
    fn poll_record(&self, cx: &mut Context<'_>) -> Poll<Record> {
        // A worker whose inbox is never empty still yields to its thread's other tasks.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let (record, size) = std::task::ready!(self.inbox.poll_pop(cx, || self.resume()));
        coop.made_progress();
        self.buffered.sub(size as i64);
        Poll::Ready(record)
    }

    /// Up to `max` records that are ready now, into `into`, without waiting, stopping once
    /// they come to `max_bytes` or more; returns their footprint. Takes them in runs of up to
    /// 32 a unit of tokio's cooperative budget, and none once the budget is spent.
    fn ready_records(&self, max: usize, max_bytes: usize, into: &mut Vec<Record>) -> usize {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut taken, mut bytes) = (0, 0);
        while taken < max && bytes < max_bytes {
            let Poll::Ready(coop) = tokio::task::coop::poll_proceed(&mut cx) else {
                break;
            };
            let before = into.len();
            let want = (max - taken).min(READY_PER_BUDGET_UNIT);
            let size = self
                .inbox
                .pop_ready(want, max_bytes - bytes, into, || self.resume());
            let got = into.len() - before;
            if got == 0 {
                break;
            }
            coop.made_progress();
            self.buffered.sub(size as i64);
            taken += got;
            bytes += size;
            if got < want && bytes < max_bytes {
                break;
            }
        }
        bytes
    }
}

/// Fetches held paused by [`Intake::hold_fetches`], released when dropped, whichever way the
/// wait ends: the fetches resume unless the inbox holds its share.
pub(super) struct FetchesHeld<'i> {
    intake: &'i Intake,
}

impl Drop for FetchesHeld<'_> {
    fn drop(&mut self) {
        self.intake.inbox.release(|| self.intake.resume());
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
    use super::*;
    use crate::consumer::client::RecordingClient;
    use crate::consumer::poll::inbox::{Budget, Inbox};

    fn record(offset: i64) -> Record {
        Record::new("t", 0, offset).with_id(format!("t-0-{offset}"))
    }

    /// A partition's intake in these tests: the consumer that records resumes and the
    /// metrics it counts in.
    #[derive(Default)]
    struct Reader {
        client: Arc<RecordingClient>,
        metrics: Metrics,
    }

    impl Reader {
        /// The intake of `inbox`, partition `topic`/`partition` at `stage`.
        fn of_stage(
            &self,
            inbox: &Arc<Inbox>,
            topic: &str,
            partition: i32,
            stage: Stage,
        ) -> Intake {
            let assigned = Assigned {
                topic: topic.into(),
                partition,
                inbox: inbox.clone(),
                reader: Arc::default(),
                cancel: CancellationToken::new(),
                revoked: CancellationToken::new(),
                spares: Arc::default(),
            };
            Intake::new(assigned, self.client.clone(), &self.metrics, stage, 0)
        }

        /// The intake of `inbox`, partition `t`/`partition` of a source topic.
        fn of(&self, inbox: &Arc<Inbox>, partition: i32) -> Intake {
            self.of_stage(inbox, "t", partition, Stage::Source)
        }
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
        let inbox = Arc::new(Inbox::new(std::sync::Arc::new(Budget::new(usize::MAX))));
        inbox.push(delivered, usize::MAX, || {}, &mut Vec::new());
        let reader = Reader::default();
        let mut records = reader.of_stage(&inbox, "t-retry-0", 0, Stage::Tier(0));
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
        let inbox = Arc::new(Inbox::new(std::sync::Arc::new(Budget::new(usize::MAX))));
        let reader = Reader::default();
        let mut records = reader.of(&inbox, 0);
        let cancel = CancellationToken::new();
        inbox.push(record(7), usize::MAX, || {}, &mut Vec::new());
        assert_eq!(records.next(&cancel).await.map(|r| r.offset), Some(7));

        // After the revocation nothing more is taken.
        inbox.push(record(8), usize::MAX, || {}, &mut Vec::new());
        cancel.cancel();
        assert!(records.next(&cancel).await.is_none(), "next takes nothing");
        assert!(
            records.take(10, Duration::ZERO, &cancel).await.is_none(),
            "take takes nothing"
        );
        drop(records);
        assert!(inbox.bytes() > 0, "the record is still in the inbox");
    }

    #[tokio::test]
    async fn a_paused_partition_is_resumed_once_its_worker_has_taken_half_its_share() {
        let size = crate::consumer::poll::inbox::footprint(&record(0));
        let inbox = Arc::new(Inbox::new(std::sync::Arc::new(Budget::new(size * 8))));
        let reader = Reader::default();
        for offset in 0..4 {
            let change = inbox.push(record(offset), size * 4, || {}, &mut Vec::new());
            reader.metrics.buffered_bytes.add(change as i64);
        }
        let mut records = reader.of(&inbox, 3);
        let cancel = CancellationToken::new();
        records.next(&cancel).await.unwrap();
        assert!(
            reader.client.resumed.lock().unwrap().is_empty(),
            "3 of 4 shares left"
        );
        records.next(&cancel).await.unwrap();
        assert_eq!(
            *reader.client.resumed.lock().unwrap(),
            [("t".to_string(), 3)]
        );
        assert_eq!(reader.metrics.buffered_bytes.get(), 2 * size as i64);
    }

    #[tokio::test]
    async fn a_chunk_stops_at_the_partitions_share() {
        let size = crate::consumer::poll::inbox::footprint(&record(0));
        let inbox = Arc::new(Inbox::new(std::sync::Arc::new(Budget::new(usize::MAX))));
        for offset in 0..10 {
            inbox.push(record(offset), size * 3, || {}, &mut Vec::new());
        }
        let reader = Reader::default();
        let mut records = reader.of(&inbox, 0);
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
        // The inbox holds more than a take wants, and more than tokio's budget lets one poll
        // take (128 units of 32 records).
        let inbox = Arc::new(Inbox::new(std::sync::Arc::new(Budget::new(usize::MAX))));
        for offset in 0..60_000 {
            inbox.push(record(offset), usize::MAX, || {}, &mut Vec::new());
        }
        let reader = Reader::default();
        let mut records = reader.of(&inbox, 0);
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
}
