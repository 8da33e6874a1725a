//! Why a consumer could not start or had to stop: one enum callers branch on.

use rdkafka::error::KafkaError;
use thiserror::Error;

use crate::config::ConfigError;

/// Why the consumer could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused the consumer configuration.
    #[error("could not create the Kafka consumer: {0}")]
    CreateConsumer(#[source] KafkaError),
    /// librdkafka refused the dead-letter producer configuration.
    #[error("could not create the dead-letter producer: {0}")]
    CreateProducer(#[source] KafkaError),
    /// The Kafka client hit a fatal error (for example, fenced by a newer instance with the
    /// same `group.instance.id`) and cannot go on.
    #[error("fatal Kafka client error {code}: {reason}")]
    Fatal {
        /// librdkafka's error code.
        code: rdkafka::types::RDKafkaErrorCode,
        /// librdkafka's description.
        reason: String,
    },
    /// A retry topic that no configured tier reads still holds records this group has not
    /// consumed (a tier was dropped from `retry_topic_delays_ms`, or retry topics were turned
    /// off, while records waited there): starting would leave them there for good.
    #[error("retry topic {topic} still holds {records} record(s) that this group has not consumed, but retry_topic_delays_ms has no tier for it: put the tier back until its records are handled (or move them with `kafka-dlq dlq replay --dlq-topic {topic}`), then drop it")]
    StrandedRetryRecords {
        /// The retry topic.
        topic: String,
        /// Its records after the group's committed offsets.
        records: i64,
    },
    /// A source topic was removed from `topics` while its retry topics or this group's
    /// redrive topic of it still held records of this group: starting would leave them there
    /// for good.
    #[error("source topic {source_topic} is no longer in topics, but {topic} still holds {records} record(s) of this group: put {source_topic} back in topics until they are handled (or move them with `kafka-dlq dlq replay --dlq-topic {topic}`), then remove it")]
    StrandedSourceRecords {
        /// The source topic no longer configured.
        source_topic: String,
        /// Its retry or redrive topic holding the records.
        topic: String,
        /// This group's records there after its committed offsets.
        records: i64,
    },
    /// A retry or redrive topic keeps its records for less than they may wait there
    /// ([`crate::retry_tier::retention::needed`]): they would be deleted before they are due,
    /// after their source offsets were committed.
    #[error("{topic} keeps records for {retention_ms} ms (retention.ms), but its records wait up to {delay_ms} ms there: they would be deleted before they are handled; set its retention.ms to at least {needed_ms} (or -1), or shorten that tier's delay in retry_topic_delays_ms")]
    RetentionTooShort {
        /// The retry or redrive topic.
        topic: String,
        /// Its `retention.ms`.
        retention_ms: i64,
        /// How long its records wait (the tier's delay; 0 for a redrive topic).
        delay_ms: u64,
        /// The retention it needs at least.
        needed_ms: i64,
    },
    /// A dead-letter topic does not exist and was not created (`create_dlq_topics` is off, or
    /// creating it failed): the consumer did not start, so no record waits on a write that
    /// cannot succeed.
    #[error("the dead-letter topic {topic} does not exist: {why}")]
    DlqTopicMissing {
        /// The dead-letter topic.
        topic: String,
        /// Why it was not created.
        why: String,
    },
    /// A park log (`key_order_after_failure = "park"`) cannot serve: its partitions are not
    /// its source topic's, it deletes records (retention or compaction), or creating it
    /// failed. The consumer did not start: parked records would be lost.
    #[error("the park log {topic} cannot keep parked records: {why}")]
    ParkLog {
        /// The park log.
        topic: String,
        /// What is wrong with it.
        why: String,
    },
    /// The cluster refused this member of a share group (`consumption = "share"`): a broker
    /// before Kafka 4.2 or Redpanda (no share groups), share groups turned off, the id in use
    /// by a consumer group, no connection at start.
    #[error("could not join the share group {group}: {reason}")]
    ShareGroup {
        /// The share group.
        group: String,
        /// What the cluster or the client said.
        reason: String,
    },
    /// Exactly once: the transactional producer could not start, or failed for good (fenced
    /// by a newer producer of its id, a transaction it could not abort, a partition it could
    /// not rewind). The records after the last committed transaction are consumed again by
    /// whoever owns their partitions next.
    #[error("exactly once: {0}")]
    Transaction(#[from] TransactionError),
    /// Subscribing to the topics failed.
    #[error("could not subscribe to {topics:?}: {source}")]
    Subscribe {
        /// The topics.
        topics: Vec<String>,
        /// The cause.
        #[source]
        source: KafkaError,
    },
}

/// Why exactly once kept the consumer from starting, or stopped it: the records after the
/// last committed transaction are consumed again by whoever owns their partitions next.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The transactional producer could not start: `init_transactions` failed (no
    /// coordinator, not authorised for the transactional id, fenced by a newer producer).
    #[error("could not start the transactional producer: {why}")]
    Start {
        /// What the producer said.
        why: String,
    },
    /// The producer failed (`failed`: fenced, a commit whose outcome is unknown, an abort
    /// that failed) and no new one could start (`why`).
    #[error("{failed}; and no new transactional producer could start: {why}")]
    NoProducer {
        /// How the producer failed.
        failed: String,
        /// Why no new one could start.
        why: String,
    },
    /// A record's own dead letter (or retry record) was refused `refusals` times by `to`
    /// (the topic missing or not writable, even its reference too large): the consumer stops
    /// rather than skip the record.
    #[error("the dead letter (or retry record) of {topic}-{partition} offset {offset} was refused {refusals} times by {to}: {error}; the consumer stops rather than skip the record (create the topic, or grant this principal Write on it)")]
    ExitRefused {
        /// The record's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// The offset it was delivered at.
        offset: i64,
        /// How often the write was refused.
        refusals: u32,
        /// The topic that refused it.
        to: String,
        /// The broker's last refusal.
        #[source]
        error: Box<KafkaError>,
    },
    /// A partition of an aborted transaction could not be sought back to its first record in
    /// it: going on would skip its records.
    #[error("could not rewind {topic}-{partition} to offset {position} after an aborted transaction: {error}")]
    Rewind {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Where it was to start again.
        position: i64,
        /// librdkafka's error.
        #[source]
        error: Box<KafkaError>,
    },
    /// After a transaction whose outcome is unknown, the group's committed offset of a
    /// partition could not be read, so where it starts again is not known.
    #[error("could not read the committed offset of {topic}-{partition} after a transaction whose outcome is unknown: {error}")]
    CommittedUnknown {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// librdkafka's error.
        #[source]
        error: Box<KafkaError>,
    },
}
