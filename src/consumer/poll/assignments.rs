//! The partitions assigned here: each one's inbox, the token that stops its worker, and the
//! hand-over of a newly assigned partition to the loop that starts its worker. The rebalance
//! callback (`context.rs`) only forwards librdkafka's assignments and revocations here, so
//! that the simulation runs this same code against its model of librdkafka.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::inbox::{Budget, Inbox};
use super::spare_records::SpareRecords;
use crate::metrics::Metrics;

/// A topic and partition.
pub(in crate::consumer) type PartitionKey = (String, i32);

/// An assigned partition: the token that stops its worker, the one that says it was revoked,
/// and its inbox.
struct PartitionSlot {
    cancel: CancellationToken,
    /// Cancelled when the assignment ends by revocation (not at shutdown, whose final commit
    /// takes what the workers store while they finish): see [`Assigned::revoked`].
    revoked: CancellationToken,
    /// The records taken from librdkafka for this assignment, waiting for its worker.
    inbox: Arc<Inbox>,
}

impl PartitionSlot {
    /// Ends the assignment: stops its worker and drops what its inbox holds.
    fn end(&self, metrics: &Metrics) {
        self.revoked.cancel();
        self.cancel.cancel();
        metrics.buffered_bytes.sub(self.inbox.close() as i64);
    }
}

/// A newly assigned partition, for the poll loop to start its worker.
pub(crate) struct Assigned {
    pub topic: String,
    pub partition: i32,
    pub inbox: Arc<Inbox>,
    /// The partition's reader lease ([`Assignments::readers`]).
    pub reader: Arc<tokio::sync::Mutex<()>>,
    pub cancel: CancellationToken,
    /// Cancelled when this assignment is revoked, before the revocation commits: from then on
    /// its worker stores no position. What it settles afterwards (a dead letter acknowledged
    /// late) is consumed again by the next owner; a store then could only land in a later
    /// assignment of the partition, to this member, and move its position back.
    pub revoked: CancellationToken,
    /// Where its worker gives settled records back ([`Assignments::spares`]).
    pub spares: Arc<SpareRecords>,
}

/// The inbox a partition's records go to now, with its share of the budget.
pub(in crate::consumer) struct Destination {
    pub inbox: Arc<Inbox>,
    pub share: usize,
}

/// See the module docs. Shared by the rebalance callback (which adds, removes and stops
/// partitions) and the poll loop's hand-off (which fills their inboxes).
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
    /// Counts rebalances (assignments and revocations): an inbox looked up before the last
    /// one may be closed, and every share has changed.
    rebalances: AtomicU64,
    /// What the inboxes may hold together: half of `max_buffered_bytes`.
    budget: Arc<Budget>,
    /// Settled records given back by the workers, for the poll loop to copy messages into.
    pub spares: Arc<SpareRecords>,
}

impl Assignments {
    /// No partition yet; newly assigned ones are sent to `assigned`, their workers stopped by
    /// `stop` too, their inboxes sharing `budget` bytes.
    pub(crate) fn new(
        metrics: Metrics,
        assigned: mpsc::UnboundedSender<Assigned>,
        stop: CancellationToken,
        budget: usize,
    ) -> Self {
        Self {
            partitions: Mutex::default(),
            metrics,
            assigned,
            stop,
            readers: Mutex::default(),
            rebalances: AtomicU64::new(0),
            budget: Arc::new(Budget::new(budget)),
            spares: Arc::default(),
        }
    }

    /// A rebalance begins (an assignment or a revocation): every share changes.
    pub(crate) fn rebalancing(&self) {
        self.rebalances.fetch_add(1, Ordering::Relaxed);
    }

    /// How many rebalances have begun: a [`Destination`] looked up before the last one may be
    /// closed, and its share has changed.
    pub(in crate::consumer) fn rebalances(&self) -> u64 {
        self.rebalances.load(Ordering::Relaxed)
    }

    /// Gives each of `partitions` a fresh inbox and sends it to the poll loop, which starts its
    /// worker. An assignment that replaces one not revoked ends that one first.
    pub(crate) fn assign(&self, partitions: &[PartitionKey]) {
        let mut slots = self.partitions.lock().expect("partitions lock");
        let mut readers = self.readers.lock().expect("readers lock");
        for key in partitions {
            // At 0 from the first assignment: an alert has a series to read.
            self.metrics
                .undecodable_batches
                .with_label_values(&[&key.0, &key.1.to_string()]);
            let reader = readers.entry(key.clone()).or_default().clone();
            let cancel = self.stop.child_token();
            let revoked = CancellationToken::new();
            let inbox = Arc::new(Inbox::new(self.budget.clone()));
            let slot = PartitionSlot {
                cancel: cancel.clone(),
                revoked: revoked.clone(),
                inbox: inbox.clone(),
            };
            if let Some(old) = slots.insert(key.clone(), slot) {
                old.end(&self.metrics);
            }
            let _ = self.assigned.send(Assigned {
                topic: key.0.clone(),
                partition: key.1,
                inbox,
                reader,
                cancel,
                revoked,
                spares: self.spares.clone(),
            });
        }
    }

    /// Ends the assignments of `partitions`: stops their workers (abandoning records in
    /// backoff, so that the new owner consumes them again) and drops what their inboxes hold.
    pub(crate) fn revoke(&self, partitions: &[PartitionKey]) {
        let mut slots = self.partitions.lock().expect("partitions lock");
        for key in partitions {
            if let Some(slot) = slots.remove(key) {
                slot.end(&self.metrics);
            }
        }
    }

    /// Ends every assignment (at shutdown).
    pub(in crate::consumer) fn end_all(&self) {
        for (_, slot) in self.partitions.lock().expect("partitions lock").drain() {
            slot.end(&self.metrics);
        }
    }

    /// The bytes every inbox holds now.
    #[cfg(test)]
    pub(in crate::consumer) fn held_bytes(&self) -> usize {
        self.budget.held()
    }

    /// What `topic`/`partition`'s inbox holds now, in bytes; 0 when it is not assigned here.
    #[cfg(test)]
    pub(in crate::consumer) fn inbox_bytes(&self, topic: &str, partition: i32) -> usize {
        self.destination(topic, partition)
            .map_or(0, |to| to.inbox.bytes())
    }

    /// Where `topic`/`partition`'s records go now; `None` when it is not assigned here.
    pub(in crate::consumer) fn destination(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<Destination> {
        let slots = self.partitions.lock().expect("partitions lock");
        let slot = slots.get(&(topic.to_string(), partition))?;
        Some(Destination {
            inbox: slot.inbox.clone(),
            share: self.budget.share(slots.len()),
        })
    }
}
