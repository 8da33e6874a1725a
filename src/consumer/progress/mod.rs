//! The disposal half of the consumer group's workers: what a partition settled, where a
//! leaving record is written, and the position that may be committed. `settle` decides what
//! becomes of a record; this room does it. One idea per file:
//!
//! | file | what |
//! |---|---|
//! | this file | [`Progress`], a partition's progress in one of three [`Way`]s, and [`Out`], what it writes with |
//! | [`ledger`] | the offset ledger: a position never passes a record that is not settled |
//! | [`pipelined`] | dead-letter and retry-topic writes in flight while the partition goes on |
//! | [`writer`] | the seam every write of a leaving record goes through, and how its end is logged and counted |
//! | [`transaction`] | exactly once: records, their outputs and their positions committed together |
//!
//! The position is stored after each chunk and before any wait (a retry, the breaker, a
//! dead-letter write), so a waiting partition has its progress stored, and it never passes
//! an unsettled record: a dead letter settles only once the broker acknowledged it.

mod ledger;
mod pipelined;
pub(crate) mod transaction;
pub(crate) mod writer;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::consumer::client::{Client, TopicPartition};
use crate::consumer::park::log::PendingPark;
use crate::consumer::park::partition::head_of;
use crate::consumer::park::{ParkLog, PartitionPark};
use crate::consumer::settle::Exit;
use crate::metrics::Metrics;
use crate::park::Cause;
use crate::record::Record;
use crate::retry_tier::RetryTiers;
use crate::stopped::Stopped;
use ledger::Offsets;
use pipelined::DeadLetterWrites;
use transaction::{Applied, Effect, Transaction};
use writer::{exited, exited_in_transaction, ExitWrite, ExitWriter, PendingExit};

/// What a partition's progress writes with and reports to, shared by every partition of a
/// consumer.
#[derive(Clone)]
pub(in crate::consumer) struct Out {
    /// Where records that exit are written: the dead-letter topic, the retry topics.
    pub exits: Arc<dyn ExitWriter>,
    /// The Kafka consumer: positions are stored in it, and its clock dates retry records.
    pub client: Arc<dyn Client>,
    pub metrics: Metrics,
    /// The retry tiers (`retry_topic_delays_ms`); empty when off.
    pub tiers: RetryTiers,
    /// The bytes that dead-letter writes in flight may hold, in KiB, for all partitions
    /// ([`pipelined::DEAD_LETTER_BUDGET_KIB`] unless a test says otherwise).
    pub budget: Arc<Semaphore>,
    /// With `key_order_after_failure = "park"`: the group's park logs.
    pub park: Option<Parking>,
}

/// What parking writes with: the group's park logs, and the group (a retry record another
/// group wrote resolves nothing of this group's).
#[derive(Clone)]
pub(in crate::consumer) struct Parking {
    pub log: Arc<dyn ParkLog>,
    pub group: String,
    /// `park_max_age`; `None`: no limit.
    pub max_age: Option<std::time::Duration>,
}

impl Out {
    /// Writes through `exits`, stores positions in `client`, counts in `metrics`, dates retry
    /// records by `tiers`, with the whole dead-letter budget.
    pub(in crate::consumer) fn new(
        exits: Arc<dyn ExitWriter>,
        client: Arc<dyn Client>,
        metrics: Metrics,
        tiers: RetryTiers,
    ) -> Self {
        Self {
            exits,
            client,
            metrics,
            tiers,
            budget: Arc::new(Semaphore::new(pipelined::DEAD_LETTER_BUDGET_KIB)),
            park: None,
        }
    }
}

/// How a partition's settled records are disposed of.
pub(in crate::consumer) enum Way {
    /// A leaving record's write is awaited before the partition goes on; positions are
    /// stored in the consumer. Batches, and a key-ordered record's own call.
    Inline,
    /// A leaving record's write starts and the partition goes on; its offset is passed once
    /// the write is acknowledged. One record at a time.
    Pipelined(DeadLetterWrites),
    /// Exactly once: a settled record goes into the transaction with its effect (its
    /// outputs, or its exit's write), which commits its position; nothing is stored here.
    Transaction(Arc<Transaction>),
    /// A key-ordered record's own call: a leaving record's write is awaited, as inline, but
    /// no ledger is kept and no position stored (its partition's worker keeps the
    /// partition's, over the calls of every key).
    Detached,
}

