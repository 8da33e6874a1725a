//! Consuming as a member of a **share group** (KIP-932, Apache Kafka 4.2+): the members share
//! every partition, the broker hands each record to one member at a time under an acquisition
//! lock, and the member acknowledges each record on its own. Queue semantics, with the same
//! [`Handler`](crate::Handler) / [`BatchHandler`], classification, backoff, breaker and dead
//! letters as a consumer group.
//!
//! # What happens to a record
//! - **Handled**: ACCEPT.
//! - **Transient failure**: retried in-process with the backoff (`max_retries`,
//!   `backoff_*`), the record staying acquired; its lock is renewed (RENEW, KIP-1222) every
//!   half lock while its calls and waits go on. When the retries of this delivery are used up
//!   it is RELEASEd: the broker delivers it again (to any member) with its delivery count one
//!   higher, until the group's `share.delivery.count.limit`; on the last delivery it is
//!   dead-lettered instead.
//! - **Permanent failure** (or a panic): dead-lettered at once.
//! - **Dead-lettered** (`share_dlq = "ours"`, the default): written to `dlq_topic` as for a
//!   consumer group (the envelope, with `error.delivery_count`, or Spring's layout), and
//!   ACCEPTed only once the dead-letter topic acknowledged it. A broker that is down holds the
//!   record (its lock renewed) until the write succeeds. With `share_dlq = "broker"` the
//!   record is REJECTed (permanent) or RELEASEd until the broker's own limit, and the broker's
//!   KIP-1191 dead-letter queue takes it: no error, kind or calls are kept.
//!
//! The handler sees the delivery in [`Record::delivery_count`](crate::Record::delivery_count)
//! (the sidecar sends `X-Kafka-Delivery-Count`).
//!
//! # Concurrency
//! A member acquires up to `share_acquire_records` records per fetch (at least
//! `max_in_flight`) and hands them to the handler `max_in_flight` at a time, the locks of
//! those waiting renewed; it fetches again once every one is settled, and that fetch carries
//! their acknowledgements (those of a batch slower than 100 ms go alone before it). More
//! throughput comes from more members — on one partition, which is what share groups are for.
//!
//! # Outage breaker
//! When most calls fail transiently the breaker opens: no more records are acquired, those in
//! hand wait for its permit with their locks renewed, one of them probing. Nothing is
//! released or dead-lettered for the outage.
//!
//! # Shutdown
//! When `shutdown` completes, waits end at once and their records are RELEASEd; calls in
//! progress get `shutdown_timeout`, then are dropped and their records RELEASEd; the last
//! acknowledgements are sent and the member leaves the group.
//!
//! # What can still happen twice or go missing
//! A member killed mid-call holds its records until their locks expire
//! (`share.record.lock.duration.ms`); the broker then delivers them to another member: the
//! handler may see a record twice. A member killed on a record's **last** delivery leaves the
//! broker to archive it, without our dead letter: configure the group's broker dead-letter
//! queue (`errors.deadletterqueue.topic.name`, Kafka 4.4) as the backstop.

#![cfg_attr(not(any(feature = "share", test)), allow(dead_code))]

mod acknowledgement;
#[cfg(feature = "share")]
mod auth;
mod client;
pub(crate) mod delivery;
pub(crate) mod delivery_limit;
#[cfg(feature = "share")]
mod kafka;
pub(crate) mod member;
#[cfg(test)]
mod simulation;
#[cfg(feature = "share")]
pub mod undecodable;

#[cfg(feature = "share")]
pub use auth::auth_config;
#[cfg(feature = "share")]
pub use consumer::ShareConsumer;

#[cfg(feature = "share")]
mod consumer;
