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
    Transaction(String),
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