impl Way {
    /// Pipelined, with no write in flight yet.
    pub(in crate::consumer) fn pipelined() -> Self {
        Way::Pipelined(DeadLetterWrites::default())
    }
}

/// A record leaving its stage unhandled, as [`Progress::exit`] takes it.
pub(in crate::consumer) struct Leaving {
    pub exit: Exit,
    /// The last failure.
    pub message: String,
    /// When the record was taken from its queue.
    pub fetched: Instant,
    /// The record's span: its write runs in it.
    pub span: tracing::Span,
}

impl Leaving {
    /// What is written for `record` leaving now (by the consumer's clock: a retry record's
    /// due time counts from the moment it is handed over).
    fn write_of(&self, out: &Out, record: &Record) -> ExitWrite {
        ExitWrite::new(
            record,
            self.exit,
            &self.message,
            &out.tiers,
            out.client.now(),
        )
    }
}

/// A partition's progress: its [`Way`], its ledger (unused by a transaction, which commits
/// positions itself), and storing the position it allows.
pub(in crate::consumer) struct Progress {
    partition: TopicPartition,
    ledger: Offsets,
    way: Way,
    /// Cancelled once the partition's assignment is revoked: no position is stored after.
    revoked: CancellationToken,
    out: Arc<Out>,
    /// A source partition's parking, with `key_order_after_failure = "park"`.
    park: Option<PartitionPark>,
}

impl Progress {
    /// The progress of `topic`/`partition` in `way`, writing with `out`, storing nothing once
    /// `revoked` fires.
    pub(in crate::consumer) fn new(
        topic: &str,
        partition: i32,
        way: Way,
        revoked: CancellationToken,
        out: Arc<Out>,
    ) -> Self {
        Self {
            partition: (topic.to_string(), partition),
            ledger: Offsets::default(),
            way,
            revoked,
            out,
            park: None,
        }
    }

    /// Parks the partition's records by `park` from now on.
    pub(in crate::consumer) fn set_park(&mut self, park: PartitionPark) {
        self.park = Some(park);
    }

    /// The partition's parking, if it parks.
    pub(in crate::consumer) fn park(&mut self) -> Option<&mut PartitionPark> {
        self.park.as_mut()
    }

    /// Takes the partition's parking (a release lends it to the released records' progress).
    pub(in crate::consumer) fn take_park(&mut self) -> Option<PartitionPark> {
        self.park.take()
    }

    /// A key-ordered record's own call on `topic`/`partition`: [`Way::Detached`].
    pub(in crate::consumer) fn detached(topic: &str, partition: i32, out: Arc<Out>) -> Self {
        Self::new(
            topic,
            partition,
            Way::Detached,
            CancellationToken::new(),
            out,
        )
    }

    /// `record` was taken from the partition's queue. Keyed by the offset it was delivered at
    /// ([`Record::delivered_offset`]: a retry record's offset in its retry topic), which is the
    /// one the partition commits, so no caller can pass the wrong one.
    pub(in crate::consumer) fn take(&mut self, record: &Record) {
        if matches!(self.way, Way::Inline | Way::Pipelined(_)) {
            self.ledger.take(record.delivered_offset());
        }
    }

    /// `record` is settled (handled, or dead-lettered and acknowledged). Exactly once: it
    /// goes into the transaction with the outputs of its last call. A retry or redrive record
    /// of this group handled while parking: its key's head is resolved, written to its park
    /// log, and the record settles once that is acknowledged.
    pub(in crate::consumer) fn settle(&mut self, record: &Record) {
        // Parking refuses the other ways, but a released record's own progress, which never
        // holds a head.
        if matches!(self.way, Way::Pipelined(_)) {
            if let Some(pending) = self.resolution(record) {
                let settling = park_written(pending, "head_resolved", record);
                if let Way::Pipelined(writes) = &mut self.way {
                    writes.push_resolution(&self.out, record, settling);
                }
                return;
            }
        }
        match &self.way {
            Way::Transaction(transaction) => {
                let outputs = crate::handler::output::take();
                let effect = Effect::Handled(outputs);
                transaction.apply(&self.partition, record, &self.revoked, effect);
            }
            Way::Inline | Way::Pipelined(_) => self.ledger.settle(record.delivered_offset()),
            Way::Detached => {}
        }
    }

