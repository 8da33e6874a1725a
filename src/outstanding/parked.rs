//! The parked keys behind outstanding dead letters (`key_order_after_failure = "park"`): the
//! park logs of the groups whose dead letters are outstanding, read as their owners read
//! them, so that the console can say how many records wait behind a dead letter, a cause, or
//! a selection about to be redriven or discarded.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};

use crate::kafka::LogContext;
use crate::park::resolve::{unresolved, HeadRef, WaitingBehind};
use crate::park::{park_topic, ParkTable};

/// The record a dead letter came from, as its envelope says: a parked key's head if its group
/// parks. `None` when the envelope names no group (a foreign writer's): no park log holds it.
pub fn head_of(source: &crate::dlq::EnvelopeSource) -> Option<HeadRef> {
    (!source.group.is_empty()).then(|| HeadRef {
        source: source.topic.clone(),
        group: source.group.clone(),
        partition: source.partition,
        offset: source.offset,
    })
}

/// An unresolved head, as its park log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadState {
    /// The records of its key parked behind it (behind every head of the key: a key has one
    /// head but for a record that failed again before its first failure was settled).
    pub waiting: u64,
    /// When it first left.
    pub since: DateTime<Utc>,
    /// It is its key's first head (where the key and its waiting records are counted).
    pub first: bool,
}

/// What waits behind some dead letters (a cause's, a selection's), as the API answers it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// Keys parked behind them.
    pub keys: u64,
    /// Records waiting behind those keys' heads.
    pub records: u64,
    /// When the oldest of those heads left; `None` when none is parked.
    pub oldest: Option<DateTime<Utc>>,
}

impl Parked {
    /// Counts `head`: its key and waiting records when it is its key's first head.
    pub fn add(&mut self, head: HeadState) {
        self.keys += u64::from(head.first);
        self.records += head.waiting;
        self.oldest = Some(self.oldest.map_or(head.since, |o| o.min(head.since)));
    }

    /// The keys and records, as a release would say them.
    pub fn behind(&self) -> WaitingBehind {
        WaitingBehind {
            keys: self.keys,
            records: self.records,
        }
    }
}

/// One park log as last read.
struct Log {
    source: String,
    group: String,
    tables: Vec<(i32, ParkTable)>,
}

/// The park logs of some groups, read up to their ends at each [`ParkLogs::catch_up`].
/// Holds offsets only (the tables), as each partition's owner does.
#[derive(Default)]
pub struct ParkLogs {
    reader: Option<BaseConsumer<LogContext>>,
    logs: BTreeMap<String, Log>,
}

impl ParkLogs {
    /// Reads on the park logs of `pairs` (source topic, group) that exist, with a client of
    /// `config` made once; a log that is gone, or of a pair no longer asked for, is
    /// forgotten. Their unresolved heads now. Blocking.
    pub fn catch_up(
        &mut self,
        config: &ClientConfig,
        pairs: &BTreeSet<(String, String)>,
    ) -> Result<Heads, KafkaError> {
        let wanted: BTreeMap<String, &(String, String)> = pairs
            .iter()
            .map(|pair| (park_topic(&pair.0, &pair.1), pair))
            .collect();
        self.logs.retain(|topic, _| wanted.contains_key(topic));
        if wanted.is_empty() {
            return Ok(Heads::default());
        }
        if self.reader.is_none() {
            self.reader = Some(crate::park::read::reader(config)?);
        }
        let reader = self.reader.as_ref().expect("made above");
        // One look at the cluster's topics: most groups do not park, and asking for each
        // park log that is not there would cost a request per group every time.
        let metadata = reader.fetch_metadata(None, std::time::Duration::from_secs(30))?;
        let existing: BTreeSet<&str> = metadata.topics().iter().map(|t| t.name()).collect();
        self.logs
            .retain(|topic, _| existing.contains(topic.as_str()));
        for (topic, (source, group)) in wanted {
            if !existing.contains(topic.as_str()) {
                continue;
            }
            let log = self.logs.entry(topic.clone()).or_insert_with(|| Log {
                source: source.clone(),
                group: group.clone(),
                tables: Vec::new(),
            });
            match crate::park::read::catch_up(reader, &topic, &mut log.tables) {
                Ok(()) => {}
                Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)) => {
                    self.logs.remove(&topic);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(heads_of(&self.logs))
    }

    /// Whether the group `pair.1` parks records of `pair.0` (its park log was read).
    pub fn parks(&self, pair: &(String, String)) -> bool {
        self.logs.contains_key(&park_topic(&pair.0, &pair.1))
    }
}

/// The unresolved heads of the park logs read, as of one [`ParkLogs::catch_up`].
#[derive(Debug, Clone, Default)]
pub struct Heads {
    heads: BTreeMap<HeadRef, HeadState>,
    /// Each head's dead letter (or retry record) id.
    ids: std::collections::HashMap<String, HeadRef>,
}

impl Heads {
    /// Heads as given (no ids): for tests of what reads them.
    #[cfg(test)]
    pub(crate) fn of_heads(heads: impl IntoIterator<Item = (HeadRef, HeadState)>) -> Self {
        Self {
            heads: heads.into_iter().collect(),
            ids: std::collections::HashMap::new(),
        }
    }

