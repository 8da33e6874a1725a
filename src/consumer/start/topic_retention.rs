//! The retention of the topics the consumer writes to, read when it starts (`DescribeConfigs`):
//! a retry or redrive topic that deletes records before they are due would lose them — their
//! source offsets were committed when they were written — so the consumer refuses to start;
//! a dead-letter topic that keeps records for a limited time deletes dead letters nobody
//! replayed, so it warns.

use std::collections::HashMap;
use std::time::Duration;

use super::ConsumerError;
use crate::config::ConsumerConfig;
use crate::kafka::topics::{Topics, TopicsError};
use crate::retry_tier::retention;

/// With retry tiers: checks the retention of `config`'s retry and redrive topics before the
/// consumer starts, refusing one that would delete records before they are due. Either way,
/// warns in the background about dead-letter topics that keep records for a limited time
/// (nothing waits for that: a cluster slow to answer `DescribeConfigs` holds no start). When
/// the cluster cannot be asked (a broker down, no `DescribeConfigs` permission), logs it
/// (`topic_retention_not_checked`) and returns `Ok`.
pub(in crate::consumer) async fn check(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    let template = config.dlq_topic()?;
    let dlqs: Vec<String> = config
        .topics
        .iter()
        .map(|t| template.for_topic(t))
        .collect();
    tokio::spawn({
        let config = config.clone();
        async move {
            match retention_of(&config, &dlqs).await {
                Ok(found) => warn_finite(&found),
                Err(error) => tracing::debug!(event = "dlq_retention_not_checked", %error),
            }
        }
    });
    if config.retry_topic_delays_ms.is_empty() {
        return Ok(());
    }
    // Each retry and redrive topic with the delay its records wait there.
    let mut waits: Vec<(String, Duration)> = Vec::new();
    for source in &config.topics {
        let tiers = config.retry_topic_delays_ms.topics(source);
        for (tier, topic) in tiers.into_iter().enumerate() {
            let delay = config.retry_topic_delays_ms.delay(tier as u32);
            waits.push((topic, delay.unwrap_or_default()));
        }
        let redrive = crate::record::retry::redrive_topic(source, &config.group_id);
        waits.push((redrive, Duration::ZERO));
    }
    let names: Vec<String> = waits.iter().map(|(t, _)| t.clone()).collect();
    let found = match retention_of(config, &names).await {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(event = "topic_retention_not_checked", %error,
                "could not read the retention of the retry and redrive topics");
            return Ok(());
        }
    };
    for (topic, delay) in &waits {
        let Some(&retention_ms) = found.get(topic) else {
            continue; // not created yet
        };
        if let Some(needed_ms) = retention::too_short(retention_ms, *delay) {
            return Err(ConsumerError::RetentionTooShort {
                topic: topic.clone(),
                retention_ms,
                delay_ms: delay.as_millis() as u64,
                needed_ms,
            });
        }
    }
    Ok(())
}

/// The `retention.ms` of those of `topics` that exist, asked within 10 s.
async fn retention_of(
    config: &ConsumerConfig,
    topics: &[String],
) -> Result<HashMap<String, i64>, TopicsError> {
    let ask = async {
        Topics::read(&config.producer_client_config())
            .await?
            .retention_ms(topics)
            .await
    };
    tokio::time::timeout(Duration::from_secs(10), ask)
        .await
        .unwrap_or_else(|_| {
            Err(TopicsError::Describe {
                topic: topics.first().cloned().unwrap_or_default(),
                source: rdkafka::error::KafkaError::AdminOp(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                ),
            })
        })
}

/// Warns about each dead-letter topic of `found` that keeps records for a limited time.
fn warn_finite(found: &HashMap<String, i64>) {
    for (topic, retention_ms) in found {
        if *retention_ms >= 0 {
            tracing::warn!(event = "dlq_retention_finite", %topic, retention_ms,
                "dead letters nobody replays within this time are deleted; set retention.ms=-1 on it to keep them");
        }
    }
}
