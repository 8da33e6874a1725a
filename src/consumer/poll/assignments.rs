//! The partitions assigned here: each one's feed (its own librdkafka queue), the token that
//! stops its worker, and the hand-over of a newly assigned partition to the loop that starts
//! its worker. The rebalance callback (`context.rs`) only forwards librdkafka's assignments
//! and revocations here, so that the simulation runs this same code against its model of
//! librdkafka.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::feed::Feed;
use super::queue_budget::{QueueBudget, QueuePart};
use crate::metrics::Metrics;

/// A topic and partition.
pub(in crate::consumer) type PartitionKey = (String, i32);

/// An assigned partition: the token that stops its worker, and the one that says it was
/// revoked.
struct PartitionSlot {
    cancel: CancellationToken,
    /// Cancelled when the assignment ends by revocation (not at shutdown, whose final commit
    /// takes what the workers store while they finish): see [`Assigned::revoked`].
    revoked: CancellationToken,
}

impl PartitionSlot {
    /// Ends the assignment: stops its worker.
    fn end(&self) {
        self.revoked.cancel();
        self.cancel.cancel();
    }
}

/// A newly assigned partition, for the poll loop to start its worker.
pub(crate) struct Assigned {
    pub topic: String,
    pub partition: i32,
    /// Where its worker reads its records: its own librdkafka queue.
    pub feed: Arc<dyn Feed>,
    /// What the queue holds, counted in the consumer's budget for its queues.
    pub part: QueuePart,
    /// The partition's reader lease ([`Assignments::readers`]).
    pub reader: Arc<tokio::sync::Mutex<()>>,
    pub cancel: CancellationToken,
    /// Cancelled when this assignment is revoked, before the revocation commits: from then on
    /// its worker stores no position. What it settles afterwards (a dead letter acknowledged
    /// late) is consumed again by the next owner; a store then could only land in a later
    /// assignment of the partition, to this member, and move its position back.
    pub revoked: CancellationToken,
}

/// See the module docs. Shared by the rebalance callback (which adds, removes and stops
/// partitions) and the poll loop (which starts their workers).
pub(crate) struct Assignments {
    partitions: Mutex<HashMap<PartitionKey, PartitionSlot>>,
    metrics: Metrics,
    /// Where newly assigned partitions go.
    assigned: mpsc::UnboundedSender<Assigned>,
    /// Parent of every worker's token; cancelled at shutdown.
    stop: CancellationToken,
    /// Each partition's reader lease, kept for the consumer's life: the worker of a new
    /// assignment of a partition starts once the worker of its revoked assignment has ended
    /// (its handler call in progress finished).
    readers: Mutex<HashMap<PartitionKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Each partition's own librdkafka queue while a worker holds it ([`Assignments::assign`]).
    /// Not held here: a queue holds its consumer, whose context holds this.
    feeds: Mutex<HashMap<PartitionKey, Weak<dyn Feed>>>,
    /// Splits a partition's own queue from the consumer's, and the consumer's budget for its
    /// queues ([`Assignments::split_with`]).
    split: OnceLock<(Split, Arc<QueueBudget>)>,
}

/// Splits a partition's own librdkafka queue from the consumer's; `None` when it cannot.
pub(in crate::consumer) type Split =
    Box<dyn Fn(&PartitionKey) -> Option<Arc<dyn Feed>> + Send + Sync>;

impl Assignments {
    /// No partition yet; newly assigned ones are sent to `assigned`, their workers stopped by
    /// `stop` too.
    pub(crate) fn new(
        metrics: Metrics,
        assigned: mpsc::UnboundedSender<Assigned>,
        stop: CancellationToken,
    ) -> Self {
        Self {
            partitions: Mutex::default(),
            metrics,
            assigned,
            stop,
            readers: Mutex::default(),
            feeds: Mutex::default(),
            split: OnceLock::new(),
        }
    }

    /// Partitions assigned from now on get their queues from `split` (the consumer's, once
    /// created; the simulation's world), and their parts of `budget`. Only the first call
    /// counts; before it, a partition gets no queue.
    pub(in crate::consumer) fn split_with(&self, split: Split, budget: Arc<QueueBudget>) {
        let _ = self.split.set((split, budget));
    }

    /// Gives each of `partitions` its feed and sends it to the poll loop, which starts its
    /// worker. A partition's feed is its own librdkafka queue, split (see
    /// [`Assignments::split_with`]) unless a worker of an earlier assignment still holds it
    /// (split again, it would take librdkafka's wake-ups from the one that worker holds). A
    /// partition the split cannot give
    /// a queue gets no worker (its records would reach the consumer's own queue, which stops
    /// the consumer). An assignment that replaces one not revoked ends that one first.
    pub(crate) fn assign(&self, partitions: &[PartitionKey]) {
        let Some((split, budget)) = self.split.get() else {
            return;
        };
        let mut slots = self.partitions.lock().expect("partitions lock");
        let mut readers = self.readers.lock().expect("readers lock");
        let mut feeds = self.feeds.lock().expect("feeds lock");
        for key in partitions {
            let feed = match feeds.get(key).and_then(Weak::upgrade) {
                Some(feed) => feed,
                None => match split(key) {
                    Some(feed) => {
                        feeds.insert(key.clone(), Arc::downgrade(&feed));
                        feed
                    }
                    None => continue,
                },
            };
            // At 0 from the first assignment: an alert has a series to read.
            self.metrics
                .undecodable_batches
                .with_label_values(&[&key.0, &key.1.to_string()]);
            let reader = readers.entry(key.clone()).or_default().clone();
            let cancel = self.stop.child_token();
            let revoked = CancellationToken::new();
            let slot = PartitionSlot {
                cancel: cancel.clone(),
                revoked: revoked.clone(),
            };
            if let Some(old) = slots.insert(key.clone(), slot) {
                old.end();
            }
            let _ = self.assigned.send(Assigned {
                topic: key.0.clone(),
                partition: key.1,
                feed,
                part: budget.part(),
                reader,
                cancel,
                revoked,
            });
        }
    }

    /// Ends the assignments of `partitions`: stops their workers (abandoning records in
    /// backoff, so that the new owner consumes them again).
    pub(crate) fn revoke(&self, partitions: &[PartitionKey]) {
        let mut slots = self.partitions.lock().expect("partitions lock");
        for key in partitions {
            if let Some(slot) = slots.remove(key) {
                slot.end();
            }
        }
    }

    /// Ends every assignment (at shutdown).
    pub(in crate::consumer) fn end_all(&self) {
        for (_, slot) in self.partitions.lock().expect("partitions lock").drain() {
            slot.end();
        }
    }
}
