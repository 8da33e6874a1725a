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
    /// Each partition's records in it.
    partitions: BTreeMap<TopicPartition, Span>,
    records: usize,
    /// When its first record settled.
    since: Option<Instant>,
}

/// A partition's records in the transaction.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// Its first record: where it starts again if the transaction aborts (its records settle
    /// in order, so that is its committed position).
    first: i64,
    /// The next offset to consume, once the transaction commits.
    position: i64,
}

impl Open {
    /// The record at `offset` of `partition` settled in the transaction at `now`.
    pub(crate) fn add(&mut self, partition: &TopicPartition, offset: i64, now: Instant) {
        self.add_run(partition, offset, offset, 1, now);
    }

    /// `records` records of `partition`, delivered from `first` to `last`, settled in the
    /// transaction at `now` (queued while a commit ran, in any order with the partition's
    /// other records: the span takes the lowest first and the highest position).
    pub(crate) fn add_run(
        &mut self,
        partition: &TopicPartition,
        first: i64,
        last: i64,
        records: usize,
        now: Instant,
    ) {
        if let Some(span) = self.partitions.get_mut(partition) {
            span.first = span.first.min(first);
            span.position = span.position.max(last + 1);
        } else {
            let position = last + 1;
            self.partitions
                .insert(partition.clone(), Span { first, position });
        }
        self.records += records;
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
        self.partitions.iter().map(|(p, span)| (p, span.position))
    }

    /// Ends it: where each of its partitions starts again if it aborted, in partition order.
    pub(crate) fn end(&mut self) -> Vec<(TopicPartition, i64)> {
        let ended = std::mem::take(self);
        ended
            .partitions
            .into_iter()
            .map(|(p, span)| (p, span.first))
            .collect()
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
    fn a_run_settled_after_a_later_record_still_rewinds_to_its_first() {
        let now = Instant::now();
        let mut open = Open::default();
        open.add(&tp(0), 9, now);
        open.add_run(&tp(0), 5, 8, 4, now);
        open.add_run(&tp(1), 0, 2, 3, now);
        let positions: Vec<_> = open.positions().map(|(p, o)| (p.clone(), o)).collect();
        assert_eq!(positions, vec![(tp(0), 10), (tp(1), 3)]);
        assert_eq!(open.records(), 8);
        assert_eq!(open.end(), vec![(tp(0), 5), (tp(1), 0)]);
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
