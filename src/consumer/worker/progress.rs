//! A partition's progress: its offset ledger ([`Offsets`]), its dead letters in flight, and
//! storing the position they allow. The position is stored after each chunk and before any
//! wait (a retry, the breaker, a dead-letter write), so a waiting partition has its progress
//! stored, and it never passes an unsettled record: a dead letter settles only once the broker
//! acknowledged it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dead_letters::{DeadLetterWrites, Leaving};
use super::Shared;
use crate::consumer::offsets::Offsets;
use crate::consumer::settle::{exited, exited_in_transaction};
use crate::consumer::transaction::{Applied, Effect, Transaction};
use crate::handler::BatchHandler;
use crate::record::Record;
use crate::stopped::Stopped;

/// See the module docs.
pub(super) struct Progress {
    /// The partition whose position is stored; `None` for [`Progress::detached`].
    partition: Option<(String, i32)>,
    offsets: Offsets,
    /// Dead-letter writes in flight (pipelined mode only).
    writes: Option<DeadLetterWrites>,
    /// Cancelled once the partition's assignment is revoked: no position is stored after.
    revoked: CancellationToken,
    /// Exactly once: where each settled record's effect and position go instead.
    transaction: Option<Arc<Transaction>>,
}

impl Progress {
    /// The progress of `topic`/`partition`; with `pipelined`, dead letters are written while
    /// the partition goes on.
    ///
    /// With a `transaction` (exactly once), a record settles by going into it with its effect
    /// ([`Transaction::apply`]), nothing is pipelined, and no position is stored here: the
    /// transaction commits them.
    pub(super) fn new(
        topic: &str,
        partition: i32,
        pipelined: bool,
        revoked: CancellationToken,
        transaction: Option<Arc<Transaction>>,
    ) -> Self {
        Self {
            partition: Some((topic.to_string(), partition)),
            offsets: Offsets::default(),
            writes: (pipelined && transaction.is_none()).then(DeadLetterWrites::default),
            revoked,
            transaction,
        }
    }

    /// Progress that stores nothing: a key-ordered record's own call, whose worker keeps the
    /// partition's ledger.
    pub(super) fn detached() -> Self {
        Self {
            partition: None,
            offsets: Offsets::default(),
            writes: None,
            revoked: CancellationToken::new(),
            transaction: None,
        }
    }

    /// `record` was taken from the partition's queue. Keyed by the offset it was delivered at
    /// ([`Record::delivered_offset`]: a retry record's offset in its retry topic), which is the
    /// one the partition commits, so no caller can pass the wrong one.
    pub(super) fn take(&mut self, record: &Record) {
        self.offsets.take(record.delivered_offset());
    }

    /// `record` is settled (handled, or dead-lettered and acknowledged). Exactly once: it
    /// goes into the transaction with the outputs of its last call.
    pub(super) fn settle(&mut self, record: &Record) {
        if let (Some(transaction), Some(partition)) = (&self.transaction, &self.partition) {
            let outputs = crate::handler::output::take();
            transaction.apply(partition, record, &self.revoked, Effect::Handled(outputs));
        }
        self.offsets.settle(record.delivered_offset());
    }

    /// Whether dead-letter writes are in flight.
    pub(super) fn writing(&self) -> bool {
        self.writes.as_ref().is_some_and(|w| !w.is_empty())
    }

    /// Whether a dead-letter write could start now without waiting: writes are pipelined and
    /// fewer than the most are in flight.
    pub(super) fn writes_without_waiting(&self) -> bool {
        self.writes.as_ref().is_some_and(|w| !w.is_full())
    }

    /// Whether the record at `offset` is too far past the oldest dead-letter write in flight
    /// to be handled before that write is acknowledged.
    pub(super) fn too_far_behind(&self, offset: i64) -> bool {
        self.writes
            .as_ref()
            .is_some_and(|w| w.too_far_behind(offset))
    }

    /// Waits until the record at `offset` is no longer [`Progress::too_far_behind`].
    pub(super) async fn catch_up(&mut self, offset: i64) {
        if let Some(writes) = self.writes.as_mut() {
            writes.catch_up(offset).await;
        }
    }

