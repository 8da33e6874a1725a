//! Writing dead letters: the envelope in the form the broker accepts (inline, detached,
//! reference), Spring's headers, retried with backoff until the broker acknowledges.

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::{spring, DlqFormat, DlqTopic, Envelope, HEADER_ENVELOPE};
use crate::backoff::ExponentialBackoff;
use crate::failure::DeadLetterKind;
use crate::kafka::send::{is_too_large, send_until_acknowledged, Failed, Sent, Written};
use crate::kafka::LogContext;
use crate::metrics::Metrics;
use crate::record::{Record, RecordHeader};
use crate::stopped::Stopped;

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

/// Writes dead letters and waits for the broker's acknowledgement. Clones share the producer
/// (retry-topic writes use it too: `retry_tier::RetryWriter`).
#[derive(Clone)]
pub struct DeadLetterPublisher {
    producer: FutureProducer<LogContext>,
    topic: DlqTopic,
    group: String,
    format: DlqFormat,
    retry: ExponentialBackoff,
    metrics: Metrics,
}

impl DeadLetterPublisher {
    /// Creates the producer from `producer` (the consumer's producer settings: `acks=all`, one
    /// request in flight), writing dead letters of `group` to `topic` in `format`; failed
    /// writes are counted in `metrics`.
    pub fn new(
        producer: &ClientConfig,
        topic: DlqTopic,
        group: &str,
        format: DlqFormat,
        metrics: Metrics,
    ) -> Result<Self, KafkaError> {
        let producer = crate::kafka::create_logged(producer)?;
        Ok(Self {
            producer,
            topic,
            group: group.to_string(),
            format,
            retry: ExponentialBackoff::infrastructure(),
            metrics,
        })
    }

    /// Hands `record`'s dead letter (`kind`, after `attempts` calls, failing with `message`)
    /// to the producer before it returns, so dead letters started one after another are
    /// written in that order. The returned future owns what it needs and resolves once the
    /// broker acknowledged a write: failed writes are retried with backoff, a dead letter too
    /// large for the broker is written again in a smaller form; `cancel` ends the wait between
    /// two writes with [`Stopped`].
    pub fn start(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Result<DeadLettered, Stopped>> + Send + 'static {
        let (write, form) = self.write(record, kind, message, attempts);
        let first = write.send(form, write.headers(form, &record.headers));
        let (retry, metrics) = (self.retry.clone(), self.metrics.clone());
        async move { write.deliver(form, first, retry, metrics, cancel).await }
    }

    /// Hands `record`'s dead letter to the producer once and returns at once, in its format's
    /// first form, or with `smallest` as a reference (no value, no source headers: it fits
    /// any topic): a transaction's commit waits for it, and a reference is what follows a
    /// dead letter the topic refused as too large. Returns the dead-letter topic.
    pub(crate) fn send_once(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        smallest: bool,
    ) -> (String, Sent) {
        let (write, form) = self.write(record, kind, message, attempts);
        let form = if smallest { Form::Reference } else { form };
        let sent = write.send(form, write.headers(form, &record.headers));
        (write.topic, sent)
    }

    /// What writing `record`'s dead letter takes, and its first form.
    fn write(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
    ) -> (Write, Form) {
        let topic = self.topic.for_topic(record.source_topic());
        let envelope = Envelope::new(record, kind, message, attempts, &self.group);
        let inline = envelope.to_vec();
        let write = Write {
            producer: self.producer.clone(),
            source_topic: record.topic.clone(),
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
        (write, form)
    }

    /// The dead-letter topic of `record`.
    pub(crate) fn topic_of(&self, record: &Record) -> String {
        self.topic.for_topic(record.source_topic())
    }

    /// The producer dead letters are written with.
    pub(crate) fn producer(&self) -> &FutureProducer<LogContext> {
        &self.producer
    }

    /// The consumer group whose dead letters these are.
    pub(crate) fn group(&self) -> &str {
        &self.group
    }

    /// Where failed writes are counted.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
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
    /// The envelope in the detached form (no payload): the detached and reference forms'
    /// envelope, and the source headers a write sent again is given.
    envelope: Envelope,
    key: Option<Vec<u8>>,
    format: DlqFormat,
}

impl Write {
    /// The record's value, byte for byte (the inline envelope holds it exactly).
    fn original_value(&self) -> Option<Vec<u8>> {
        Envelope::from_slice(&self.inline)
            .and_then(|e| e.payload_bytes())
            .expect("an envelope we built decodes")
    }

