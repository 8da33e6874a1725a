//! How many partitions the consumer's topics have at start: the most one member can own, by
//! which each partition's librdkafka queue gets its share of the consumer's buffer.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::ClientConfig;

/// How long the count waits for the cluster's metadata.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The partitions `topics` have together, asked of the cluster with `config` (the consumer's
/// settings; nothing joins a group). A topic the cluster does not show (not created yet, or
/// not readable) counts as one partition, and so does the whole when the cluster does not
/// answer (logged): the queues are then sized as for fewer partitions than there may be.
pub(in crate::consumer) async fn count(config: &ClientConfig, topics: &[String]) -> usize {
    let (config, asked) = (config.clone(), topics.to_vec());
    let counted = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<crate::kafka::LogContext> =
            crate::kafka::create_logged(&config)?;
        let metadata = consumer.fetch_metadata(None, METADATA_TIMEOUT)?;
        Ok::<_, rdkafka::error::KafkaError>(
            asked
                .iter()
                .map(|topic| {
                    metadata
                        .topics()
                        .iter()
                        .find(|t| t.name() == topic)
                        .map_or(1, |t| t.partitions().len().max(1))
                })
                .sum::<usize>(),
        )
    })
    .await
    .expect("fetching metadata does not panic");
    match counted {
        Ok(partitions) => partitions,
        Err(error) => {
            tracing::warn!(event = "partition_count_unknown", %error,
                "sizing each partition's queue as if the topics had one partition each");
            topics.len()
        }
    }
}