    /// The head whose dead letter has record id `id`, when one is parked.
    pub fn by_id(&self, id: &str) -> Option<HeadState> {
        self.ids.get(id).and_then(|at| self.head(at))
    }

    /// `head`'s state when it is an unresolved head.
    pub fn head(&self, head: &HeadRef) -> Option<HeadState> {
        self.heads.get(head).copied()
    }

    /// Whether no head is parked.
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// What waits behind `refs`: the unresolved heads among them, each once (a record
    /// dead-lettered twice is one head).
    pub fn behind<'a>(&self, refs: impl IntoIterator<Item = &'a HeadRef>) -> Parked {
        let mut parked = Parked::default();
        let mut counted = BTreeSet::new();
        for r in refs {
            if let Some(head) = self.head(r).filter(|_| counted.insert(r)) {
                parked.add(head);
            }
        }
        parked
    }
}

/// The unresolved heads of `logs`, each with its key's waiting records (counted at the key's
/// first head only), and by their dead letters' ids.
fn heads_of(logs: &BTreeMap<String, Log>) -> Heads {
    let mut found = Heads::default();
    for log in logs.values() {
        for u in unresolved(&log.source, &log.group, &log.tables) {
            found.ids.insert(u.id.to_string(), u.head.clone());
            let state = HeadState {
                waiting: u.waiting,
                since: u.since,
                first: u.first,
            };
            found.heads.insert(u.head, state);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::park::{Cause, ParkEvent};

    fn log_of(events: &[ParkEvent]) -> Log {
        let mut table = ParkTable::default();
        for (at, event) in events.iter().enumerate() {
            table.apply(at as i64, event);
        }
        Log {
            source: "orders".into(),
            group: "billing".into(),
            tables: vec![(0, table)],
        }
    }

    fn head(key: &str, offset: i64, since: DateTime<Utc>) -> ParkEvent {
        ParkEvent::Head {
            key: key.as_bytes().to_vec(),
            offset,
            id: format!("orders-0-{offset}"),
            cause: Cause::DeadLetter,
            at: since,
        }
    }

    fn parked(key: &str, offset: i64) -> ParkEvent {
        ParkEvent::Parked {
            key: key.as_bytes().to_vec(),
            offset,
            id: format!("orders-0-{offset}"),
            timestamp: None,
            headers: Vec::new(),
            value: None,
        }
    }

    fn at(offset: i64) -> HeadRef {
        HeadRef {
            source: "orders".into(),
            group: "billing".into(),
            partition: 0,
            offset,
        }
    }

    #[test]
    fn a_heads_waiting_records_are_counted_once_per_key_and_the_oldest_head_is_named() {
        let early = DateTime::from_timestamp(1_000, 0).unwrap();
        let late = DateTime::from_timestamp(2_000, 0).unwrap();
        let logs = BTreeMap::from([(
            "orders-park-billing".to_string(),
            log_of(&[
                head("a", 1, late),
                parked("a", 2),
                parked("a", 3),
                head("b", 4, early),
                // b/5 failed again before b/4 was settled: a second head of b.
                head("b", 5, late),
                parked("b", 6),
            ]),
        )]);
        let heads = heads_of(&logs);
        assert_eq!(heads.head(&at(1)).unwrap().waiting, 2);
        assert_eq!(heads.head(&at(4)).unwrap().waiting, 1);
        assert_eq!(heads.head(&at(5)).unwrap().waiting, 0);
        assert_eq!(heads.head(&at(2)), None, "a waiting record is no head");
        let behind = heads.behind(&[at(1), at(4), at(5), at(9), at(1)]);
        assert_eq!((behind.keys, behind.records), (2, 3));
        assert_eq!(behind.oldest, Some(early));
        assert_eq!(heads.behind(&[at(9)]), Parked::default());
        assert_eq!(heads.by_id("orders-0-1"), heads.head(&at(1)));
        assert_eq!(heads.by_id("orders-0-2"), None);
    }
}
