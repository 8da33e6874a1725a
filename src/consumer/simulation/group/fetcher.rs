//! A member's queue as the real poll loop (`consumer::poll_loop`) sees it: what librdkafka
//! fetched (the world's queues) handed to the consumer's real hand-off
//! (`consumer::poll::dispatch`) one message at a time, which copies it into a settled record
//! the workers gave back, puts it in its partition's real inbox and pauses the partition (in
//! the world) when the inbox says so; and the memory bound checked at every record.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use rdkafka::message::{OwnedHeaders, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Timestamp;

use super::world::{delivered, WorldRef};
use crate::consumer::client::TopicPartition;
use crate::consumer::poll::assignments::Assignments;
use crate::consumer::poll::dispatch::{Dispatch, Pause};
use crate::consumer::poll::fetcher::{Fetcher, Polled};
use crate::consumer::poll::inbox::footprint;
use crate::record::Record;

/// Member `member`'s queue in the world, delivering into the inboxes of `assignments`.
pub(super) struct SimFetcher {
    pub world: WorldRef,
    pub member: usize,
    pub assignments: Arc<Assignments>,
}

impl SimFetcher {
    /// The pause of member `member`'s fetches, in the world.
    pub(super) fn pause(world: &WorldRef, member: usize) -> Pause {
        let world = world.clone();
        Box::new(move |topic, partition| {
            world.lock().pause(member, &(topic.to_string(), partition));
        })
    }
}

impl Fetcher for SimFetcher {
    async fn next(&mut self, dispatch: &mut Dispatch) -> Option<Polled> {
        poll_fn(|cx| match self.ready(dispatch) {
            Some(polled) => Poll::Ready(Some(polled)),
            None => {
                // The next fetch wakes the loop.
                self.world.lock().members[self.member].poll_loop = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// The oldest record of the first assigned partition that has one, delivered with the
    /// world unlocked (the hand-off may pause); then librdkafka fetches on unless it paused.
    fn ready(&mut self, dispatch: &mut Dispatch) -> Option<Polled> {
        let member = self.member;
        let assigned: Vec<TopicPartition> = self.world.lock().members[member]
            .assigned
            .iter()
            .cloned()
            .collect();
        let (tp, record) = assigned
            .into_iter()
            .find_map(|tp| next(&self.world, member, &tp).map(|record| (tp, record)))?;
        let size = footprint(&record);
        dispatch.deliver(&as_message(record));
        let mut guard = self.world.lock();
        let w = &mut *guard;
        // The inboxes hold at most their budget, and what reached an inbox before its pause
        // took effect: one record each.
        let m = &mut w.members[member];
        m.largest_record = m.largest_record.max(size);
        let held = self.assignments.held_bytes();
        let bound = w.inbox_budget + m.assigned.len() * m.largest_record;
        if held > bound {
            let violation = format!(
                "the inboxes of member {member} hold {held} bytes, over their budget of {} and a record each ({bound} in all)",
                w.inbox_budget
            );
            w.violations.push(violation);
        }
        if !w.members[member].paused.contains(&tp) {
            w.fetch(member, &tp);
        }
        Some(Polled::Delivered)
    }

    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)> {
        None
    }
}

/// The next record `member`'s queue of `tp` hands the application, if any.
fn next(world: &WorldRef, member: usize, tp: &TopicPartition) -> Option<Record> {
    let mut w = world.lock();
    let queue = w.members[member].queues.get_mut(tp)?;
    let record = queue.records.pop_front()?;
    queue.app = delivered(&record).1 + 1;
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
