//! The retry topics of [`crate::retry_tier`] and the group's redrive topics
//! ([`crate::record::retry::redrive_topic`]), created when the consumer starts if they are
//! missing: as many partitions as their source topic, the broker's default replication.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::ConsumerConfig;
use crate::kafka::topics::{Topics, TopicsError};

/// The topics besides its sources that the consumer reads: each source's retry tiers' topics
/// (none without retry tiers) and its redrive topic for this group, each with its source.
pub(in crate::consumer) fn follow_up_topics(config: &ConsumerConfig) -> Vec<(String, &str)> {
    let mut topics = Vec::new();
    for source in &config.topics {
        for topic in config.retry_topic_delays_ms.topics(source) {
            topics.push((topic, source.as_str()));
        }
        let redrive = crate::record::retry::redrive_topic(source, &config.group_id);
        topics.push((redrive, source.as_str()));
    }
    topics
}

/// The `retention.ms` a retry topic of `config` is created with (its tier's delay decides),
/// or for its redrive topic, the dead-letter topics' (`dlq_retention_ms`).
fn retention_ms(config: &ConsumerConfig, topic: &str) -> Option<i64> {
    match config.retry_topic_delays_ms.tier_of(topic, &config.topics) {
        Some((_, tier)) => config
            .retry_topic_delays_ms
            .delay(tier)
            .map(crate::retry_tier::retention::created_ms),
        None => Some(config.dlq_retention_ms),
    }
}

/// How long the consumer's start waits for its retry and redrive topics.
const FIRST_ATTEMPT: Duration = Duration::from_secs(10);

