//! Resolving heads from outside the consumer: an operator discarded their dead letters, so
//! the records parked behind them may go to the handler. The partition's owner does the
//! release when it reads the `resolved` event written here, as it does for a redrive.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use rdkafka::consumer::Consumer as _;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use super::{park_topic, How, ParkEvent, ParkTable};
use crate::kafka::LogContext;

/// A dead letter's source record, which may be a parked key's head: the source topic, the
/// consumer group that dead-lettered it, and its partition and offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeadRef {
    /// The source topic.
    pub source: String,
    /// The consumer group whose park log would hold it.
    pub group: String,
    /// The source partition.
    pub partition: i32,
    /// The source offset.
    pub offset: i64,
}

/// The names of the cluster's topics that may be park logs (named `…-park-…`), read with a
/// client of `config`. Blocking.
pub fn park_logs(config: &ClientConfig) -> Result<BTreeSet<String>, KafkaError> {
    let consumer = super::read::reader(config)?;
    let metadata = consumer.fetch_metadata(None, std::time::Duration::from_secs(30))?;
    Ok(metadata
        .topics()
        .iter()
        .map(|t| t.name())
        .filter(|name| name.contains("-park-"))
        .map(str::to_string)
        .collect())
}

/// An unresolved head in a park log's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved<'a> {
    /// Where it is.
    pub head: HeadRef,
    /// Its key.
    pub key: &'a [u8],
    /// Its dead letter's (or retry record's) id.
    pub id: &'a str,
    /// When it first left.
    pub since: DateTime<Utc>,
    /// The records of its key waiting, at the key's first head; 0 at the others (a key has
    /// more than one head only when a record failed again before the first was settled),
    /// so that a sum over heads counts each key's records once.
    pub waiting: u64,
    /// It is its key's first head.
    pub first: bool,
}

/// Every unresolved head of `tables`, the partitions of `source`'s park log of `group`, key
/// by key, each key's heads in source order.
pub fn unresolved<'a>(
    source: &'a str,
    group: &'a str,
    tables: &'a [(i32, ParkTable)],
) -> impl Iterator<Item = Unresolved<'a>> + 'a {
    tables.iter().flat_map(move |(partition, table)| {
        table.keys().flat_map(move |(key, parked)| {
            parked
                .heads
                .values()
                .enumerate()
                .map(move |(i, head)| Unresolved {
                    head: HeadRef {
                        source: source.to_string(),
                        group: group.to_string(),
                        partition: *partition,
                        offset: head.offset,
                    },
                    key,
                    id: &head.id,
                    since: head.since,
                    waiting: match i {
                        0 => parked.waiting.len() as u64,
                        _ => 0,
                    },
                    first: i == 0,
                })
        })
    })
}

/// A parked key's head found among the dead letters asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundHead {
    /// The dead letter's source record: the head.
    pub head: HeadRef,
    /// Its key.
    pub key: Vec<u8>,
    /// The records of the key parked behind it (0 unless it is the key's first head).
    pub waiting: u64,
}

/// Parked keys and the records waiting behind them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitingBehind {
    /// Parked keys.
    pub keys: u64,
    /// Records parked behind their heads.
    pub records: u64,
}

impl WaitingBehind {
    /// What waits behind `heads`.
    pub fn of(heads: &[FoundHead]) -> Self {
        let keys: BTreeSet<(&str, &str, i32, &[u8])> = heads
            .iter()
            .map(|f| {
                (
                    f.head.source.as_str(),
                    f.head.group.as_str(),
                    f.head.partition,
                    f.key.as_slice(),
                )
            })
            .collect();
        Self {
            keys: keys.len() as u64,
            records: heads.iter().map(|f| f.waiting).sum(),
        }
    }
}

