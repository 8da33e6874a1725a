//! Where a replay sends each dead letter: by default to the redrive topic of the group that
//! dead-lettered it, which only that group reads; explicitly back to its source topic, where
//! every group reading that topic handles it again; or to a topic of the operator's choice.

use std::collections::{BTreeMap, HashSet};

use crate::dlq::Envelope;
use crate::kafka::topics::{Topics, TopicsError};
use crate::record::retry::redrive_topic;

/// Where a replay sends each dead letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Destination {
    /// To the redrive topic of the group that dead-lettered it (`<source>-redrive-<group>`,
    /// [`redrive_topic`]), which every kafka-dlq consumer of that group reads and no other
    /// group does: it is handled again by the service that failed it, as its original record,
    /// at once. The default. A dead letter that names no group stops the replay
    /// ([`super::ReplayError::NoGroup`]), and so does one another tool wrote (Spring, Connect,
    /// a share group's broker) for a group whose redrive topic does not exist — a group no
    /// kafka-dlq consumer has run, which would never read it
    /// ([`super::ReplayError::NotAKafkaDlqGroup`]).
    #[default]
    Group,
    /// Back to its source topic (`--to-source`): **every** group reading that topic handles it
    /// again. The replay logs which groups those are (`replay_to_source`), from the committed
    /// offsets on the broker, and lists them in [`super::ReplayReport::source_readers`].
    Source,
    /// To this topic (`--to TOPIC`), as it was first written.
    Topic(String),
}

impl Destination {
    /// The topic `envelope`'s record goes to; `None` for [`Destination::Group`] when it names
    /// no group.
    pub fn topic_of(&self, envelope: &Envelope) -> Option<String> {
        match self {
            Destination::Group if envelope.source.group.is_empty() => None,
            Destination::Group => Some(redrive_topic(
                &envelope.source.topic,
                &envelope.source.group,
            )),
            Destination::Source => Some(envelope.source.topic.clone()),
            Destination::Topic(topic) => Some(topic.clone()),
        }
    }
}

/// The redrive topics a replay has made sure of: each is created, when missing, before the
/// first record goes to it (as many partitions as its source topic), as the group's consumer
/// would at its start — so records for a group that is not running yet wait there for it.
pub(super) struct RedriveTopics {
    /// The cluster's topics when the replay started.
    cluster: Topics,
    /// The redrive topics known to exist by now.
    ready: HashSet<String>,
}

impl RedriveTopics {
    /// Reads the cluster's topics through an admin client of `config`.
    pub(super) async fn read(config: &rdkafka::ClientConfig) -> Result<Self, TopicsError> {
        Ok(Self {
            cluster: Topics::read(config).await?,
            ready: HashSet::new(),
        })
    }

    /// Whether the redrive topic `topic` exists: a kafka-dlq consumer of its group creates it
    /// when it starts, so a redrive topic that does not exist is one no consumer reads yet.
    pub(super) fn exists(&self, topic: &str) -> bool {
        self.ready.contains(topic) || self.cluster.exists(topic)
    }

    /// Makes sure the redrive topic `topic` of the source topic `source` exists.
    pub(super) async fn ensure(&mut self, topic: &str, source: &str) -> Result<(), TopicsError> {
        if self.ready.contains(topic) {
            return Ok(());
        }
        let missing: BTreeMap<String, i32> = self.cluster.missing([(topic.to_string(), source)]);
        self.cluster
            // Dead letters put back wait there for their group: kept until read.
            .create(&missing, |_| Some(-1), "redrive_topic_created")
            .await?;
        self.ready.insert(topic.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::DeadLetterKind;
    use crate::record::Record;

    #[test]
    fn a_dead_letter_goes_to_its_groups_redrive_topic_unless_told_otherwise() {
        let record = Record::new("orders", 0, 7);
        let billing = Envelope::new(&record, DeadLetterKind::Permanent, "e", 1, "billing");
        let nobody = Envelope::new(&record, DeadLetterKind::Permanent, "e", 1, "");
        let group = Destination::Group;
        assert_eq!(
            group.topic_of(&billing).as_deref(),
            Some("orders-redrive-billing")
        );
        assert_eq!(group.topic_of(&nobody), None);
        assert_eq!(
            Destination::Source.topic_of(&nobody).as_deref(),
            Some("orders")
        );
        assert_eq!(
            Destination::Topic("fixed".into())
                .topic_of(&billing)
                .as_deref(),
            Some("fixed")
        );
    }
}
