//! How a record given to the handler came from a retry topic (see [`crate::retry_tier`]), and
//! the names of retry topics: `<source>-retry-<tier>`.

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

/// How a record given to the handler came from a retry topic: set in
/// [`Record::retry`](crate::Record::retry), `None` for a record of its source topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryDelivery {
    /// The tier: 0 for `<topic>-retry-0`.
    pub tier: u32,
    /// The retry topic it was delivered from.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_record_is_for_the_group_that_wrote_it_or_for_any_when_it_does_not_say() {
        let delivery = |group: Option<&str>| RetryDelivery {
            tier: 0,
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
}
