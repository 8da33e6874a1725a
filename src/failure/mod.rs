//! What went wrong with a record, and what to do about it.
//!
//! A [`Handler`](crate::handler::Handler) reports a failure as a [`HandlerError`], marked
//! *transient* (the record may succeed later: a downstream timed out, answered 503) or
//! *permanent* (it never will: malformed JSON, a rejected value). Any other error converted with
//! `?` is **permanent**, and so is a handler panic: a bug must not retry forever, and the safe
//! place for a record nobody understands is the dead-letter topic.
//!
//! [`decide`] is the one place that turns a failure into a [`Decision`], in the manner of
//! Spring Kafka's `DefaultErrorHandler`: a permanent failure is dead-lettered after its first
//! attempt; a transient one is retried after the next delay of the backoff, and dead-lettered
//! as [`DeadLetterKind::RetriesExhausted`] when the backoff gives up.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Delays;

/// Whether a failure may go away if the record is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Try again later (timeouts, 5xx, a downstream that is down).
    Transient,
    /// Trying again will not help (malformed input, a rejected value, a bug).
    Permanent,
}

/// A failure reported by a handler for one record.
///
/// Build one with [`HandlerError::transient`] or [`HandlerError::permanent`] (both take any
/// error or message: `.map_err(HandlerError::transient)?`); the errors of reading a record's
/// bytes convert into a permanent one with `?` (see the `From` impls). It is a
/// `std::error::Error`, so it goes wherever errors go (`Box<dyn Error>`, `anyhow`).
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerError {
    kind: FailureKind,
    message: String,
    retry_after: Option<Duration>,
    /// The record's bytes do not decode ([`HandlerError::undecodable`]).
    undecodable: bool,
    /// A partial batch response: the records of the batch that failed, by offset, each with
    /// its own failure; the batch's other records succeeded ([`HandlerError::partial`]).
    records: Option<Vec<(i64, HandlerError)>>,
}

impl HandlerError {
    /// A failure that may go away: the record is retried with backoff.
    pub fn transient(message: impl fmt::Display) -> Self {
        Self {
            kind: FailureKind::Transient,
            message: message.to_string(),
            retry_after: None,
            undecodable: false,
            records: None,
        }
    }

    /// A failure that will not go away: the record is dead-lettered at once.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self {
            kind: FailureKind::Permanent,
            message: message.to_string(),
            retry_after: None,
            undecodable: false,
            records: None,
        }
    }

    /// A permanent failure because the record's bytes do not decode (with their schema, or at
    /// all): dead-lettered at once with kind [`DeadLetterKind::Deserialization`], as Spring's
    /// `ErrorHandlingDeserializer` tells a record that cannot be read from one a handler
    /// refused. `message` says why.
    pub fn undecodable(message: impl fmt::Display) -> Self {
        Self {
            undecodable: true,
            ..Self::permanent(message)
        }
    }

    /// Whether the record's bytes did not decode ([`HandlerError::undecodable`]).
    pub fn is_undecodable(&self) -> bool {
        self.undecodable
    }

    /// A partial batch response (as AWS Lambda's `batchItemFailures`): of a batch, only the
    /// records at these offsets failed, each with its own failure; every other record of the
    /// batch succeeded. The named records go through the retry and dead-letter policy on their
    /// own (their first attempt was this call), the others settle at once; no bisection. If any
    /// offset is not in the batch, no record is settled by it: the whole batch failed
    /// transiently (as SQS treats an unknown `itemIdentifier`), and is split as any failed
    /// batch is. The call counts as answered for the outage breaker.
    pub fn partial(failures: impl IntoIterator<Item = (i64, HandlerError)>) -> Self {
        let records: Vec<(i64, HandlerError)> = failures.into_iter().collect();
        Self {
            kind: FailureKind::Permanent,
            message: format!("{} record(s) of the batch failed", records.len()),
            retry_after: None,
            undecodable: false,
            records: Some(records),
        }
    }

    /// The failed records of a partial batch response, by offset; `None` for any other
    /// failure.
    pub fn failed_records(&self) -> Option<&[(i64, HandlerError)]> {
        self.records.as_deref()
    }

    /// Asks that the next retry wait exactly `delay` instead of the backoff's next delay (as an
    /// HTTP `Retry-After` does). It still counts as one retry. Ignored on permanent failures.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Transient or permanent.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The failure's text, as it goes into logs and the dead-letter envelope.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The delay the handler asked for before the next retry, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            FailureKind::Transient => "transient",
            FailureKind::Permanent => "permanent",
        };
        write!(f, "{kind} failure: {}", self.message)
    }
}

