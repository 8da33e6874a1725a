//! Which dead letters are outstanding: those the unfiltered replay's position has not passed
//! (or passed unsent), less those a later action resolved — a discard not restored, or a
//! filtered replay (the console's redrives, `dlq replay` with filters or `--to`) whose
//! position passed them and sent them. Built from the audit's run summaries (discards and
//! restores) and the positions topic (every replay group's position and filter); deciding
//! only, no I/O. The monitor, the console, `dlq list` and `dlq replay` all decide with it, so
//! they agree after any idle time.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::audit::{Action, ReplayRun};
use super::position_record::{still_valid, PositionTable};
use crate::dlq_reader::position::Position;
use crate::dlq_reader::{DlqEntry, Filter, REPLAY_GROUP};

/// Why a dead letter is no longer outstanding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Resolution {
    /// The unfiltered replay passed it.
    Replayed,
    /// A filtered replay (a redrive) sent it.
    Redriven {
        /// The run that sent it last.
        run: String,
        /// Who ran it.
        operator: String,
    },
    /// Discarded.
    Discarded {
        /// The discard's run id (restoring it makes the dead letter outstanding again).
        run: String,
        /// Who discarded it.
        operator: String,
        /// When.
        at: DateTime<Utc>,
        /// Why.
        reason: String,
    },
}

struct Discard {
    run: String,
    operator: String,
    at: DateTime<Utc>,
    reason: String,
    selection: Filter,
    ends: BTreeMap<i32, i64>,
}

struct Redrive {
    run: String,
    operator: String,
    selection: Filter,
    positions: HashMap<i32, Position>,
    honoured: BTreeMap<i32, Vec<String>>,
}

/// What the audit and the replay positions say of one DLT.
pub struct Ledger {
    /// The unfiltered replay's position per partition.
    replay: HashMap<i32, Position>,
    /// Per partition, the discards whose dead letters the unfiltered replay passed unsent.
    replay_honoured: BTreeMap<i32, Vec<String>>,
    discards: Vec<Discard>,
    /// Every discard, restored or not: a position that passed its dead letters unsent did not
    /// send them.
    all_discards: Vec<Discard>,
    redrives: Vec<Redrive>,
}

impl Ledger {
    /// The ledger of `dlq_topic`, whose partitions end at `ends` now (a position past its
    /// partition's end belongs to a topic deleted and created again, and counts for nothing:
    /// [`still_valid`]), from its audit `runs` (oldest first; those of other topics are passed
    /// over) and the positions `table`.
    pub fn new(
        dlq_topic: &str,
        ends: &HashMap<i32, i64>,
        runs: &[ReplayRun],
        table: &PositionTable,
    ) -> Ledger {
        let runs: Vec<&ReplayRun> = runs.iter().filter(|r| r.dlq_topic == dlq_topic).collect();
        let restored: HashSet<&str> = runs
            .iter()
            .filter(|r| r.action == Action::Restore)
            .filter_map(|r| r.restores.as_deref())
            .collect();
        let discard = |r: &&&ReplayRun| {
            Some(Discard {
                run: r.run.clone(),
                operator: r.operator.clone(),
                at: r.started,
                reason: r.reason.clone().unwrap_or_default(),
                selection: r.selection.clone()?,
                ends: r.ends.clone(),
            })
        };
        let all_discards: Vec<Discard> = runs
            .iter()
            .filter(|r| r.action == Action::Discard)
            .filter_map(|r| discard(&r))
            .collect();
        let discards = runs
            .iter()
            .filter(|r| r.action == Action::Discard && !restored.contains(r.run.as_str()))
            .filter_map(|r| discard(&r))
            .collect();
        // The latest run of each group names who moved it, when its position does not say.
        let mut last_run: HashMap<&str, &ReplayRun> = HashMap::new();
        for r in &runs {
            if let (Action::Replay, Some(group)) = (&r.action, &r.position_group) {
                last_run.insert(group, r);
            }
        }
        let valid = |positions: &BTreeMap<i32, Position>| -> HashMap<i32, Position> {
            positions
                .iter()
                .filter_map(|(p, position)| {
                    let end = ends.get(p).copied().unwrap_or(i64::MAX);
                    still_valid(Some(position), end).map(|v| (*p, v.clone()))
                })
                .collect()
        };
        let mut replay = HashMap::new();
        let mut replay_honoured = BTreeMap::new();
        let mut redrives = Vec::new();
        for (group, found) in table.groups_of(dlq_topic) {
            if group == REPLAY_GROUP {
                replay = valid(&found.partitions);
                replay_honoured = found.honoured.clone();
                continue;
            }
            let run = last_run.get(group);
            let Some(selection) = found
                .selection
                .clone()
                .or_else(|| run.and_then(|r| r.selection.clone()))
            else {
                continue; // a group no replay of kafka-dlq names
            };
            redrives.push(Redrive {
                run: found
                    .run
                    .clone()
                    .or_else(|| run.map(|r| r.run.clone()))
                    .unwrap_or_default(),
                operator: found
                    .operator
                    .clone()
                    .or_else(|| run.map(|r| r.operator.clone()))
                    .unwrap_or_default(),
                selection,
                positions: valid(&found.partitions),
                honoured: found.honoured.clone(),
            });
        }
        Ledger {
            replay,
            replay_honoured,
            discards,
            all_discards,
            redrives,
        }
    }

