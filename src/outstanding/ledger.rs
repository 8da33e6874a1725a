//! Which dead letters are outstanding: those the replay position has not passed (as the
//! monitor counts them), less those a later action resolved — a discard not restored, or a
//! filtered replay (the console's redrives, `dlq replay` with filters) whose position passed
//! them. Built from the audit topic's run summaries and the replay groups' committed
//! positions; deciding only, no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::dlq_reader::position::Position;
use crate::dlq_reader::{DlqEntry, Filter, REPLAY_GROUP};
use crate::replay::audit::{Action, ReplayRun};

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
    group: String,
}

/// What the audit and the replay positions say of one DLT.
pub struct Ledger {
    /// The unfiltered replay's position per partition.
    replay: HashMap<i32, Position>,
    discards: Vec<Discard>,
    redrives: Vec<Redrive>,
    /// Each filtered replay group's position per partition.
    groups: HashMap<String, HashMap<i32, Position>>,
}

impl Ledger {
    /// The ledger of `dlq_topic` from its audit `runs` (oldest first; those of other topics
    /// are passed over). `positions` gives a replay group's committed position per partition
    /// ([`Ledger::groups`] names the groups asked).
    pub fn new(
        dlq_topic: &str,
        runs: &[ReplayRun],
        mut positions: impl FnMut(&str) -> HashMap<i32, Position>,
    ) -> Ledger {
        let runs: Vec<&ReplayRun> = runs.iter().filter(|r| r.dlq_topic == dlq_topic).collect();
        let restored: HashSet<&str> = runs
            .iter()
            .filter(|r| r.action == Action::Restore)
            .filter_map(|r| r.restores.as_deref())
            .collect();
        let discards = runs
            .iter()
            .filter(|r| r.action == Action::Discard && !restored.contains(r.run.as_str()))
            .filter_map(|r| {
                Some(Discard {
                    run: r.run.clone(),
                    operator: r.operator.clone(),
                    at: r.started,
                    reason: r.reason.clone().unwrap_or_default(),
                    selection: r.selection.clone()?,
                    ends: r.ends.clone(),
                })
            })
            .collect();
        // The latest run of each filtered group names it.
        let mut by_group: BTreeMap<&str, &ReplayRun> = BTreeMap::new();
        for r in &runs {
            match (&r.action, &r.position_group, &r.selection) {
                (Action::Replay, Some(group), Some(_)) if group != REPLAY_GROUP => {
                    by_group.insert(group, r);
                }
                _ => {}
            }
        }
        let redrives: Vec<Redrive> = by_group
            .into_iter()
            .map(|(group, r)| Redrive {
                run: r.run.clone(),
                operator: r.operator.clone(),
                selection: r.selection.clone().unwrap_or_default(),
                group: group.to_string(),
            })
            .collect();
        let groups = redrives
            .iter()
            .map(|r| (r.group.clone(), positions(&r.group)))
            .collect();
        Ledger {
            replay: positions(REPLAY_GROUP),
            discards,
            redrives,
            groups,
        }
    }

    /// The replay groups whose positions [`Ledger::new`] asks: [`REPLAY_GROUP`] and those of
    /// the filtered replays in `runs` of `dlq_topic`.
    pub fn groups(dlq_topic: &str, runs: &[ReplayRun]) -> Vec<String> {
        let mut groups = vec![REPLAY_GROUP.to_string()];
        for r in runs.iter().filter(|r| r.dlq_topic == dlq_topic) {
            if let (Action::Replay, Some(group), Some(_)) =
                (&r.action, &r.position_group, &r.selection)
            {
                if !groups.contains(group) {
                    groups.push(group.clone());
                }
            }
        }
        groups
    }

    /// The first offset of `partition` that may be outstanding: the replay position, or its
    /// first dead letter passed over unsent.
    pub fn first_outstanding(&self, partition: i32) -> i64 {
        match self.replay.get(&partition) {
            None => 0,
            Some(p) => p.lost.first().copied().unwrap_or(p.next).min(p.next),
        }
    }

    /// Why `entry` is no longer outstanding; `None` when it is.
    pub fn resolution(&self, entry: &DlqEntry) -> Option<Resolution> {
        if passed(self.replay.get(&entry.partition), entry.offset) {
            return Some(Resolution::Replayed);
        }
        for d in &self.discards {
            let before_end = d
                .ends
                .get(&entry.partition)
                .is_some_and(|end| entry.offset < *end);
            if before_end && d.selection.matches(entry) {
                return Some(Resolution::Discarded {
                    run: d.run.clone(),
                    operator: d.operator.clone(),
                    at: d.at,
                    reason: d.reason.clone(),
                });
            }
        }
        for r in &self.redrives {
            let position = self
                .groups
                .get(&r.group)
                .and_then(|g| g.get(&entry.partition));
            if passed(position, entry.offset) && r.selection.matches(entry) {
                return Some(Resolution::Redriven {
                    run: r.run.clone(),
                    operator: r.operator.clone(),
                });
            }
        }
        None
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

    fn position(next: i64, lost: &[i64]) -> HashMap<i32, Position> {
        HashMap::from([(
            0,
            Position {
                next,
                lost: lost.to_vec(),
            },
        )])
    }

    #[test]
    fn the_replay_position_resolves_what_it_passed_and_sent() {
        let ledger = Ledger::new("orders-dlt", &[], |_| position(10, &[4]));
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
    fn a_discard_resolves_what_it_selected_before_its_ends_until_restored() {
        let mut discard = run(Action::Discard, "d1");
        discard.selection = Some(Filter {
            group: Some("billing".into()),
            ..Filter::default()
        });
        discard.ends = BTreeMap::from([(0, 20)]);
        discard.reason = Some("test data".into());
        let ledger = Ledger::new("orders-dlt", &[discard.clone()], |_| HashMap::new());
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
        let ledger = Ledger::new("orders-dlt", &[discard, restore], |_| HashMap::new());
        assert_eq!(ledger.resolution(&entry("billing", 0, 5)), None);
    }

    #[test]
    fn a_filtered_replay_resolves_what_its_position_passed_and_its_filter_selects() {
        let mut redrive = run(Action::Replay, "x1");
        redrive.selection = Some(Filter {
            group: Some("billing".into()),
            ..Filter::default()
        });
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
        let ledger = Ledger::new("orders-dlt", &runs, |group| {
            if group == REPLAY_GROUP {
                HashMap::new()
            } else {
                position(8, &[2])
            }
        });
        assert!(matches!(
            ledger.resolution(&entry("billing", 0, 5)),
            Some(Resolution::Redriven { ref run, .. }) if run == "x1"
        ));
        assert_eq!(
            ledger.resolution(&entry("billing", 0, 2)),
            None,
            "refused, unsent"
        );
        assert_eq!(ledger.resolution(&entry("billing", 0, 8)), None);
        assert_eq!(ledger.resolution(&entry("shipping", 0, 5)), None);
    }
}
