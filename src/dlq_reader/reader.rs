//! Reading a dead-letter topic back: every record up to the high watermarks seen at the start,
//! decoded as an [`Envelope`] or, when it is not one, kept as such.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::DlqContent;
use crate::kafka::LogContext;

const TIMEOUT: Duration = Duration::from_secs(10);

/// One record of a dead-letter topic.
#[derive(Debug, Clone)]
pub struct DlqEntry {
    /// The DLQ topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// When it was written.
    pub timestamp: Option<DateTime<Utc>>,
    /// What it holds.
    pub content: DlqContent,
    /// For a reference whose source record could not be read: why (the envelope is then left
    /// as a reference, and its payload does not decode).
    pub unresolved: Option<super::Unresolved>,
}

impl DlqEntry {
    /// The record id of an envelope, else `<dlq topic>-<partition>-<offset>`.
    pub fn id(&self) -> String {
        match self.content.envelope() {
            Some(e) => e.id.clone(),
            None => format!("{}-{}-{}", self.topic, self.partition, self.offset),
        }
    }
}

/// Whether `error`, from [`DlqReader::open`] or [`check_exists`], says the topic does not
/// exist.
pub fn is_unknown_topic(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition
                | rdkafka::types::RDKafkaErrorCode::UnknownTopic
        )
    )
}

/// Checks that `topic` exists ([`is_unknown_topic`] tells the error for one that does not).
/// Blocks on a metadata request.
pub fn check_exists(
    brokers: &str,
    librdkafka: &crate::kafka::ClientOptions,
    topic: &str,
) -> Result<(), KafkaError> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    librdkafka.apply(&mut config);
    let consumer: BaseConsumer<LogContext> = crate::kafka::create_logged(&config)?;
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    match metadata.topics().first() {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => Ok(()),
        Some(t) => Err(KafkaError::MetadataFetch(
            t.error()
                .map(Into::into)
                .unwrap_or(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition),
        )),
        None => Err(KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopic,
        )),
    }
}

/// The high watermark of each of `partitions` of `topic`, asked with `read_uncommitted`, so
/// open transactions' records included; empty when the reader itself reads uncommitted.
fn uncommitted_ends(
    brokers: &str,
    librdkafka: &crate::kafka::ClientOptions,
    topic: &str,
    partitions: &[i32],
) -> Result<HashMap<i32, i64>, KafkaError> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    librdkafka.apply(&mut config);
    if config.get("isolation.level") == Some("read_uncommitted") {
        return Ok(HashMap::new()); // its ends are the high watermarks already
    }
    config.set("isolation.level", "read_uncommitted");
    let marks: BaseConsumer<LogContext> = crate::kafka::create_logged(&config)?;
    partitions
        .iter()
        .map(|&p| Ok((p, marks.fetch_watermarks(topic, p, TIMEOUT)?.1)))
        .collect()
}

/// The offsets committed for `partitions`, asked again while the group's coordinator is moving
/// or loading (a broker just started or restarted answers so for a few seconds).
pub(crate) fn committed(
    consumer: &BaseConsumer<LogContext>,
    partitions: TopicPartitionList,
) -> Result<TopicPartitionList, KafkaError> {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut pause = Duration::from_millis(100);
    loop {
        match consumer.committed_offsets(partitions.clone(), TIMEOUT) {
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        Code::NotCoordinator
                            | Code::CoordinatorLoadInProgress
                            | Code::CoordinatorNotAvailable
                    )
                ) && std::time::Instant::now() + pause < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            result => return result,
        }
    }
}

/// Reads a DLQ topic without joining a group, from its log start (or where
/// [`DlqReader::narrow`] says) up to the high watermarks taken when it was opened. Where a
/// replay got to is kept in the positions topic ([`crate::state`]), not here.
pub struct DlqReader {
    consumer: BaseConsumer<LogContext>,
    topic: String,
    /// Resolves references from their source topics.
    sources: super::reference::SourceReader,
    /// Whether references are resolved ([`DlqReader::leaving_references`]).
    resolve_references: bool,
    /// Per partition: the next offset to read and the end (high watermark at open).
    positions: HashMap<i32, (i64, i64)>,
    /// Partitions whose end is held back by a transaction still open at open.
    open_transactions: Vec<OpenTransaction>,
    /// Whether the partitions were assigned: at the first read, once [`DlqReader::narrow`]
    /// had its say, so that nothing is fetched from where reading does not start.
    assigned: bool,
}

/// A partition whose readable end, its last stable offset, stands before its high watermark:
/// a transaction that was still open when the reader opened holds the offsets between them.
/// The reader stops at the last stable offset and never commits past it; the records behind
/// it are read by the next run once the transaction commits (or skipped if it aborts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpenTransaction {
    /// The partition.
    pub partition: i32,
    /// Where reading stopped: the first offset of the open transaction.
    pub last_stable_offset: i64,
    /// The partition's high watermark, transactional records still open included.
    pub high_watermark: i64,
}

