//! Dead letters written as references (`payload_encoding` `reference`, see
//! [`Encoding::Reference`](super::Encoding::Reference)): their value and headers are read back
//! from the source topic while it still retains the record.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::Envelope;
use crate::kafka::LogContext;

/// Reads source records for references; its consumer is made when the first reference is
/// resolved.
pub(crate) struct SourceReader {
    brokers: String,
    librdkafka: BTreeMap<String, String>,
    source: Option<BaseConsumer<LogContext>>,
}

impl SourceReader {
    /// A reader of the source topics on `brokers`.
    pub(crate) fn new(brokers: &str, librdkafka: &BTreeMap<String, String>) -> Self {
        Self {
            brokers: brokers.to_string(),
            librdkafka: librdkafka.clone(),
            source: None,
        }
    }

    /// Fills a reference in from its source topic (see [`Encoding::Reference`]
    /// (super::Encoding::Reference)); returned as it is when the source no longer has the
    /// record (its payload then does not decode, naming where it was).
    pub(crate) async fn resolve(&mut self, envelope: Envelope) -> Envelope {
        let (topic, partition, offset) = (
            envelope.source.topic.clone(),
            envelope.source.partition,
            envelope.source.offset,
        );
        if self.source.is_none() {
            let mut config = ClientConfig::new();
            config
                .set("bootstrap.servers", &self.brokers)
                .set("group.id", crate::monitor::REPLAY_GROUP)
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false");
            crate::config::apply_librdkafka(&mut config, &self.librdkafka);
            match config.create_with_context(LogContext) {
                Ok(consumer) => self.source = Some(consumer),
                Err(e) => {
                    tracing::warn!(event = "dlq_reference_unresolved", %topic, partition, offset, error = %e);
                    return envelope;
                }
            }
        }
        let source = self.source.as_ref().expect("made above");
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&topic, partition, Offset::Offset(offset))
            .is_err()
            || source.assign(&tpl).is_err()
        {
            return envelope;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            match source.poll(Duration::ZERO) {
                Some(Ok(m)) if m.offset() == offset => {
                    let headers = m
                        .headers()
                        .map(crate::kafka::headers::read)
                        .unwrap_or_default();
                    return envelope.resolve(m.payload(), &headers);
                }
                // Past it: the record is gone (retention or compaction).
                Some(Ok(m)) if m.offset() > offset => break,
                Some(_) => {}
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        tracing::warn!(event = "dlq_reference_unresolved", %topic, partition, offset,
            "the dead letter refers to a record the source topic no longer has");
        envelope
    }
}
