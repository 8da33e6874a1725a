//! kafka-dlq's own state on the cluster, kept where Kafka does not expire it.
//!
//! Two topics hold what the tools must remember for as long as the dead letters they speak of:
//!
//! | topic | holds | kept |
//! |---|---|---|
//! | the audit topic (`kafka-dlq-audit`) | every replay's, redrive's, discard's and restore's summary ([`crate::replay::audit`]) | for ever: created with `retention.ms=-1` and `retention.bytes=-1` |
//! | the positions topic (the audit topic's name and `-positions`) | where each replay group got to on each DLT partition, with the offsets it passed over unsent and the filter it replays ([`position_record`]) | compacted: the latest record of each key for ever |
//!
//! Replay positions used to be the committed offsets of the `kafka-dlq-replay…` groups, which
//! Kafka deletes `offsets.retention.minutes` (7 days by default) after an idle group's last
//! commit: every replayed dead letter was then outstanding again and the next replay sent it a
//! second time. Those offsets are read once, when a group has no position in the positions
//! topic yet, and written there ([`positions::PositionStore::migrate`]); nothing commits them
//! any more.
//!
//! - [`audit`]: the audit topic's run summaries, appended and read back;
//! - [`seal`]: with a shared key, state records are sealed (HMAC) and unsealed ones ignored;
//! - [`position_record`]: a position record and the table a reader keeps (pure);
//! - [`positions`]: reading and writing the positions topic;
//! - [`ledger`]: which dead letters are outstanding, from both (pure);
//! - [`topics`]: creating both topics so, and checking existing ones.

pub mod audit;
pub mod ledger;
pub mod position_record;
pub mod positions;
pub mod seal;
pub mod topics;

pub use position_record::{
    GroupPositions, PositionKey, PositionRecord, PositionTable, SHARED_PREFIX,
};
pub use positions::PositionStore;
pub use seal::{StateKey, StateKeyTooShort, HEADER_SEAL};
pub use topics::{RetentionFinding, StateTopicProblem};

/// The audit topic every tool uses unless told otherwise.
pub const DEFAULT_AUDIT_TOPIC: &str = "kafka-dlq-audit";

/// The suffix that names the positions topic after the audit topic.
pub const POSITIONS_SUFFIX: &str = "-positions";

/// Where kafka-dlq keeps its state, and the key that seals it.
#[derive(Debug, Clone, PartialEq)]
pub struct StateTopics {
    /// The audit topic: every action's summary.
    pub audit: String,
    /// The positions topic: the replay groups' positions (compacted).
    pub positions: String,
    /// With a key, state records are sealed when written and unsealed ones ignored when read
    /// ([`seal`]).
    pub key: Option<StateKey>,
}

impl StateTopics {
    /// The state kept on `audit_topic` and its positions topic (`<audit_topic>-positions`),
    /// unsealed.
    pub fn new(audit_topic: &str) -> StateTopics {
        StateTopics {
            audit: audit_topic.to_string(),
            positions: format!("{audit_topic}{POSITIONS_SUFFIX}"),
            key: None,
        }
    }

    /// The same, sealed with `key` (`None`: unsealed).
    pub fn sealed_with(self, key: Option<StateKey>) -> StateTopics {
        StateTopics { key, ..self }
    }

    /// Whether `topic` is one of them: never a destination of a redrive.
    pub fn holds(&self, topic: &str) -> bool {
        topic == self.audit || topic == self.positions
    }
}

impl Default for StateTopics {
    fn default() -> Self {
        StateTopics::new(DEFAULT_AUDIT_TOPIC)
    }
}

impl PartialEq for StateKey {
    fn eq(&self, other: &Self) -> bool {
        // Only to compare configurations; the key never leaves this process.
        self.seal(b"", b"") == other.seal(b"", b"")
    }
}

/// Why reading or writing kafka-dlq's state failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A client could not be created (a bad setting).
    #[error("could not create a client for `{topic}`: {source}")]
    Client {
        /// The state topic.
        topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The topic could not be read (a broker down, no Read permission, a timeout).
    #[error("could not read `{topic}`: {source}")]
    Read {
        /// The state topic.
        topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A record could not be written (not acknowledged: a broker down, no Write permission).
    #[error("could not write to `{topic}`: {source}")]
    Write {
        /// The state topic.
        topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The topic could not be created or its configuration read.
    #[error(transparent)]
    Topic(#[from] crate::kafka::topics::TopicsError),
    /// A group's committed offsets could not be read to migrate them.
    #[error("could not read the committed offsets of `{group}` on `{dlq_topic}` to move them to the positions topic: {source}")]
    Migrate {
        /// The replay group.
        group: String,
        /// The DLT.
        dlq_topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
}