    fn writes(&self) -> Option<&DeadLetterWrites> {
        match &self.way {
            Way::Pipelined(writes) => Some(writes),
            _ => None,
        }
    }

    /// Whether dead-letter writes are in flight.
    pub(in crate::consumer) fn writing(&self) -> bool {
        self.writes().is_some_and(|w| !w.is_empty())
    }

    /// Whether a dead-letter write could start now without waiting: writes are pipelined and
    /// fewer than the most are in flight.
    pub(in crate::consumer) fn writes_without_waiting(&self) -> bool {
        self.writes().is_some_and(|w| !w.is_full())
    }

    /// Whether the record at `offset` is too far past the oldest dead-letter write in flight
    /// to be handled before that write is acknowledged.
    pub(in crate::consumer) fn too_far_behind(&self, offset: i64) -> bool {
        self.writes().is_some_and(|w| w.too_far_behind(offset))
    }

    /// Waits until the record at `offset` is no longer [`Progress::too_far_behind`].
    pub(in crate::consumer) async fn catch_up(&mut self, offset: i64) {
        if let Way::Pipelined(writes) = &mut self.way {
            writes.catch_up(offset).await;
        }
    }

    /// Writes `record` to where it is `leaving` for, by the partition's [`Way`]: pipelined, it
    /// starts the write and the partition goes on, its offset passed only once the write is
    /// acknowledged; inline, it waits for the acknowledgement and settles the record; in a
    /// transaction, the write goes into it. `Ok(true)` when the record settled now.
    /// [`Stopped`] when `cancel` fired first.
    pub(in crate::consumer) async fn exit(
        &mut self,
        record: &Record,
        leaving: Leaving,
        cancel: &CancellationToken,
    ) -> Result<bool, Stopped> {
        let head = self.head(record, leaving.exit, cancel);
        match &mut self.way {
            Way::Transaction(transaction) => {
                // Its exit is written in the transaction that commits its offset.
                let write = leaving.write_of(&self.out, record);
                let _entered = leaving.span.enter();
                let effect = Effect::Exit(&write);
                if transaction.apply(&self.partition, record, &self.revoked, effect)
                    == Applied::Taken
                {
                    exited_in_transaction(&write);
                }
                Ok(true)
            }
            Way::Pipelined(writes) => {
                let exits = self.out.exits.clone();
                let pending = |write: &ExitWrite| after_head(head, exits, record, write, cancel);
                writes
                    .start(&self.out, record, leaving, pending, cancel)
                    .await?;
                Ok(false)
            }
            Way::Inline | Way::Detached => {
                let out = &self.out;
                let write = leaving.write_of(out, record);
                let written = leaving
                    .span
                    .in_scope(|| after_head(head, out.exits.clone(), record, &write, cancel))
                    .instrument(leaving.span)
                    .await;
                exited(&out.metrics, &record.topic, &write, written)?;
                if matches!(self.way, Way::Inline) {
                    self.ledger.settle(record.delivered_offset());
                }
                Ok(true)
            }
        }
    }

    /// When parking and `record`, handled, is a head of its key: the write of its
    /// resolution. A retry or redrive record of this group is always one (its source
    /// partition's owner knows which head it resolves); a record of the source partition is
    /// one when it is a head come again (a rebalance, or an exit given up).
    fn resolution(&mut self, record: &Record) -> Option<PendingPark> {
        let parking = self.out.park.as_ref()?;
        let key = record.key.as_ref()?;
        match &record.retry {
            Some(retry) if retry.is_for(&parking.group) => {
                let event = crate::park::ParkEvent::Resolved {
                    key: key.clone(),
                    head: record.offset,
                    how: crate::park::How::Handled,
                    by: parking.group.clone(),
                    at: self.out.client.now(),
                };
                let (topic, partition) = (record.source_topic(), record.partition);
                Some(
                    parking
                        .log
                        .write(topic, partition, &event, self.revoked.clone()),
                )
            }
            Some(_) => None,
            // Every handled record of a parking source partition asks: no clock read or
            // clone unless its key is parked.
            None => {
                let park = self.park.as_mut()?;
                if park.table().is_empty() {
                    return None;
                }
                let (now, cancel) = (self.out.client.now(), self.revoked.clone());
                park.resolve_if_head(record, &parking.group, now, cancel)
            }
        }
    }

