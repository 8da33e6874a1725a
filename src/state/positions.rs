//! Reading and writing the positions topic ([`super::position_record`]): one reader follows the
//! whole (compacted, small) topic and keeps the latest record of every key; a write is done
//! once the broker acknowledged it (`acks=all`, idempotent).
//!
//! A replay reads its group's positions when it starts and writes them as it goes; the
//! console and the monitor keep one store each and catch up once a tick, however many
//! groups there are.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::position_record::{PositionKey, PositionRecord, PositionTable, SHARED_PREFIX};
use super::{seal, StateError, StateTopics};
use crate::dlq_reader::position::Position;
use crate::kafka::{ClientOptions, LogContext};

const TIMEOUT: Duration = Duration::from_secs(10);
/// A catch-up that gets no record for this long gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The positions topic, as read so far, and a writer to it.
pub struct PositionStore {
    brokers: String,
    options: ClientOptions,
    topics: StateTopics,
    reader: Option<Arc<BaseConsumer<LogContext>>>,
    /// Per partition of the positions topic: the next offset to read.
    next: HashMap<i32, i64>,
    table: PositionTable,
    /// Records passed over: not sealed with the configured key, or not a position record.
    unverified: u64,
    producer: Option<FutureProducer<LogContext>>,
    /// The (DLT, group) pairs whose committed offsets were looked at already.
    migrated: HashSet<(String, String)>,
}

impl PositionStore {
    /// A store of `topics`' positions topic on `brokers`; nothing is read until
    /// [`PositionStore::catch_up`].
    pub fn new(brokers: &str, options: &ClientOptions, topics: &StateTopics) -> PositionStore {
        PositionStore {
            brokers: brokers.to_string(),
            options: options.clone(),
            topics: topics.clone(),
            reader: None,
            next: HashMap::new(),
            table: PositionTable::default(),
            unverified: 0,
            producer: None,
            migrated: HashSet::new(),
        }
    }

    /// The positions read so far.
    pub fn table(&self) -> &PositionTable {
        &self.table
    }

    /// Records passed over so far because they were not sealed with the configured key (or
    /// were not position records at all).
    pub fn unverified(&self) -> u64 {
        self.unverified
    }

    fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        self.options.apply(&mut config);
        config
    }

    /// Reads what was written to the positions topic since the last call, up to its end now;
    /// whether any position changed (a shared record changing is told by
    /// [`PositionTable::shared_changes`]). A topic that does not exist yet holds nothing.
    pub async fn catch_up(&mut self) -> Result<bool, StateError> {
        let topic = self.topics.positions.clone();
        let reader = match &self.reader {
            Some(r) => r.clone(),
            None => {
                let mut config = self.client();
                // No end-of-partition events: the record before a partition's end always
                // exists (the topic is compacted, and compaction keeps each key's latest), so
                // reading to it tells the end.
                config
                    .set("group.id", "kafka-dlq-positions-reader")
                    .set("enable.auto.commit", "false")
                    .set("enable.partition.eof", "false");
                let reader: BaseConsumer<LogContext> = crate::kafka::create_logged(&config)
                    .map_err(|source| StateError::Client {
                        topic: topic.clone(),
                        source,
                    })?;
                let reader = Arc::new(reader);
                self.reader = Some(reader.clone());
                reader
            }
        };
        let key = self.topics.key.clone();
        let mut next = std::mem::take(&mut self.next);
        let mut table = std::mem::take(&mut self.table);
        let t = topic.clone();
        let (next, table, read) = tokio::task::spawn_blocking(move || {
            let read = read_to_end(&reader, &t, &mut next, &mut table, key.as_ref());
            (next, table, read)
        })
        .await
        .expect("positions read task");
        self.next = next;
        self.table = table;
        let (changed, unverified) = read.map_err(|source| StateError::Read { topic, source })?;
        self.unverified += unverified;
        Ok(changed)
    }

    /// Writes `record` as the position of `key` and returns once the broker acknowledged it
    /// (creating the positions topic, compacted, the first time it is missing); the store's
    /// table takes it too.
    pub async fn write(
        &mut self,
        key: &PositionKey,
        record: &PositionRecord,
    ) -> Result<(), StateError> {
        let value = serde_json::to_vec(record).expect("a position record serialises");
        self.send(&key.to_string(), Some(&value)).await?;
        self.table.apply(key, record);
        Ok(())
    }

    /// Writes `value` as the shared record `name` (its key is [`SHARED_PREFIX`] then `name`;
    /// `None` writes a tombstone, which Kafka's compaction then drops) and returns once the
    /// broker acknowledged it; the store's table takes it too. Sealed like a position.
    pub async fn share(&mut self, name: &str, value: Option<&[u8]>) -> Result<(), StateError> {
        self.send(&format!("{SHARED_PREFIX}{name}"), value).await?;
        self.table.apply_shared(name, value);
        Ok(())
    }

    async fn send(&mut self, key_text: &str, value: Option<&[u8]>) -> Result<(), StateError> {
        let topic = self.topics.positions.clone();
        let write_error = |source| StateError::Write {
            topic: topic.clone(),
            source,
        };
        if self.producer.is_none() {
            super::topics::ensure_one(&self.client(), &self.topics, &topic).await?;
            let mut config = self.client();
            config
                .set("enable.idempotence", "true")
                .set("acks", "all")
                .set("allow.auto.create.topics", "false")
                .set("message.timeout.ms", "30000");
            let producer: FutureProducer<LogContext> = crate::kafka::create_logged(&config)
                .map_err(|source| StateError::Client {
                    topic: topic.clone(),
                    source,
                })?;
            self.producer = Some(producer);
        }
        let producer = self.producer.as_ref().expect("created above");
        let mut headers = OwnedHeaders::new();
        if let Some(k) = &self.topics.key {
            let seal = k.seal(key_text.as_bytes(), value.unwrap_or_default());
            headers = headers.insert(Header {
                key: seal::HEADER_SEAL,
                value: Some(seal.as_bytes()),
            });
        }
        let mut record = FutureRecord::to(&topic)
            .key(key_text.as_bytes())
            .headers(headers);
        if let Some(value) = value {
            record = record.payload(value);
        }
        producer
            .send(record, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| write_error(e))?;
        Ok(())
    }

    /// When `group` has no position on `dlq_topic` in the positions topic yet (a replay group
    /// of a version that kept positions as committed offsets), reads the group's committed
    /// offsets on `dlq_topic` and writes them as its positions, with the filter, run and
    /// operator of its last summary in `runs` (the audit's); whether it moved any. Each pair is looked at
    /// once per store. Call after [`PositionStore::catch_up`]. When the write fails (a
    /// principal that may not write the positions topic), the store's table holds the
    /// positions read all the same, and the error says that they were not kept.
    pub async fn migrate(
        &mut self,
        dlq_topic: &str,
        group: &str,
        runs: &[super::audit::ReplayRun],
    ) -> Result<bool, StateError> {
        let template = PositionRecord::migrated_from(dlq_topic, group, runs);
        let pair = (dlq_topic.to_string(), group.to_string());
        if self.migrated.contains(&pair) || self.table.group(dlq_topic, group).is_some() {
            return Ok(false);
        }
        let (config, t, g) = (self.client(), dlq_topic.to_string(), group.to_string());
        let committed = tokio::task::spawn_blocking(move || committed_offsets(config, &t, &g))
            .await
            .expect("committed offsets task")
            .map_err(|source| StateError::Migrate {
                group: group.to_string(),
                dlq_topic: dlq_topic.to_string(),
                source,
            })?;
        for (partition, position) in &committed {
            let record = PositionRecord {
                next: position.next,
                lost: position.lost.clone(),
                migrated: true,
                at: chrono::Utc::now(),
                ..template.clone()
            };
            let key = PositionKey {
                dlq_topic: dlq_topic.to_string(),
                partition: *partition,
                group: group.to_string(),
            };
            self.table.apply(&key, &record);
            self.write(&key, &record).await?;
        }
        if !committed.is_empty() {
            tracing::info!(event = "replay_position_migrated", %dlq_topic, %group,
                partitions = committed.len(), positions_topic = %self.topics.positions,
                "the group's committed offsets are now kept in the positions topic");
        }
        self.migrated.insert(pair);
        Ok(!committed.is_empty())
    }
}

