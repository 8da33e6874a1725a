//! A member's poll loop, simulated: moves what librdkafka fetched (the world's queues) into
//! the partitions' real inboxes, pausing a partition when its inbox says so and waking the
//! workers, as `consumer::dispatch` does; and the memory bound checked at every record.
//!
//! A source topic's record is copied out of its message into a settled record the workers
//! gave back, as `dispatch` does (`Record::copy_from_message`), so a field left over from the
//! record it was before would show in what the handler is called with. (A retry or redrive
//! topic's record, restored already to the original it carries, goes in as it is.)

use std::future::poll_fn;
use std::task::Poll;

use super::super::client::TopicPartition;
use super::world::{delivered, WorldRef};
use rdkafka::message::{OwnedHeaders, OwnedMessage};
use rdkafka::Timestamp;

use crate::consumer::inbox::footprint;
use crate::record::Record;

/// Runs member `member`'s poll loop until the runtime ends: each time librdkafka has fetched
/// records, they go into their partitions' inboxes, oldest first, partition by partition.
pub(super) async fn poll_loop(world: WorldRef, member: usize) {
    poll_fn(|cx| {
        let mut guard = world.lock();
        let world = &mut *guard;
        // Fetches made below wake no earlier poll of this loop: it is running now.
        world.members[member].poll_loop = None;
        let mut wake = Vec::new();
        let assigned: Vec<TopicPartition> = world.members[member].inboxes.keys().cloned().collect();
        let share = world.members[member].budget.share(assigned.len());
        for tp in assigned {
            loop {
                let m = &mut world.members[member];
                let Some(record) = m.queues.get_mut(&tp).and_then(|q| q.records.pop_front())
                else {
                    break;
                };
                let record = as_copied(record, &mut m.spares_taken);
                let offset = delivered(&record).1;
                let size = footprint(&record);
                m.queues.get_mut(&tp).expect("its queue").app = offset + 1;
                let mut paused = false;
                m.inboxes[&tp].push(record, share, || paused = true, &mut wake);
                // The inboxes hold at most their budget, and what reached an inbox before its
                // pause took effect: one record each.
                m.largest_record = m.largest_record.max(size);
                let held = m.budget.held();
                let bound = world.inbox_budget + m.inboxes.len() * m.largest_record;
                if held > bound {
                    world.violations.push(format!(
                        "the inboxes of member {member} hold {held} bytes, over their budget of {} and a record each ({bound} in all)",
                        world.inbox_budget
                    ));
                }
                if paused {
                    world.pause(member, &tp);
                    break;
                }
                // librdkafka fetches on while it is not paused.
                world.fetch(member, &tp);
            }
        }
        // What the workers gave back, for the next records, as `dispatch` takes it.
        let m = &mut world.members[member];
        if m.spares_taken.is_empty() {
            m.spares.take_all(&mut m.spares_taken);
        }
        world.members[member].poll_loop = Some(cx.waker().clone());
        drop(guard);
        wake.into_iter().for_each(std::task::Waker::wake);
        Poll::<()>::Pending
    })
    .await
}

/// `record` as the consumer's poll loop hands it over: a source topic's record copied out of
/// its message into a spare record of `taken`, or a new one when none is left; a retry or
/// redrive topic's record as it is.
fn as_copied(record: Record, taken: &mut Vec<Record>) -> Record {
    if record.retry.is_some() {
        return record;
    }
    let mut headers = OwnedHeaders::new();
    for header in &record.headers {
        headers = crate::kafka::headers::add(headers, &header.key, header.value.as_deref());
    }
    let message = OwnedMessage::new(
        record.payload,
        record.key,
        record.topic,
        record.timestamp.map_or(Timestamp::NotAvailable, |t| {
            Timestamp::CreateTime(t.timestamp_millis())
        }),
        record.partition,
        record.offset,
        Some(headers),
    );
    let mut copy = taken.pop().unwrap_or_else(Record::blank);
    copy.copy_from_message(&message, None);
    copy
}
