//! Why a replay stopped with an error: [`ReplayError`].

use rdkafka::error::KafkaError;

use super::LockError;

/// Why a replay stopped with an error. Its position stays before the record concerned, so
/// running it again retries that record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The DLQ topic could not be opened or read.
    #[error("cannot read dead-letter topic `{topic}`: {source}")]
    Read {
        /// The DLQ topic.
        topic: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
    /// Another replay with the same position is running, or the lock could not be taken.
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The producer could not be created.
    #[error("cannot create the replay producer: {0}")]
    CreateProducer(#[source] KafkaError),
    /// Sending a record failed.
    #[error("cannot send `{id}` to `{topic}`: {source}")]
    Send {
        /// The record id.
        id: String,
        /// The destination topic.
        topic: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
    /// A reference's source record could not be read now (a timeout, denied, a broker
    /// outage). Nothing was committed past it; run the replay again once the source is
    /// readable.
    #[error("cannot resolve `{id}` (dead letter {topic}/{partition}@{offset}): {source}; nothing was committed past it, run the replay again once the source topic is readable")]
    Unresolved {
        /// The record id.
        id: String,
        /// The DLQ topic.
        topic: String,
        /// The dead letter's DLQ partition.
        partition: i32,
        /// Its DLQ offset.
        offset: i64,
        /// Why.
        #[source]
        source: crate::dlq_reader::Unresolved,
    },
    /// A DLQ partition holds more lost references than its replay position can carry
    /// ([`crate::dlq_reader::position::MAX_LOST`]); nothing was committed past the last one.
    #[error("dead letter {topic}/{partition}@{offset}: {source}")]
    TooManyLost {
        /// The DLQ topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset of the one that did not fit.
        offset: i64,
        /// The cause.
        #[source]
        source: crate::dlq_reader::position::TooManyLost,
    },
    /// A dead letter names no consumer group (a foreign dead-letter topic, an envelope
    /// without `source.group`), so it has no group's redrive topic to go to. Nothing was
    /// committed past it.
    #[error("dead letter `{id}` ({topic}/{partition}@{offset}) names no consumer group, so it cannot go to its group's redrive topic; replay it with --to-source (every group reading its source topic handles it again) or --to TOPIC; nothing was committed past it")]
    NoGroup {
        /// The record id.
        id: String,
        /// The DLQ topic.
        topic: String,
        /// The dead letter's DLQ partition.
        partition: i32,
        /// Its DLQ offset.
        offset: i64,
    },
    /// A dead letter another tool wrote (Spring, Kafka Connect, a share group's broker) names a
    /// group whose redrive topic does not exist: no kafka-dlq consumer of that group has run,
    /// so nothing would read it there. Nothing was sent or committed past it.
    #[error("dead letter `{id}` ({topic}/{partition}@{offset}) was written by {writer} for group `{group}`, which no kafka-dlq consumer runs (its redrive topic `{redrive}` does not exist), so nothing would read it there; replay it with --to-source (every group reading its source topic handles it again) or --to TOPIC; nothing was committed past it")]
    NotAKafkaDlqGroup {
        /// The record id.
        id: String,
        /// The DLQ topic.
        topic: String,
        /// The dead letter's DLQ partition.
        partition: i32,
        /// Its DLQ offset.
        offset: i64,
        /// Who wrote it (`Spring Kafka`, `Kafka Connect`, `Kafka share group`).
        writer: &'static str,
        /// The group it names.
        group: String,
        /// The redrive topic that does not exist.
        redrive: String,
    },
    /// A redrive topic was missing and could not be created, or the cluster's topics could
    /// not be read to tell. Nothing was committed past the record bound for it.
    #[error("cannot make sure of the redrive topic `{topic}`: {source}; nothing was committed past its first record")]
    RedriveTopic {
        /// The redrive topic (or, when the cluster could not be read, the DLQ topic).
        topic: String,
        /// The cause.
        #[source]
        source: crate::kafka::topics::TopicsError,
    },
    /// Writing the replay position to the positions topic failed.
    #[error("cannot keep the replay position of `{topic}`: {source}")]
    Commit {
        /// The DLQ topic.
        topic: String,
        /// The cause.
        #[source]
        source: crate::state::StateError,
    },
    /// The state a replay starts from (the audit, the positions) could not be read, or an
    /// older position could not be moved to the positions topic. Nothing was sent.
    #[error("cannot read what was done on `{topic}` before (the audit and positions topics): {source}; nothing was sent")]
    State {
        /// The DLQ topic.
        topic: String,
        /// The cause.
        #[source]
        source: crate::state::StateError,
    },
    /// The destination named is one no replay may write to. Nothing was sent.
    #[error("cannot send to `{topic}`: {why}; nothing was sent")]
    Destination {
        /// The topic named.
        topic: String,
        /// Why not.
        why: String,
    },
}
