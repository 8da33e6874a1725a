//! What the poll loop asks of librdkafka's queue: the next message, handed straight to the
//! hand-off (`dispatch.rs`) while librdkafka still holds it, and the client's fatal error. The
//! consumer's queue answers in production, the simulation's world under test, so the one poll
//! loop (`consumer::poll_loop`) runs in both.

use std::future::Future;

use futures_util::{FutureExt, StreamExt};
use rdkafka::consumer::stream_consumer::MessageStream;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::context::RebalanceContext;
use super::dispatch::Dispatch;

/// What one poll of the queue served: a message (already in its inbox) or an error.
pub(in crate::consumer) enum Polled {
    Delivered,
    Failed(KafkaError),
}

/// The consumer's queue, as the poll loop sees it.
pub(in crate::consumer) trait Fetcher: Send {
    /// Waits for the next message and hands it to `dispatch`; `None` once the queue has
    /// ended (it never does in librdkafka).
    fn next(&mut self, dispatch: &mut Dispatch) -> impl Future<Output = Option<Polled>> + Send;

    /// Hands the next message to `dispatch` if one is ready now, without waiting.
    fn ready(&mut self, dispatch: &mut Dispatch) -> Option<Polled>;

    /// The client's fatal error, when it has one: it cannot go on.
    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)>;
}

/// librdkafka's queue: one message stream for the loop's life (each `recv` would register
/// and unregister a waker).
pub(in crate::consumer) struct KafkaFetcher<'a> {
    consumer: &'a StreamConsumer<RebalanceContext>,
    stream: MessageStream<'a, RebalanceContext>,
}

impl<'a> KafkaFetcher<'a> {
    /// The queue of `consumer`.
    pub(in crate::consumer) fn new(consumer: &'a StreamConsumer<RebalanceContext>) -> Self {
        Self {
            consumer,
            stream: consumer.stream(),
        }
    }
}

/// A message polled from librdkafka, delivered (and released) before the next is asked for.
fn hand_over(
    polled: rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>,
    dispatch: &mut Dispatch,
) -> Polled {
    match polled {
        Ok(message) => {
            dispatch.deliver(&message);
            Polled::Delivered
        }
        Err(error) => Polled::Failed(error),
    }
}

impl Fetcher for KafkaFetcher<'_> {
    async fn next(&mut self, dispatch: &mut Dispatch) -> Option<Polled> {
        let polled = self.stream.next().await?;
        Some(hand_over(polled, dispatch))
    }

    fn ready(&mut self, dispatch: &mut Dispatch) -> Option<Polled> {
        let polled = self.stream.next().now_or_never()??;
        Some(hand_over(polled, dispatch))
    }

    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.consumer.client().fatal_error()
    }
}
