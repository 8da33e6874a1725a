//! The park logs (`key_order_after_failure = "park"`), checked when the consumer starts: a
//! missing one is created with its source topic's partition count (a park partition is the
//! story of the source partition of the same number) and no retention (a parked record stays
//! until its key is released); one that exists must have that partition count and keep its
//! records for ever, or the consumer refuses to start naming it — parked records, whose source
//! offsets are committed, would be deleted, or read by the wrong partition's owner.

use super::ConsumerError;
use crate::config::{ConsumerConfig, KeyOrderAfterFailure};
use crate::kafka::topics::Topics;
use crate::park::park_topic;

/// Creates `config`'s missing park logs and checks the others (see the module docs). When
/// the cluster cannot be asked, logs it and returns `Ok`: each partition's worker waits for
/// its park log to be read before its first record.
pub(in crate::consumer) async fn ensure(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    if config.key_order_after_failure != KeyOrderAfterFailure::Park {
        return Ok(());
    }
    let topics = match Topics::read(&config.producer_client_config()).await {
        Ok(topics) => topics,
        Err(error) => {
            tracing::warn!(event = "park_logs_not_checked", %error,
                "could not read the cluster's topics to check the park logs");
            return Ok(());
        }
    };
    let logs: Vec<(String, &str)> = config
        .topics
        .iter()
        .map(|source| (park_topic(source, &config.group_id), source.as_str()))
        .collect();
    let refuse = |topic: &str, why: String| ConsumerError::ParkLog {
        topic: topic.to_string(),
        why,
    };
    for (log, source) in &logs {
        if !topics.exists(log) {
            continue;
        }
        let (have, want) = (topics.partitions(log), topics.partitions(source));
        if have != want {
            return Err(refuse(log, format!(
                "it has {have:?} partitions and its source topic {source} has {want:?}: add partitions to it to match (each park partition serves the source partition of its number)"
            )));
        }
    }
    let existing: Vec<String> = logs
        .iter()
        .map(|(log, _)| log.clone())
        .filter(|l| topics.exists(l))
        .collect();
    let configs = topics.configs(&existing).await.map_err(|error| {
        refuse(
            &existing.join(", "),
            format!("reading its settings failed: {error}"),
        )
    })?;
    for (log, settings) in &configs {
        for key in ["retention.ms", "retention.bytes"] {
            if let Some(value) = settings.get(key).filter(|v| v.as_str() != "-1") {
                return Err(refuse(log, format!(
                    "its {key} is {value}: parked records would be deleted before their key is released; set it to -1"
                )));
            }
        }
        if let Some(policy) = settings
            .get("cleanup.policy")
            .filter(|p| p.as_str() != "delete")
        {
            return Err(refuse(log, format!(
                "its cleanup.policy is {policy}: compaction would keep one event per key and lose parked records; set it to delete"
            )));
        }
    }
    let missing = topics.missing(logs.iter().map(|(log, source)| (log.clone(), *source)));
    topics
        .create_with(
            &missing,
            |_| {
                vec![
                    ("retention.ms", "-1"),
                    ("retention.bytes", "-1"),
                    ("cleanup.policy", "delete"),
                ]
            },
            "park_log_created",
        )
        .await
        .map_err(|error| match error {
            crate::kafka::topics::TopicsError::Create { topic, code } => {
                refuse(&topic, format!("creating it failed: {code}"))
            }
            other => refuse(
                missing.keys().next().map_or("", String::as_str),
                format!("creating it failed: {other}"),
            ),
        })
}
