//! The dead-letter topic: where records go that cannot be handled, and what they look like.
//!
//! A dead letter is written to the topic named by [`DlqTopic`] (default `<topic>-dlt`, as in
//! Spring Kafka 3.3+), with the source record's key, the source headers (less any earlier
//! `kafka_dlt-*` ones) plus Spring's `kafka_dlt-*` headers, and an [`Envelope`] as its value.
//!
//! An envelope that is too large for the broker (the producer's `message.max.bytes` or the
//! topic's `max.message.bytes`: base64 makes a binary value a third larger) is written in the
//! **detached form** instead: the original value, byte for byte, as the dead letter's value,
//! and the envelope without it in the `kafka_dlq-envelope` header (Spring also writes the
//! original value); [`DlqReader`] joins them again, so `dlq show` and `dlq replay` work the
//! same. A record that does not fit even that way (its value and headers over the limit) is
//! written as a **reference** (`payload_encoding` `reference`: the envelope without payload
//! and source headers, Spring's headers only), which `DlqReader` resolves from the source
//! topic while it still retains the record. Only a DLQ whose limit is smaller than a
//! reference stalls its partition (logged as `dlq_record_too_large`).
//!
//! [`DeadLetterPublisher::publish`] returns only once the broker acknowledged the write
//! (`acks=all`, one request in flight). A failed write is logged as an error and retried with
//! backoff (1 s doubling to 30 s) for as long as it takes or until the partition is revoked or
//! the service stops: the caller commits the source offset only after an acknowledged write,
//! so a broken dead-letter topic stalls its partition instead of losing records (a record
//! handler's partition goes on for up to 5,000 records past the dead letter meanwhile, storing
//! no offset past it).

mod envelope;
pub(crate) use envelope::encode_payload;
pub mod foreign;
mod reader;
mod reference;
pub mod spring;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

pub use envelope::{
    truncate_message, Encoding, Envelope, EnvelopeDecodeError, EnvelopeError, EnvelopeHeader,
    EnvelopeSource, MAX_ERROR_MESSAGE_BYTES,
};
pub use reader::{DlqContent, DlqEntry, DlqReader, Filter};

use crate::backoff::ExponentialBackoff;
use crate::config::ConsumerConfig;
use crate::failure::DeadLetterKind;
use crate::kafka::LogContext;
use crate::metrics::Metrics;
use crate::record::Record;

/// Header of a dead letter in the detached form ([`Encoding::Detached`]): the envelope, JSON,
/// without the payload, which is the dead letter's value.
pub const HEADER_ENVELOPE: &str = "kafka_dlq-envelope";

/// How a dead letter is laid out (`dlq_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DlqFormat {
    /// The JSON [`Envelope`] as the value (the original value inside it), Spring's headers
    /// beside it. The default.
    #[default]
    Envelope,
    /// Spring Kafka's layout: the original value, byte for byte, as the value, and every piece
    /// of metadata in headers: Spring's `kafka_dlt-*` ones and the envelope without payload in
    /// `kafka_dlq-envelope` (the detached form), for DLT consumers written for Spring's
    /// `DeadLetterPublishingRecoverer`. A record too large even so is written as a reference.
    Spring,
}

impl std::str::FromStr for DlqFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "envelope" => Ok(DlqFormat::Envelope),
            "spring" => Ok(DlqFormat::Spring),
            other => Err(format!("expected `envelope` or `spring`, got `{other}`")),
        }
    }
}

/// A dead-letter topic name template: `{topic}` stands for the source topic; a template
/// without it sends every topic's dead letters to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqTopic {
    template: String,
}

impl DlqTopic {
    /// Checks the template: not empty, not just `{topic}`.
    pub fn new(template: &str) -> Result<Self, String> {
        if template.trim().is_empty() {
            return Err("must not be empty".into());
        }
        if template == "{topic}" {
            return Err("would send dead letters back to their own topic".into());
        }
        Ok(Self {
            template: template.to_string(),
        })
    }

    /// The dead-letter topic for records of `topic`.
    pub fn for_topic(&self, topic: &str) -> String {
        self.template.replace("{topic}", topic)
    }
}

/// Checks a Kafka topic name: 1 to 249 characters of `a-z A-Z 0-9 . _ -`, not `.` or `..`.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err("a topic name has 1 to 249 characters".into());
    }
    if name == "." || name == ".." {
        return Err("`.` and `..` are not topic names".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "character {c:?} is not allowed in a topic name (a-z A-Z 0-9 . _ -)"
        ));
    }
    Ok(())
}

/// Where a dead letter was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLettered {
    /// The dead-letter topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// The dead-letter write was given up because the partition was revoked or the service is
/// stopping; the source offset was not stored, so the record will be consumed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned;

/// Writes dead letters and waits for the broker's acknowledgement.
pub struct DeadLetterPublisher {
    producer: FutureProducer<LogContext>,
    topic: DlqTopic,
    group: String,
    format: DlqFormat,
    retry: ExponentialBackoff,
    metrics: Metrics,
}

