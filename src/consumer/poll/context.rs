//! The consumer's librdkafka context: rebalance callbacks (decided in `rebalance.rs`),
//! errors, statistics and logs.

use super::assignments::PartitionKey;
use super::rebalance::Rebalancing;
use super::undecodable::Undecodable;
use crate::metrics::Metrics;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;

/// The consumer's librdkafka context. A rebalance's partitions go to its decisions
/// (`rebalance.rs`: revoked ones end, then the commit; assigned ones get their own queues, split
/// here before librdkafka fetches them); after an
/// assignment it resumes their fetches (a pause of an earlier assignment outlives its
/// revocation in librdkafka).
pub(in crate::consumer) struct RebalanceContext {
    /// What a rebalance does to the partitions here.
    pub rebalancing: Rebalancing,
    pub metrics: Metrics,
    /// Batches librdkafka could not decode, and the partitions stopped at them.
    pub undecodable: Undecodable,
    /// Where and how the consumer connects (`<brokers> (SASL_SSL, SCRAM-SHA-512)`), for a
    /// refused connection's report.
    pub cluster: String,
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
        let keys = |tpl: &rdkafka::TopicPartitionList| -> Vec<PartitionKey> {
            tpl.elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect()
        };
        match rebalance {
            Rebalance::Revoke(tpl) => self
                .rebalancing
                .revoke(&keys(tpl), || commit_stored(consumer, "rebalance")),
            // Split before librdkafka starts fetching them (it does once this returns).
            Rebalance::Assign(tpl) => self.rebalancing.assign(&keys(tpl)),
            Rebalance::Error(e) => {
                tracing::warn!(event = "rebalance_failed", error = %e);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // A retry wait or the breaker may have left the partition paused when it was
            // revoked, and librdkafka keeps a pause across revocation and re-assignment.
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
pub(in crate::consumer) fn commit_stored<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    when: &str,
) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!(event = "offsets_committed", when),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => tracing::error!(event = "offset_commit_failed", when, error = %e,
            "settled records after the last commit will be consumed again"),
    }
}
