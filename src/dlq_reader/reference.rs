//! Dead letters written as references (`payload_encoding` `reference`, see
//! [`Encoding::Reference`](super::Encoding::Reference)): their value and headers are read back
//! from the record's copy on the retry or redrive topic it was dead-lettered from, if any and
//! while that topic retains it, else from the source topic while it still retains the record.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::dlq::Envelope;
use crate::kafka::LogContext;
use crate::record::RecordHeader;

/// How long reading one source record may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Reads source records for references; its consumer is made when the first reference is
/// resolved.
pub(crate) struct SourceReader {
    brokers: String,
    librdkafka: crate::kafka::ClientOptions,
    source: Option<BaseConsumer<LogContext>>,
    /// The dead-letter topic read: a reference is followed only to a source topic whose
    /// dead-letter topic under `template` it is.
    dlq_topic: String,
    template: crate::dlq::DlqTopic,
}

impl SourceReader {
    /// A reader of the source topics on `brokers`.
    pub(crate) fn new(
        brokers: &str,
        librdkafka: &crate::kafka::ClientOptions,
        dlq_topic: &str,
    ) -> Self {
        Self {
            brokers: brokers.to_string(),
            librdkafka: librdkafka.clone(),
            source: None,
            dlq_topic: dlq_topic.to_string(),
            template: crate::dlq::DlqTopic::default(),
        }
    }

    /// Follows references only to the source topics whose dead-letter topic under `template`
    /// is the one read (`{topic}-dlt` unless told).
    pub(crate) fn set_template(&mut self, template: crate::dlq::DlqTopic) {
        self.template = template;
    }

    /// Fills a reference in from its source topic (see [`Encoding::Reference`]
    /// (super::Encoding::Reference)), or says why it could not.
    pub(crate) async fn resolve(&mut self, envelope: Envelope) -> Result<Envelope, Unresolved> {
        let (topic, partition, offset) = (
            envelope.source.topic.clone(),
            envelope.source.partition,
            envelope.source.offset,
        );
        // Whoever can write the dead-letter topic writes the reference: followed anywhere, it
        // would have the operator's credentials copy any readable record out.
        if !follows(&self.template, &self.dlq_topic, &topic) {
            let why = format!(
                "it names the source topic `{topic}`, whose dead-letter topic is `{}`, not `{}` (--dlq-topic-template)",
                self.template.for_topic(&topic),
                self.dlq_topic
            );
            tracing::warn!(event = "dlq_reference_refused", id = %envelope.id, %topic,
                partition, offset, %why);
            return Err(Unresolved::Refused(why));
        }
        // The retry or redrive copy is the younger one: tried first, its retry headers dropped.
        if let Some(copy) = envelope
            .retry_copy
            .clone()
            .filter(|c| is_copy_of(&c.topic, &topic, &envelope.source.group))
        {
            match self.read(&copy.topic, copy.partition, copy.offset).await {
                Ok((value, headers)) => {
                    let headers: Vec<RecordHeader> = headers
                        .into_iter()
                        .filter(|h| !crate::retry_tier::is_retry_header(&h.key))
                        .collect();
                    return Ok(envelope.resolve(value.as_deref(), &headers));
                }
                Err(unresolved) => {
                    tracing::info!(event = "dlq_reference_copy_unresolved", id = %envelope.id,
                        topic = %copy.topic, partition = copy.partition, offset = copy.offset,
                        error = %unresolved, "reading the source record instead");
                }
            }
        }
        let outcome = self.read(&topic, partition, offset).await;
        match outcome {
            Ok((value, headers)) => Ok(envelope.resolve(value.as_deref(), &headers)),
            Err(unresolved) => {
                tracing::warn!(event = "dlq_reference_unresolved", id = %envelope.id, %topic,
                    partition, offset, error = %unresolved);
                Err(unresolved)
            }
        }
    }

