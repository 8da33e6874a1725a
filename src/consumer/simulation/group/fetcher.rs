//! A member's librdkafka queues as the real code sees them: the consumer's own queue, which
//! the real poll loop (`consumer::poll_loop`) serves and which carries no records (each
//! partition's queue is split from it), and each partition's own queue, which its worker
//! reads through the real intake (`consumer::worker::intake`): [`SimFeed`] pops what
//! librdkafka fetched (the world's queues), as a message the worker copies into a record it
//! settled before, and librdkafka fetches on unless the partition is paused.

use std::task::{Context, Poll, Waker};

use rdkafka::error::KafkaError;
use rdkafka::message::{OwnedHeaders, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Timestamp;

use super::world::{delivered, WorldRef};
use crate::consumer::client::TopicPartition;
use crate::consumer::poll::feed::{footprint, Feed};
use crate::consumer::poll::fetcher::{Fetcher, Polled};
use crate::record::Record;

/// A member's own queue: no record comes to it, and its rebalances are the schedule's.
pub(super) struct SimFetcher;

impl Fetcher for SimFetcher {
    async fn next(&mut self) -> Option<Polled> {
        std::future::pending().await
    }

    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)> {
        None
    }
}

/// Member `member`'s own queue of `tp` in the world, as its worker reads it.
pub(super) struct SimFeed {
    pub world: WorldRef,
    pub member: usize,
    pub tp: TopicPartition,
    /// The partition's share of the member's buffer ([`Feed::share`]).
    pub share: usize,
}

impl Feed for SimFeed {
    fn poll_take(
        &self,
        cx: &mut Context<'_>,
        max: usize,
        max_bytes: usize,
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Poll<Result<usize, KafkaError>> {
        let (mut taken, mut bytes) = (0, 0);
        while taken < max && bytes < max_bytes {
            let Some(record) = next(&self.world, self.member, &self.tp) else {
                if taken > 0 {
                    break;
                }
                if !cx.waker().will_wake(Waker::noop()) {
                    let mut world = self.world.lock();
                    let waiting = &mut world.members[self.member].waiting;
                    waiting.insert(self.tp.clone(), cx.waker().clone());
                }
                return Poll::Pending;
            };
            if taken == 0 {
                // Not waiting any more (a wait dropped before its wake left its waker here).
                let mut world = self.world.lock();
                world.members[self.member].waiting.remove(&self.tp);
            }
            // Copied out as the worker copies what librdkafka hands it.
            let mut copy = spares.pop().unwrap_or_else(Record::blank);
            copy.copy_from_message(&as_message(record), None);
            bytes += footprint(&copy);
            taken += 1;
            into.push(copy);
        }
        Poll::Ready(Ok(bytes))
    }

    fn share(&self) -> usize {
        self.share
    }

    /// The share and a fetch of a share: the world fetches up to its queue's capacity.
    fn bound(&self) -> usize {
        self.share.saturating_mul(2)
    }

    fn waiting(&self) -> usize {
        let world = self.world.lock();
        world.members[self.member]
            .queues
            .get(&self.tp)
            .map_or(0, |queue| queue.records.len())
    }

    /// Noted, for the check that nothing else holds a partition paused: a retry wait lasts
    /// its tier's delay at most.
    fn hold(&self, pause: &dyn Fn()) {
        pause();
        let now = tokio::time::Instant::now();
        let mut world = self.world.lock();
        let member = &mut world.members[self.member];
        member.retry_waits.insert(self.tp.clone(), now);
    }

    /// Noted, for the same check: a trim lasts until the worker wants records again. The
    /// world's pause drops what the queue holds at once.
    fn trim(
        &self,
        pause: &dyn Fn(),
        _: &mut Vec<Record>,
        _: &mut Vec<Record>,
    ) -> Result<(), KafkaError> {
        pause();
        let mut world = self.world.lock();
        world.members[self.member].trimmed.insert(self.tp.clone());
        Ok(())
    }

    fn release(&self, resume: &dyn Fn()) {
        resume();
    }
}

/// The next record `member`'s queue of `tp` hands the application, if any; then librdkafka
/// fetches on (unless the partition is paused).
fn next(world: &WorldRef, member: usize, tp: &TopicPartition) -> Option<Record> {
    let mut w = world.lock();
    let queue = w.members[member].queues.get_mut(tp)?;
    let record = queue.records.pop_front()?;
    queue.app = delivered(&record).1 + 1;
    w.fetch(member, tp);
    Some(record)
}

/// `record` as librdkafka hands it over: a message.
fn as_message(record: Record) -> OwnedMessage {
    let mut headers = OwnedHeaders::new();
    for header in &record.headers {
        headers = crate::kafka::headers::add(headers, &header.key, header.value.as_deref());
    }
    OwnedMessage::new(
        record.payload,
        record.key,
        record.topic,
        record.timestamp.map_or(Timestamp::NotAvailable, |t| {
            Timestamp::CreateTime(t.timestamp_millis())
        }),
        record.partition,
        record.offset,
        Some(headers),
    )
}
