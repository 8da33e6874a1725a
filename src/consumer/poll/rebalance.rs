//! What a rebalance does here, apart from librdkafka: the callback (`context.rs`) hands its
//! partitions over, and the simulation hands over its world's, so both run these decisions.

use std::sync::Arc;

use super::assignments::{Assignments, PartitionKey};
use crate::consumer::progress::transaction::{off_the_runtime, Transaction};

/// The decisions of the rebalance callback: revoked partitions end before anything is
/// committed, then the commit; assigned partitions get their own queues and workers.
pub(in crate::consumer) struct Rebalancing {
    pub assignments: Arc<Assignments>,
    /// Exactly once: the transaction that commits before revoked partitions go.
    pub transaction: Option<Arc<Transaction>>,
}

impl Rebalancing {
    /// `revoked` go: their workers are stopped, so the records they
    /// settle from now on are not stored (nor taken into the transaction); then what settled
    /// before is committed, waiting for it (the next owner must find it committed): the open
    /// transaction, or else the stored positions by `commit_stored`.
    pub(in crate::consumer) fn revoke(
        &self,
        revoked: &[PartitionKey],
        commit_stored: impl FnOnce(),
    ) {
        self.assignments.revoke(revoked);
        tracing::info!(event = "partitions_revoked", partitions = ?named(revoked));
        match &self.transaction {
            // The revoked workers' records are refused from now on: the commit takes what
            // settled before (or aborts, and the next owner starts before it). The poll loop
            // waits for it; the runtime's other tasks do not.
            Some(transaction) => {
                off_the_runtime(|| transaction.commit());
            }
            None => commit_stored(),
        }
    }

    /// `assigned` come, each with its feed (its own librdkafka queue, split from the
    /// consumer's before librdkafka starts fetching it, as this runs before), and its worker is
    /// started by the poll loop. The caller then resumes their
    /// fetches (a pause outlives a revocation in librdkafka).
    pub(in crate::consumer) fn assign(&self, assigned: &[PartitionKey]) {
        tracing::info!(event = "partitions_assigned", partitions = ?named(assigned));
        self.assignments.assign(assigned);
    }
}

fn named(keys: &[PartitionKey]) -> Vec<String> {
    keys.iter().map(|(t, p)| format!("{t}-{p}")).collect()
}