    /// When parking and `record` has a key: its head for leaving by `exit`, the key parked
    /// behind it (at once in the partition's own table; a retry or redrive record's source
    /// partition's owner reads it from the log), to be written before its exit.
    fn head(
        &mut self,
        record: &Record,
        exit: Exit,
        cancel: &CancellationToken,
    ) -> Option<PendingPark> {
        let parking = self.out.park.as_ref()?;
        record.key.as_ref()?;
        let cause = match exit {
            // A parked record following its expired head parks nothing behind it.
            Exit::DeadLetter {
                kind: crate::failure::DeadLetterKind::Parked,
                ..
            } => return None,
            Exit::DeadLetter { .. } => Cause::DeadLetter,
            Exit::RetryTier { .. } => Cause::RetryTier,
        };
        let now = self.out.client.now();
        Some(match &mut self.park {
            Some(park) => park.head(record, cause, now, cancel.clone()),
            None => parking.log.write(
                record.source_topic(),
                record.partition,
                &head_of(record, cause, now),
                cancel.clone(),
            ),
        })
    }

    /// Parks `record`, whose key is parked ([`PartitionPark::decide`]): writes it to the park
    /// log, by the partition's [`Way`] as a dead letter is written. `Ok(true)` when it
    /// settled now. [`Stopped`] when `cancel` fired first.
    pub(in crate::consumer) async fn park_record(
        &mut self,
        record: &Record,
        fetched: Instant,
        cancel: &CancellationToken,
    ) -> Result<bool, Stopped> {
        let park = self.park.as_mut().expect("only a parking partition parks");
        let pending = park.park(record, cancel.clone());
        let settling = park_written(pending, "record_parked", record);
        match &mut self.way {
            Way::Pipelined(writes) => {
                writes
                    .start_park(&self.out, record, settling, fetched, cancel)
                    .await?;
                Ok(false)
            }
            Way::Inline | Way::Detached => {
                settling.await?;
                if matches!(self.way, Way::Inline) {
                    self.ledger.settle(record.delivered_offset());
                }
                Ok(true)
            }
            Way::Transaction(_) => unreachable!("parking is refused with exactly once"),
        }
    }

    /// How many records are taken and not yet passed by the position.
    pub(in crate::consumer) fn open(&self) -> usize {
        self.ledger.open()
    }

    /// Settles the dead letters acknowledged so far and stores the position reached, unless
    /// the assignment was revoked: the revocation committed what was stored before it, and a
    /// store after it could only land in a later assignment of the partition to this member,
    /// moving that one's position back (seed 7302864).
    pub(in crate::consumer) fn store(&mut self) {
        if let Way::Pipelined(writes) = &mut self.way {
            writes.collect_finished();
            for offset in writes.take_acknowledged() {
                self.ledger.settle(offset);
            }
        }
        let Some(position) = self.ledger.take_position() else {
            return;
        };
        if self.revoked.is_cancelled() {
            return;
        }
        let (topic, partition) = (&self.partition.0, self.partition.1);
        if let Err(error) = self.out.client.store_position(topic, partition, position) {
            tracing::debug!(event = "offset_store_failed", %topic, partition, position,
                %error, "partition no longer assigned; the new owner consumes it again");
        }
    }

    /// Runs `wait` (a backoff, the breaker, a retry record's due time) while settling and
    /// storing the dead letters acknowledged meanwhile, so that a waiting partition's
    /// acknowledged writes give their share of the budget back and get committed.
    pub(in crate::consumer) async fn meanwhile<T>(
        &mut self,
        wait: impl std::future::Future<Output = T>,
    ) -> T {
        let mut wait = std::pin::pin!(wait);
        loop {
            let writes = match &mut self.way {
                Way::Pipelined(writes) if !writes.is_empty() => Some(writes),
                _ => None,
            };
            let pending = writes.is_some();
            tokio::select! {
                biased;
                out = &mut wait => return out,
                _ = async { writes.expect("checked").wait_first().await }, if pending => {}
            }
            self.store();
        }
    }

