//! The open transaction's bookkeeping, pure: the position each partition reaches in it, where
//! each would rewind to if it aborts, how many records settled in it, and when it is due.

use std::collections::BTreeMap;
use std::time::Duration;

// tokio's clock: the simulation runs the transaction on a paused one.
use tokio::time::Instant;

/// A topic and partition.
pub(crate) type TopicPartition = (String, i32);

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Open {
    /// The next offset to consume of each partition, once the transaction commits.
    positions: BTreeMap<TopicPartition, i64>,
    /// Each partition's first record in the transaction: where it starts again if the
    /// transaction aborts (its records settle in order, so that is its committed position).
    firsts: BTreeMap<TopicPartition, i64>,
    records: usize,
    /// When its first record settled.
    since: Option<Instant>,
}

impl Open {
    /// The record at `offset` of `partition` settled in the transaction at `now`.
    pub(crate) fn add(&mut self, partition: &TopicPartition, offset: i64, now: Instant) {
        if let Some(position) = self.positions.get_mut(partition) {
            *position = (*position).max(offset + 1);
        } else {
            self.positions.insert(partition.clone(), offset + 1);
            self.firsts.insert(partition.clone(), offset);
        }
        self.records += 1;
        self.since.get_or_insert(now);
    }

    /// Whether no record settled in it.
    pub(crate) fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Records settled in it.
    pub(crate) fn records(&self) -> usize {
        self.records
    }

    /// Whether it should commit at `now`: `max_records` settled in it, or its first record
    /// settled `interval` ago.
    pub(crate) fn is_due(&self, now: Instant, max_records: usize, interval: Duration) -> bool {
        self.records >= max_records
            || self
                .since
                .is_some_and(|since| now.saturating_duration_since(since) >= interval)
    }

    /// How long after `now` it is due by time; `None` while empty.
    pub(crate) fn due_in(&self, now: Instant, interval: Duration) -> Option<Duration> {
        self.since
            .map(|since| (since + interval).saturating_duration_since(now))
    }

    /// The positions its commit stores, in partition order.
    pub(crate) fn positions(&self) -> impl Iterator<Item = (&TopicPartition, i64)> {
        self.positions.iter().map(|(p, o)| (p, *o))
    }

    /// Ends it: where each of its partitions starts again if it aborted, in partition order.
    pub(crate) fn end(&mut self) -> Vec<(TopicPartition, i64)> {
        let rewinds = std::mem::take(&mut self.firsts).into_iter().collect();
        *self = Open::default();
        rewinds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("orders".to_string(), p)
    }

    #[test]
    fn a_partition_commits_past_its_last_record_and_rewinds_to_its_first() {
        let now = Instant::now();
        let mut open = Open::default();
        assert!(open.is_empty());
        open.add(&tp(0), 7, now);
        open.add(&tp(0), 8, now);
        open.add(&tp(1), 3, now);
        let mut positions: Vec<_> = open.positions().map(|(p, o)| (p.clone(), o)).collect();
        positions.sort();
        assert_eq!(positions, vec![(tp(0), 9), (tp(1), 4)]);
        assert_eq!(open.records(), 3);
        let mut rewinds = open.end();
        rewinds.sort();
        assert_eq!(rewinds, vec![(tp(0), 7), (tp(1), 3)]);
        assert!(open.is_empty(), "ended");
        assert_eq!(open.positions().count(), 0);
    }

    #[test]
    fn a_transaction_is_due_after_its_records_or_its_interval_whichever_first() {
        let now = Instant::now();
        let interval = Duration::from_millis(100);
        let mut open = Open::default();
        assert!(
            !open.is_due(now + interval * 10, 3, interval),
            "empty is never due"
        );
        assert_eq!(open.due_in(now, interval), None);
        open.add(&tp(0), 0, now);
        open.add(&tp(0), 1, now);
        assert!(!open.is_due(now + interval / 2, 3, interval));
        assert_eq!(
            open.due_in(now + interval / 2, interval),
            Some(interval / 2)
        );
        assert!(open.is_due(now + interval, 3, interval), "by time");
        open.add(&tp(0), 2, now);
        assert!(open.is_due(now, 3, interval), "by records");
    }
}
