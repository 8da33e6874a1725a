//! The state topics created so that Kafka never expires them, and existing ones checked: the
//! audit topic with `retention.ms=-1` and `retention.bytes=-1` (its summaries are keyed by DLT,
//! so it must never be compacted), the positions topic compacted. An existing topic that would
//! delete state is a [`RetentionFinding`], with the `kafka-configs` line that fixes it: every
//! tool warns about it when it starts (`state_topic_retention`), and `kafka-dlq config check
//! --connect` fails on it.

use std::collections::{BTreeMap, HashMap};

use super::StateTopics;
use crate::kafka::topics::{Topics, TopicsError};

/// What an existing state topic does that loses state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateTopicProblem {
    /// It deletes records older than `retention_ms` or beyond `retention_bytes` (`-1`: no
    /// limit of that kind).
    FiniteRetention {
        /// Its `retention.ms`.
        retention_ms: i64,
        /// Its `retention.bytes`.
        retention_bytes: i64,
    },
    /// The audit topic is compacted: only the last summary of each DLT would be kept.
    AuditCompacted,
}

/// An existing state topic that would lose state, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionFinding {
    /// The topic.
    pub topic: String,
    /// What it does.
    pub problem: StateTopicProblem,
    /// The command that fixes it.
    pub fix: String,
}

impl std::fmt::Display for RetentionFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.problem {
            StateTopicProblem::FiniteRetention {
                retention_ms,
                retention_bytes,
            } => write!(
                f,
                "the state topic `{}` deletes records (retention.ms={retention_ms}, retention.bytes={retention_bytes}): what it holds (discards, replay positions) would be forgotten and dead letters come back as outstanding and be replayed again; fix: {}",
                self.topic, self.fix
            ),
            StateTopicProblem::AuditCompacted => write!(
                f,
                "the audit topic `{}` is compacted: Kafka would keep only the last summary of each DLT, and forget the discards before it; fix: {}",
                self.topic, self.fix
            ),
        }
    }
}

/// The settings of the audit topic when kafka-dlq creates it.
pub const AUDIT_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
];

/// The settings of the positions topic when kafka-dlq creates it: compacted, with hourly
/// segments so that the replays' frequent position records are compacted away within hours.
pub const POSITIONS_CONFIG: &[(&str, &str)] =
    &[("cleanup.policy", "compact"), ("segment.ms", "3600000")];

/// Creates those of `topics`' state topics that do not exist (one partition each, the
/// broker's default replication, [`AUDIT_CONFIG`] and [`POSITIONS_CONFIG`]), through an admin
/// client of `config`.
pub async fn ensure(
    config: &rdkafka::ClientConfig,
    topics: &StateTopics,
) -> Result<(), TopicsError> {
    let cluster = Topics::read(config).await?;
    for (topic, settings) in [
        (&topics.audit, AUDIT_CONFIG),
        (&topics.positions, POSITIONS_CONFIG),
    ] {
        if cluster.exists(topic) {
            continue;
        }
        let one = BTreeMap::from([(topic.clone(), 1)]);
        cluster
            .create_with(&one, |_| settings.to_vec(), "state_topic_created")
            .await?;
    }
    Ok(())
}

/// Creates `topic` (one of `topics`') if it does not exist, as [`ensure`] would.
pub async fn ensure_one(
    config: &rdkafka::ClientConfig,
    topics: &StateTopics,
    topic: &str,
) -> Result<(), TopicsError> {
    let cluster = Topics::read(config).await?;
    if cluster.exists(topic) {
        return Ok(());
    }
    let settings = match topic == topics.positions {
        true => POSITIONS_CONFIG,
        false => AUDIT_CONFIG,
    };
    let one = BTreeMap::from([(topic.to_string(), 1)]);
    cluster
        .create_with(&one, |_| settings.to_vec(), "state_topic_created")
        .await
}

/// The state topics of `topics` that exist and would lose state, read with one
/// `DescribeConfigs` request through an admin client of `config` (bootstrap `brokers`, named
/// in the fix).
pub async fn check(
    config: &rdkafka::ClientConfig,
    brokers: &str,
    topics: &StateTopics,
) -> Result<Vec<RetentionFinding>, TopicsError> {
    let cluster = Topics::read(config).await?;
    let names = [topics.audit.clone(), topics.positions.clone()];
    let found = cluster.configs(&names).await?;
    let mut findings = Vec::new();
    for topic in &names {
        if let Some(settings) = found.get(topic) {
            let audit = *topic == topics.audit;
            if let Some(problem) = problem(audit, settings) {
                findings.push(RetentionFinding {
                    topic: topic.clone(),
                    fix: fix(brokers, topic, audit),
                    problem,
                });
            }
        }
    }
    Ok(findings)
}

