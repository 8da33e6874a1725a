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
//! original value); [`DlqReader`](crate::dlq_reader::DlqReader) joins them again, so `dlq show` and `dlq replay` work the
//! same. A record that does not fit even that way (its value and headers over the limit) is
//! written as a **reference** (`payload_encoding` `reference`: the envelope without payload
//! and source headers, Spring's headers only), which the `DlqReader` resolves from the source
//! topic while it still retains the record. Only a DLQ whose limit is smaller than a
//! reference stalls its partition (logged as `dlq_record_too_large`).
//!
//! [`DeadLetterPublisher::start`] resolves only once the broker acknowledged the write
//! (`acks=all`, one request in flight). A failed write is logged as an error and retried with
//! backoff (1 s doubling to 30 s) for as long as it takes or until the partition is revoked or
//! the service stops: the caller commits the source offset only after an acknowledged write,
//! so a broken dead-letter topic stalls its partition instead of losing records (a record
//! handler's partition goes on for up to 5,000 records past the dead letter meanwhile, storing
//! no offset past it).

mod encoding;
mod envelope;
mod error_message;
#[cfg(feature = "sidecar")]
pub(crate) use encoding::encode_payload;
pub use encoding::Encoding;
mod publisher;
pub mod spring;
mod topic;

pub use envelope::{
    Envelope, EnvelopeDecodeError, EnvelopeError, EnvelopeHeader, EnvelopeSource, RetryCopy,
};
pub use error_message::{truncate_message, MAX_ERROR_MESSAGE_BYTES};
pub use publisher::{DeadLetterPublisher, DeadLettered};
pub use topic::{check_topic_name, DlqTopic, DlqTopicError, TopicNameError};

/// Header of a dead letter in the detached form ([`Encoding::Detached`]): the envelope, JSON,
/// without the payload, which is the dead letter's value.
pub const HEADER_ENVELOPE: &str = "kafka_dlq-envelope";

/// How a dead letter is laid out (`dlq_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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

impl std::fmt::Display for DlqFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DlqFormat::Envelope => "envelope",
            DlqFormat::Spring => "spring",
        })
    }
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