    /// While the most writes are in flight, waits for the oldest, then stores what is
    /// settled. A head's resolution is written as its record settles, without waiting for
    /// room (settling is not async): the next record waits here instead, so that a redrive
    /// of thousands of heads keeps as many writes in flight as dead letters do, no more.
    pub(in crate::consumer) async fn make_room(&mut self) {
        let Way::Pipelined(writes) = &mut self.way else {
            return;
        };
        if !writes.is_full() {
            return;
        }
        while writes.is_full() {
            writes.wait_first().await;
        }
        self.store();
    }

    /// Waits for every dead-letter write in flight, then stores what is settled.
    pub(in crate::consumer) async fn finish(&mut self) {
        if let Way::Pipelined(writes) = &mut self.way {
            writes.wait_all().await;
        }
        self.store();
    }
}

/// `record`'s exit write: after its head (when there is one) is acknowledged, so that a
/// resolution of the head (which needs its dead letter or retry record) always comes after
/// the head in the park log.
fn after_head(
    head: Option<PendingPark>,
    exits: Arc<dyn ExitWriter>,
    record: &Record,
    write: &ExitWrite,
    cancel: &CancellationToken,
) -> PendingExit {
    let Some(head) = head else {
        return exits.write(record, write, cancel.clone());
    };
    let (record, write, cancel) = (record.clone(), write.clone(), cancel.clone());
    Box::pin(async move {
        head.await?;
        exits.write(&record, &write, cancel).await
    })
}