/// The heads among `refs` that are unresolved heads of their park logs now, with their keys
/// and the records waiting behind them; park logs that do not exist (the group does not
/// park) are passed over. Reads each park log involved whole, with clients of `config`.
/// Blocking.
pub fn find(config: &ClientConfig, refs: &BTreeSet<HeadRef>) -> Result<Vec<FoundHead>, KafkaError> {
    let mut logs: BTreeMap<String, Vec<&HeadRef>> = BTreeMap::new();
    for r in refs {
        logs.entry(park_topic(&r.source, &r.group))
            .or_default()
            .push(r);
    }
    let mut found = Vec::new();
    for (topic, refs) in logs {
        let tables = match super::read::tables(config, &topic) {
            Ok(tables) => tables,
            Err(KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
            )) => continue,
            Err(error) => return Err(error),
        };
        let (source, group) = (&refs[0].source, &refs[0].group);
        let heads: BTreeMap<HeadRef, Unresolved<'_>> = unresolved(source, group, &tables)
            .map(|u| (u.head.clone(), u))
            .collect();
        found.extend(refs.into_iter().filter_map(|r| {
            heads.get(r).map(|u| FoundHead {
                head: r.clone(),
                key: u.key.to_vec(),
                waiting: u.waiting,
            })
        }));
    }
    Ok(found)
}

/// Writes a `resolved` event (how `how`, by `by`) for each head [`find`] returned, and waits
/// for each acknowledgement; the partitions' owners then release the keys in order. What
/// they release ([`WaitingBehind::of`] the heads). Fails on the first write refused, naming
/// the park log; writing again is harmless (a head resolved twice changes nothing).
pub async fn resolve(
    config: &ClientConfig,
    heads: &[FoundHead],
    how: How,
    by: &str,
) -> Result<WaitingBehind, ResolveError> {
    if heads.is_empty() {
        return Ok(WaitingBehind::default());
    }
    let producer: FutureProducer<LogContext> =
        crate::kafka::create_logged(config).map_err(|error| ResolveError {
            topic: String::new(),
            error,
        })?;
    let at = Utc::now();
    for FoundHead { head, key, .. } in heads {
        let topic = park_topic(&head.source, &head.group);
        let event = ParkEvent::Resolved {
            key: key.clone(),
            head: head.offset,
            how,
            by: by.to_string(),
            at,
        };
        let (headers, value) = event.encode();
        let refused = |error| ResolveError {
            topic: topic.clone(),
            error,
        };
        let delivery = super::write::send(
            &producer,
            &topic,
            head.partition,
            key,
            &headers,
            value.as_deref(),
        )
        .map_err(refused)?;
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => return Err(refused(error)),
            Err(_) => return Err(refused(KafkaError::Canceled)),
        }
    }
    Ok(WaitingBehind::of(heads))
}

/// A `resolved` event that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to the park log {topic}: {error}")]
pub struct ResolveError {
    /// The park log (empty: the producer could not be made).
    pub topic: String,
    /// Kafka's error.
    pub error: KafkaError,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::park::table::tests::{head, parked};

    #[test]
    fn a_keys_waiting_records_are_counted_at_its_first_head_only() {
        let mut table = ParkTable::default();
        // b/5 failed again before b/4 was settled: a second head of b.
        let events = [
            head("a", 1),
            parked("a", 2),
            head("b", 4),
            head("b", 5),
            parked("b", 6),
            parked("b", 7),
        ];
        for (at, event) in events.iter().enumerate() {
            table.apply(at as i64, event);
        }
        let tables = [(3, table)];
        let found: Vec<(i64, &[u8], u64, bool)> = unresolved("orders", "billing", &tables)
            .map(|u| (u.head.offset, u.key, u.waiting, u.first))
            .collect();
        assert_eq!(
            found,
            [
                (1, &b"a"[..], 1, true),
                (4, &b"b"[..], 2, true),
                (5, &b"b"[..], 0, false)
            ]
        );
        let first = unresolved("orders", "billing", &tables).next().unwrap();
        assert_eq!(
            (first.head.partition, first.id, first.head.group.as_str()),
            (3, "orders-0-1", "billing")
        );
    }
}
