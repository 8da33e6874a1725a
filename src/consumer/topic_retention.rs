//! The retention of the topics the consumer writes to, read when it starts (`DescribeConfigs`):
//! a retry or redrive topic that deletes records before they are due would lose them — their
//! source offsets were committed when they were written — so the consumer refuses to start;
//! a dead-letter topic that keeps records for a limited time deletes dead letters nobody
//! replayed, so it warns.

use std::time::Duration;

use super::ConsumerError;
use crate::config::ConsumerConfig;
use crate::kafka::topics::Topics;
use crate::retry_tier::retention;

/// Checks the retention of `config`'s retry, redrive and dead-letter topics, as said above.
/// When the cluster cannot be asked (a broker down, no `DescribeConfigs` permission), logs it
/// (`topic_retention_not_checked`) and returns `Ok`.
pub(super) async fn check(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    let template = config.dlq_topic()?;
    // Each topic with the delay its records wait there; `None` for a dead-letter topic.
    let mut wanted: Vec<(String, Option<Duration>)> = Vec::new();
    for source in &config.topics {
        for (tier, topic) in config
            .retry_topic_delays_ms
            .topics(source)
            .into_iter()
            .enumerate()
        {
            wanted.push((topic, config.retry_topic_delays_ms.delay(tier as u32)));
        }
        let redrive = crate::record::retry::redrive_topic(source, &config.group_id);
        wanted.push((redrive, Some(Duration::ZERO)));
        wanted.push((template.for_topic(source), None));
    }
    let names: Vec<String> = wanted.iter().map(|(t, _)| t.clone()).collect();
    let found = match Topics::read(&config.producer_client_config()).await {
        Ok(topics) => topics.retention_ms(&names).await,
        Err(e) => Err(e),
    };
    let found = match found {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(event = "topic_retention_not_checked", %error,
                "could not read the retention of the retry, redrive and dead-letter topics");
            return Ok(());
        }
    };
    for (topic, delay) in &wanted {
        let Some(&retention_ms) = found.get(topic) else {
            continue; // not created yet
        };
        match delay {
            Some(delay) => {
                if let Some(needed_ms) = retention::too_short(retention_ms, *delay) {
                    return Err(ConsumerError::RetentionTooShort {
                        topic: topic.clone(),
                        retention_ms,
                        delay_ms: delay.as_millis() as u64,
                        needed_ms,
                    });
                }
            }
            None if retention_ms >= 0 => {
                tracing::warn!(event = "dlq_retention_finite", %topic, retention_ms,
                    "dead letters nobody replays within this time are deleted; set retention.ms=-1 on it to keep them");
            }
            None => {}
        }
    }
    Ok(())
}
