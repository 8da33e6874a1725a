//! One record of the positions topic, and the table of them a reader keeps: where each replay
//! group got to on each partition of each DLT, with the filter the group replays, so that what
//! it resolved can be told again without its audit summary. Pure: no I/O.
//!
//! The record's key is `<dlq topic>/<partition>/<group>` (a topic name holds no `/`, so the
//! key parses back whatever the group is called); its value is a [`PositionRecord`] as JSON.
//! The topic is compacted: Kafka keeps the latest record of each key for ever.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::dlq_reader::position::Position;
use crate::dlq_reader::Filter;

/// Which position a record holds: a replay group's on one partition of one DLT.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PositionKey {
    /// The dead-letter topic read.
    pub dlq_topic: String,
    /// Its partition.
    pub partition: i32,
    /// The replay's position group ([`crate::replay::ReplayOptions::position_group`]).
    pub group: String,
}

impl std::fmt::Display for PositionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.dlq_topic, self.partition, self.group)
    }
}

impl PositionKey {
    /// The key of a record's key bytes; `None` for bytes no kafka-dlq tool writes.
    pub fn parse(bytes: &[u8]) -> Option<PositionKey> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (dlq_topic, rest) = text.split_once('/')?;
        let (partition, group) = rest.split_once('/')?;
        if dlq_topic.is_empty() || group.is_empty() {
            return None;
        }
        Some(PositionKey {
            dlq_topic: dlq_topic.to_string(),
            partition: partition.parse().ok()?,
            group: group.to_string(),
        })
    }
}

/// A replay group's position on one partition, as the positions topic holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PositionRecord {
    /// The next offset to read: every dead letter before it was dealt with.
    pub next: i64,
    /// Offsets before `next` passed over unsent ([`Position::lost`]): still outstanding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<i64>,
    /// The filter the group replays; absent for the unfiltered replay's group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Filter>,
    /// The run that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// When it was written.
    pub at: DateTime<Utc>,
    /// Taken over from the group's committed offset (a position written before the
    /// positions topic existed), not written by a replay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub migrated: bool,
    /// The discards (their run ids) whose dead letters on this partition the replay passed
    /// unsent because they were discarded: restored, those are outstanding again although
    /// the position passed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub honoured: Vec<String>,
}

impl PositionRecord {
    /// The record of position `next`, written now, with nothing else to say.
    pub fn at(next: i64) -> PositionRecord {
        PositionRecord {
            next,
            lost: Vec::new(),
            selection: None,
            run: None,
            operator: None,
            at: Utc::now(),
            migrated: false,
            honoured: Vec::new(),
        }
    }

    /// What a position of `group` on `dlq_topic` taken over from its committed offsets
    /// carries besides the offsets: the filter, run and operator of the group's last summary
    /// in `runs` (none for the unfiltered replay's group, which has no filter).
    pub fn migrated_from(
        dlq_topic: &str,
        group: &str,
        runs: &[crate::state::audit::ReplayRun],
    ) -> PositionRecord {
        let last = runs
            .iter()
            .rev()
            .find(|r| r.dlq_topic == dlq_topic && r.position_group.as_deref() == Some(group));
        PositionRecord {
            selection: last
                .and_then(|r| r.selection.clone())
                .filter(|_| group != crate::dlq_reader::REPLAY_GROUP),
            run: last.map(|r| r.run.clone()),
            operator: last.map(|r| r.operator.clone()),
            migrated: true,
            ..PositionRecord::at(0)
        }
    }

    /// The position it holds.
    pub fn position(&self) -> Position {
        Position {
            next: self.next,
            lost: self
                .lost
                .iter()
                .copied()
                .filter(|o| *o < self.next)
                .collect(),
        }
    }
}