impl DeadLetterPublisher {
    /// Creates the producer (`acks=all`, one request in flight) from `config`, writing to
    /// `topic`; failed writes are counted in `metrics`.
    pub fn new(
        config: &ConsumerConfig,
        topic: DlqTopic,
        metrics: Metrics,
    ) -> Result<Self, KafkaError> {
        let producer = config
            .producer_client_config()
            .create_with_context(LogContext)?;
        Ok(Self {
            producer,
            topic,
            group: config.group_id.clone(),
            format: config.dlq_format,
            retry: ExponentialBackoff::infrastructure(),
            metrics,
        })
    }

    /// Writes `record` to its dead-letter topic and returns once the broker acknowledged it.
    /// Failed writes are retried with backoff until they succeed; `cancel` ends the wait
    /// between two writes with [`Abandoned`].
    pub async fn publish(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        cancel: &CancellationToken,
    ) -> Result<DeadLettered, Abandoned> {
        self.start(record, kind, message, attempts, cancel.clone())
            .await
    }

    /// Like [`publish`](Self::publish), but hands the first write to the producer before it
    /// returns, so dead letters started one after another are written in that order; the
    /// returned future waits for the acknowledgement (and retries) and owns what it needs.
    pub fn start(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Result<DeadLettered, Abandoned>> + Send + 'static {
        let topic = self.topic.for_topic(&record.topic);
        let envelope = Envelope::new(record, kind, message, attempts, &self.group);
        let inline = envelope.to_vec();
        let write = Write {
            producer: self.producer.clone(),
            source_topic: record.topic.clone(),
            headers: dead_letter_headers(record, &envelope),
            // The payload is kept once, in `inline`; the other forms are derived from it.
            envelope: envelope.into_detached(),
            inline,
            key: record.key.clone(),
            topic,
            format: self.format,
        };
        let form = match self.format {
            DlqFormat::Envelope => Form::Inline,
            DlqFormat::Spring => Form::Detached,
        };
        let first = write.send(form);
        let (retry, metrics) = (self.retry.clone(), self.metrics.clone());
        async move { write.deliver(form, first, retry, metrics, cancel).await }
    }
}

/// The forms a dead letter takes, each tried when the one before is too large for the broker
/// (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The envelope with the payload, as the value.
    Inline,
    /// The original value as the value, the envelope in a header.
    Detached,
    /// The envelope without payload or source headers, as the value.
    Reference,
}

/// One dead letter and what writing it takes.
struct Write {
    producer: FutureProducer<LogContext>,
    topic: String,
    source_topic: String,
    /// The envelope with the payload, as JSON: the only copy of the payload a write keeps.
    inline: Vec<u8>,
    headers: OwnedHeaders,
    /// The envelope in the detached form (no payload), for the detached and reference forms.
    envelope: Envelope,
    key: Option<Vec<u8>>,
    format: DlqFormat,
}

type Sent = Result<rdkafka::producer::DeliveryFuture, KafkaError>;

impl Write {
    /// The record's value, byte for byte (the inline envelope holds it exactly).
    fn original_value(&self) -> Option<Vec<u8>> {
        Envelope::from_slice(&self.inline)
            .and_then(|e| e.payload_bytes())
            .expect("an envelope we built decodes")
    }

    /// Hands the dead letter in `form` to the producer.
    fn send(&self, form: Form) -> Sent {
        let original;
        let reference;
        let (value, headers) = match form {
            Form::Inline => (Some(self.inline.as_slice()), self.headers.clone()),
            Form::Detached => {
                let headers = self.headers.clone().insert(Header {
                    key: HEADER_ENVELOPE,
                    value: Some(&self.envelope.to_vec()),
                });
                original = self.original_value();
                (original.as_deref(), headers)
            }
            Form::Reference => {
                reference = self.envelope.reference().to_vec();
                (Some(reference.as_slice()), spring_headers(&self.envelope))
            }
        };
        let mut out = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
        if let Some(value) = value {
            out = out.payload(value);
        }
        if let Some(key) = self.key.as_deref() {
            out = out.key(key);
        }
        self.producer.send_result(out).map_err(|(error, _)| error)
    }