impl std::error::Error for HandlerError {}

/// Errors that `?` turns into a **permanent** failure, its message the error's chain of
/// sources: what a handler meets when a record's bytes are not what it expects. For any other
/// error, say which kind it is: `.map_err(HandlerError::transient)?` for a downstream that may
/// recover, `.map_err(HandlerError::permanent)?` for a record that never will; a boxed error
/// (`Box<dyn Error + Send + Sync>`) converts as permanent with `?`.
macro_rules! permanent_from {
    ($($error:ty),* $(,)?) => {
        $(
            impl From<$error> for HandlerError {
                fn from(error: $error) -> Self {
                    Self::permanent(error_chain(&error))
                }
            }
        )*
    };
}

permanent_from!(
    serde_json::Error,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::io::Error,
);

impl From<Box<dyn std::error::Error + Send + Sync>> for HandlerError {
    fn from(error: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Self::permanent(error_chain(error.as_ref()))
    }
}

/// An error's message followed by those of its sources, joined by `: `.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why a record went to the dead-letter topic; written as `error.kind` in the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeadLetterKind {
    /// The handler reported a permanent failure (or panicked).
    Permanent,
    /// Transient failures outlasted every retry.
    RetriesExhausted,
    /// A permanent failure because the record's bytes do not decode with their schema (or at
    /// all): the handler never saw the record ([`HandlerError::undecodable`]).
    Deserialization,
    /// Written by another tool that does not say which of the two it was (Spring Kafka's
    /// `DeadLetterPublishingRecoverer`, Kafka Connect); kafka-dlq never writes it.
    Unclassified,
    /// Never failed itself: parked behind an earlier record of its key that left and was not
    /// resolved within `park_max_age` (`key_order_after_failure = "park"`), it followed that
    /// record to the dead-letter topic; the message names it.
    Parked,
}