/// Logs each finding of [`check`] as a warning (`state_topic_retention`); a check that could
/// not be made is logged too (`state_topic_retention_not_checked`), and nothing waits on it
/// beyond 10 s.
pub async fn warn(config: &rdkafka::ClientConfig, brokers: &str, topics: &StateTopics) {
    let checked = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        check(config, brokers, topics),
    )
    .await;
    match checked {
        Ok(Ok(findings)) => {
            for finding in findings {
                tracing::warn!(event = "state_topic_retention", topic = %finding.topic,
                    fix = %finding.fix, "{finding}");
            }
        }
        Ok(Err(error)) => tracing::warn!(event = "state_topic_retention_not_checked", %error,
            "could not read the state topics' configuration (DescribeConfigs)"),
        Err(_) => tracing::warn!(
            event = "state_topic_retention_not_checked",
            "the cluster did not describe the state topics within 10 s"
        ),
    }
}

/// What `settings` (a topic's configuration) does that loses state; `audit` for the audit
/// topic.
fn problem(audit: bool, settings: &HashMap<String, String>) -> Option<StateTopicProblem> {
    let get = |key: &str| settings.get(key).map(String::as_str);
    let policy: Vec<&str> = get("cleanup.policy")
        .unwrap_or("delete")
        .split(',')
        .map(str::trim)
        .collect();
    let number = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
    if audit && policy.contains(&"compact") {
        return Some(StateTopicProblem::AuditCompacted);
    }
    let (retention_ms, retention_bytes) = (number("retention.ms"), number("retention.bytes"));
    let deletes = policy.contains(&"delete") && (retention_ms >= 0 || retention_bytes >= 0);
    deletes.then_some(StateTopicProblem::FiniteRetention {
        retention_ms,
        retention_bytes,
    })
}

/// The `kafka-configs` line that makes `topic` keep its state.
fn fix(brokers: &str, topic: &str, audit: bool) -> String {
    let broker = brokers.split(',').next().unwrap_or(brokers).trim();
    let config = match audit {
        true => "cleanup.policy=delete,retention.ms=-1,retention.bytes=-1",
        false => "cleanup.policy=compact",
    };
    format!(
        "kafka-configs.sh --bootstrap-server {broker} --alter --entity-type topics --entity-name {topic} --add-config {config}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_state_topic_that_deletes_records_is_a_finding() {
        let week = settings(&[("cleanup.policy", "delete"), ("retention.ms", "604800000")]);
        assert_eq!(
            problem(true, &week),
            Some(StateTopicProblem::FiniteRetention {
                retention_ms: 604_800_000,
                retention_bytes: -1
            })
        );
        assert_eq!(problem(false, &week), problem(true, &week));
        let bytes = settings(&[("retention.ms", "-1"), ("retention.bytes", "1073741824")]);
        assert!(problem(true, &bytes).is_some());
        let kept = settings(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
        ]);
        assert_eq!(problem(true, &kept), None);
        assert_eq!(
            problem(
                true,
                &settings(
                    &AUDIT_CONFIG
                        .iter()
                        .map(|(k, v)| (*k, *v))
                        .collect::<Vec<_>>()
                )
            ),
            None
        );
    }

    #[test]
    fn compaction_keeps_positions_but_would_lose_the_audit() {
        let compact = settings(&[("cleanup.policy", "compact"), ("retention.ms", "604800000")]);
        assert_eq!(
            problem(false, &compact),
            None,
            "compaction ignores retention.ms"
        );
        assert_eq!(
            problem(true, &compact),
            Some(StateTopicProblem::AuditCompacted)
        );
        let both = settings(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "1000"),
        ]);
        assert!(matches!(
            problem(false, &both),
            Some(StateTopicProblem::FiniteRetention {
                retention_ms: 1000,
                ..
            })
        ));
    }

    #[test]
    fn the_fix_is_a_line_to_paste() {
        let finding = RetentionFinding {
            topic: "kafka-dlq-audit".into(),
            problem: StateTopicProblem::FiniteRetention {
                retention_ms: 604_800_000,
                retention_bytes: -1,
            },
            fix: fix("k1:9092,k2:9092", "kafka-dlq-audit", true),
        };
        assert_eq!(
            finding.fix,
            "kafka-configs.sh --bootstrap-server k1:9092 --alter --entity-type topics --entity-name kafka-dlq-audit --add-config cleanup.policy=delete,retention.ms=-1,retention.bytes=-1"
        );
        assert!(finding.to_string().contains("retention.ms=604800000"));
        assert!(fix("b:1", "p", false).ends_with("--add-config cleanup.policy=compact"));
    }
}