/// `pending`, a park-log write for `record`, logged as `event` once acknowledged.
fn park_written(pending: PendingPark, event: &'static str, record: &Record) -> pipelined::Settling {
    let (topic, partition, offset) = (record.topic.clone(), record.partition, record.offset);
    Box::pin(async move {
        let at = pending.await?;
        tracing::info!(event, %topic, partition, offset, park_offset = at);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures_util::FutureExt;

    use super::writer::PendingExit;
    use super::*;
    use crate::consumer::client::RecordingClient;
    use crate::dlq::DeadLettered;
    use crate::failure::DeadLetterKind;
    use crate::retry_tier::RetryWritten;

    /// Dead-letter writes the test acknowledges, one by one, by sending on their channel.
    #[derive(Default)]
    struct HeldWrites(Mutex<Vec<tokio::sync::oneshot::Sender<()>>>);

    impl ExitWriter for HeldWrites {
        fn write(&self, record: &Record, _: &ExitWrite, _: CancellationToken) -> PendingExit {
            let (acknowledge, acknowledged) = tokio::sync::oneshot::channel();
            self.0.lock().unwrap().push(acknowledge);
            let offset = record.offset;
            Box::pin(async move {
                acknowledged.await.map_err(|_| Stopped)?;
                Ok(RetryWritten::DeadLettered(DeadLettered {
                    topic: "orders-dlt".into(),
                    partition: 0,
                    offset,
                }))
            })
        }
    }

    struct Fixture {
        positions: Arc<RecordingClient>,
        writes: Arc<HeldWrites>,
        out: Arc<Out>,
    }

    fn fixture() -> Fixture {
        let (positions, writes) = (
            Arc::new(RecordingClient::default()),
            Arc::new(HeldWrites::default()),
        );
        let out = Out::new(
            writes.clone(),
            positions.clone(),
            Metrics::default(),
            RetryTiers::default(),
        );
        Fixture {
            positions,
            writes,
            out: Arc::new(out),
        }
    }

    impl Fixture {
        fn stored(&self) -> Vec<i64> {
            std::mem::take(&mut *self.positions.stored.lock().unwrap())
        }

        /// Acknowledges the oldest write not acknowledged yet.
        fn acknowledge(&self) {
            let acknowledge = self.writes.0.lock().unwrap().remove(0);
            acknowledge.send(()).unwrap();
        }
    }

    fn leaving() -> Leaving {
        Leaving {
            exit: Exit::DeadLetter {
                kind: DeadLetterKind::Permanent,
                attempts: 1,
            },
            message: "malformed".into(),
            fetched: Instant::now(),
            span: tracing::Span::none(),
        }
    }

    fn taken(progress: &mut Progress, offsets: std::ops::Range<i64>) -> Vec<Record> {
        let records: Vec<Record> = offsets.map(|o| Record::new("orders", 0, o)).collect();
        records.iter().for_each(|r| progress.take(r));
        records
    }

    #[tokio::test]
    async fn a_pipelined_dead_letter_holds_the_position_until_it_is_acknowledged() {
        let f = fixture();
        let revoked = CancellationToken::new();
        let mut progress = Progress::new("orders", 0, Way::pipelined(), revoked, f.out.clone());
        let records = taken(&mut progress, 0..3);
        progress.settle(&records[0]);
        let stop = CancellationToken::new();
        let settled_now = progress.exit(&records[1], leaving(), &stop).await;
        assert_eq!(settled_now, Ok(false), "the partition goes on");
        progress.settle(&records[2]);
        progress.store();
        assert_eq!(f.stored(), vec![1], "not past the dead letter in flight");
        assert!(progress.writing());
        f.acknowledge();
        progress.finish().await;
        assert_eq!(f.stored(), vec![3]);
        assert!(!progress.writing());
    }

    #[tokio::test]
    async fn an_inline_dead_letter_settles_its_record_once_acknowledged() {
        let f = fixture();
        let revoked = CancellationToken::new();
        let mut progress = Progress::new("orders", 0, Way::Inline, revoked, f.out.clone());
        let records = taken(&mut progress, 0..2);
        let stop = CancellationToken::new();
        let mut exit = Box::pin(progress.exit(&records[0], leaving(), &stop));
        assert!(
            (&mut exit).now_or_never().is_none(),
            "it waits for the write"
        );
        f.acknowledge();
        assert_eq!(exit.await, Ok(true));
        progress.settle(&records[1]);
        progress.store();
        assert_eq!(f.stored(), vec![2]);
    }

    #[tokio::test]
    async fn nothing_is_stored_once_the_assignment_is_revoked() {
        let f = fixture();
        let revoked = CancellationToken::new();
        let mut progress = Progress::new(
            "orders",
            0,
            Way::pipelined(),
            revoked.clone(),
            f.out.clone(),
        );
        let records = taken(&mut progress, 0..2);
        progress.settle(&records[0]);
        progress.store();
        revoked.cancel();
        progress.settle(&records[1]);
        progress.store();
        assert_eq!(
            f.stored(),
            vec![1],
            "the revocation committed what was stored"
        );
    }

    #[tokio::test]
    async fn a_detached_progress_writes_inline_and_stores_nothing() {
        let f = fixture();
        let mut progress = Progress::detached("orders", 0, f.out.clone());
        let record = Record::new("orders", 0, 5);
        let stop = CancellationToken::new();
        let mut exit = Box::pin(progress.exit(&record, leaving(), &stop));
        assert!(
            (&mut exit).now_or_never().is_none(),
            "it waits for the write"
        );
        f.acknowledge();
        assert_eq!(exit.await, Ok(true));
        let next = Record::new("orders", 0, 6);
        progress.take(&next);
        progress.settle(&next);
        progress.store();
        assert!(
            f.stored().is_empty(),
            "its worker stores the partition's position"
        );
    }

    #[test]
    fn the_ledger_of_a_retry_partition_is_kept_by_the_offsets_records_were_delivered_at() {
        let record = |delivered: i64| Record {
            retry: Some(Box::new(crate::record::retry::RetryDelivery {
                group: None,
                tier: Some(0),
                topic: "orders-retry-0".into(),
                partition: 0,
                offset: delivered,
                due: chrono::Utc::now(),
                attempts: 1,
                history: vec![],
            })),
            // The original's offset in its source topic.
            ..Record::new("orders", 3, 9_000)
        };
        let f = fixture();
        let revoked = CancellationToken::new();
        let mut progress = Progress::new("orders-retry-0", 0, Way::Inline, revoked, f.out.clone());
        let (first, second) = (record(4), record(5));
        progress.take(&first);
        progress.take(&second);
        progress.settle(&second);
        progress.store();
        assert_eq!(f.stored(), Vec::<i64>::new(), "4 is not settled");
        progress.settle(&first);
        progress.store();
        assert_eq!(f.stored(), vec![6]);
    }
}
