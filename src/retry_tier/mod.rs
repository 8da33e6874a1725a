//! Retry topics ("retry tiers"): Spring Kafka's non-blocking retries, for failures that take
//! minutes or hours to clear.
//!
//! # Why
//! An in-process retry holds its partition: a record whose downstream needs an hour would hold
//! its partition for an hour. With retry tiers (`retry_topic_delays_ms = [60000, 600000]`,
//! off by default), a record whose in-process retries are used up (`max_retries`, 0 to go
//! straight to the tiers) is written to its first retry topic and its partition goes on.
//!
//! # How
//! - Tier `n` of topic `orders` is the topic `orders-retry-<n>` (Spring's default naming, by
//!   index), with delay `retry_topic_delays_ms[n]`. The consumer creates missing retry topics
//!   at start (the source topic's partition count, the broker's default replication) and
//!   subscribes to them in the same group.
//! - A record leaves a stage when its in-process retries there are used up: from the source
//!   topic to tier 0, from tier `n` to tier `n + 1`, from the last tier to the dead-letter
//!   topic, with its whole history in the envelope's `history`. A permanent failure goes to the
//!   dead-letter topic at once, from any stage.
//! - The retry record is the original key and value with the original headers, plus Spring's
//!   `kafka_dlt-original-*` and `retry_topic-*` headers (Spring's encodings, read off
//!   spring-kafka 4.1's `DeadLetterPublishingRecovererFactory`) and ours, `kafka_dlq-retry`
//!   (JSON): the original coordinates, when it is due, the handler calls so far and the
//!   stages it went through ([`retry_headers`]).
//! - A retry partition's worker takes its records in order and waits until the head record is
//!   due, pausing fetches of that partition alone (records of one tier are written in due
//!   order). The handler then gets the **original** record: its topic, partition, offset, id,
//!   headers and timestamp, with [`Record::retry`](crate::Record::retry) saying where it was
//!   delivered from and what went before.
//! - Like a dead letter, the source offset is stored only once the retry topic acknowledged the
//!   write, so a crash between the write and the commit loses nothing (the record may be
//!   written to the retry topic twice: at least once).
//!
//! # What is given up
//! Order: a record that goes to a retry topic is handled after records of its key that came
//! later, as in Spring. A retry topic must keep records longer than its delay: the consumer
//! creates its retry topics with a retention of at least twice their delay and a week, and
//! refuses to start where one keeps records for less ([`retention`]).

mod account;
mod delivery;
pub mod retention;
mod spring;
mod write;

use std::fmt;
use std::time::Duration;

use crate::record::retry::{parse_topic, redrive_topic, topic_name, Stage};

pub(crate) use delivery::is_ours as is_retry_header;
pub use delivery::{redrive_headers, restore, retry_headers, RestoreError, HEADER_RETRY};
pub use spring::{SPRING_ATTEMPTS, SPRING_BACKOFF_TIMESTAMP, SPRING_ORIGINAL_TIMESTAMP};
pub use write::{RetryWriter, RetryWritten};

/// At most this many retry tiers.
pub const MAX_TIERS: usize = 32;

/// The retry tiers: the delay of each in milliseconds, first tier first
/// (`retry_topic_delays_ms`); none by default. Written as a comma-separated list on the
/// command line (`--retry-topic-delays 60000,600000`) and as an array in the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct RetryTiers(Vec<u64>);

impl RetryTiers {
    /// Tiers with these delays, in milliseconds.
    pub fn new(delays_ms: impl IntoIterator<Item = u64>) -> Self {
        Self(delays_ms.into_iter().collect())
    }

    /// Whether there are no tiers (retry topics off).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many tiers there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The delays, in milliseconds.
    pub fn delays_ms(&self) -> &[u64] {
        &self.0
    }

    /// The delay of tier `tier`; `None` past the last.
    pub fn delay(&self, tier: u32) -> Option<Duration> {
        self.0
            .get(tier as usize)
            .map(|ms| Duration::from_millis(*ms))
    }

    /// The tier a record goes to when it leaves its stage: 0 from its source topic
    /// (`current` `None`), `n + 1` from tier `n`; `None` after the last (the dead-letter
    /// topic).
    pub fn next(&self, current: Option<u32>) -> Option<u32> {
        let next = current.map_or(0, |n| n + 1);
        ((next as usize) < self.0.len()).then_some(next)
    }

