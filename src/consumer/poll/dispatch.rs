//! The poll loop's hand-off: each record the consumer's queue serves is copied out of
//! librdkafka into its partition's inbox, and the workers waiting for records are woken once
//! for all that was ready (one wake-up for many records). Records are copied into settled
//! records the workers gave back when there are any (`spare_records`), into new ones when
//! not. It knows librdkafka only as messages and a pause, so that the simulation runs it.

use std::sync::Arc;
use std::task::Waker;

use rdkafka::message::Message;

use super::assignments::{Assignments, Destination};
use crate::kafka::headers::RawHeaders;
use crate::record::Record;

/// The inbox a partition's records went to last, with its share, as of `rebalances`.
struct Recent {
    rebalances: u64,
    topic: String,
    partition: i32,
    to: Destination,
}

/// Stops fetching a partition (topic, partition) whose inbox is full; a failure is the
/// pauser's to report.
pub(in crate::consumer) type Pause = Box<dyn Fn(&str, i32) + Send>;

/// Moves records into their partitions' inboxes; see the module docs.
pub(in crate::consumer) struct Dispatch {
    assignments: Arc<Assignments>,
    pause: Pause,
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
    /// A hand-off into the inboxes of `assignments`, pausing a partition with `pause`, reading
    /// each record's id from `id_header` (when set) and counting the inboxes' bytes in
    /// `buffered`.
    pub(in crate::consumer) fn new(
        assignments: Arc<Assignments>,
        pause: Pause,
        id_header: Option<String>,
        buffered: prometheus::IntGauge,
    ) -> Self {
        Self {
            assignments,
            pause,
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
    pub(in crate::consumer) fn deliver<M: Message>(&mut self, message: &M)
    where
        M::Headers: RawHeaders,
    {
        let mut record = self.spares.pop().unwrap_or_else(Record::blank);
        record.copy_from_message(message, self.id_header.as_deref());
        let rebalances = self.assignments.rebalances();
        let current = self.recent.as_ref().is_some_and(|r| {
            r.rebalances == rebalances && r.partition == record.partition && r.topic == record.topic
        });
        if !current {
            let Some(to) = self
                .assignments
                .destination(&record.topic, record.partition)
            else {
                tracing::debug!(event = "record_of_unassigned_partition",
                    topic = %record.topic, partition = record.partition, offset = record.offset);
                return;
            };
            self.recent = Some(Recent {
                rebalances,
                topic: record.topic.clone(),
                partition: record.partition,
                to,
            });
        }
        let Some(recent) = self.recent.as_ref() else {
            return;
        };
        let pause = &self.pause;
        let change = recent.to.inbox.push(
            record,
            recent.to.share,
            || pause(&recent.topic, recent.partition),
            &mut self.wake,
        );
        self.buffered.add(change as i64);
    }

    /// Wakes the workers waiting for the records delivered since the last call, and takes the
    /// records they gave back meanwhile when none is left to copy into (once a burst, not a
    /// record: with records too large to keep, there never are any).
    pub(in crate::consumer) fn wake(&mut self) {
        self.wake.drain(..).for_each(Waker::wake);
        if self.spares.is_empty() {
            self.assignments.spares.take_all(&mut self.spares);
        }
    }
}