    /// Writes `record` to where it is `leaving` for: pipelined, it starts the write and the
    /// partition goes on, its offset passed only once the write is acknowledged; otherwise it
    /// waits for the acknowledgement and settles the record. `Ok(true)` when the record
    /// settled now. [`Stopped`] when `cancel` fired first.
    pub(super) async fn exit<H: BatchHandler>(
        &mut self,
        shared: &Arc<Shared<H>>,
        record: &Record,
        leaving: Leaving,
        cancel: &CancellationToken,
    ) -> Result<bool, Stopped> {
        if let (Some(transaction), Some(partition)) = (&self.transaction, &self.partition) {
            // Exactly once: its exit is written in the transaction that commits its offset.
            let write = leaving.write_of(shared, record);
            let _entered = leaving.span.enter();
            if transaction.apply(partition, record, &self.revoked, Effect::Exit(&write))
                == Applied::Taken
            {
                exited_in_transaction(&write);
            }
            self.offsets.settle(record.delivered_offset());
            return Ok(true);
        }
        match self.writes.as_mut() {
            Some(writes) => {
                writes.start(shared, record, leaving, cancel).await?;
                Ok(false)
            }
            None => {
                let write = leaving.write_of(shared, record);
                let written = leaving
                    .span
                    .in_scope(|| (shared.exits).write(record, &write, cancel.clone()))
                    .instrument(leaving.span)
                    .await;
                exited(&shared.metrics, &record.topic, &write, written)?;
                self.settle(record);
                Ok(true)
            }
        }
    }

    /// How many records are taken and not yet passed by the position.
    pub(super) fn open(&self) -> usize {
        self.offsets.open()
    }

    /// Settles the dead letters acknowledged so far and stores the position reached, unless
    /// the assignment was revoked: the revocation committed what was stored before it, and a
    /// store after it could only land in a later assignment of the partition to this member,
    /// moving that one's position back (seed 7302864).
    pub(super) fn store(&mut self, shared: &Shared<impl BatchHandler>) {
        if let Some(writes) = self.writes.as_mut() {
            writes.collect_finished();
            for offset in writes.take_acknowledged() {
                self.offsets.settle(offset);
            }
        }
        if let (Some((topic, partition)), Some(position)) =
            (&self.partition, self.offsets.take_position())
        {
            if !self.revoked.is_cancelled() && self.transaction.is_none() {
                store_position(shared, topic, *partition, position);
            }
        }
    }

    /// Runs `wait` (a backoff, the breaker, a retry record's due time) while settling and
    /// storing the dead letters acknowledged meanwhile, so that a waiting partition's
    /// acknowledged writes give their share of the budget back and get committed.
    pub(super) async fn meanwhile<T>(
        &mut self,
        shared: &Shared<impl BatchHandler>,
        wait: impl std::future::Future<Output = T>,
    ) -> T {
        let mut wait = std::pin::pin!(wait);
        loop {
            let writes = self.writes.as_mut().filter(|w| !w.is_empty());
            let pending = writes.is_some();
            tokio::select! {
                biased;
                out = &mut wait => return out,
                _ = async { writes.expect("checked").wait_first().await }, if pending => {}
            }
            self.store(shared);
        }
    }

    /// Waits for every dead-letter write in flight, then stores what is settled.
    pub(super) async fn finish(&mut self, shared: &Shared<impl BatchHandler>) {
        if let Some(writes) = self.writes.as_mut() {
            writes.wait_all().await;
        }
        self.store(shared);
    }
}

/// Stores `position` (the next offset to consume) of `topic`/`partition` for the next commit.
pub(super) fn store_position(
    shared: &Shared<impl BatchHandler>,
    topic: &str,
    partition: i32,
    position: i64,
) {
    if let Err(error) = shared.client.store_position(topic, partition, position) {
        tracing::debug!(event = "offset_store_failed", %topic, partition, position,
            %error, "partition no longer assigned; the new owner consumes it again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_of_a_retry_partition_is_kept_by_the_offsets_records_were_delivered_at() {
        let record = |delivered: i64| Record {
            id: "orders-3-9000".into(),
            topic: "orders".into(),
            partition: 3,
            offset: 9_000, // the original's offset in its source topic
            key: None,
            payload: None,
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
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
            delivery_count: None,
        };
        let mut progress =
            Progress::new("orders-retry-0", 0, false, CancellationToken::new(), None);
        let (first, second) = (record(4), record(5));
        progress.take(&first);
        progress.take(&second);
        progress.settle(&second);
        assert_eq!(progress.offsets.take_position(), None, "4 is not settled");
        progress.settle(&first);
        assert_eq!(progress.offsets.take_position(), Some(6));
    }
}