/// Reads `topic` from `next` to its end now into `table`; whether a position changed, and
/// how many records were passed over as unverified. Blocks.
fn read_to_end(
    reader: &BaseConsumer<LogContext>,
    topic: &str,
    next: &mut HashMap<i32, i64>,
    table: &mut PositionTable,
    key: Option<&super::StateKey>,
) -> Result<(bool, u64), KafkaError> {
    let metadata = reader.fetch_metadata(Some(topic), TIMEOUT)?;
    let Some(t) = metadata.topics().first() else {
        return Ok((false, 0));
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok((false, 0)); // not created yet: no positions
    }
    let mut assignment = TopicPartitionList::new();
    let mut ends: HashMap<i32, i64> = HashMap::new();
    for p in t.partitions() {
        let (low, high) = reader.fetch_watermarks(topic, p.id(), TIMEOUT)?;
        let from = next.get(&p.id()).copied().unwrap_or(low).max(low);
        if from < high {
            assignment.add_partition_offset(topic, p.id(), Offset::Offset(from))?;
            ends.insert(p.id(), high);
        }
    }
    if ends.is_empty() {
        return Ok((false, 0));
    }
    reader.assign(&assignment)?;
    let (mut changed, mut unverified) = (false, 0);
    let mut last = std::time::Instant::now();
    while !ends.is_empty() {
        let Some(polled) = reader.poll(Duration::from_millis(100)) else {
            if last.elapsed() > READ_TIMEOUT {
                return Err(KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                ));
            }
            continue;
        };
        last = std::time::Instant::now();
        let message = polled?;
        let (partition, offset) = (message.partition(), message.offset());
        let Some(&end) = ends.get(&partition) else {
            continue;
        };
        if offset >= end {
            ends.remove(&partition);
            continue;
        }
        next.insert(partition, offset + 1);
        if offset + 1 >= end {
            ends.remove(&partition);
        }
        let (record_key, value) = (message.key().unwrap_or_default(), message.payload());
        let sealed = message.headers().and_then(|h| {
            h.iter()
                .filter(|h| h.key == seal::HEADER_SEAL)
                .last()
                .and_then(|h| h.value)
        });
        let shared = record_key
            .strip_prefix(SHARED_PREFIX.as_bytes())
            .and_then(|name| std::str::from_utf8(name).ok());
        if let Some(name) = shared {
            // Not a position: `changed` says whether a position moved (the inbox and the
            // monitor count again when one did), and redrives beat every second.
            if seal::trusted(key, record_key, value.unwrap_or_default(), sealed) {
                table.apply_shared(name, value);
            } else {
                unverified += 1;
            }
            continue;
        }
        let Some(value) = value else {
            continue; // a tombstone of a position: nothing kafka-dlq writes
        };
        let parsed = PositionKey::parse(record_key)
            .zip(serde_json::from_slice::<PositionRecord>(value).ok());
        match parsed {
            Some((k, record)) if seal::trusted(key, record_key, value, sealed) => {
                changed |= table.apply(&k, &record);
            }
            _ => {
                unverified += 1;
                tracing::debug!(event = "state_record_unverified", %topic, partition, offset,
                    "passed over: not a position record sealed with the configured audit key");
            }
        }
    }
    Ok((changed, unverified))
}

/// `group`'s committed offsets on `dlq_topic` per partition, as the positions they hold (an
/// older version kept the passed-over offsets in the commit metadata). Blocks.
fn committed_offsets(
    mut config: ClientConfig,
    dlq_topic: &str,
    group: &str,
) -> Result<Vec<(i32, Position)>, KafkaError> {
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer<LogContext> = crate::kafka::create_logged(&config)?;
    let metadata = consumer.fetch_metadata(Some(dlq_topic), TIMEOUT)?;
    let mut tpl = TopicPartitionList::new();
    for t in metadata.topics().iter().filter(|t| t.error().is_none()) {
        for p in t.partitions() {
            tpl.add_partition(dlq_topic, p.id());
        }
    }
    if tpl.count() == 0 {
        return Ok(Vec::new());
    }
    let committed = crate::dlq_reader::committed(&consumer, tpl)?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), Position::from_commit(o, e.metadata()))),
            _ => None,
        })
        .collect())
}