impl std::fmt::Display for OpenTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "partition {} was read up to offset {}, its last stable offset: a transaction in progress holds the {} offset(s) after it; run again once it has ended",
            self.partition,
            self.last_stable_offset,
            self.high_watermark - self.last_stable_offset
        )
    }
}

impl DlqReader {
    /// Opens `topic`, to read it from its log start. Blocks on metadata requests.
    pub fn open(
        brokers: &str,
        librdkafka: &crate::kafka::ClientOptions,
        topic: &str,
    ) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("group.id", "kafka-dlq-reader")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        librdkafka.apply(&mut config);
        // A partition's end is reported, so one whose last offsets hold no record a consumer
        // sees (a transaction's commit or abort marker, aborted records) still ends.
        config.set("enable.partition.eof", "true");
        let consumer: BaseConsumer<LogContext> = crate::kafka::create_logged(&config)?;
        let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
        let t = metadata.topics().first().ok_or(KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopic,
        ))?;
        if let Some(e) = t.error() {
            return Err(KafkaError::MetadataFetch(e.into()));
        }
        if t.partitions().is_empty() {
            return Err(KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
            ));
        }
        // Asked before the readable ends: a last stable offset asked later is never behind a
        // high watermark asked earlier unless a transaction still holds the offsets between.
        let ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        let uncommitted = uncommitted_ends(brokers, librdkafka, topic, &ids)?;
        let mut open_transactions = Vec::new();
        let mut positions = HashMap::new();
        for p in t.partitions() {
            // Under `read_committed` (the default) the end asked here is the last stable
            // offset (librdkafka asks ListOffsets with the client's isolation level), so
            // reading never passes an open transaction.
            let (low, high) = consumer.fetch_watermarks(topic, p.id(), TIMEOUT)?;
            positions.insert(p.id(), (low, high));
            if let Some(&marked) = uncommitted.get(&p.id()).filter(|&&m| m > high) {
                open_transactions.push(OpenTransaction {
                    partition: p.id(),
                    last_stable_offset: high,
                    high_watermark: marked,
                });
            }
        }
        open_transactions.sort_by_key(|o| o.partition);
        Ok(Self {
            consumer,
            topic: topic.to_string(),
            sources: super::reference::SourceReader::new(brokers, librdkafka, topic),
            resolve_references: true,
            positions,
            open_transactions,
            assigned: false,
        })
    }

    /// Gives references as they are, without reading their source records back: for a reader
    /// that needs a dead letter's metadata only (counting, grouping by cause); their payload
    /// does not decode and `unresolved` stays `None`.
    pub fn leaving_references(mut self) -> Self {
        self.resolve_references = false;
        self
    }

    /// Follows references only to source topics whose dead-letter topic under `template` is
    /// the one read (`{topic}-dlt` by default): a reference naming another topic is passed
    /// over as unresolved ([`super::Unresolved::Refused`]).
    pub fn with_template(mut self, template: crate::dlq::DlqTopic) -> Self {
        self.sources.set_template(template);
        self
    }

    /// Reads only the offsets of `ranges` (by partition) within what it would read: a
    /// partition not named is not read; the ends taken at open still hold. For one dead letter,
    /// or what was written since the last read. Call before the first read.
    pub fn narrow(
        &mut self,
        ranges: &HashMap<i32, std::ops::Range<i64>>,
    ) -> Result<(), KafkaError> {
        for (partition, (next, end)) in &mut self.positions {
            match ranges.get(partition) {
                Some(range) => {
                    *next = (*next).max(range.start);
                    *end = (*end).min(range.end).max(*next);
                }
                None => *next = *end,
            }
        }
        if self.assigned {
            self.assign()?;
        }
        Ok(())
    }

    /// Assigns each partition with something left to read, at its next offset.
    fn assign(&mut self) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (partition, (next, end)) in &self.positions {
            if next < end {
                tpl.add_partition_offset(&self.topic, *partition, Offset::Offset(*next))?;
            }
        }
        self.assigned = true;
        self.consumer.assign(&tpl)
    }

    /// Each partition's end: the high watermark (last stable offset) taken at open, or
    /// where [`DlqReader::narrow`] cut it.
    pub fn ends(&self) -> HashMap<i32, i64> {
        self.positions
            .iter()
            .map(|(p, (_, end))| (*p, *end))
            .collect()
    }

    /// The partitions whose reading stops at a transaction still open when the reader
    /// opened, in partition order.
    pub fn open_transactions(&self) -> &[OpenTransaction] {
        &self.open_transactions
    }

    /// Records left to read.
    pub fn remaining(&self) -> u64 {
        self.positions
            .values()
            .map(|(next, end)| (end - next).max(0) as u64)
            .sum()
    }

    /// Each partition read to its end: where the reader stopped on it (its end, or the end
    /// [`DlqReader::narrow`] cut it to).
    pub fn ended(&self) -> Vec<(i32, i64)> {
        self.positions
            .iter()
            .filter(|(_, (next, end))| next >= end)
            .map(|(p, (_, end))| (*p, *end))
            .collect()
    }

    /// The next entry, in no particular order across partitions but in offset order within
    /// one; `None` when every partition reached its end (the high watermark taken at open; a
    /// partition whose last offsets are transaction markers or aborted records ends when the
    /// broker reports its end). Waits without blocking the thread; gives up with a timeout
    /// error after 30 s without a record.
    pub async fn next_entry(&mut self) -> Option<Result<DlqEntry, KafkaError>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        if !self.assigned && self.remaining() > 0 {
            if let Err(e) = self.assign() {
                return Some(Err(e));
            }
        }
        while self.remaining() > 0 {
            let Some(polled) = self.consumer.poll(Duration::ZERO) else {
                if std::time::Instant::now() > deadline {
                    return Some(Err(KafkaError::MessageConsumption(
                        rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                    )));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let message = match polled {
                Ok(m) => m,
                Err(KafkaError::PartitionEOF(partition)) => {
                    // Everything up to the partition's current end was delivered; whatever
                    // offsets below `end` were not are control records or aborted ones.
                    if let Some((next, end)) = self.positions.get_mut(&partition) {
                        *next = *end;
                    }
                    continue;
                }
                Err(e) => return Some(Err(e)),
            };
            let (next, end) = self
                .positions
                .get_mut(&message.partition())
                .expect("only assigned partitions are read");
            if message.offset() >= *end {
                // Past the end taken at open: the offsets before it that were skipped hold
                // no record to read.
                *next = *end;
                continue;
            }
            if message.offset() < *next {
                continue;
            }
            *next = message.offset() + 1;
            let content = DlqContent::decode(&message);
            let mut entry = DlqEntry {
                topic: self.topic.clone(),
                partition: message.partition(),
                offset: message.offset(),
                timestamp: message
                    .timestamp()
                    .to_millis()
                    .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
                content,
                unresolved: None,
            };
            drop(message);
            if let DlqContent::Envelope(env) = &entry.content {
                if env.payload_encoding == crate::dlq::Encoding::Reference
                    && self.resolve_references
                {
                    match self.sources.resolve((**env).clone()).await {
                        Ok(resolved) => entry.content = DlqContent::Envelope(Box::new(resolved)),
                        Err(unresolved) => entry.unresolved = Some(unresolved),
                    }
                }
            }
            return Some(Ok(entry));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq_reader::foreign::ForeignFormat;
    use crate::dlq_reader::Filter;

    #[test]
    fn decodes_a_spring_dead_letter_as_foreign_and_filters_it_by_source() {
        use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};
        let spring = |name: &str, value: &[u8], headers: OwnedHeaders| {
            headers.insert(Header {
                key: name,
                value: Some(value),
            })
        };
        let headers = OwnedHeaders::new();
        let headers = spring(crate::dlq::spring::ORIGINAL_TOPIC, b"orders", headers);
        let headers = spring(
            crate::dlq::spring::ORIGINAL_PARTITION,
            &2_i32.to_be_bytes(),
            headers,
        );
        let headers = spring(
            crate::dlq::spring::ORIGINAL_OFFSET,
            &9_i64.to_be_bytes(),
            headers,
        );
        let headers = spring(crate::dlq::spring::EXCEPTION_MESSAGE, b"boom", headers);
        let message = OwnedMessage::new(
            Some(b"not json".to_vec()),
            None,
            "orders-dlt".into(),
            Timestamp::CreateTime(1_700_000_000_000),
            0,
            4,
            Some(headers),
        );
        let content = DlqContent::decode(&message);
        let DlqContent::Foreign { format, envelope } = &content else {
            panic!("{content:?}");
        };
        assert_eq!(*format, ForeignFormat::Spring);
        assert_eq!(envelope.id, "orders-2-9");
        let entry = DlqEntry {
            topic: "orders-dlt".into(),
            partition: 0,
            offset: 4,
            timestamp: None,
            content,
            unresolved: None,
        };
        assert_eq!(entry.id(), "orders-2-9");
        let by_source = |t: &str| Filter {
            source_topic: Some(t.into()),
            ..Filter::default()
        };
        assert!(by_source("orders").matches(&entry));
        assert!(!by_source("other").matches(&entry));
    }
}