    /// The value and headers of the source record at `offset`.
    async fn read(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(Option<Vec<u8>>, Vec<RecordHeader>), Unresolved> {
        let unavailable =
            |why: String| Unresolved::Unavailable(format!("{topic}/{partition}: {why}"));
        if self.source.is_none() {
            let mut config = ClientConfig::new();
            config
                .set("bootstrap.servers", &self.brokers)
                .set("group.id", crate::dlq_reader::REPLAY_GROUP)
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false");
            self.librdkafka.apply(&mut config);
            let consumer = crate::kafka::create_logged(&config)
                .map_err(|e| unavailable(format!("cannot create a reader: {e}")))?;
            self.source = Some(consumer);
        }
        let source = self.source.as_ref().expect("made above");
        // The topic's own answer first: only a topic the cluster says it does not have (or
        // a partition it lacks) is gone; a denied or unanswered request is not.
        let metadata = source
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| unavailable(format!("cannot read the topic's metadata: {e}")))?;
        let described = metadata
            .topics()
            .first()
            .ok_or_else(|| unavailable("the cluster did not describe the topic".into()))?;
        match described.error().map(RDKafkaErrorCode::from) {
            None => {}
            Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                return Err(Unresolved::Gone(format!(
                    "the source topic {topic} does not exist (deleted)"
                )))
            }
            Some(code) => return Err(unavailable(format!("the topic's metadata says {code}"))),
        }
        if !described.partitions().iter().any(|p| p.id() == partition) {
            return Err(Unresolved::Gone(format!(
                "the source topic {topic} has no partition {partition} (recreated)"
            )));
        }
        let (low, high) = source
            .fetch_watermarks(topic, partition, TIMEOUT)
            .map_err(|e| unavailable(format!("cannot read the watermarks: {e}")))?;
        if offset < low {
            return Err(Unresolved::Gone(format!(
                "{topic}/{partition} starts at offset {low} now (retention deleted offset {offset})"
            )));
        }
        if offset >= high {
            return Err(Unresolved::Gone(format!(
                "{topic}/{partition} ends at offset {high}, before offset {offset} (the topic was \
                 recreated or truncated)"
            )));
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .and_then(|()| source.assign(&tpl))
            .map_err(|e| unavailable(format!("cannot assign: {e}")))?;
        let deadline = std::time::Instant::now() + TIMEOUT;
        while std::time::Instant::now() < deadline {
            match source.poll(Duration::ZERO) {
                Some(Ok(m)) if m.offset() == offset => {
                    let headers = m.headers().map(RecordHeader::read_all).unwrap_or_default();
                    return Ok((m.payload().map(<[u8]>::to_vec), headers));
                }
                Some(Ok(m)) if m.offset() > offset => {
                    return Err(Unresolved::Gone(format!(
                        "{topic}/{partition} no longer has offset {offset} (compacted away)"
                    )))
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(unavailable(format!("cannot read: {e}"))),
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        Err(unavailable(format!(
            "offset {offset} was not read within {} s",
            TIMEOUT.as_secs()
        )))
    }
}

/// Why a reference could not be filled in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unresolved {
    /// The source record is gone for good (retention, compaction, the topic deleted or
    /// recreated): the dead letter's payload is lost.
    #[error("the source record is gone: {0}")]
    Gone(String),
    /// The source could not be read now (a timeout, an authorization error, a broker
    /// outage): trying again later may resolve it.
    #[error("the source record could not be read: {0}")]
    Unavailable(String),
    /// The reference names a source topic whose dead-letter topic (under the template) is not
    /// the one read: not followed. Passed over like a lost one.
    #[error("the reference was not followed: {0}")]
    Refused(String),
}

/// Whether a reference read from `dlq_topic` may be followed to `source`: `dlq_topic` is
/// `source`'s dead-letter topic under `template`.
fn follows(template: &crate::dlq::DlqTopic, dlq_topic: &str, source: &str) -> bool {
    template.for_topic(source) == dlq_topic
}

/// Whether `topic` is a retry topic of `source`, or `group`'s redrive topic of it: the only
/// copies a reference whose source is followed is filled in from.
fn is_copy_of(topic: &str, source: &str, group: &str) -> bool {
    crate::record::retry::parse_topic(topic).is_some_and(|(s, _)| s == source)
        || topic == crate::record::retry::redrive_topic(source, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_followed_only_to_a_source_whose_dead_letter_topic_is_read() {
        let default = crate::dlq::DlqTopic::default();
        assert!(follows(&default, "orders-dlt", "orders"));
        assert!(
            !follows(&default, "orders-dlt", "payments"),
            "a forged source"
        );
        let dotted = crate::dlq::DlqTopic::new("dlq.{topic}").unwrap();
        assert!(follows(&dotted, "dlq.orders", "orders"));
        assert!(!follows(&default, "dlq.orders", "orders"));
    }

    #[test]
    fn a_reference_is_filled_in_only_from_a_retry_or_redrive_copy_of_its_source() {
        assert!(is_copy_of("orders-retry-1", "orders", "billing"));
        assert!(is_copy_of("orders-redrive-billing", "orders", "billing"));
        assert!(
            !is_copy_of("payments-retry-0", "orders", "billing"),
            "another source's"
        );
        assert!(
            !is_copy_of("orders-redrive-other", "orders", "billing"),
            "another group's"
        );
        assert!(!is_copy_of("payments", "orders", "billing"));
    }
}