/// One replay group's positions on one DLT, and what it replays.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupPositions {
    /// The filter it replays (from its latest record); `None` for the unfiltered replay.
    pub selection: Option<Filter>,
    /// The latest run that moved it.
    pub run: Option<String>,
    /// Who ran that.
    pub operator: Option<String>,
    /// Its position per partition.
    pub partitions: BTreeMap<i32, Position>,
    /// Per partition, the discards whose dead letters it passed unsent
    /// ([`PositionRecord::honoured`]).
    pub honoured: BTreeMap<i32, Vec<String>>,
}

/// The latest record of every key read so far: what a reader of the positions topic knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PositionTable {
    groups: HashMap<(String, String), GroupPositions>,
    /// The shared records ([`SHARED_PREFIX`]) by name, each's latest value.
    shared: BTreeMap<String, Vec<u8>>,
    /// How often a shared record changed.
    shared_changes: u64,
}

/// What starts the key of a shared record: the consoles' own state kept beside the positions
/// (a redrive's progress and the controls asked of it, [`crate::state::PositionStore::share`]).
/// No position key starts so: a topic name is never empty.
pub const SHARED_PREFIX: &str = "/";

impl PositionTable {
    /// Takes `value` as the latest of the shared record `name` (`None`: a tombstone, which
    /// removes it); whether it changed anything.
    pub fn apply_shared(&mut self, name: &str, value: Option<&[u8]>) -> bool {
        let changed = match value {
            Some(v) => self.shared.insert(name.to_string(), v.to_vec()).as_deref() != Some(v),
            None => self.shared.remove(name).is_some(),
        };
        self.shared_changes += u64::from(changed);
        changed
    }

    /// How many times a shared record changed so far: a reader of them compares it with the
    /// count it last saw (a change of one is not a position moving).
    pub fn shared_changes(&self) -> u64 {
        self.shared_changes
    }

    /// The shared records whose names start with `prefix`, in name order: (name, value).
    pub fn shared<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a [u8])> {
        self.shared
            .range(prefix.to_string()..)
            .take_while(move |(name, _)| name.starts_with(prefix))
            .map(|(name, value)| (name.as_str(), value.as_slice()))
    }

    /// Takes `record` as the latest of `key`; whether it changed anything.
    pub fn apply(&mut self, key: &PositionKey, record: &PositionRecord) -> bool {
        let entry = self
            .groups
            .entry((key.dlq_topic.clone(), key.group.clone()))
            .or_default();
        let before = entry.clone();
        entry.partitions.insert(key.partition, record.position());
        entry
            .honoured
            .insert(key.partition, record.honoured.clone());
        if record.selection.is_some() {
            entry.selection = record.selection.clone();
        }
        if record.run.is_some() {
            entry.run = record.run.clone();
            entry.operator = record.operator.clone();
        }
        *entry != before
    }

    /// `group`'s positions on `dlq_topic`, if it has any.
    pub fn group(&self, dlq_topic: &str, group: &str) -> Option<&GroupPositions> {
        self.groups.get(&(dlq_topic.to_string(), group.to_string()))
    }

    /// Every group with positions on `dlq_topic`, in name order.
    pub fn groups_of(&self, dlq_topic: &str) -> Vec<(&str, &GroupPositions)> {
        let mut found: Vec<(&str, &GroupPositions)> = self
            .groups
            .iter()
            .filter(|((topic, _), _)| topic == dlq_topic)
            .map(|((_, group), positions)| (group.as_str(), positions))
            .collect();
        found.sort_by_key(|(group, _)| *group);
        found
    }

    /// Every group's positions on every DLT: (DLT, group, positions), in no order.
    pub fn all(&self) -> impl Iterator<Item = (&str, &str, &GroupPositions)> {
        self.groups
            .iter()
            .map(|((topic, group), positions)| (topic.as_str(), group.as_str(), positions))
    }

    /// How many (DLT, group) pairs it holds.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// The position `found` on a partition whose log now ends at `high`, as a replay may resume
