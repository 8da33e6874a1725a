//! What a replay reads and where it sends: [`ReplayOptions`], and the consumer group that
//! keeps its position.

use super::{audit, Destination};
use crate::dlq_reader::Filter;

/// What to replay and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// Bootstrap servers.
    pub brokers: String,
    /// Raw librdkafka properties for the reader and the producer.
    pub librdkafka: crate::kafka::ClientOptions,
    /// The dead-letter topic to read.
    pub dlq_topic: String,
    /// The consumers' dead-letter topic template (`dlq_topic` of their configuration): a
    /// reference is followed only to a source topic whose dead-letter topic under it is
    /// `dlq_topic`. Default `{topic}-dlt`.
    pub dlq_template: crate::dlq::DlqTopic,
    /// Where each dead letter goes: its group's redrive topic (the default), its source
    /// topic, or one topic.
    pub destination: Destination,
    /// Which dead letters.
    pub filter: Filter,
    /// Report what would be sent; send and commit nothing.
    pub dry_run: bool,
    /// At most this many records per second (`None`: as fast as the broker takes them).
    pub rate_per_sec: Option<u32>,
    /// The loop guard: a record already replayed this many times is refused. Default 3.
    pub max_replays: u32,
    /// Who runs it, for the audit (default: the login name, [`audit::operator_name`]).
    pub operator: String,
    /// Where the run keeps its position and appends its summary ([`crate::state`]), and the
    /// key that seals them. Default: [`audit::DEFAULT_AUDIT_TOPIC`] and its positions topic,
    /// unsealed.
    pub state: crate::state::StateTopics,
    /// Sends the edited payload instead of each dead letter's own (the console's edit then
    /// redrive, whose filter names one dead letter); the run's summary keeps both.
    pub edit: Option<audit::Edit>,
    /// The console's request this replay carries out, once approved (in its summary).
    pub request: Option<String>,
    /// A bulk fix: each payload transformed before it is sent; one it fails on is passed over
    /// unsent ([`super::transform`]).
    pub transform: Option<super::transform::Transform>,
}

impl ReplayOptions {
    /// Replays everything on `dlq_topic` to its source topics, with the defaults.
    pub fn new(brokers: &str, dlq_topic: &str) -> Self {
        Self {
            brokers: brokers.into(),
            librdkafka: crate::kafka::ClientOptions::new(),
            dlq_topic: dlq_topic.into(),
            dlq_template: crate::dlq::DlqTopic::default(),
            destination: Destination::Group,
            filter: Filter::default(),
            dry_run: false,
            rate_per_sec: None,
            max_replays: 3,
            operator: audit::operator_name(),
            state: crate::state::StateTopics::default(),
            edit: None,
            request: None,
            transform: None,
        }
    }

    /// The group this replay's position is kept under in the positions topic:
    /// [`crate::dlq_reader::REPLAY_GROUP`] for a replay without filters that puts each dead
    /// letter back (to its group or its source: either way it is replayed once), another for
    /// each filter, `--to` topic or edit (the edited payload's digest: a second edit of the
    /// same dead letter is a redrive of its own).
    pub fn position_group(&self) -> String {
        let to = match &self.destination {
            Destination::Topic(topic) => Some(topic),
            Destination::Group | Destination::Source => None,
        };
        if self.filter.is_empty() && to.is_none() && self.edit.is_none() {
            return crate::dlq_reader::REPLAY_GROUP.to_string();
        }
        // A hash of the filter and destination: the same replay resumes, another starts anew.
        let mut key = format!("{}|{:?}", self.filter.key(), to);
        if let Some(transform) = &self.transform {
            key.push_str(&format!("|transform:{}", transform.digest()));
        }
        if let Some(edit) = &self.edit {
            key.push_str(&format!("|edit:{}", edit.edited_sha256));
        }
        let hash = crate::fingerprint::stable_hash(&key);
        format!("{}-{hash:016x}", crate::dlq_reader::REPLAY_GROUP)
    }
}
