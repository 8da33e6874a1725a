//! What a share-group member asks of its Kafka client: records acquired under a lock, and
//! their acknowledgements. A trait so that the whole member runs against a simulated share
//! partition in tests (`share/simulation.rs`), with no broker; `share/kafka.rs` implements it
//! with the `krafka` crate's share consumer.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::acknowledgement::Ack;
use crate::record::Record;

/// One record acquired by this member, with what identifies it to [`ShareClient::acknowledge`].
#[derive(Debug, Clone)]
pub(crate) struct Acquired {
    /// The record; its `delivery_count` is set.
    pub record: Record,
    /// Which acquired record this is, for its acknowledgements.
    pub token: u64,
}

impl Acquired {
    /// The delivery count (1 for the first delivery).
    pub(crate) fn delivery(&self) -> u16 {
        self.record.delivery_count.unwrap_or(1)
    }
}

/// A boxed future, as the trait's methods return them.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a share-group member asks of its client; see the module docs.
pub(crate) trait ShareClient: Send + Sync + 'static {
    /// Acquires the next records (at most `max_in_flight`), waiting up to `wait` for some; an
    /// empty list when none came. Called only when every record acquired before has been
    /// acknowledged (ACCEPT, RELEASE or REJECT).
    fn acquire(&self, wait: Duration) -> Pending<'_, Result<Vec<Acquired>, String>>;

    /// Acknowledges the record `token`; returns at once (the acknowledgement travels with the
    /// next fetch or [`ShareClient::flush`]). Fails when the client no longer holds it.
    fn acknowledge(&self, token: u64, ack: Ack) -> Result<(), String>;

    /// Sends the acknowledgements made so far and waits for the broker's answers.
    fn flush(&self) -> Pending<'_, ()>;

    /// How long an acquisition lock lasts, as the broker said; `None` before it has.
    fn lock_duration(&self) -> Option<Duration>;

    /// How many partitions the group assigned this member (shared with the other members).
    // Read by the share consumer alone (feature `share`); the simulation builds without it.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    fn assigned_partitions(&self) -> usize;
}