/// Creates the missing retry and redrive topics of `config`'s topics. When that fails (a
/// broker down, no permission), logs why and tries again in the background, 1 s doubling to
/// 60 s, until it succeeds or `cancel` fires; meanwhile records bound for a missing retry topic
/// wait (their writes are retried), and the consumer picks a topic created later up at its next
/// metadata refresh.
pub(in crate::consumer) async fn ensure(config: &ConsumerConfig, cancel: &CancellationToken) {
    // The first attempt holds the start for at most FIRST_ATTEMPT: a cluster that answers
    // CreateTopics late (a controller election) does not hold the consumer up.
    let error = match tokio::time::timeout(FIRST_ATTEMPT, try_ensure(config)).await {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {} s", FIRST_ATTEMPT.as_secs()),
    };
    tracing::error!(event = "retry_topics_not_created", %error,
        "trying again in the background; records bound for a missing retry topic wait until it exists");
    let (config, cancel) = (config.clone(), cancel.clone());
    tokio::spawn(async move {
        let mut delay = Duration::from_secs(1);
        loop {
            tokio::select! {
                biased;
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

/// One attempt: reads the cluster's topics and creates the retry and redrive topics that are
/// missing.
async fn try_ensure(config: &ConsumerConfig) -> Result<(), TopicsError> {
    let topics = Topics::read(&config.producer_client_config()).await?;
    let missing = topics.missing(follow_up_topics(config));
    topics
        .create(
            &missing,
            |topic| retention_ms(config, topic),
            "retry_topic_created",
        )
        .await?;
    shown(config, &missing).await
}

/// Waits until the cluster's metadata shows `created` (at most 5 s, read every 100 ms): a
/// topic subscribed to before then is taken for unknown, and librdkafka passes it over until
/// its next metadata refresh (5 minutes by default).
async fn shown(
    config: &ConsumerConfig,
    created: &BTreeMap<String, i32>,
) -> Result<(), TopicsError> {
    for _ in 0..50 {
        if created.is_empty() {
            return Ok(());
        }
        let topics = Topics::read(&config.producer_client_config()).await?;
        if created.keys().all(|topic| topics.exists(topic)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!(event = "retry_topics_not_shown", topics = ?created.keys().collect::<Vec<_>>(),
        "created, but not in the cluster's metadata after 5 s: consumed from the next metadata refresh");
    Ok(())
}

/// Records of this group waiting in a topic it no longer reads, which nobody would ever handle
/// (their source offsets were committed when they were written): see [`unread_topics`] for
/// which topics, each read after this group's committed offset there (from the log start where
/// it never committed: a long tier's first records wait there uncommitted). Only this group's
/// records count (those whose retry account names this group or no group): several services
/// share a source's retry topics, and another group's records are its own to handle. Returns
/// the first such topic and how many of this group's records it holds; `None` when there is
/// none or the cluster could not be asked (logged: the consumer starts as before).
pub(in crate::consumer) async fn stranded(config: &ConsumerConfig) -> Option<Stranded> {
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

/// How long the stranded-record check reads a dropped tier's records at most.
const READ_FOR: Duration = Duration::from_secs(30);

/// A topic this group no longer reads that holds records of this group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::consumer) struct Stranded {
    /// The retry or redrive topic.
    pub topic: String,
    /// This group's records there.
    pub records: i64,
    /// The source topic it belongs to, when that source is no longer in `topics`; `None` for
    /// a dropped tier of a configured source.
    pub removed_source: Option<String>,
}

/// The topics of `cluster` (its topic names) that this group once read but no longer does:
/// - `<source>-retry-<n>` of a configured source with `n` at or beyond the `tiers` configured
///   (a tier dropped, or retry topics turned off);
/// - every retry topic of a source no longer in `sources`, and this group's redrive topic of
///   it. A source is one this group read when its redrive topic for this group exists (every
///   consumer creates one per source at start).
///
/// Each with its tier (`None`: the redrive topic) and, for a removed source, that source.
fn unread_topics(
    cluster: &[&str],
    sources: &[String],
    tiers: u32,
    group: &str,
) -> Vec<(String, Option<u32>, Option<String>)> {
    use crate::record::retry::{parse_topic, redrive_topic};
    // A cluster may have thousands of topics: each name is looked up, never searched for.
    let names: std::collections::HashSet<&str> = cluster.iter().copied().collect();
    let exists = |name: &str| names.contains(name);
    let configured = |source: &str| sources.iter().any(|s| s == source);
    let redrive_suffix = format!("-redrive-{group}");
    // Every name a removed source may have: topics themselves, the sources of retry topics,
    // and what precedes this group's plain redrive suffix (the source may be deleted).
    let mut removed: Vec<&str> = cluster
        .iter()
        .flat_map(|name| {
            [
                Some(*name),
                parse_topic(name).map(|(source, _)| source),
                name.strip_suffix(redrive_suffix.as_str()),
            ]
        })
        .flatten()
        .filter(|source| !source.is_empty() && !configured(source))
        .filter(|source| exists(&redrive_topic(source, group)))
        .collect();
    removed.sort_unstable();
    removed.dedup();
    let mut unread = Vec::new();
    for name in cluster {
        let Some((source, tier)) = parse_topic(name) else {
            continue;
        };
        if configured(source) && tier >= tiers {
            unread.push((name.to_string(), Some(tier), None));
        } else if removed.binary_search(&source).is_ok() {
            unread.push((name.to_string(), Some(tier), Some(source.to_string())));
        }
    }
    for source in removed {
        unread.push((redrive_topic(source, group), None, Some(source.to_string())));
    }
    unread.sort();
    unread
}

fn find_stranded(config: &ConsumerConfig) -> Result<Option<Stranded>, rdkafka::error::KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let timeout = Duration::from_secs(5);
    // Only asks the cluster and reads assigned partitions: never subscribes, so it does not
    // join the group, and commits nothing.
    let mut client = config.consumer_client_config();
    // A partition ends where the broker says, even where its last offsets hold no record.
    client.set("enable.partition.eof", "true");
    let consumer: BaseConsumer<crate::kafka::LogContext> = crate::kafka::create_logged(&client)?;
    let metadata = consumer.fetch_metadata(None, timeout)?;
    let tiers = config.retry_topic_delays_ms.len() as u32;
    let described: std::collections::HashMap<&str, i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name(), t.partitions().len() as i32))
        .collect();
    let names: Vec<&str> = described.keys().copied().collect();
    for (topic, tier, removed_source) in
        unread_topics(&names, &config.topics, tiers, &config.group_id)
    {
        let partitions = described[topic.as_str()];
        let mut list = rdkafka::TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition(&topic, partition);
        }
        let committed = consumer.committed_offsets(list, timeout)?;
        // Each partition's records to read: from the committed offset (or the log start) to
        // the end.
        let mut ends = std::collections::HashMap::new();
        let mut read = rdkafka::TopicPartitionList::new();
        for partition in 0..partitions {
            let (low, high) = consumer.fetch_watermarks(&topic, partition, timeout)?;
            let from = match committed
                .find_partition(&topic, partition)
                .map(|e| e.offset())
            {
                Some(rdkafka::Offset::Offset(offset)) => offset.max(low),
                _ => low,
            };
            if from < high {
                read.add_partition_offset(&topic, partition, rdkafka::Offset::Offset(from))?;
                ends.insert(partition, high);
            }
        }
        if ends.is_empty() {
            continue;
        }
        consumer.assign(&read)?;
        let mut ours = 0;
        let deadline = std::time::Instant::now() + READ_FOR;
        while !ends.is_empty() && std::time::Instant::now() < deadline {
            let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = match polled {
                Ok(message) => message,
                Err(rdkafka::error::KafkaError::PartitionEOF(partition)) => {
                    ends.remove(&partition);
                    continue;
                }
                Err(e) => return Err(e),
            };
            use rdkafka::Message as _;
            let Some(&end) = ends.get(&message.partition()) else {
                continue;
            };
            if message.offset() < end {
                let record = crate::record::Record::from_message(&message, None);
                let (record, _) = crate::retry_tier::restore(record, tier);
                if record
                    .retry
                    .as_ref()
                    .is_some_and(|r| r.is_for(&config.group_id))
                {
                    ours += 1;
                }
            }
            if message.offset() + 1 >= end {
                ends.remove(&message.partition());
            }
        }
        consumer.unassign()?;
        if !ends.is_empty() && ours == 0 {
            tracing::warn!(event = "retry_topic_not_checked", %topic,
                "a retry or redrive topic this group no longer reads holds records not read within 30 s: if some are this group's, put its tier or source back until they are handled");
        }
        if ours > 0 {
            return Ok(Some(Stranded {
                topic,
                records: ours,
                removed_source,
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unread(
        cluster: &[&str],
        sources: &[&str],
        tiers: u32,
    ) -> Vec<(String, Option<u32>, Option<String>)> {
        let sources: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
        unread_topics(cluster, &sources, tiers, "billing")
    }

    #[test]
    fn a_dropped_tier_of_a_configured_source_is_unread() {
        let cluster = [
            "orders",
            "orders-retry-0",
            "orders-retry-1",
            "orders-redrive-billing",
        ];
        assert_eq!(
            unread(&cluster, &["orders"], 1),
            [("orders-retry-1".to_string(), Some(1), None)]
        );
        assert!(unread(&cluster, &["orders"], 2).is_empty());
    }

    #[test]
    fn a_removed_source_leaves_its_tiers_and_this_groups_redrive_topic_unread() {
        let cluster = [
            "orders",
            "orders-retry-0",
            "orders-redrive-billing",
            "payments",
            "payments-redrive-billing",
        ];
        let removed = Some("orders".to_string());
        assert_eq!(
            unread(&cluster, &["payments"], 1),
            [
                ("orders-redrive-billing".to_string(), None, removed.clone()),
                ("orders-retry-0".to_string(), Some(0), removed),
            ]
        );
    }

    #[test]
    fn a_source_deleted_with_its_topics_left_behind_is_still_found() {
        let cluster = ["orders-retry-0", "orders-redrive-billing", "payments"];
        assert_eq!(unread(&cluster, &["payments"], 0).len(), 2);
    }

    #[test]
    fn another_groups_sources_are_not_this_groups_business() {
        // shipping reads orders; billing never did (it has no redrive topic of orders).
        let cluster = [
            "orders",
            "orders-retry-0",
            "orders-redrive-shipping",
            "payments",
        ];
        assert!(unread(&cluster, &["payments"], 1).is_empty());
    }
}