    /// Whether a position that passed `entry` with `honoured` (the discards it passed unsent
    /// on the entry's partition) sent it: not when one of those discards selected it.
    fn sent(&self, honoured: Option<&Vec<String>>, entry: &DlqEntry) -> bool {
        let Some(honoured) = honoured.filter(|h| !h.is_empty()) else {
            return true;
        };
        !self
            .all_discards
            .iter()
            .filter(|d| honoured.contains(&d.run))
            .any(|d| d.covers(entry))
    }

    /// The replay groups named in `runs` of `dlq_topic`: those whose committed offsets a
    /// positions topic without them is migrated from ([`super::PositionStore::migrate`]).
    pub fn groups(dlq_topic: &str, runs: &[ReplayRun]) -> Vec<String> {
        let mut groups = vec![REPLAY_GROUP.to_string()];
        for r in runs.iter().filter(|r| r.dlq_topic == dlq_topic) {
            if let (Action::Replay, Some(group)) = (&r.action, &r.position_group) {
                if !groups.contains(group) {
                    groups.push(group.clone());
                }
            }
        }
        groups
    }

    /// The first offset of `partition` that may be outstanding: the replay position, or its
    /// first dead letter passed over unsent (the log start when it passed a discard's dead
    /// letters unsent and that discard was restored).
    pub fn first_outstanding(&self, partition: i32) -> i64 {
        // Passed unsent under a discard since restored: anywhere before the position.
        let restored = self.replay_honoured.get(&partition).is_some_and(|runs| {
            runs.iter()
                .any(|run| !self.discards.iter().any(|d| d.run == *run))
        });
        match self.replay.get(&partition) {
            None => 0,
            Some(_) if restored => 0,
            Some(p) => p.lost.first().copied().unwrap_or(p.next).min(p.next),
        }
    }

    /// The unfiltered replay's position on `partition`, if it has one.
    pub fn replay_position(&self, partition: i32) -> Option<&Position> {
        self.replay.get(&partition)
    }

    /// Why `entry` is no longer outstanding; `None` when it is. A position that passed it
    /// while a discard selected it did not send it: restored, it is outstanding again.
    pub fn resolution(&self, entry: &DlqEntry) -> Option<Resolution> {
        let honoured = self.replay_honoured.get(&entry.partition);
        if passed(self.replay.get(&entry.partition), entry.offset) && self.sent(honoured, entry) {
            return Some(Resolution::Replayed);
        }
        for d in &self.discards {
            if d.covers(entry) {
                return Some(Resolution::Discarded {
                    run: d.run.clone(),
                    operator: d.operator.clone(),
                    at: d.at,
                    reason: d.reason.clone(),
                });
            }
        }
        for r in &self.redrives {
            let sent = self.sent(r.honoured.get(&entry.partition), entry);
            if passed(r.positions.get(&entry.partition), entry.offset)
                && sent
                && r.selection.matches(entry)
            {
                return Some(Resolution::Redriven {
                    run: r.run.clone(),
                    operator: r.operator.clone(),
                });
            }
        }
        None
    }
}

