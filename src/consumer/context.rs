//! The consumer's librdkafka context: rebalance callbacks and logs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::inbox::{Budget, Inbox};
use super::spare_records::SpareRecords;
use super::undecodable::Undecodable;
use crate::metrics::Metrics;

/// A topic and partition.
pub(super) type PartitionKey = (String, i32);

/// An assigned partition: the token that stops its worker, the one that says it was revoked,
/// and its inbox.
pub(super) struct PartitionSlot {
    pub cancel: CancellationToken,
    /// Cancelled when the assignment ends by revocation (not at shutdown, whose final commit
    /// takes what the workers store while they finish): see [`Assigned::revoked`].
    pub revoked: CancellationToken,
    /// The records taken from librdkafka for this assignment, waiting for its worker.
    pub inbox: Arc<Inbox>,
}

impl PartitionSlot {
    /// Ends the assignment: stops its worker and drops what its inbox holds.
    pub fn end(&self, metrics: &Metrics) {
        self.revoked.cancel();
        self.cancel.cancel();
        metrics.buffered_bytes.sub(self.inbox.close() as i64);
    }
}

/// The partitions that have a worker, shared by the rebalance callback (which adds, removes
/// and stops them) and the poll loop (which fills their inboxes).
pub(super) type Partitions = Arc<Mutex<HashMap<PartitionKey, PartitionSlot>>>;

/// On assignment: gives each partition a fresh inbox and sends it to the poll loop, which
/// starts the partition's worker; then resumes the partitions' fetches (a pause of an earlier
/// assignment outlives its revocation in librdkafka). On revocation (or loss): stops their
/// workers, abandoning records in backoff so that the new owner consumes them again, and
/// commits the offsets stored so far.
pub(super) struct RebalanceContext {
    pub partitions: Partitions,
    pub metrics: Metrics,
    /// Where newly assigned partitions go.
    pub assigned: mpsc::UnboundedSender<Assigned>,
    /// Parent of every worker's token; cancelled at shutdown.
    pub stop: CancellationToken,
    /// Each partition's reader lease, kept for the consumer's life: the worker of a new
    /// assignment of a partition starts once the worker of its revoked assignment has ended
    /// (its handler call in progress finished).
    pub readers: Mutex<HashMap<PartitionKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Counts rebalances (assignments and revocations): an inbox looked up before the last
    /// one may be closed, and every share has changed.
    pub rebalances: std::sync::atomic::AtomicU64,
    /// What the inboxes may hold together: half of `max_buffered_bytes`.
    pub budget: Arc<Budget>,
    /// Settled records given back by the workers, for the poll loop to copy messages into.
    pub spares: Arc<SpareRecords>,
    /// Batches librdkafka could not decode, and the partitions stopped at them.
    pub undecodable: Undecodable,
    /// Where and how the consumer connects (`<brokers> (SASL_SSL, SCRAM-SHA-512)`), for a
    /// refused connection's report.
    pub cluster: String,
}

/// A newly assigned partition, for the poll loop to start its worker.
pub(super) struct Assigned {
    pub topic: String,
    pub partition: i32,
    pub inbox: Arc<Inbox>,
    /// The partition's reader lease ([`RebalanceContext::readers`]).
    pub reader: Arc<tokio::sync::Mutex<()>>,
    pub cancel: CancellationToken,
    /// Cancelled when this assignment is revoked, before the revocation commits: from then on
    /// its worker stores no position. What it settles afterwards (a dead letter acknowledged
    /// late) is consumed again by the next owner; a store then could only land in a later
    /// assignment of the partition, to this member, and move its position back.
    pub revoked: CancellationToken,
    /// Where its worker gives settled records back ([`RebalanceContext::spares`]).
    pub spares: Arc<SpareRecords>,
}

impl ClientContext for RebalanceContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        crate::kafka::oauth_token(config)
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::log_rdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if self.undecodable.error(reason, &self.metrics) {
            return;
        }
        if let Some(refusal) = crate::kafka::Refusal::of(reason).filter(|r| r.is_lasting()) {
            // Not ready until a broker connection is up again (the statistics say).
            self.metrics.set_not_ready(
                "connection",
                format!(
                    "cannot connect to Kafka at {}: {}",
                    self.cluster,
                    refusal.advice()
                ),
            );
        }
        crate::kafka::log_client_error(&error, reason, &self.cluster);
    }

    fn stats(&self, statistics: Statistics) {
        self.metrics.observe_statistics(&statistics);
        self.undecodable.statistics(&statistics, &self.metrics);
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.rebalances
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
                            slot.end(&self.metrics);
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
                let mut partitions = self.partitions.lock().expect("partitions lock");
                let mut readers = self.readers.lock().expect("readers lock");
                for e in tpl.elements() {
                    let key = (e.topic().to_string(), e.partition());
                    // At 0 from the first assignment: an alert has a series to read.
                    self.metrics
                        .undecodable_batches
                        .with_label_values(&[e.topic(), &e.partition().to_string()]);
                    let reader = readers.entry(key.clone()).or_default().clone();
                    let cancel = self.stop.child_token();
                    let revoked = CancellationToken::new();
                    let inbox = Arc::new(Inbox::new(self.budget.clone()));
                    let slot = PartitionSlot {
                        cancel: cancel.clone(),
                        revoked: revoked.clone(),
                        inbox: inbox.clone(),
                    };
                    if let Some(old) = partitions.insert(key.clone(), slot) {
                        old.end(&self.metrics);
                    }
                    let _ = self.assigned.send(Assigned {
                        topic: key.0,
                        partition: key.1,
                        inbox,
                        reader,
                        cancel,
                        revoked,
                        spares: self.spares.clone(),
                    });
                }
            }
            Rebalance::Error(e) => {
                tracing::warn!(event = "rebalance_failed", error = %e);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // An inbox full when its partition was revoked left the partition paused, and
            // librdkafka keeps a pause across revocation and re-assignment.
            if let Err(error) = consumer.resume(tpl) {
                tracing::warn!(event = "partition_resume_failed", %error,
                    "newly assigned partitions may stay paused");
            }
        }
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
