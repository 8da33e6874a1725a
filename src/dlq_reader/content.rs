//! What a DLQ record holds, decoded: one of our envelopes (in any of its forms), a foreign
//! dead letter, or something else. The one decoder of the `dlq` commands and the monitor.

use chrono::{TimeZone, Utc};
use rdkafka::message::Message;

use super::foreign::ForeignFormat;
use crate::dlq::Envelope;
use crate::record::RecordHeader;

/// The value of a DLQ record.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DlqContent {
    /// One of our envelopes.
    Envelope(Box<Envelope>),
    /// A dead letter another tool wrote (Spring Kafka, Kafka Connect, a share group), read
    /// as an envelope from its headers (see [`super::foreign`]); shown and replayed like ours.
    Foreign {
        /// Who wrote it.
        format: ForeignFormat,
        /// What its headers and value say, as an envelope.
        envelope: Box<Envelope>,
    },
    /// Something else: shown as such, never replayed.
    NotAnEnvelope {
        /// Why it does not decode.
        reason: String,
        /// The start of the value, as lossy UTF-8.
        preview: String,
    },
}

impl DlqContent {
    /// Decodes one DLQ record, whatever form it takes: the envelope as the value, the
    /// detached form (the original value as the value, the envelope in the
    /// `kafka_dlq-envelope` header; put back together here), a reference (returned as it is:
    /// [`DlqReader`](super::DlqReader) resolves it from the source topic), or a dead letter written by Spring
    /// Kafka, Kafka Connect, a share group, Kafka Streams or a data contract rule
    /// ([`super::foreign::decode`]). The one decoder of
    /// the `dlq` commands and the monitor.
    pub fn decode<M: Message>(message: &M) -> DlqContent
    where
        M::Headers: crate::kafka::headers::RawHeaders,
    {
        let detached = message.headers().and_then(|headers| {
            crate::kafka::headers::find(headers, crate::dlq::HEADER_ENVELOPE.as_bytes())
                .flatten()
                .map(Envelope::from_slice)
        });
        let ours = detached.or_else(|| message.payload().map(Envelope::from_slice));
        if let Some(Ok(env)) = ours {
            return DlqContent::Envelope(Box::new(env.attach(message.payload())));
        }
        if let Some(envelope) = waiting_retry(message) {
            return DlqContent::Foreign {
                format: ForeignFormat::RetryTopic,
                envelope: Box::new(envelope),
            };
        }
        let headers = message
            .headers()
            .map(RecordHeader::read_all)
            .unwrap_or_default();
        let foreign = super::foreign::decode(super::foreign::DlqRecord {
            key: message.key(),
            value: message.payload(),
            headers: &headers,
            timestamp: message
                .timestamp()
                .to_millis()
                .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
            at: (message.topic(), message.partition(), message.offset()),
        });
        if let Some((format, envelope)) = foreign {
            return DlqContent::Foreign {
                format,
                envelope: Box::new(envelope),
            };
        }
        match ours {
            Some(Err(e)) => DlqContent::NotAnEnvelope {
                reason: e.to_string(),
                preview: {
                    let value = message.payload().unwrap_or_default();
                    String::from_utf8_lossy(&value[..value.len().min(120)]).to_string()
                },
            },
            _ => DlqContent::NotAnEnvelope {
                reason: "empty value".into(),
                preview: String::new(),
            },
        }
    }

    /// The envelope, ours or one read from a foreign dead letter (or a record waiting in a
    /// retry topic); `None` when it is neither.
    pub fn envelope(&self) -> Option<&Envelope> {
        match self {
            DlqContent::Envelope(e) | DlqContent::Foreign { envelope: e, .. } => Some(e),
            DlqContent::NotAnEnvelope { .. } => None,
        }
    }

    /// Its error kind and message: the envelope's, or for a record that is not one
    /// `unreadable` and `not a kafka-dlq envelope: <why>`.
    pub fn cause(&self) -> (&'static str, std::borrow::Cow<'_, str>) {
        match self {
            DlqContent::Envelope(e) | DlqContent::Foreign { envelope: e, .. } => {
                (e.error.kind.as_str(), e.error.message.as_str().into())
            }
            DlqContent::NotAnEnvelope { reason, .. } => (
                "unreadable",
                format!("not a kafka-dlq envelope: {reason}").into(),
            ),
        }
    }

    /// The fingerprint of its [`cause`](Self::cause) ([`crate::fingerprint::fingerprint`]):
    /// how the monitor and the console group dead letters.
    pub fn fingerprint(&self) -> String {
        let (kind, message) = self.cause();
        crate::fingerprint::fingerprint(kind, &message)
    }
}

/// A record waiting in one of our retry topics or a group's redrive topic (it has a readable
/// `kafka_dlq-retry` header), as an envelope: the original record, kind `retries_exhausted`,
/// the handler calls so far, the message `waiting in retry tier <n>, due <time>: <last error>`
/// (`replayed to its group's redrive topic, due <time>: …` there), its history and the group
/// that wrote it.
fn waiting_retry<M: Message>(message: &M) -> Option<Envelope>
where
    M::Headers: crate::kafka::headers::RawHeaders,
{
    let headers = message.headers()?;
    crate::kafka::headers::find(headers, crate::retry_tier::HEADER_RETRY.as_bytes())??;
    let tier = crate::record::retry::parse_topic(message.topic()).map(|(_, tier)| tier);
    let (original, error) =
        crate::retry_tier::restore(crate::record::Record::from_message(message, None), tier);
    if error.is_some() {
        return None;
    }
    let retry = original.retry.as_ref()?;
    let last = retry.history.last()?;
    let due = retry.due.format("%Y-%m-%dT%H:%M:%S%.3fZ");
    let text = match tier {
        Some(tier) => format!("waiting in retry tier {tier}, due {due}: {}", last.error),
        None => format!(
            "replayed to its group's redrive topic, due {due}: {}",
            last.error
        ),
    };
    let mut envelope = Envelope::new(
        &original,
        crate::failure::DeadLetterKind::RetriesExhausted,
        &text,
        retry.attempts,
        retry.group.as_deref().unwrap_or_default(),
    );
    envelope.history = retry.history.clone();
    envelope.timestamp = last.at;
    Some(envelope)
}
