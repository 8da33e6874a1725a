//! The dead-letter topics, checked when the consumer starts: a missing one is created (as
//! many partitions as its source topic, the broker's default replication) or, with
//! `create_dlq_topics` off, the consumer refuses to start naming it. Without this, a record
//! bound for a DLQ topic that does not exist (a broker without auto-creation) would have its
//! write retried for ever, with nothing at start-up to say why.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::types::RDKafkaErrorCode;

use super::ConsumerError;
use crate::config::ConsumerConfig;
use crate::kafka::LogContext;

/// Creates the missing DLQ topics of `config`'s source topics, or says which one is missing.
/// When the cluster cannot be asked (a broker down), logs it and returns `Ok`: the consumer
/// starts, and its dead-letter writes wait and are retried as in any broker outage.
pub(super) async fn ensure(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    let template = config.dlq_topic()?;
    let admin: AdminClient<LogContext> = match config
        .producer_client_config()
        .create_with_context(LogContext)
    {
        Ok(admin) => admin,
        Err(error) => {
            tracing::warn!(event = "dlq_topics_not_checked", %error,
                "could not create an admin client to check the dead-letter topics");
            return Ok(());
        }
    };
    // fetch_metadata blocks: off the async threads.
    let (admin, metadata) = tokio::task::spawn_blocking(move || {
        let metadata = admin.inner().fetch_metadata(None, Duration::from_secs(10));
        (admin, metadata)
    })
    .await
    .expect("metadata fetch does not panic");
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(error) => {
            tracing::warn!(event = "dlq_topics_not_checked", %error,
                "could not read the cluster's topics to check the dead-letter topics");
            return Ok(());
        }
    };
    let partitions: HashMap<&str, i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name(), t.partitions().len() as i32))
        .collect();
    // Each missing DLQ topic once, with its source's partition count (-1: the broker's
    // default, for a source that does not exist yet either).
    let mut missing: BTreeMap<String, i32> = BTreeMap::new();
    for source in &config.topics {
        let dlq = template.for_topic(source);
        if !partitions.contains_key(dlq.as_str()) {
            let count = partitions.get(source.as_str()).copied().unwrap_or(-1);
            missing.entry(dlq).or_insert(count);
        }
    }
    let Some(first) = missing.keys().next() else {
        return Ok(());
    };
    if !config.create_dlq_topics {
        return Err(ConsumerError::DlqTopicMissing {
            topic: first.clone(),
            why: "create_dlq_topics is off (--create-dlq-topics false); create it, or turn \
                  create_dlq_topics on"
                .into(),
        });
    }
    let new: Vec<NewTopic> = missing
        .iter()
        .map(|(topic, count)| NewTopic::new(topic, *count, TopicReplication::Fixed(-1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results =
        admin
            .create_topics(&new, &options)
            .await
            .map_err(|e| ConsumerError::DlqTopicMissing {
                topic: first.clone(),
                why: format!("creating it failed: {e}"),
            })?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(event = "dlq_topic_created", %topic,
                partitions = missing.get(&topic).copied().unwrap_or(-1)),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                return Err(ConsumerError::DlqTopicMissing {
                    topic,
                    why: format!("creating it failed: {code}"),
                })
            }
        }
    }
    Ok(())
}
