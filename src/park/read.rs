//! Reading a park log back: one partition from an offset to its end (its owner's worker), or
//! every partition whole into its table (the tools: `dlq parked`).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{ParkEvent, ParkTable};
use crate::kafka::LogContext;
use crate::record::RecordHeader;

/// How long one read of a park partition may take before it fails.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads `topic`/`partition` with `consumer` (assigned that partition alone) from `from` (or
/// the log's start, if that was deleted) up to its high watermark, blocking: its events, and
/// the offset after them. The consumer stays assigned after them, fetching what comes next
/// for [`read_fetched`]. A record that is not a park event is logged
/// (`park_event_unreadable`) and passed over. Fails after 30 s.
pub fn read_partition(
    consumer: &BaseConsumer<LogContext>,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<(Vec<(i64, ParkEvent)>, i64), KafkaError> {
    let (low, high) = consumer.fetch_watermarks(topic, partition, READ_TIMEOUT)?;
    let from = from.max(low);
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(from.min(high)))?;
    consumer.assign(&list)?;
    if from >= high {
        return Ok((Vec::new(), from.max(high)));
    }
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut events = Vec::new();
    let mut next = from;
    while next < high {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaError::MessageConsumption(
                rdkafka::types::RDKafkaErrorCode::RequestTimedOut,
            ));
        }
        let Some(message) = consumer.poll(left.min(Duration::from_millis(100))) else {
            continue;
        };
        let message = message?;
        next = message.offset() + 1;
        events.extend(decoded(&message, topic, partition));
    }
    Ok((events, next))
}

/// The events `consumer` fetched already after a [`read_partition`] (or a `read_fetched`)
/// that ended at `from`, without waiting: its assignment kept fetching while the worker
/// handled records, so a catch-up costs no round trip. It may end before the log's end (what
/// was written a moment ago comes at the next read). A fetch error (the log trimmed past
/// `from`: its reader resets to nothing) fails it: read with [`read_partition`] again.
pub fn read_fetched(
    consumer: &BaseConsumer<LogContext>,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<(Vec<(i64, ParkEvent)>, i64), KafkaError> {
    let mut events = Vec::new();
    let mut next = from;
    while let Some(message) = consumer.poll(Duration::ZERO) {
        let message = message?;
        if message.topic() != topic || message.partition() != partition || message.offset() < next {
            continue;
        }
        next = message.offset() + 1;
        events.extend(decoded(&message, topic, partition));
    }
    Ok((events, next))
}

/// `message`'s park event; `None`, logged (`park_event_unreadable`), when it is not one.
fn decoded(
    message: &rdkafka::message::BorrowedMessage<'_>,
    topic: &str,
    partition: i32,
) -> Option<(i64, ParkEvent)> {
    let headers = message
        .headers()
        .map(RecordHeader::read_all)
        .unwrap_or_default();
    match ParkEvent::decode(message.key(), &headers, message.payload()) {
        Ok(event) => Some((message.offset(), event)),
        Err(error) => {
            tracing::warn!(event = "park_event_unreadable", %topic, partition,
                offset = message.offset(), %error, "passed over");
            None
        }
    }
}

/// A park client of `config` (the cluster's connection): assigns partitions, commits nothing.
pub fn reader(config: &ClientConfig) -> Result<BaseConsumer<LogContext>, KafkaError> {
    let mut config = config.clone();
    config
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        // A position trimmed away is an error, not a silent jump to the end.
        .set("auto.offset.reset", "error")
        // What an assigned reader fetches ahead waits for its next read: a few MB, not the
        // default 64 MB per park partition.
        .set("queued.max.messages.kbytes", "4096");
    if config.get("group.id").is_none() {
        // Never joins it: librdkafka wants one for a consumer all the same.
        config.set("group.id", "kafka-dlq-park-reader");
    }
    crate::kafka::create_logged(&config)
}

/// Every partition of park log `topic`, read whole with a client of `config`, each folded
/// into its table: what is parked there now. Blocking.
pub fn tables(config: &ClientConfig, topic: &str) -> Result<Vec<(i32, ParkTable)>, KafkaError> {
    let consumer = reader(config)?;
    let mut tables = Vec::new();
    catch_up(&consumer, topic, &mut tables)?;
    Ok(tables)
}

/// Brings `tables` (park log `topic`'s partitions, as last read) up to the log's end with
/// `consumer` ([`reader`]): a partition new to them is read from its start, the others from
/// where they were read to. Blocking. Fails with `UnknownTopicOrPartition` when there is no
/// such topic.
pub fn catch_up(
    consumer: &BaseConsumer<LogContext>,
    topic: &str,
    tables: &mut Vec<(i32, ParkTable)>,
) -> Result<(), KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), READ_TIMEOUT)?;
    let partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len() as i32)
        .ok_or(KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
        ))?;
    for partition in tables.len() as i32..partitions {
        tables.push((partition, ParkTable::default()));
    }
    for (partition, table) in tables.iter_mut() {
        let (events, next) = read_partition(consumer, topic, *partition, table.next())?;
        for (at, event) in &events {
            table.apply(*at, event);
        }
        table.read_to(next);
    }
    Ok(())
}
