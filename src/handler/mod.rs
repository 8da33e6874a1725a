//! The user's code: what to do with one record.
//!
//! Implement [`Handler`] with an `async fn`. Return `Ok(())` when the record is done,
//! [`HandlerError::transient`] when it may succeed later, [`HandlerError::permanent`] when it
//! never will. Any other error returned with `?` is permanent, and so is a panic: the
//! [`Consumer`](crate::consumer::Consumer) catches it, dead-letters the record and keeps running.
//!
//! A handler may be called more than once for the same record (at-least-once delivery: after a
//! crash, a rebalance, or a call that failed after its side effect). Make side effects
//! idempotent, keyed by [`Record::id`].
//!
//! ```
//! use kafka_dlq::{Handler, HandlerError, Record};
//!
//! struct Deliveries;
//!
//! #[derive(serde::Deserialize)]
//! struct Event { parcel: String }
//!
//! impl Handler for Deliveries {
//!     async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
//!         let event: Event = record.json()?; // malformed JSON: permanent, dead-lettered at once
//!         if event.parcel.is_empty() {
//!             return Err(HandlerError::permanent("parcel id is empty"));
//!         }
//!         Ok(())
//!     }
//! }
//! ```

use std::future::Future;

pub(crate) mod output;

pub use crate::failure::HandlerError;
pub use crate::record::Record;
pub use output::{Output, Transactional, TransactionalHandler};

/// Handles one record at a time. Records of one partition are given in offset order, the
/// next only after the previous one is settled (handled or dead-lettered); records of different
/// partitions are handled concurrently, so `handle` runs on many tasks at once.
pub trait Handler: Send + Sync + 'static {
    /// Handles `record`. See the [module docs](self) for what each outcome does.
    fn handle(&self, record: &Record) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

/// Handles records of one partition in batches (a bulk INSERT, a bulk API call), in offset
/// order, up to [`batch_size`](crate::ConsumerConfig::batch_size) records gathered for at most
/// [`batch_linger`](crate::ConsumerConfig::batch_linger).
///
/// The batch succeeds or fails as a whole. When it fails, the consumer **isolates the poison by
/// bisection**: it calls the handler again with each half, in order, recursively; every part
/// that succeeds is settled at once, and only single records that still fail go through the
/// per-record retry and dead-letter policy. With one poison record in a batch of n, that costs
/// the first call plus at most 2·⌈log2 n⌉ calls until the record is isolated (its own first
/// attempt included), then its retries: 15 calls for 100 records, not 100 retries of the whole
/// batch. Offsets are stored only up to the last record of the longest settled prefix, so
/// order and at-least-once hold.
///
/// A handler that knows which records failed returns
/// [`HandlerError::partial`](crate::HandlerError::partial) instead: only the records it names
/// go through the retry and dead-letter policy (this call was their first attempt), the others
/// settle at once, and nothing is bisected.
///
/// Every [`Handler`] is a `BatchHandler` that handles batches of one.
pub trait BatchHandler: Send + Sync + 'static {
    /// Handles `records` (one partition, offset order, never empty) as one unit.
    fn handle_batch(
        &self,
        records: &[Record],
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Whether its calls produce output records ([`Transactional`]), which only a consumer
    /// with [`exactly_once`](crate::ConsumerConfig::exactly_once) writes. `false` unless
    /// overridden.
    fn produces_outputs(&self) -> bool {
        false
    }
}

impl<H: Handler> BatchHandler for H {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        for record in records {
            self.handle(record).await?;
        }
        Ok(())
    }
}
