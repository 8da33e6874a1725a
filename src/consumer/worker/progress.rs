//! A partition's progress: its offset ledger ([`Offsets`]), its dead letters in flight, and
//! storing the position they allow. The position is stored after each chunk and before any
//! wait (a retry, the breaker, a dead-letter write), so a waiting partition has its progress
//! stored, and it never passes an unsettled record: a dead letter settles only once the broker
//! acknowledged it.

use rdkafka::consumer::Consumer as _;

use super::dead_letters::DeadLetterWrites;
use super::Shared;
use crate::consumer::offsets::Offsets;
use crate::handler::BatchHandler;

/// See the module docs.
pub(super) struct Progress {
    /// The partition whose position is stored; `None` for [`Progress::detached`].
    partition: Option<(String, i32)>,
    offsets: Offsets,
    /// Dead-letter writes in flight (pipelined mode only).
    pub(super) writes: Option<DeadLetterWrites>,
}

impl Progress {
    /// The progress of `topic`/`partition`; with `pipelined`, dead letters are written while
    /// the partition goes on.
    pub(super) fn new(topic: &str, partition: i32, pipelined: bool) -> Self {
        Self {
            partition: Some((topic.to_string(), partition)),
            offsets: Offsets::default(),
            writes: pipelined.then(DeadLetterWrites::default),
        }
    }

    /// Progress that stores nothing: a key-ordered record's own call, whose worker keeps the
    /// partition's ledger.
    pub(super) fn detached() -> Self {
        Self {
            partition: None,
            offsets: Offsets::default(),
            writes: None,
        }
    }

    /// A record was taken from the partition's queue.
    pub(super) fn take(&mut self, offset: i64) {
        self.offsets.take(offset);
    }

    /// A record is settled (handled, or dead-lettered and acknowledged).
    pub(super) fn settle(&mut self, offset: i64) {
        self.offsets.settle(offset);
    }

    /// Settles the dead letters acknowledged so far and stores the position reached.
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
            store_position(shared, topic, *partition, position);
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
    // rdkafka's store_offset takes the last handled offset and stores the one after it.
    let offset = position - 1;
    if let Err(e) = shared.consumer.store_offset(topic, partition, offset) {
        tracing::debug!(event = "offset_store_failed", %topic, partition, offset,
            error = %e, "partition no longer assigned; the new owner consumes it again");
    }
}
