//! Where a partition's worker reads its records: the partition's own librdkafka queue, split
//! from the consumer's when the partition is assigned
//! ([`KafkaFeed`](super::partition_queue::KafkaFeed)), or its queue in the simulation's
//! world. The worker copies each message out of librdkafka itself, into a record it settled
//! before (its buffers reused): the copies of different partitions run on different threads,
//! and no loop hands records over.

use std::task::{Context, Poll};

use rdkafka::error::KafkaError;

use crate::record::Record;

/// A partition's records, as its worker reads them.
pub(crate) trait Feed: Send + Sync {
    /// Moves records that are ready into `into` — up to `max`, and once they come to
    /// `max_bytes` ([`footprint`]) no more (a feed may read several at once, as many as the
    /// sizes read so far say fit, and pass `max_bytes` by those) — each copied into a record
    /// taken from `spares` when there is one; returns their footprint. `Pending` (and `cx`
    /// woken once one is ready) when none is. A partition's error (an offset out of range, a
    /// batch librdkafka cannot decode) is `Ready(Err)`, with the records read along with it
    /// in `into`.
    fn poll_take(
        &self,
        cx: &mut Context<'_>,
        max: usize,
        max_bytes: usize,
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Poll<Result<usize, KafkaError>>;

    /// The partition's share of the consumer's buffer, in bytes: what a chunk of its records
    /// may come to beyond its first.
    fn share(&self) -> usize;

    /// What librdkafka alone lets the partition's queue hold, in bytes: its share, and one
    /// fetch beyond it. More is a record batch larger than a fetch (a broker never splits
    /// one), which [`Feed::trim`] drops.
    fn bound(&self) -> usize;

    /// Messages waiting in the partition's queue now (librdkafka's count: an error waiting
    /// counts too).
    fn waiting(&self) -> usize;

    /// Holds the partition's fetches stopped (by `pause`) until [`Feed::release`]: a retry
    /// record waits until it is due.
    fn hold(&self, pause: &dyn Fn());

    /// Drops what the partition's queue holds, by stopping its fetches (`pause`) until
    /// [`Feed::release`] and reading the queue empty: librdkafka never hands out what was
    /// fetched before a pause, and frees it as the queue is read. So a record batch larger
    /// than the queue's share waits on the broker, not in memory, while the worker settles
    /// its chunk. A record fetched after a resume in between would come out all the same: it
    /// goes into `into` (copied into one of `spares`), never dropped.
    fn trim(
        &self,
        pause: &dyn Fn(),
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Result<(), KafkaError>;

    /// Ends a [`Feed::hold`] or a [`Feed::trim`]: the fetches go on (by `resume`), from the
    /// last record taken.
    fn release(&self, resume: &dyn Fn());
}

/// The bytes a record holds in memory, roughly: its key, value, header names and values, id
/// and topic, plus a fixed 128 for the record itself.
pub(crate) fn footprint(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len) + 32)
        .sum();
    128 + record.id.len()
        + record.topic.len()
        + record.key.as_ref().map_or(0, Vec::len)
        + record.payload.as_ref().map_or(0, Vec::len)
        + headers
}