    /// The headers of the dead letter in `form`, the record's headers being `source`. Built
    /// for each write rather than kept and copied: librdkafka takes the headers it is given,
    /// and copying them costs one allocation a header (most of a dead letter's allocations).
    fn headers(&self, form: Form, source: &[RecordHeader]) -> OwnedHeaders {
        match form {
            Form::Inline => dead_letter_headers(source, &self.envelope),
            Form::Detached => dead_letter_headers(source, &self.envelope).insert(Header {
                key: HEADER_ENVELOPE,
                value: Some(&self.envelope.to_vec()),
            }),
            Form::Reference => spring_headers(&self.envelope),
        }
    }

    /// The headers of the dead letter in `form` written again: the record's headers as its
    /// envelope holds them.
    fn headers_again(&self, form: Form) -> OwnedHeaders {
        let source = self
            .envelope
            .headers()
            .expect("an envelope we built decodes");
        self.headers(form, &source)
    }

    /// Hands the dead letter in `form`, with `headers`, to the producer.
    fn send(&self, form: Form, headers: OwnedHeaders) -> Sent {
        let original;
        let reference;
        let value = match form {
            Form::Inline => Some(self.inline.as_slice()),
            Form::Detached => {
                original = self.original_value();
                original.as_deref()
            }
            Form::Reference => {
                reference = self.envelope.reference().to_vec();
                Some(reference.as_slice())
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
    /// until a write is; a dead letter too large for the broker is written again at once in
    /// the next, smaller form.
    async fn deliver(
        self,
        form: Form,
        first: Sent,
        retry: ExponentialBackoff,
        metrics: Metrics,
        cancel: CancellationToken,
    ) -> Result<DeadLettered, Stopped> {
        let this = &self;
        let on_failure = |form: Form, error: &KafkaError| match form {
            // The detached form (no base64, no copy of the value), then a reference (no
            // value, no source headers).
            Form::Inline if is_too_large(error) => Failed::Resend(Form::Detached),
            Form::Detached if is_too_large(error) => Failed::Resend(Form::Reference),
            _ => Failed::Later,
        };
        let on_wait = |_: Form, error: &KafkaError, delay: std::time::Duration| {
            if is_too_large(error) {
                tracing::error!(
                    event = "dlq_record_too_large",
                    dlq_topic = %this.topic,
                    reference_bytes = this.envelope.reference().to_vec().len(),
                    retry_in_ms = delay.as_millis() as u64,
                    "not even a reference to the record (no value, no headers) fits the dead-letter topic: its max.message.bytes is far too small; the partition does not advance until it fits"
                );
            } else {
                tracing::error!(
                    event = "dlq_write_failed",
                    dlq_topic = %this.topic,
                    error = %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "dead-letter write failed; the partition does not advance until it succeeds"
                );
            }
            metrics
                .dlq_write_failures
                .with_label_values(&[this.source_topic.as_str()])
                .inc();
        };
        let written = send_until_acknowledged(
            &cancel,
            &retry,
            form,
            first,
            |form| this.send(form, this.headers_again(form)),
            on_failure,
            on_wait,
        )
        .await?;
        let (form, delivery) = match written {
            Written::Acknowledged(form, delivery) => (form, delivery),
            Written::GaveUp => unreachable!("a dead letter is written until it fits"),
        };
        match form {
            Form::Inline => {}
            Form::Detached if this.format == DlqFormat::Spring => {}
            Form::Detached => {
                tracing::warn!(event = "dead_letter_detached", dlq_topic = %this.topic,
                envelope_bytes = this.inline.len(),
                "the envelope was too large for the broker: the dead letter's value is the original value, the envelope is in its kafka_dlq-envelope header")
            }
            Form::Reference => {
                tracing::warn!(event = "dead_letter_reference", dlq_topic = %this.topic,
                envelope_bytes = this.inline.len(),
                "the record was too large for the dead-letter topic even without its envelope: the dead letter refers to it (payload_encoding \"reference\"); dlq show and replay read it from the source topic while it retains it")
            }
        }
        Ok(DeadLettered {
            topic: this.topic.clone(),
            partition: delivery.partition,
            offset: delivery.offset,
        })
    }
}

/// The headers of a dead letter: the `source` headers less earlier `kafka_dlt-*` ones, then
/// Spring's `kafka_dlt-*` headers ([`spring::headers`]).
fn dead_letter_headers(source: &[RecordHeader], envelope: &Envelope) -> OwnedHeaders {
    // Written in a traced `send` span, the dead letter carries that span's trace context (the
    // envelope keeps the record's own, which a replay sends).
    #[cfg(feature = "otel")]
    let trace = crate::record::TraceContext::current();
    #[cfg(not(feature = "otel"))]
    let trace: Option<crate::record::TraceContext> = None;
    let replaced = |key: &[u8]| {
        trace.is_some()
            && (key == crate::record::TRACEPARENT.as_bytes()
                || key == crate::record::TRACESTATE.as_bytes())
    };
    let mut headers = OwnedHeaders::new_with_capacity(source.len() + 11);
    for h in source
        .iter()
        .filter(|h| !h.key.starts_with(spring::PREFIX.as_bytes()) && !replaced(&h.key))
    {
        headers = crate::kafka::headers::add(headers, &h.key, h.value.as_deref());
    }
    if let Some(trace) = &trace {
        headers = crate::kafka::headers::add(
            headers,
            crate::record::TRACEPARENT.as_bytes(),
            Some(trace.traceparent.as_bytes()),
        );
        if let Some(state) = &trace.tracestate {
            headers = crate::kafka::headers::add(
                headers,
                crate::record::TRACESTATE.as_bytes(),
                Some(state.as_bytes()),
            );
        }
    }
    add_spring_headers(headers, envelope)
}

/// Spring's `kafka_dlt-*` headers alone, from an envelope, less the stack trace (it repeats
/// the message, up to 1 KiB more): the headers of a reference, which has to fit a small
/// record size limit.
fn spring_headers(envelope: &Envelope) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(8);
    for (key, value) in spring::headers(envelope)
        .into_iter()
        .filter(|(key, _)| *key != spring::EXCEPTION_STACKTRACE)
    {
        headers = headers.insert(Header {
            key,
            value: Some(&value),
        });
    }
    headers
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

    /// A dead letter written again has its headers rebuilt from its envelope: the same
    /// headers, whatever bytes the record's headers held.
    #[test]
    fn headers_rebuilt_from_the_envelope_are_the_records() {
        let header = |key: &[u8], value: Option<&[u8]>| RecordHeader {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        };
        let mut record = Record::new("orders", 1, 4);
        record.headers = vec![
            header(b"trace", Some(b"t1")),
            header(&[0xff, 0xfe, b'k'], Some(&[0x80, 0x81, 0x00])),
            header(b"empty", Some(b"")),
            header(b"none", None),
            header(spring::ORIGINAL_TOPIC.as_bytes(), Some(b"older")),
        ];
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "boom", 1, "g1");
        let pairs = |headers: OwnedHeaders| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            RecordHeader::read_all(&headers)
                .into_iter()
                .map(|h| (h.key, h.value))
                .collect()
        };
        let first = pairs(dead_letter_headers(&record.headers, &envelope));
        let detached = envelope.into_detached();
        let again = pairs(dead_letter_headers(&detached.headers().unwrap(), &detached));
        assert_eq!(again, first);
        assert_eq!(
            first[1],
            (vec![0xff, 0xfe, b'k'], Some(vec![0x80, 0x81, 0x00]))
        );
        assert_eq!(first[3], (b"none".to_vec(), None));
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
            retry: None,
            delivery_count: None,
        };
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "boom", 1, "g1");
        let headers = dead_letter_headers(&record.headers, &envelope);
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
