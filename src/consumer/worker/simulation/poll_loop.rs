//! A member's poll loop: what librdkafka fetched (the world's queues) handed, one message at a
//! time, to the consumer's real hand-off (`consumer::poll::dispatch`), which copies it into a
//! settled record the workers gave back, puts it in its partition's real inbox, pauses the
//! partition (in the world) when the inbox says so, and wakes the workers; and the memory
//! bound checked at every record.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use rdkafka::message::{OwnedHeaders, OwnedMessage};
use rdkafka::Timestamp;

use super::world::{delivered, WorldRef};
use crate::consumer::client::TopicPartition;
use crate::consumer::poll::assignments::Assignments;
use crate::consumer::poll::dispatch::{Dispatch, Pause};
use crate::consumer::poll::inbox::footprint;
use crate::record::Record;

/// Runs member `member`'s poll loop until the runtime ends: each time librdkafka has fetched
/// records, they go into their partitions' inboxes (`assignments`), oldest first, partition
/// by partition.
pub(super) async fn poll_loop(world: WorldRef, member: usize, assignments: Arc<Assignments>) {
    let pauser = world.clone();
    let pause: Pause = Box::new(move |topic, partition| {
        pauser.lock().pause(member, &(topic.to_string(), partition));
    });
    let buffered = prometheus::IntGauge::new("buffered", "the inboxes' bytes").expect("a gauge");
    let mut dispatch = Dispatch::new(assignments.clone(), pause, None, buffered);
    poll_fn(|cx| {
        // Fetches made below wake no earlier poll of this loop: it is running now.
        world.lock().members[member].poll_loop = None;
        let assigned: Vec<TopicPartition> =
            world.lock().members[member].assigned.iter().cloned().collect();
        for tp in assigned {
            // One message at a time, the world unlocked while the hand-off runs (it pauses).
            while let Some(record) = next(&world, member, &tp) {
                let size = footprint(&record);
                dispatch.deliver(&as_message(record));
                let mut guard = world.lock();
                let w = &mut *guard;
                // The inboxes hold at most their budget, and what reached an inbox before its
                // pause took effect: one record each.
                let m = &mut w.members[member];
                m.largest_record = m.largest_record.max(size);
                let held = assignments.held_bytes();
                let bound = w.inbox_budget + m.assigned.len() * m.largest_record;
                if held > bound {
                    let violation = format!(
                        "the inboxes of member {member} hold {held} bytes, over their budget of {} and a record each ({bound} in all)",
                        w.inbox_budget
                    );
                    w.violations.push(violation);
                }
                if w.members[member].paused.contains(&tp) {
                    break;
                }
                // librdkafka fetches on while it is not paused.
                w.fetch(member, &tp);
            }
        }
        world.lock().members[member].poll_loop = Some(cx.waker().clone());
        dispatch.wake();
        Poll::<()>::Pending
    })
    .await
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
