//! The poll loop's hand-off: each record the consumer's queue serves is copied out of
//! librdkafka into its partition's inbox, and the workers waiting for records are woken once
//! for all that was ready (one wake-up for many records). Records are copied into settled
//! records the workers gave back when there are any (`spare_records`), into new ones when
//! not.

use std::sync::Arc;
use std::task::Waker;

use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::BorrowedMessage;

use super::context::RebalanceContext;
use super::inbox::Inbox;
use crate::record::Record;

/// The inbox a partition's records went to last, with its share, as of `rebalances`.
struct Recent {
    rebalances: u64,
    topic: String,
    partition: i32,
    inbox: Arc<Inbox>,
    share: usize,
}

/// Moves records into their partitions' inboxes; see the module docs.
pub(super) struct Dispatch {
    consumer: Arc<StreamConsumer<RebalanceContext>>,
    /// The header whose value is a record's id (`id_header`).
    id_header: Option<String>,
    /// The bytes every inbox holds (`kafka_dlq_buffered_bytes`).
    buffered: prometheus::IntGauge,
    /// The inbox the last record went to, kept until the next rebalance: records come in runs
    /// of one partition.
    recent: Option<Recent>,
    /// The workers to wake once the records ready now are delivered.
    wake: Vec<Waker>,
    /// Settled records taken from the consumer's spares, to copy the next messages into
    /// (refilled at [`Dispatch::wake`]).
    spares: Vec<Record>,
}

impl Dispatch {
    /// A hand-off for `consumer`'s records, reading each record's id from `id_header` (when
    /// set) and counting the inboxes' bytes in `buffered`.
    pub(super) fn new(
        consumer: Arc<StreamConsumer<RebalanceContext>>,
        id_header: Option<String>,
        buffered: prometheus::IntGauge,
    ) -> Self {
        Self {
            consumer,
            id_header,
            buffered,
            recent: None,
            wake: Vec::new(),
            spares: Vec::new(),
        }
    }

    /// Copies `message` into its partition's inbox, pausing the partition's fetches when the
    /// inbox decides so (it holds its share of the budget, see `inbox.rs`). A record of a
    /// partition no longer assigned here is dropped: its offset was not stored, so the new
    /// owner consumes it. The worker waiting for it, if any, is woken by [`Dispatch::wake`].
    pub(super) fn deliver(&mut self, message: &BorrowedMessage<'_>) {
        let context = self.consumer.context();
        let mut record = self.spares.pop().unwrap_or_else(Record::blank);
        record.copy_from_message(message, self.id_header.as_deref());
        let rebalances = context
            .rebalances
            .load(std::sync::atomic::Ordering::Relaxed);
        let current = self.recent.as_ref().is_some_and(|r| {
            r.rebalances == rebalances && r.partition == record.partition && r.topic == record.topic
        });
        if !current {
            let partitions = context.partitions.lock().expect("partitions lock");
            let key = (record.topic.clone(), record.partition);
            let Some(slot) = partitions.get(&key) else {
                tracing::debug!(event = "record_of_unassigned_partition",
                    topic = %key.0, partition = key.1, offset = record.offset);
                return;
            };
            self.recent = Some(Recent {
                rebalances,
                topic: key.0,
                partition: key.1,
                inbox: slot.inbox.clone(),
                share: context.budget.share(partitions.len()),
            });
        }
        let Some(to) = self.recent.as_ref() else {
            return;
        };
        let consumer = &self.consumer;
        let change = to.inbox.push(
            record,
            to.share,
            || {
                let mut list = rdkafka::TopicPartitionList::with_capacity(1);
                list.add_partition(&to.topic, to.partition);
                if let Err(error) = consumer.pause(&list) {
                    tracing::warn!(event = "partition_pause_failed", topic = %to.topic,
                        partition = to.partition, %error, "its inbox may grow past its share");
                }
            },
            &mut self.wake,
        );
        self.buffered.add(change as i64);
    }

    /// Wakes the workers waiting for the records delivered since the last call, and takes the
    /// records they gave back meanwhile when none is left to copy into (once a burst, not a
    /// record: with records too large to keep, there never are any).
    pub(super) fn wake(&mut self) {
        self.wake.drain(..).for_each(Waker::wake);
        if self.spares.is_empty() {
            self.consumer.context().spares.take_all(&mut self.spares);
        }
    }
}
