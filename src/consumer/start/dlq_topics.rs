//! The dead-letter topics, checked when the consumer starts: a missing one is created (as
//! many partitions as its source topic, the broker's default replication) or, with
//! `create_dlq_topics` off, the consumer refuses to start naming it. Without this, a record
//! bound for a DLQ topic that does not exist (a broker without auto-creation) would have its
//! write retried for ever, with nothing at start-up to say why.

use super::ConsumerError;
use crate::config::ConsumerConfig;
use crate::kafka::topics::{Topics, TopicsError};

/// Creates the missing DLQ topics of `config`'s source topics, or says which one is missing.
/// When the cluster cannot be asked (a broker down), logs it and returns `Ok`: the consumer
/// starts, and its dead-letter writes wait and are retried as in any broker outage.
pub(in crate::consumer) async fn ensure(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    let template = config.dlq_topic()?;
    let topics = match Topics::read(&config.producer_client_config()).await {
        Ok(topics) => topics,
        Err(error) => {
            tracing::warn!(event = "dlq_topics_not_checked", %error,
                "could not read the cluster's topics to check the dead-letter topics");
            return Ok(());
        }
    };
    // Each missing DLQ topic once, with its source's partition count.
    let missing = topics.missing(
        config
            .topics
            .iter()
            .map(|source| (template.for_topic(source), source.as_str())),
    );
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
    topics
        .create(
            &missing,
            |_| Some(config.dlq_retention_ms),
            "dlq_topic_created",
        )
        .await
        .map_err(|error| match error {
            TopicsError::Create { topic, code } => ConsumerError::DlqTopicMissing {
                topic,
                why: format!("creating it failed: {code}"),
            },
            other => ConsumerError::DlqTopicMissing {
                topic: first.clone(),
                why: format!("creating it failed: {other}"),
            },
        })
}
