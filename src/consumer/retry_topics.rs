//! The retry topics of [`crate::retry_tier`], created when the consumer starts if they are
//! missing: as many partitions as their source topic, the broker's default replication.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

use crate::config::ConsumerConfig;
use crate::kafka::LogContext;

/// Why the retry topics could not be checked or created (this time).
#[derive(Debug, thiserror::Error)]
enum EnsureError {
    #[error("could not create the admin client: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error("could not read the cluster's topics: {0}")]
    Metadata(#[source] rdkafka::error::KafkaError),
    #[error("could not create {topic}: {code}")]
    Create {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("could not create the retry topics: {0}")]
    Request(#[source] rdkafka::error::KafkaError),
}

/// Creates the missing retry topics of `config`'s topics. When that fails (a broker down, no
/// permission), logs why and tries again in the background, 1 s doubling to 60 s, until it
/// succeeds or `cancel` fires; meanwhile records bound for a missing retry topic wait (their
/// writes are retried), and the consumer picks a topic created later up at its next metadata
/// refresh.
pub(super) async fn ensure(config: &ConsumerConfig, cancel: &CancellationToken) {
    if config.retry_topic_delays_ms.is_empty() {
        return;
    }
    let Err(error) = try_ensure(config).await else {
        return;
    };
    tracing::error!(event = "retry_topics_not_created", %error,
        "trying again in the background; records bound for a missing retry topic wait until it exists");
    let (config, cancel) = (config.clone(), cancel.clone());
    tokio::spawn(async move {
        let mut delay = Duration::from_secs(1);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            match try_ensure(&config).await {
                Ok(()) => return,
                Err(error) => tracing::warn!(event = "retry_topics_not_created", %error,
                    retry_in_ms = delay.as_millis() as u64),
            }
            delay = (delay * 2).min(Duration::from_secs(60));
        }
    });
}

/// One attempt: reads the cluster's topics and creates the retry topics that are missing.
async fn try_ensure(config: &ConsumerConfig) -> Result<(), EnsureError> {
    let admin: AdminClient<LogContext> = config
        .producer_client_config()
        .create_with_context(LogContext)
        .map_err(EnsureError::Client)?;
    // fetch_metadata blocks: off the async threads.
    let (admin, metadata) = tokio::task::spawn_blocking(move || {
        let metadata = admin.inner().fetch_metadata(None, Duration::from_secs(10));
        (admin, metadata)
    })
    .await
    .expect("metadata fetch does not panic");
    let metadata = metadata.map_err(EnsureError::Metadata)?;
    let partitions: HashMap<&str, i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name(), t.partitions().len() as i32))
        .collect();
    let mut missing = Vec::new();
    for source in &config.topics {
        // A source topic that does not exist yet: the broker's default partition count.
        let count = partitions.get(source.as_str()).copied().unwrap_or(-1);
        for topic in config.retry_topic_delays_ms.topics(source) {
            if !partitions.contains_key(topic.as_str()) {
                missing.push((topic, count));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let new: Vec<NewTopic> = missing
        .iter()
        .map(|(topic, count)| NewTopic::new(topic, *count, TopicReplication::Fixed(-1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics(&new, &options)
        .await
        .map_err(EnsureError::Request)?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(event = "retry_topic_created", %topic),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(EnsureError::Create { topic, code }),
        }
    }
    Ok(())
}

/// Records waiting in a retry topic that no configured tier reads: `<source>-retry-<n>` with
/// `n` at or beyond the configured tiers (a tier dropped, or retry topics turned off), which
/// still hold records after this group's committed offset. Their source offsets were
/// committed when they were written, so nobody would ever handle them. Returns the first such
/// topic and its records; `None` when there is none or the cluster could not be asked
/// (logged: the consumer starts as before). A partition where this group never committed is
/// not counted (another group's retry topic of the same source, until retry topics are named
/// by group), only logged (`retry_topic_not_consumed`).
pub(super) async fn stranded(config: &ConsumerConfig) -> Option<(String, i64)> {
    let config = config.clone();
    let found = tokio::task::spawn_blocking(move || find_stranded(&config))
        .await
        .expect("the stranded-record check does not panic");
    match found {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(event = "retry_topics_not_checked", %error,
                "could not look for records left in retry topics beyond the configured tiers");
            None
        }
    }
}

fn find_stranded(
    config: &ConsumerConfig,
) -> Result<Option<(String, i64)>, rdkafka::error::KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let timeout = Duration::from_secs(5);
    // Only asks the cluster: never subscribes, so it does not join the group.
    let consumer: BaseConsumer = config.consumer_client_config().create()?;
    let metadata = consumer.fetch_metadata(None, timeout)?;
    let tiers = config.retry_topic_delays_ms.len() as u32;
    let mut topics: Vec<(String, i32)> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .filter(|t| {
            crate::record::retry::parse_topic(t.name()).is_some_and(|(source, tier)| {
                tier >= tiers && config.topics.iter().any(|s| s == source)
            })
        })
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect();
    topics.sort();
    for (topic, partitions) in topics {
        let mut list = rdkafka::TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition(&topic, partition);
        }
        let committed = consumer.committed_offsets(list, timeout)?;
        let mut records = 0;
        for partition in 0..partitions {
            let (low, high) = consumer.fetch_watermarks(&topic, partition, timeout)?;
            match committed
                .find_partition(&topic, partition)
                .map(|e| e.offset())
            {
                Some(rdkafka::Offset::Offset(offset)) => records += (high - offset.max(low)).max(0),
                _ if high > low => tracing::warn!(event = "retry_topic_not_consumed", %topic,
                    partition, records = high - low,
                    "a retry topic beyond the configured tiers holds records, and this group never committed there: if they are this group's, put the tier back until they are handled"),
                _ => {}
            }
        }
        if records > 0 {
            return Ok(Some((topic, records)));
        }
    }
    Ok(None)
}