/// from it: `None` when it stands past the end, which only a topic deleted and created again
/// (or a log truncated) leaves behind — its offsets name records that are gone, so the
/// partition is read again from its start.
pub fn still_valid(found: Option<&Position>, high: i64) -> Option<&Position> {
    found.filter(|p| p.next <= high)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(next: i64) -> PositionRecord {
        PositionRecord {
            next,
            lost: vec![],
            selection: None,
            run: None,
            operator: None,
            at: Utc::now(),
            migrated: false,
            honoured: Vec::new(),
        }
    }

    #[test]
    fn shared_records_keep_their_latest_value_and_a_tombstone_removes_one() {
        let mut table = PositionTable::default();
        assert!(table.apply_shared("redrive/a", Some(b"1")));
        assert!(table.apply_shared("redrive/a/wanted", Some(b"run")));
        assert!(table.apply_shared("other/x", Some(b"2")));
        assert!(!table.apply_shared("redrive/a", Some(b"1")));
        assert!(table.apply_shared("redrive/a", Some(b"3")));
        let under: Vec<(&str, &[u8])> = table.shared("redrive/").collect();
        assert_eq!(
            under,
            vec![("redrive/a", &b"3"[..]), ("redrive/a/wanted", &b"run"[..])]
        );
        assert!(table.apply_shared("redrive/a", None));
        assert_eq!(table.shared("redrive/").count(), 1);
        assert_eq!(table.shared_changes(), 5);
        // No position key is a shared record's.
        assert_eq!(PositionKey::parse(b"/redrive/a"), None);
    }

    #[test]
    fn a_key_names_topic_partition_and_any_group_and_parses_back() {
        let key = PositionKey {
            dlq_topic: "orders-dlt".into(),
            partition: 3,
            group: "kafka-dlq-replay-00ff/odd:name".into(),
        };
        assert_eq!(
            key.to_string(),
            "orders-dlt/3/kafka-dlq-replay-00ff/odd:name"
        );
        assert_eq!(PositionKey::parse(key.to_string().as_bytes()), Some(key));
        for bad in [
            &b"orders-dlt/x/g"[..],
            b"orders-dlt/1",
            b"/1/g",
            b"t/1/",
            b"\xff/1/g",
        ] {
            assert_eq!(PositionKey::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_latest_record_of_a_key_wins_and_the_group_keeps_its_filter() {
        let mut table = PositionTable::default();
        let key = |partition| PositionKey {
            dlq_topic: "orders-dlt".into(),
            partition,
            group: "g".into(),
        };
        let mut first = record(10);
        first.selection = Some(Filter {
            group: Some("billing".into()),
            ..Filter::default()
        });
        first.run = Some("r1".into());
        assert!(table.apply(&key(0), &first));
        assert!(!table.apply(&key(0), &first), "the same record again");
        let mut later = record(4);
        later.lost = vec![2, 9];
        assert!(table.apply(&key(0), &later));
        assert!(table.apply(&key(1), &record(7)));
        let g = table.group("orders-dlt", "g").unwrap();
        assert_eq!(
            g.partitions[&0],
            Position {
                next: 4,
                lost: vec![2]
            }
        );
        assert_eq!(g.partitions[&1].next, 7);
        assert_eq!(
            g.selection, first.selection,
            "kept from the record that had it"
        );
        assert_eq!(g.run.as_deref(), Some("r1"));
        assert_eq!(table.groups_of("orders-dlt").len(), 1);
        assert!(table.groups_of("payments-dlt").is_empty());
        let value = serde_json::to_string(&later).unwrap();
        assert!(
            !value.contains("selection") && !value.contains("migrated"),
            "{value}"
        );
        assert_eq!(
            serde_json::from_str::<PositionRecord>(&value).unwrap(),
            later
        );
    }

    #[test]
    fn a_position_past_the_end_of_the_log_is_one_of_a_topic_created_again() {
        let p = Position {
            next: 50,
            lost: vec![],
        };
        assert_eq!(still_valid(Some(&p), 50), Some(&p));
        assert_eq!(still_valid(Some(&p), 80), Some(&p));
        assert_eq!(still_valid(Some(&p), 12), None);
        assert_eq!(still_valid(None, 12), None);
    }
}
