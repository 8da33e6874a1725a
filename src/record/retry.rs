//! How a record given to the handler came from a retry topic (see [`crate::retry_tier`]) or its
//! group's redrive topic, and the names of both: `<source>-retry-<tier>` and
//! `<source>-redrive-<group>`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One stage a record went through and left: its source topic or a retry topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryStage {
    /// The topic it was consumed from there.
    pub topic: String,
    /// The handler calls there.
    pub attempts: u32,
    /// The last failure's message there (at most 1024 bytes).
    pub error: String,
    /// When it left (RFC 3339 UTC, milliseconds).
    pub at: DateTime<Utc>,
}

/// How a record given to the handler came from a retry topic or its group's redrive topic: set
/// in [`Record::retry`](crate::Record::retry), `None` for a record of its source topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryDelivery {
    /// The retry tier it was delivered from: `Some(0)` for `<topic>-retry-0`. `None` for the
    /// group's redrive topic (`<topic>-redrive-<group>`, see [`redrive_topic`]), where
    /// `dlq replay` put a dead letter back: it is handled as a record of its source topic
    /// would be, its failures going to tier 0 (or the dead-letter topic) again.
    pub tier: Option<u32>,
    /// The retry or redrive topic it was delivered from.
    pub topic: String,
    /// Its partition there.
    pub partition: i32,
    /// Its offset there: the offset the consumer commits.
    pub offset: i64,
    /// When it was due.
    pub due: DateTime<Utc>,
    /// The handler calls before this delivery, in every stage.
    pub attempts: u32,
    /// The stages it left, first first.
    pub history: Vec<RetryStage>,
    /// The consumer group that wrote the retry record (its `kafka_dlt-original-consumer-group`,
    /// which Spring writes too): only that group handles it. `None` when it does not say.
    pub group: Option<String>,
}

impl RetryDelivery {
    /// Whether a consumer of `group` handles this retry record: it was written by that group,
    /// or does not say by whom. Several services (groups) with retry tiers on one topic share
    /// its retry topics, and each handles only its own failures again; another group's records
    /// are passed over, never waited for.
    pub fn is_for(&self, group: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
    }
}

/// What a consumed partition is to the worker that reads it: of a source topic, of a retry
/// tier's topic, or of the group's redrive topic for the source topic `source`. The records of
/// the last two carry an original record ([`crate::retry_tier::restore`]), go one at a time,
/// in order, and wait until due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A source topic.
    Source,
    /// Retry tier `n`'s topic.
    Tier(u32),
    /// The group's redrive topic of `source`.
    Redrive {
        /// The source topic whose redrive topic this is.
        source: String,
    },
}

impl Stage {
    /// Whether the partition's records are retry records (a tier's or a redrive topic's).
    pub(crate) fn is_retry(&self) -> bool {
        !matches!(self, Stage::Source)
    }

    /// The retry tier, for a tier's topic.
    pub(crate) fn tier(&self) -> Option<u32> {
        match self {
            Stage::Tier(tier) => Some(*tier),
            _ => None,
        }
    }
}

/// The source topic and tier a topic's name gives (`<source>-retry-<tier>`), whatever the
/// configured tiers; `None` for another name.
pub fn parse_topic(topic: &str) -> Option<(&str, u32)> {
    let (source, tier) = topic.rsplit_once("-retry-")?;
    let number: u32 = tier.parse().ok()?;
    (!source.is_empty() && number.to_string() == tier).then_some((source, number))
}

/// The retry topic of tier `tier` of `source`: `<source>-retry-<tier>`.
pub fn topic_name(source: &str, tier: u32) -> String {
    format!("{source}-retry-{tier}")
}

/// The longest topic name Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;

/// The redrive topic of consumer group `group` for its source topic `source`: where
/// `dlq replay` puts that group's dead letters back, read by that group alone (every kafka-dlq
/// consumer subscribes to its own, with or without retry tiers).
///
/// `<source>-redrive-<group>` when that is a name Kafka accepts (at most 249 characters of
/// `a-z A-Z 0-9 . _ -`). Otherwise every other character of the group becomes `_`, the name is
/// cut to fit, and `-` plus 16 hex digits of the group name's FNV-1a hash end it, so two groups
/// never share one: `orders-redrive-team_a-1f0c…`.
pub fn redrive_topic(source: &str, group: &str) -> String {
    group_topic(source, "redrive", group)
}

/// `<source>-<role>-<group>`, made to fit as [`redrive_topic`] says: a topic of consumer group
/// `group` for its source topic `source` (its redrive topic, its park log).
pub(crate) fn group_topic(source: &str, role: &str, group: &str) -> String {
    let plain = format!("{source}-{role}-{group}");
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if plain.len() <= MAX_TOPIC_NAME && group.chars().all(legal) {
        return plain;
    }
    let suffix = format!("-{:016x}", crate::fingerprint::stable_hash(group));
    let mut name: String = plain
        .chars()
        .map(|c| if legal(c) { c } else { '_' })
        .collect();
    // Only ASCII is left: cutting at a byte count is cutting at a character.
    name.truncate(MAX_TOPIC_NAME - suffix.len());
    name.push_str(&suffix);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_record_is_for_the_group_that_wrote_it_or_for_any_when_it_does_not_say() {
        let delivery = |group: Option<&str>| RetryDelivery {
            tier: Some(0),
            topic: "orders-retry-0".into(),
            partition: 0,
            offset: 3,
            due: Utc::now(),
            attempts: 1,
            history: vec![],
            group: group.map(String::from),
        };
        assert!(delivery(Some("billing")).is_for("billing"));
        assert!(!delivery(Some("billing")).is_for("shipping"));
        assert!(delivery(None).is_for("shipping"));
    }

    #[test]
    fn a_redrive_topic_is_named_after_its_source_and_group_and_always_valid() {
        assert_eq!(redrive_topic("orders", "billing"), "orders-redrive-billing");
        let odd = redrive_topic("orders", "team a/billing");
        assert!(odd.starts_with("orders-redrive-team_a_billing-"), "{odd}");
        assert_ne!(odd, redrive_topic("orders", "team_a_billing"));
        assert_ne!(odd, redrive_topic("orders", "team a:billing"));
        let long = redrive_topic(&"t".repeat(240), "billing");
        assert_eq!(long.len(), 249, "{long}");
        for name in [odd, long, redrive_topic("o", "ünïcode")] {
            assert!(name.len() <= 249);
            assert!(name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
        }
    }
}