    /// The retry topics of `source`, tier 0 first.
    pub fn topics(&self, source: &str) -> Vec<String> {
        (0..self.0.len() as u32)
            .map(|tier| topic_name(source, tier))
            .collect()
    }

    /// Which of `sources`' tiers `topic` is: the source topic and the tier; `None` when it
    /// is no retry topic of theirs.
    pub fn tier_of<'a>(&self, topic: &str, sources: &'a [String]) -> Option<(&'a str, u32)> {
        let (source, tier) = parse_topic(topic)?;
        let source = sources.iter().find(|s| s.as_str() == source)?;
        ((tier as usize) < self.0.len()).then_some((source.as_str(), tier))
    }

    /// What `topic` is to a consumer of `sources` in `group`: one of their retry tiers' topics,
    /// the group's redrive topic of one of them ([`redrive_topic`]), or else a source topic.
    pub(crate) fn stage_of(&self, topic: &str, sources: &[String], group: &str) -> Stage {
        if let Some((_, tier)) = self.tier_of(topic, sources) {
            return Stage::Tier(tier);
        }
        match sources.iter().find(|s| redrive_topic(s, group) == topic) {
            Some(source) => Stage::Redrive {
                source: source.clone(),
            },
            None => Stage::Source,
        }
    }
}

impl fmt::Display for RetryTiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let delays: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&delays.join(","))
    }
}

impl std::str::FromStr for RetryTiers {
    type Err = String;

    /// A comma-separated list of delays in milliseconds; empty for none.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        s.split(',')
            .map(|item| {
                item.trim().parse::<u64>().map_err(|_| {
                    format!(
                        "`{}` is not a delay in milliseconds (expected e.g. 60000,600000)",
                        item.trim()
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_the_source_then_each_other_then_end() {
        let tiers = RetryTiers::new([2_000, 60_000]);
        assert_eq!(tiers.next(None), Some(0));
        assert_eq!(tiers.next(Some(0)), Some(1));
        assert_eq!(tiers.next(Some(1)), None);
        assert_eq!(RetryTiers::default().next(None), None);
        assert_eq!(tiers.delay(1), Some(Duration::from_secs(60)));
        assert_eq!(tiers.delay(2), None);
    }

    #[test]
    fn retry_topics_are_named_by_index_and_recognized() {
        let tiers = RetryTiers::new([1, 2]);
        assert_eq!(tiers.topics("orders"), ["orders-retry-0", "orders-retry-1"]);
        let sources = vec!["orders".to_string(), "a-retry-x".to_string()];
        assert_eq!(
            tiers.tier_of("orders-retry-1", &sources),
            Some(("orders", 1))
        );
        assert_eq!(tiers.tier_of("orders-retry-2", &sources), None, "no tier 2");
        assert_eq!(tiers.tier_of("orders-retry-01", &sources), None);
        assert_eq!(tiers.tier_of("orders", &sources), None);
        assert_eq!(tiers.tier_of("other-retry-0", &sources), None);
    }

    #[test]
    fn a_partition_is_of_a_source_a_tier_or_the_groups_redrive_topic() {
        let tiers = RetryTiers::new([1]);
        let sources = vec!["orders".to_string()];
        let stage = |topic: &str| tiers.stage_of(topic, &sources, "billing");
        assert_eq!(stage("orders"), Stage::Source);
        assert_eq!(stage("orders-retry-0"), Stage::Tier(0));
        assert_eq!(
            stage("orders-redrive-billing"),
            Stage::Redrive {
                source: "orders".into()
            }
        );
        assert_eq!(stage("orders-redrive-shipping"), Stage::Source);
    }

    #[test]
    fn delays_parse_from_a_comma_list_and_print_back() {
        let tiers: RetryTiers = "60000, 600000,3600000".parse().unwrap();
        assert_eq!(tiers.delays_ms(), [60_000, 600_000, 3_600_000]);
        assert_eq!(tiers.to_string(), "60000,600000,3600000");
        assert!("".parse::<RetryTiers>().unwrap().is_empty());
        let error = "60000,ten".parse::<RetryTiers>().unwrap_err();
        assert!(error.contains("`ten`"), "{error}");
    }
}
