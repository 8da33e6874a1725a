//! The Slack thread of the open incident, kept with the monitor's position: every commit of
//! the monitor's DLQ positions carries the first message's `ts` as offset-commit metadata
//! (`slack_thread_ts=<ts>`, empty once the incident is resolved), so a restarted monitor
//! replies in the same thread.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

/// The metadata's prefix.
const PREFIX: &str = "slack_thread_ts=";

/// Commit metadata for `thread`.
pub(super) fn metadata(thread: Option<&str>) -> String {
    thread.map(|ts| format!("{PREFIX}{ts}")).unwrap_or_default()
}

/// The thread `ts` in commit metadata written by [`metadata`]; `None` for any other.
pub(super) fn parse(metadata: &str) -> Option<String> {
    metadata
        .strip_prefix(PREFIX)
        .filter(|ts| !ts.is_empty())
        .map(str::to_string)
}

/// The positions the monitor's group committed on `topics` (the DLQ topics), and the thread
/// their metadata names. Blocks on the broker (metadata and offset requests, 10 s each).
pub(super) fn restore<C: rdkafka::consumer::ConsumerContext>(
    consumer: &impl Consumer<C>,
    topics: &[String],
) -> (Option<String>, BTreeMap<(String, i32), i64>) {
    let timeout = Duration::from_secs(10);
    let mut all = TopicPartitionList::new();
    for topic in topics {
        let Ok(metadata) = consumer.fetch_metadata(Some(topic), timeout) else {
            continue;
        };
        for t in metadata.topics() {
            for p in t.partitions() {
                all.add_partition(topic, p.id());
            }
        }
    }
    let mut thread = None;
    let mut positions = BTreeMap::new();
    if let Ok(committed) = consumer.committed_offsets(all, timeout) {
        for e in committed.elements() {
            if let Offset::Offset(offset) = e.offset() {
                positions.insert((e.topic().to_string(), e.partition()), offset);
                thread = thread.or_else(|| parse(e.metadata()));
            }
        }
    }
    (thread, positions)
}

/// `positions` as a list to commit, each with the metadata of `thread`.
pub(super) fn commit_list(
    positions: &BTreeMap<(String, i32), i64>,
    thread: Option<&str>,
) -> TopicPartitionList {
    let meta = metadata(thread);
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in positions {
        let mut e = tpl.add_partition(topic, *partition);
        if e.set_offset(Offset::Offset(*offset)).is_ok() {
            e.set_metadata(&meta);
        }
    }
    tpl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_round_trips_through_commit_metadata() {
        assert_eq!(
            parse(&metadata(Some("1700000000.000100"))).as_deref(),
            Some("1700000000.000100")
        );
        assert_eq!(parse(&metadata(None)), None);
        assert_eq!(parse("something else"), None);
        let positions = BTreeMap::from([(("t-dlt".to_string(), 0), 5)]);
        let tpl = commit_list(&positions, Some("1.2"));
        let e = tpl.find_partition("t-dlt", 0).unwrap();
        assert_eq!(e.offset(), Offset::Offset(5));
        assert_eq!(e.metadata(), "slack_thread_ts=1.2");
    }
}
