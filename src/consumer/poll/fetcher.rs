//! What the poll loop asks of the consumer's own librdkafka queue: its events — rebalances
//! (served by the context's callbacks while it is polled), errors, statistics — and the
//! client's fatal error. Records do not come here: each partition's queue is split from it
//! when the partition is assigned (`feed.rs`). The consumer's queue answers in production,
//! the simulation's world under test, so the one poll loop (`consumer::poll_loop`) runs in
//! both.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;

use super::context::RebalanceContext;

/// What one poll of the consumer's queue served.
pub(in crate::consumer) enum Polled {
    /// An error: a partition's or the client's.
    Failed(KafkaError),
    /// A record, which only a partition whose queue was not split would put here: its
    /// topic, partition and offset. It is not handled, and its offset not stored.
    Stray(String, i32, i64),
}

/// The consumer's queue, as the poll loop sees it.
pub(in crate::consumer) trait Fetcher: Send {
    /// Serves the queue's events (the rebalance callbacks run meanwhile) until one is for the
    /// loop; `None` once the queue has ended (it never does in librdkafka).
    fn next(&mut self) -> impl Future<Output = Option<Polled>> + Send;

    /// The client's fatal error, when it has one: it cannot go on.
    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)>;
}

/// The consumer's own librdkafka queue, woken by librdkafka when it gets an event while empty
/// (`waker`, set as the consumer's non-empty callback when it was created).
pub(in crate::consumer) struct KafkaFetcher {
    pub consumer: Arc<BaseConsumer<RebalanceContext>>,
    pub waker: Arc<AtomicWaker>,
}

impl KafkaFetcher {
    fn poll_once(&self) -> Option<Polled> {
        match self.consumer.poll(Duration::ZERO)? {
            Ok(message) => Some(Polled::Stray(
                message.topic().to_string(),
                message.partition(),
                message.offset(),
            )),
            Err(error) => Some(Polled::Failed(error)),
        }
    }
}

impl Fetcher for KafkaFetcher {
    async fn next(&mut self) -> Option<Polled> {
        loop {
            let woken = std::future::poll_fn(|cx| {
                if let Some(polled) = self.poll_once() {
                    return Poll::Ready(Some(polled));
                }
                // Registered before looking again: an event queued in between wakes us.
                self.waker.register(cx.waker());
                match self.poll_once() {
                    Some(polled) => Poll::Ready(Some(polled)),
                    None => Poll::Pending,
                }
            });
            // A rebalance served reads as nothing served (rust-rdkafka's `poll` answers `None`
            // for an event it consumed), and events queued behind it wake nobody: look again
            // every 100 ms.
            if let Ok(polled) = tokio::time::timeout(Duration::from_millis(100), woken).await {
                return polled;
            }
        }
    }

    fn fatal(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.consumer.client().fatal_error()
    }
}