impl Discard {
    /// Whether it discarded `entry`: selected, and written before the discard.
    fn covers(&self, entry: &DlqEntry) -> bool {
        let before_end = self
            .ends
            .get(&entry.partition)
            .is_some_and(|end| entry.offset < *end);
        before_end && self.selection.matches(entry)
    }
}

/// Whether `position` passed `offset` and sent it (not one it passed over unsent).
fn passed(position: Option<&Position>, offset: i64) -> bool {
    position.is_some_and(|p| offset < p.next && p.lost.binary_search(&offset).is_err())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::dlq_reader::DlqContent;
    use crate::failure::DeadLetterKind;
    use crate::record::Record;
    use crate::state::{PositionKey, PositionRecord};

    fn entry(group: &str, partition: i32, offset: i64) -> DlqEntry {
        let record = Record::new("orders", 0, offset).with_id(format!("o-{offset}"));
        DlqEntry {
            topic: "orders-dlt".into(),
            partition,
            offset,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(Envelope::new(
                &record,
                DeadLetterKind::Permanent,
                "bad json",
                1,
                group,
            ))),
            unresolved: None,
        }
    }

    fn run(action: Action, id: &str) -> ReplayRun {
        let mut r = ReplayRun::record(action, "alice", "orders-dlt");
        r.run = id.into();
        r
    }

    /// A position of a group: group, partition, next offset, passed-over offsets, filter.
    type Entry<'a> = (&'a str, i32, i64, &'a [i64], Option<Filter>);

    fn table(entries: &[Entry]) -> PositionTable {
        let mut table = PositionTable::default();
        for (group, partition, next, lost, selection) in entries {
            let key = PositionKey {
                dlq_topic: "orders-dlt".into(),
                partition: *partition,
                group: group.to_string(),
            };
            let record = PositionRecord {
                next: *next,
                lost: lost.to_vec(),
                selection: selection.clone(),
                run: Some("x1".into()),
                operator: Some("bob".into()),
                at: Utc::now(),
                migrated: false,
                honoured: Vec::new(),
            };
            table.apply(&key, &record);
        }
        table
    }

    fn ends() -> HashMap<i32, i64> {
        HashMap::from([(0, 100), (1, 100)])
    }

    #[test]
    fn the_replay_position_resolves_what_it_passed_and_sent() {
        let t = table(&[(REPLAY_GROUP, 0, 10, &[4], None)]);
        let ledger = Ledger::new("orders-dlt", &ends(), &[], &t);
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 3)),
            Some(Resolution::Replayed)
        );
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 4)),
            None,
            "passed over unsent"
        );
        assert_eq!(ledger.resolution(&entry("billing", 0, 10)), None);
        assert_eq!(
            ledger.resolution(&entry("billing", 1, 0)),
            None,
            "no position there"
        );
        assert_eq!(ledger.first_outstanding(0), 4);
        assert_eq!(ledger.first_outstanding(1), 0);
    }

    #[test]
    fn a_position_past_the_end_is_of_a_topic_created_again_and_resolves_nothing() {
        let t = table(&[(REPLAY_GROUP, 0, 10, &[], None)]);
        let recreated = HashMap::from([(0, 3)]);
        let ledger = Ledger::new("orders-dlt", &recreated, &[], &t);
        assert_eq!(ledger.resolution(&entry("billing", 0, 1)), None);
        assert_eq!(ledger.first_outstanding(0), 0);
    }

    #[test]
    fn a_discard_resolves_what_it_selected_before_its_ends_until_restored() {
        let mut discard = run(Action::Discard, "d1");
        discard.selection = Some(Filter {
            group: Some("billing".into()),
            ..Filter::default()
        });
        discard.ends = BTreeMap::from([(0, 20)]);
        discard.reason = Some("test data".into());
        let none = PositionTable::default();
        let ledger = Ledger::new("orders-dlt", &ends(), &[discard.clone()], &none);
        assert!(matches!(
            ledger.resolution(&entry("billing", 0, 5)),
            Some(Resolution::Discarded { ref reason, .. }) if reason == "test data"
        ));
        assert_eq!(ledger.resolution(&entry("shipping", 0, 5)), None);
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 20)),
            None,
            "written after it"
        );
        assert_eq!(ledger.resolution(&entry("billing", 1, 5)), None);
        let mut restore = run(Action::Restore, "r1");
        restore.restores = Some("d1".into());
        let ledger = Ledger::new("orders-dlt", &ends(), &[discard, restore], &none);
        assert_eq!(ledger.resolution(&entry("billing", 0, 5)), None);
    }

    #[test]
    fn a_discarded_dead_letter_a_replay_passed_unsent_is_outstanding_once_restored() {
        let mut discard = run(Action::Discard, "d1");
        discard.selection = Some(Filter {
            group: Some("shipping".into()),
            ..Filter::default()
        });
        discard.ends = BTreeMap::from([(0, 20)]);
        let mut t = table(&[(REPLAY_GROUP, 0, 10, &[], None)]);
        let key = PositionKey {
            dlq_topic: "orders-dlt".into(),
            partition: 0,
            group: REPLAY_GROUP.into(),
        };
        let honouring = PositionRecord {
            honoured: vec!["d1".into()],
            ..PositionRecord {
                next: 10,
                lost: vec![],
                selection: None,
                run: None,
                operator: None,
                at: Utc::now(),
                migrated: false,
                honoured: vec![],
            }
        };
        t.apply(&key, &honouring);
        let ledger = Ledger::new("orders-dlt", &ends(), &[discard.clone()], &t);
        assert!(matches!(
            ledger.resolution(&entry("shipping", 0, 5)),
            Some(Resolution::Discarded { .. })
        ));
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 5)),
            Some(Resolution::Replayed)
        );
        let mut restore = run(Action::Restore, "r1");
        restore.restores = Some("d1".into());
        let ledger = Ledger::new("orders-dlt", &ends(), &[discard, restore], &t);
        assert_eq!(
            ledger.resolution(&entry("shipping", 0, 5)),
            None,
            "the replay never sent it"
        );
        assert_eq!(ledger.first_outstanding(0), 0);
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 5)),
            Some(Resolution::Replayed)
        );
    }

    #[test]
    fn a_filtered_replay_resolves_what_its_position_passed_and_its_filter_selects() {
        let billing = Filter {
            group: Some("billing".into()),
            ..Filter::default()
        };
        // The filter comes with the position: no audit summary needed.
        let t = table(&[("kafka-dlq-replay-00ab", 0, 8, &[2], Some(billing.clone()))]);
        let ledger = Ledger::new("orders-dlt", &ends(), &[], &t);
        assert!(matches!(
            ledger.resolution(&entry("billing", 0, 5)),
            Some(Resolution::Redriven { ref run, ref operator }) if run == "x1" && operator == "bob"
        ));
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 2)),
            None,
            "refused, unsent"
        );
        assert_eq!(ledger.resolution(&entry("billing", 0, 8)), None);
        assert_eq!(ledger.resolution(&entry("shipping", 0, 5)), None);
        // A migrated position without a filter takes it from the group's last summary.
        let t = table(&[("kafka-dlq-replay-00ab", 0, 8, &[], None)]);
        let mut redrive = run(Action::Replay, "x0");
        redrive.selection = Some(billing);
        redrive.position_group = Some("kafka-dlq-replay-00ab".into());
        let other_topic = ReplayRun {
            dlq_topic: "payments-dlt".into(),
            ..redrive.clone()
        };
        let runs = [redrive, other_topic];
        assert_eq!(
            Ledger::groups("orders-dlt", &runs),
            [REPLAY_GROUP, "kafka-dlq-replay-00ab"]
        );
        let ledger = Ledger::new("orders-dlt", &ends(), &runs, &t);
        assert!(ledger.resolution(&entry("billing", 0, 5)).is_some());
        assert_eq!(ledger.resolution(&entry("shipping", 0, 5)), None);
        // Neither a filter nor a summary: a group kafka-dlq does not know resolves nothing.
        let ledger = Ledger::new("orders-dlt", &ends(), &[], &t);
        assert_eq!(ledger.resolution(&entry("billing", 0, 5)), None);
    }
}
