//! The one produce-and-retry loop: a record handed to the producer is waited for until the
//! broker acknowledges it; a failed write is written again, at once in another form when the
//! writer has a smaller one for a record too large, else after the backoff's next delay. Dead
//! letters (`dlq/publisher.rs`) and retry records (`retry_tier/write.rs`) are written with
//! it, each saying what a failure means for it.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::DeliveryFuture;
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

use crate::backoff::{retry, ExponentialBackoff, Next};
use crate::stopped::Stopped;

/// A record handed to the producer: the future of its acknowledgement, or why the producer
/// did not take it.
pub(crate) type Sent = Result<DeliveryFuture, KafkaError>;

/// How a write handed to the producer ended: the broker's acknowledgement or the error.
pub(crate) async fn acknowledged(sent: Sent) -> Result<Delivery, KafkaError> {
    match sent {
        Ok(delivery) => match delivery.await {
            Ok(Ok(delivery)) => Ok(delivery),
            Ok(Err((error, _))) => Err(error),
            Err(_) => Err(KafkaError::Canceled),
        },
        Err(error) => Err(error),
    }
}

/// Whether `error` says the record is larger than the broker or the topic accepts.
pub(crate) fn is_too_large(error: &KafkaError) -> bool {
    *error == KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// Whether `error` says the broker will never take the record as it is: too large, invalid
/// (a compacted topic refuses a record without a key), for a topic that does not exist or
/// that this principal may not write, or refused by a policy. Writing it again as it is
/// cannot succeed; a timeout, a leader moving or a broker down can.
pub(crate) fn refused_for_good(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        error,
        KafkaError::MessageProduction(
            MessageSizeTooLarge
                | InvalidMessageSize
                | MessageBatchTooLarge
                | InvalidRecord
                | InvalidMessage
                | UnknownTopic
                | UnknownTopicOrPartition
                | InvalidTopic
                | TopicAuthorizationFailed
                | PolicyViolation
        )
    )
}

/// What a writer does with a write that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failed<F> {
    /// Write again at once, in this form (a smaller one, for a record too large).
    Resend(F),
    /// Write again in the same form after the backoff's next delay.
    Later,
    /// Give up: the record can never be written this way.
    GiveUp,
}

/// How [`send_until_acknowledged`] ended.
#[derive(Debug)]
pub(crate) enum Written<F> {
    /// Acknowledged in form `F`.
    Acknowledged(F, Delivery),
    /// The writer gave up ([`Failed::GiveUp`]).
    GaveUp,
}

/// Waits for `first` (handed to the producer in `form`) to be acknowledged, writing again
/// with `send` until a write is. After each failure `on_failure` says what comes next; before
/// the wait of a [`Failed::Later`], `on_wait` is told the error and the delay (its log and
/// metrics are the writer's). A write in flight is never cut short; `cancel` ends a wait
/// between two writes with [`Stopped`].
pub(crate) async fn send_until_acknowledged<F: Copy>(
    cancel: &CancellationToken,
    backoff: &ExponentialBackoff,
    form: F,
    first: Sent,
    send: impl Fn(F) -> Sent,
    on_failure: impl Fn(F, &KafkaError) -> Failed<F>,
    on_wait: impl Fn(F, &KafkaError, Duration),
) -> Result<Written<F>, Stopped> {
    let (send, on_failure, on_wait) = (&send, &on_failure, &on_wait);
    let state = (form, Some(first), backoff.delays());
    retry(cancel, state, |(form, sent, mut delays)| async move {
        let result = acknowledged(sent.unwrap_or_else(|| send(form))).await;
        let (form, next) = match result {
            Ok(delivery) => (form, Next::Done(Written::Acknowledged(form, delivery))),
            Err(error) => match on_failure(form, &error) {
                Failed::Resend(smaller) => (smaller, Next::RetryNow),
                Failed::Later => {
                    let delay = delays.next().expect("an infrastructure backoff never ends");
                    on_wait(form, &error, delay);
                    (form, Next::RetryIn(delay))
                }
                Failed::GiveUp => (form, Next::Done(Written::GaveUp)),
            },
        };
        ((form, None, delays), next)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn too_large() -> KafkaError {
        KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
    }

    fn refused() -> KafkaError {
        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
    }

    fn backoff() -> ExponentialBackoff {
        ExponentialBackoff::new(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(8),
            0.0,
            None,
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_too_large_is_sent_again_at_once_in_each_smaller_form_then_given_up() {
        let sent = RefCell::new(Vec::new());
        let start = tokio::time::Instant::now();
        let written = send_until_acknowledged(
            &CancellationToken::new(),
            &backoff(),
            1u8,
            Err(too_large()),
            |form| {
                sent.borrow_mut().push(form);
                Err(too_large())
            },
            |form, error| match form {
                1 | 2 if is_too_large(error) => Failed::Resend(form + 1),
                _ => Failed::GiveUp,
            },
            |_, _, _| panic!("no wait: every failure was too large"),
        )
        .await;
        assert!(matches!(written, Ok(Written::GaveUp)));
        assert_eq!(*sent.borrow(), vec![2, 3], "each smaller form once");
        assert_eq!(start.elapsed(), Duration::ZERO, "no backoff between forms");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_is_sent_again_after_each_delay_until_the_stop() {
        let cancel = CancellationToken::new();
        let waits = RefCell::new(Vec::new());
        let stop_later = {
            let cancel = cancel.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                cancel.cancel();
            }
        };
        let backoff = backoff();
        let sending = send_until_acknowledged(
            &cancel,
            &backoff,
            (),
            Err(refused()),
            |()| Err(refused()),
            |(), _| Failed::Later,
            |(), error, delay| {
                assert!(!is_too_large(error));
                waits.borrow_mut().push(delay.as_secs());
            },
        );
        let (written, ()) = tokio::join!(sending, stop_later);
        assert!(matches!(written, Err(Stopped)), "the stop ends the wait");
        assert_eq!(*waits.borrow(), vec![1, 2, 4, 8], "the backoff's delays");
    }
}