impl DeadLetterKind {
    /// The name used in the envelope, logs and metrics: `permanent`, `retries_exhausted`,
    /// `deserialization`, `unclassified` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterKind::Permanent => "permanent",
            DeadLetterKind::Deserialization => "deserialization",
            DeadLetterKind::RetriesExhausted => "retries_exhausted",
            DeadLetterKind::Unclassified => "unclassified",
            DeadLetterKind::Parked => "parked",
        }
    }

    /// The kind [`DeadLetterKind::as_str`] names; `None` for any other text.
    pub fn from_name(name: &str) -> Option<DeadLetterKind> {
        [
            DeadLetterKind::Permanent,
            DeadLetterKind::RetriesExhausted,
            DeadLetterKind::Deserialization,
            DeadLetterKind::Unclassified,
            DeadLetterKind::Parked,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

/// What to do with a record after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait `delay`, then call the handler again with the same record.
    Retry {
        /// How long to wait first.
        delay: Duration,
    },
    /// Send the record to the dead-letter topic.
    DeadLetter(DeadLetterKind),
    /// The downstream is down, not the record at fault: call again once the outage breaker
    /// permits, without using up a retry (the backoff starts over).
    WaitForDownstream,
}

/// Classifies one failed attempt, made while the downstream was down (`downstream_down`: the
/// outage breaker is open) or not.
///
/// - transient while the downstream is down → [`Decision::WaitForDownstream`], and the
///   backoff starts over: failures during an outage say nothing about the record;
/// - permanent → [`Decision::DeadLetter`]`(Permanent)` (`(Deserialization)` when the bytes did
///   not decode); the backoff is not touched;
/// - transient → the backoff's next delay (replaced by the error's `retry_after` when it has
///   one, bounded by the backoff's initial and max delay: see [`Delays::bound`]) as
///   [`Decision::Retry`]; a `retry_after` uses up a retry like any delay; when the backoff has
///   given up,
///   [`Decision::DeadLetter`]`(RetriesExhausted)`.
pub fn decide(error: &HandlerError, downstream_down: bool, delays: &mut Delays) -> Decision {
    if waits_for_downstream(error, downstream_down) {
        delays.reset();
        return Decision::WaitForDownstream;
    }
    match error.kind {
        FailureKind::Permanent if error.undecodable => {
            Decision::DeadLetter(DeadLetterKind::Deserialization)
        }
        FailureKind::Permanent => Decision::DeadLetter(DeadLetterKind::Permanent),
        FailureKind::Transient => match delays.next() {
            Some(delay) => Decision::Retry {
                delay: error.retry_after.map_or(delay, |asked| delays.bound(asked)),
            },
            None => Decision::DeadLetter(DeadLetterKind::RetriesExhausted),
        },
    }
}

/// Whether a failure made while the downstream was down (`downstream_down`) is the outage's,
/// not the record's: [`decide`] says [`Decision::WaitForDownstream`] exactly then.
pub fn waits_for_downstream(error: &HandlerError, downstream_down: bool) -> bool {
    downstream_down && error.kind == FailureKind::Transient
}

/// A call's result for the record at `offset`: a partial batch response
/// ([`HandlerError::partial`]) comes down to that record's own failure, or to success when it
/// names no record; one that names another offset is a transient failure (no record settles
/// on an answer that may mean another one).
pub(crate) fn narrow(result: Result<(), HandlerError>, offset: i64) -> Result<(), HandlerError> {
    match result {
        Err(error) => match error.failed_records() {
            Some(failures) => {
                if let Some((other, _)) = failures.iter().find(|(o, _)| *o != offset) {
                    return Err(HandlerError::transient(format!(
                        "the handler's partial batch response names offset {other}, which is \
                         not the one record of this call (offset {offset})"
                    )));
                }
                match failures.first() {
                    Some((_, own)) => Err(own.clone()),
                    None => Ok(()),
                }
            }
            None => Err(error),
        },
        ok => ok,
    }
}

/// Turns a caught panic payload into a permanent failure naming the panic message.
pub fn from_panic(payload: Box<dyn std::any::Any + Send>) -> HandlerError {
    HandlerError::permanent(format!("handler panicked: {}", panic_message(&payload)))
}

/// The message of a caught panic.
pub fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::ExponentialBackoff;

    fn backoff(max_retries: u32) -> ExponentialBackoff {
        ExponentialBackoff::new(
            Duration::from_millis(100),
            2.0,
            Duration::from_secs(1),
            0.0,
            Some(max_retries),
        )
        .unwrap()
    }

    #[test]
    fn decisions_table() {
        let ms = Duration::from_millis;
        let cases: Vec<(HandlerError, u32, usize, Decision)> = vec![
            // (error, max_retries, previous failures, expected decision)
            (
                HandlerError::permanent("bad json"),
                10,
                0,
                Decision::DeadLetter(DeadLetterKind::Permanent),
            ),
            (
                HandlerError::permanent("bad json").with_retry_after(ms(5)),
                10,
                0,
                Decision::DeadLetter(DeadLetterKind::Permanent),
            ),
            (
                HandlerError::transient("503"),
                10,
                0,
                Decision::Retry { delay: ms(100) },
            ),
            (
                HandlerError::transient("503"),
                10,
                3,
                Decision::Retry { delay: ms(800) },
            ),
            (
                HandlerError::transient("503"),
                10,
                9,
                Decision::Retry { delay: ms(1000) },
            ),
            (
                HandlerError::transient("503"),
                10,
                10,
                Decision::DeadLetter(DeadLetterKind::RetriesExhausted),
            ),
            (
                HandlerError::transient("429").with_retry_after(ms(700)),
                10,
                0,
                Decision::Retry { delay: ms(700) },
            ),
            (
                HandlerError::transient("503"),
                0,
                0,
                Decision::DeadLetter(DeadLetterKind::RetriesExhausted),
            ),
            (
                HandlerError::transient("429").with_retry_after(ms(0)),
                10,
                0,
                Decision::Retry { delay: ms(100) },
            ),
            (
                HandlerError::transient("429").with_retry_after(Duration::from_secs(86_400)),
                10,
                0,
                Decision::Retry { delay: ms(1000) },
            ),
        ];
        for (error, max_retries, before, expected) in cases {
            let mut delays = backoff(max_retries).delays_seeded(0);
            for _ in 0..before {
                delays.next();
            }
            assert_eq!(
                decide(&error, false, &mut delays),
                expected,
                "{error} after {before} of {max_retries}"
            );
        }
    }

    #[test]
    fn a_transient_failure_while_the_downstream_is_down_waits_and_starts_the_backoff_over() {
        let mut delays = backoff(2).delays_seeded(0);
        delays.next();
        delays.next();
        let down = HandlerError::transient("503");
        assert_eq!(
            decide(&down, true, &mut delays),
            Decision::WaitForDownstream
        );
        // Both retries are there again.
        assert!(matches!(
            decide(&down, false, &mut delays),
            Decision::Retry { .. }
        ));
        assert!(matches!(
            decide(&down, false, &mut delays),
            Decision::Retry { .. }
        ));
        // A permanent failure is the record's, outage or not.
        assert_eq!(
            decide(&HandlerError::permanent("bad"), true, &mut delays),
            Decision::DeadLetter(DeadLetterKind::Permanent)
        );
    }

    #[test]
    fn unmarked_errors_are_permanent_and_keep_their_cause() {
        let parse = serde_json::from_str::<serde_json::Value>("{not json").unwrap_err();
        let error: HandlerError = parse.into();
        assert_eq!(error.kind(), FailureKind::Permanent);
        assert!(error.message().contains("key must be a string"), "{error}");
    }

    #[test]
    fn a_boxed_error_converts_with_its_chain_and_a_handler_error_is_an_error() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("ledger write failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            Box::new(Outer(std::io::Error::other("disk full")));
        let error = HandlerError::from(boxed);
        assert_eq!(error.kind(), FailureKind::Permanent);
        assert_eq!(error.message(), "ledger write failed: disk full");

        // It goes where errors go: into a box, and back out by downcasting.
        let as_error: Box<dyn std::error::Error + Send + Sync> =
            Box::new(HandlerError::transient("503"));
        let back = as_error.downcast::<HandlerError>().unwrap();
        assert_eq!(back.kind(), FailureKind::Transient);
    }

    #[test]
    fn panics_become_permanent_failures_with_their_message() {
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let error = from_panic(caught);
        assert_eq!(error.kind(), FailureKind::Permanent);
        assert_eq!(error.message(), "handler panicked: boom 7");
    }
}

#[cfg(test)]
mod narrow_tests {
    use super::{narrow, FailureKind, HandlerError};

    #[test]
    fn a_partial_response_comes_down_to_the_records_own_failure() {
        let own = HandlerError::permanent("row rejected");
        assert_eq!(
            narrow(Err(HandlerError::partial([(7, own.clone())])), 7),
            Err(own)
        );
        assert_eq!(narrow(Err(HandlerError::partial([])), 7), Ok(()));
    }

    #[test]
    fn a_partial_response_naming_another_offset_fails_the_call_transiently() {
        let answer = HandlerError::partial([(8, HandlerError::permanent("x"))]);
        let error = narrow(Err(answer), 7).unwrap_err();
        assert_eq!(error.kind(), FailureKind::Transient);
        assert!(error.message().contains("names offset 8"), "{error}");
    }
}
