//! The consumer's librdkafka context: rebalance callbacks and logs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

use super::partition::PartitionQueue;
use crate::metrics::Metrics;

/// A topic and partition.
pub(super) type PartitionKey = (String, i32);

/// A partition's queue and the token that stops its worker.
pub(super) struct PartitionSlot {
    pub queue: Arc<PartitionQueue>,
    pub cancel: CancellationToken,
}

/// The partitions that have a worker, shared by the poll loop (which adds them) and the
/// rebalance callback (which removes and stops them).
pub(super) type Partitions = Arc<Mutex<HashMap<PartitionKey, PartitionSlot>>>;

/// On revocation (or loss) of partitions: stop their workers, abandoning records in backoff so
/// that the new owner consumes them again, and commit the offsets stored so far.
pub(super) struct RebalanceContext {
    pub partitions: Partitions,
    pub metrics: Metrics,
}

impl ClientContext for RebalanceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::log_rdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::kafka::log_client_error(&error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        self.metrics.observe_statistics(&statistics);
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let revoked: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}-{}", e.topic(), e.partition()))
                    .collect();
                {
                    let mut partitions = self.partitions.lock().expect("partitions lock");
                    for e in tpl.elements() {
                        if let Some(slot) =
                            partitions.remove(&(e.topic().to_string(), e.partition()))
                        {
                            slot.cancel.cancel();
                        }
                    }
                }
                tracing::info!(event = "partitions_revoked", partitions = ?revoked);
                commit_stored(consumer, "rebalance");
            }
            Rebalance::Assign(tpl) => {
                let assigned: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}-{}", e.topic(), e.partition()))
                    .collect();
                tracing::info!(event = "partitions_assigned", partitions = ?assigned);
            }
            Rebalance::Error(e) => {
                tracing::warn!(event = "rebalance_failed", error = %e);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        let assigned = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        self.metrics.partitions_assigned.set(assigned as i64);
    }
}

/// Commits the offsets stored so far, synchronously. "No offset to commit" is not an error.
pub(super) fn commit_stored<C: Consumer<X>, X: ConsumerContext>(consumer: &C, when: &str) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!(event = "offsets_committed", when),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => tracing::error!(event = "offset_commit_failed", when, error = %e,
            "settled records after the last commit will be consumed again"),
    }
}
