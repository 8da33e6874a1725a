//! Where a replay sends each dead letter: by default to the redrive topic of the group that
//! dead-lettered it, which only that group reads; explicitly back to its source topic, where
//! every group reading that topic handles it again; or to a topic of the operator's choice.

use std::collections::{BTreeMap, HashSet};

use crate::dlq::Envelope;
use crate::kafka::topics::{Topics, TopicsError};
use crate::record::retry::redrive_topic;

/// Where a replay sends each dead letter. As JSON: `"group"`, `"source"` or
/// `{"topic": "…"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// Why `topic` is never where a replay of `dlq_topic` sends (the consumers' dead-letter topic
/// template `template`, kafka-dlq's state in `state`); `None` when it may be:
///
/// - the audit or positions topic: a record there would be taken for an action or a position
///   (a forged discard hides dead letters from the console and the monitor);
/// - a dead-letter topic (the one read, or any the template names, or ending in `-dlt`,
///   `.DLT` or `-dlq`): a loop, and an envelope written by no consumer;
/// - a retry topic (`<topic>-retry-<n>`): its records carry retry accounts the consumer
///   trusts;
/// - an internal topic (`__*`, `_schemas`, `_confluent*`, `_connect*`).
pub fn refusal(
    topic: &str,
    dlq_topic: &str,
    template: &crate::dlq::DlqTopic,
    state: &crate::state::StateTopics,
) -> Option<String> {
    if topic == state.audit {
        return Some(
            "it is kafka-dlq's audit topic: a record there would pass for an action".into(),
        );
    }
    if topic == state.positions {
        return Some(
            "it is kafka-dlq's positions topic: a record there would pass for a replay position"
                .into(),
        );
    }
    let internal = topic.starts_with("__")
        || topic == "_schemas"
        || topic.starts_with("_confluent")
        || topic.starts_with("_connect");
    if internal {
        return Some("it is an internal topic".into());
    }
    let lower = topic.to_ascii_lowercase();
    let dead_letters = topic == dlq_topic
        || template.is_dlq_topic(topic)
        || lower.ends_with("-dlt")
        || lower.ends_with(".dlt")
        || lower.ends_with("-dlq");
    if dead_letters {
        return Some("it is a dead-letter topic".into());
    }
    if crate::record::retry::parse_topic(topic).is_some() {
        return Some(
            "it is a retry topic: its records carry retry accounts the consumer trusts".into(),
        );
    }
    None
}

/// Whether `source`, a dead letter's source topic as its envelope says, is one whose dead
/// letters go to `dlq_topic` under `template` — the only sources a replay of `dlq_topic` sends
/// back to (directly, or through their group's redrive topic). Whoever can write the DLT
/// writes its envelopes: a dead letter naming another topic is passed over, unsent.
/// (A retry topic read as a DLT, `<source>-retry-<n>`, belongs to its source too.)
pub fn source_belongs(source: &str, dlq_topic: &str, template: &crate::dlq::DlqTopic) -> bool {
    let retry_of = crate::record::retry::parse_topic(dlq_topic).map(|(s, _)| s);
    !source.is_empty() && (template.for_topic(source) == dlq_topic || retry_of == Some(source))
}

/// Refuses a `--to` topic that is never a destination ([`refusal`]) or that holds dead-letter
/// envelopes already (the last record of any of its partitions is one: a DLT under another
/// name), for a replay of `options.dlq_topic`. Reads the topic's last records.
pub async fn check_named(
    options: &super::ReplayOptions,
    topic: &str,
) -> Result<(), super::ReplayError> {
    let refused = |why: String| super::ReplayError::Destination {
        topic: topic.to_string(),
        why,
    };
    if let Some(why) = refusal(
        topic,
        &options.dlq_topic,
        &options.dlq_template,
        &options.state,
    ) {
        return Err(refused(why));
    }
    match holds_dead_letters(&options.brokers, &options.librdkafka, topic).await {
        Ok(false) => Ok(()),
        Ok(true) => Err(refused(
            "it holds dead-letter envelopes: it is a dead-letter topic under another name".into(),
        )),
        Err(e) if crate::dlq_reader::is_unknown_topic(&e) => Ok(()),
        Err(e) => Err(refused(format!(
            "it could not be read to tell what it holds: {e}"
        ))),
    }
}

/// Whether the last record of any partition of `topic` is a dead letter (kafka-dlq's
/// envelope, or Spring's, Connect's or a share group's).
async fn holds_dead_letters(
    brokers: &str,
    raw: &crate::kafka::ClientOptions,
    topic: &str,
) -> Result<bool, rdkafka::error::KafkaError> {
    use crate::dlq_reader::foreign::ForeignFormat;
    use crate::dlq_reader::{DlqContent, DlqReader};
    let (brokers, raw, t) = (brokers.to_string(), raw.clone(), topic.to_string());
    let mut reader = tokio::task::spawn_blocking(move || {
        let mut reader = DlqReader::open(&brokers, &raw, &t)?.leaving_references();
        let last: std::collections::HashMap<i32, std::ops::Range<i64>> = reader
            .ends()
            .into_iter()
            .map(|(p, end)| (p, (end - 1).max(0)..end))
            .collect();
        reader.narrow(&last)?;
        Ok::<_, rdkafka::error::KafkaError>(reader)
    })
    .await
    .expect("destination read task")?;
    while let Some(entry) = reader.next_entry().await {
        let dead_letter = match entry?.content {
            DlqContent::Envelope(_) => true,
            DlqContent::Foreign { format, .. } => format != ForeignFormat::RetryTopic,
            _ => false,
        };
        if dead_letter {
            return Ok(true);
        }
    }
    Ok(false)
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

    #[test]
    fn state_dead_letter_retry_and_internal_topics_are_never_destinations() {
        let template = crate::dlq::DlqTopic::default();
        let state = crate::state::StateTopics::new("kafka-dlq-audit");
        let refused = |t: &str| refusal(t, "orders-dlt", &template, &state);
        for topic in [
            "kafka-dlq-audit",
            "kafka-dlq-audit-positions",
            "orders-dlt",
            "payments-dlt",
            "orders.DLT",
            "orders-dlq",
            "orders-retry-0",
            "__consumer_offsets",
            "__transaction_state",
            "_schemas",
            "_confluent-command",
        ] {
            assert!(refused(topic).is_some(), "{topic}");
        }
        for topic in [
            "orders",
            "orders-redrive-billing",
            "orders-fixed",
            "dlt-archive",
        ] {
            assert_eq!(refused(topic), None, "{topic}");
        }
        let custom = crate::dlq::DlqTopic::new("dead.{topic}").unwrap();
        assert!(refusal("dead.orders", "x", &custom, &state).is_some());
    }

    #[test]
    fn only_a_source_whose_dead_letters_go_to_the_topic_read_is_sent_back_to() {
        let template = crate::dlq::DlqTopic::default();
        assert!(source_belongs("orders", "orders-dlt", &template));
        assert!(!source_belongs("payments", "orders-dlt", &template));
        assert!(!source_belongs("", "orders-dlt", &template));
        assert!(source_belongs("orders", "orders-retry-1", &template));
        assert!(!source_belongs("payments", "orders-retry-1", &template));
    }
}
