//! Resolving heads from outside the consumer: an operator discarded their dead letters, so
//! the records parked behind them may go to the handler. The partition's owner does the
//! release when it reads the `resolved` event written here, as it does for a redrive.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Utc;
use rdkafka::consumer::Consumer as _;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use super::{park_topic, How, ParkEvent};
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

/// A parked key's head found among the dead letters asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundHead {
    /// The dead letter's source record: the head.
    pub head: HeadRef,
    /// Its key.
    pub key: Vec<u8>,
    /// The records of the key parked behind it (0 for the second head of a key found).
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
        // Per partition: each unresolved head's key, and whether its waiting records were
        // counted already.
        let mut heads: BTreeMap<(i32, i64), (&[u8], &super::ParkedKey)> = BTreeMap::new();
        for (partition, table) in &tables {
            for (key, parked) in table.keys() {
                for offset in parked.heads.keys() {
                    heads.insert((*partition, *offset), (key, parked));
                }
            }
        }
        let mut counted: BTreeSet<(i32, &[u8])> = BTreeSet::new();
        for r in refs {
            let Some((key, parked)) = heads.get(&(r.partition, r.offset)) else {
                continue;
            };
            let first = counted.insert((r.partition, key));
            found.push(FoundHead {
                head: r.clone(),
                key: key.to_vec(),
                waiting: if first {
                    parked.waiting.len() as u64
                } else {
                    0
                },
            });
        }
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