    /// Waits for `first` (sent in `form`) to be acknowledged, writing again (with backoff)
    /// until a write is.
    async fn deliver(
        self,
        mut form: Form,
        first: Sent,
        retry: ExponentialBackoff,
        metrics: Metrics,
        cancel: CancellationToken,
    ) -> Result<DeadLettered, Abandoned> {
        let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let mut delays = retry.delays();
        let mut sent = first;
        loop {
            // A write in flight is not cut short by `cancel` (that could dead-letter the record
            // and consume it again); only the wait between writes is.
            let result = match sent {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(delivery)) => Ok(delivery),
                    Ok(Err((error, _))) => Err(error),
                    Err(_) => Err(KafkaError::Canceled),
                },
                Err(error) => Err(error),
            };
            match result {
                Ok(delivery) => {
                    match form {
                        Form::Inline => {}
                        Form::Detached if self.format == DlqFormat::Spring => {}
                        Form::Detached => {
                            tracing::warn!(event = "dead_letter_detached", dlq_topic = %self.topic,
                            envelope_bytes = self.inline.len(),
                            "the envelope was too large for the broker: the dead letter's value is the original value, the envelope is in its kafka_dlq-envelope header")
                        }
                        Form::Reference => {
                            tracing::warn!(event = "dead_letter_reference", dlq_topic = %self.topic,
                            envelope_bytes = self.inline.len(),
                            "the record was too large for the dead-letter topic even without its envelope: the dead letter refers to it (payload_encoding \"reference\"); dlq show and replay read it from the source topic while it retains it")
                        }
                    }
                    return Ok(DeadLettered {
                        topic: self.topic,
                        partition: delivery.partition,
                        offset: delivery.offset,
                    });
                }
                Err(error) if error == too_large && form != Form::Reference => {
                    // Try at once in the next form: the detached one (no base64, no copy of
                    // the value), then a reference (no value, no source headers).
                    form = match form {
                        Form::Inline => Form::Detached,
                        _ => Form::Reference,
                    };
                }
                Err(error) => {
                    let delay = delays.next().expect("infrastructure backoff never ends");
                    if error == too_large {
                        tracing::error!(
                            event = "dlq_record_too_large",
                            dlq_topic = %self.topic,
                            reference_bytes = self.envelope.reference().to_vec().len(),
                            retry_in_ms = delay.as_millis() as u64,
                            "not even a reference to the record (no value, no headers) fits the dead-letter topic: its max.message.bytes is far too small; the partition does not advance until it fits"
                        );
                    } else {
                        tracing::error!(
                            event = "dlq_write_failed",
                            dlq_topic = %self.topic,
                            error = %error,
                            retry_in_ms = delay.as_millis() as u64,
                            "dead-letter write failed; the partition does not advance until it succeeds"
                        );
                    }
                    metrics
                        .dlq_write_failures
                        .with_label_values(&[self.source_topic.as_str()])
                        .inc();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = cancel.cancelled() => return Err(Abandoned),
                    }
                }
            }
            sent = self.send(form);
        }
    }
}

/// The headers of a dead letter: the source headers less earlier `kafka_dlt-*` ones, then
/// Spring's `kafka_dlt-*` headers ([`spring::headers`]).
fn dead_letter_headers(record: &Record, envelope: &Envelope) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 9);
    for h in record
        .headers
        .iter()
        .filter(|h| !h.key.starts_with(spring::PREFIX.as_bytes()))
    {
        headers = crate::kafka::headers::add(headers, &h.key, h.value.as_deref());
    }
    add_spring_headers(headers, envelope)
}

/// Spring's `kafka_dlt-*` headers alone, from an envelope: the headers of a reference.
fn spring_headers(envelope: &Envelope) -> OwnedHeaders {
    add_spring_headers(OwnedHeaders::new_with_capacity(9), envelope)
}

/// Appends Spring's `kafka_dlt-*` headers, in Spring's encodings, from the envelope.
fn add_spring_headers(mut headers: OwnedHeaders, envelope: &Envelope) -> OwnedHeaders {
    for (key, value) in spring::headers(envelope) {
        headers = headers.insert(Header {
            key,
            value: Some(&value),
        });
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    #[test]
    fn template_replaces_topic() {
        let t = DlqTopic::new("{topic}-dlt").unwrap();
        assert_eq!(t.for_topic("orders"), "orders-dlt");
        assert_eq!(
            DlqTopic::new("all-dead").unwrap().for_topic("x"),
            "all-dead"
        );
        assert!(DlqTopic::new("{topic}").is_err());
        assert!(DlqTopic::new("").is_err());
    }

    #[test]
    fn topic_names_are_checked() {
        assert!(check_topic_name("orders.v1_x-2").is_ok());
        assert!(check_topic_name("bad/topic").is_err());
        assert!(check_topic_name(&"a".repeat(250)).is_err());
        assert!(check_topic_name("..").is_err());
    }

    #[test]
    fn headers_keep_originals_and_add_spring_ones() {
        let record = Record {
            id: "i".into(),
            topic: "orders".into(),
            partition: 2,
            offset: 9,
            key: None,
            payload: None,
            headers: vec![
                crate::record::RecordHeader {
                    key: "trace".into(),
                    value: Some(b"t1".to_vec()),
                },
                crate::record::RecordHeader {
                    key: spring::ORIGINAL_TOPIC.into(),
                    value: Some(b"older".to_vec()),
                },
            ],
            timestamp: None,
            timestamp_type: None,
        };
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "boom", 1, "g1");
        let headers = dead_letter_headers(&record, &envelope);
        let pairs: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|h| (h.key.to_string(), h.value.unwrap().to_vec()))
            .collect();
        let mut expected = vec![("trace".to_string(), b"t1".to_vec())];
        expected.extend(
            spring::headers(&envelope)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        assert_eq!(pairs, expected);
        assert_eq!(
            pairs[2],
            (spring::ORIGINAL_PARTITION.into(), vec![0, 0, 0, 2])
        );
    }
}
