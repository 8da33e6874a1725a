//! Exactly-once handlers: a [`TransactionalHandler`] returns the records its input produces
//! ([`Output`]); in a consumer with [`exactly_once`](crate::ConsumerConfig::exactly_once) they
//! are written in the transaction that commits the input's offset, so a `read_committed`
//! reader sees them once, or not at all when the input was dead-lettered instead.
//!
//! ```
//! use kafka_dlq::{HandlerError, Output, Record, TransactionalHandler};
//!
//! struct Invoicing;
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: String, cents: u64 }
//!
//! impl TransactionalHandler for Invoicing {
//!     async fn handle(&self, record: &Record) -> Result<Vec<Output>, HandlerError> {
//!         let order: Order = record.json()?; // malformed: dead-lettered in the transaction
//!         let invoice = serde_json::json!({ "order": order.id, "cents": order.cents });
//!         Ok(vec![Output::json("invoices", &invoice)?.key(order.id)])
//!     }
//! }
//! // Consumer::new(ConsumerConfig { exactly_once: true, ..config }, Transactional(Invoicing))
//! ```

use std::cell::RefCell;
use std::future::Future;

use super::BatchHandler;
use crate::failure::HandlerError;
use crate::record::Record;

/// A record a [`TransactionalHandler`] produces: written to `topic` in the transaction of the
/// input that produced it. Key and value are bytes as given; header names any text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The topic it is written to.
    pub topic: String,
    /// Its key; `None` for none (the default partitioner then spreads such records).
    pub key: Option<Vec<u8>>,
    /// Its value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Its headers, in order, duplicates kept, any bytes (a `None` value is a header
    /// without one).
    pub headers: Vec<crate::record::RecordHeader>,
}

impl Output {
    /// A record of `value` to `topic`, without key or headers.
    pub fn new(topic: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            topic: topic.into(),
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    /// A record whose value is `value`'s compact JSON text. A value that cannot be written as
    /// JSON is a permanent failure of the input.
    pub fn json(
        topic: impl Into<String>,
        value: &impl serde::Serialize,
    ) -> Result<Self, HandlerError> {
        let value = serde_json::to_vec(value)
            .map_err(|e| HandlerError::permanent(format!("output is not JSON: {e}")))?;
        Ok(Self::new(topic, value))
    }

    /// The same record with key `key`.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The same record with header `name` = `value` added.
    pub fn header(mut self, name: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(crate::record::RecordHeader {
            key: name.into(),
            value: Some(value.into()),
        });
        self
    }
}

/// Handles one record and returns the records it produces, for a consumer with
/// [`exactly_once`](crate::ConsumerConfig::exactly_once); give it to the consumer wrapped in
/// [`Transactional`]. Errors mean what a [`Handler`](super::Handler)'s do; the outputs of a
/// call that failed are dropped (a retried call returns its own).
///
/// Effects outside Kafka (a database write, an HTTP call) are not in the transaction: they
/// happen at least once, as with any handler.
pub trait TransactionalHandler: Send + Sync + 'static {
    /// Handles `record`; `Ok` carries the records to write in its transaction (none is fine).
    fn handle(
        &self,
        record: &Record,
    ) -> impl Future<Output = Result<Vec<Output>, HandlerError>> + Send;
}

/// A [`TransactionalHandler`] as the consumer takes it. A consumer without `exactly_once`
/// refuses it (its outputs would be dropped).
pub struct Transactional<T>(pub T);

impl<T: TransactionalHandler> BatchHandler for Transactional<T> {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        // What an earlier, failed call produced is not this call's.
        set(Vec::new());
        let mut outputs = Vec::new();
        for record in records {
            outputs.extend(self.0.handle(record).await?);
        }
        set(outputs);
        Ok(())
    }

    fn produces_outputs(&self) -> bool {
        true
    }
}

tokio::task_local! {
    /// The outputs of the last successful call of the worker's record: each worker runs in
    /// its own scope ([`scope`]), and its calls are awaited on its own task.
    static OUTPUTS: RefCell<Vec<Output>>;
}

/// Runs `work` (a partition's worker) with a place for its records' outputs.
pub(crate) fn scope<F: Future>(work: F) -> impl Future<Output = F::Output> {
    OUTPUTS.scope(RefCell::new(Vec::new()), work)
}

/// Sets the outputs of the record being handled (the sidecar's answer carries them too).
pub(crate) fn set(outputs: Vec<Output>) {
    let _ = OUTPUTS.try_with(|o| *o.borrow_mut() = outputs);
}

/// Takes the outputs of the record just handled: none outside a worker's scope.
pub(crate) fn take() -> Vec<Output> {
    OUTPUTS
        .try_with(|o| std::mem::take(&mut *o.borrow_mut()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl TransactionalHandler for Echo {
        async fn handle(&self, record: &Record) -> Result<Vec<Output>, HandlerError> {
            match record.payload.as_deref() {
                Some(b"bad") => Err(HandlerError::permanent("bad")),
                _ => Ok(vec![Output::new(
                    "out",
                    record.payload.clone().unwrap_or_default(),
                )]),
            }
        }
    }

    fn record(value: &[u8]) -> Record {
        Record {
            id: "in-0-1".into(),
            topic: "in".into(),
            partition: 0,
            offset: 1,
            key: None,
            payload: Some(value.to_vec()),
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
            retry: None,
            delivery_count: None,
        }
    }

    #[tokio::test]
    async fn a_failed_call_leaves_no_outputs_behind_and_a_successful_one_leaves_its_own() {
        scope(async {
            let handler = Transactional(Echo);
            handler.handle_batch(&[record(b"good")]).await.unwrap();
            assert_eq!(take(), vec![Output::new("out", b"good".to_vec())]);
            assert_eq!(take(), vec![], "taken once");
            handler.handle_batch(&[record(b"first")]).await.unwrap();
            assert!(handler.handle_batch(&[record(b"bad")]).await.is_err());
            assert_eq!(
                take(),
                vec![],
                "the failed call's outputs are not the first call's"
            );
        })
        .await;
    }

    #[test]
    fn an_output_takes_key_headers_and_json() {
        let out = Output::json("t", &serde_json::json!({"a": 1}))
            .unwrap()
            .key("k")
            .header("h", "v");
        assert_eq!(out.value.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(out.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(
            out.headers,
            vec![crate::record::RecordHeader {
                key: b"h".to_vec(),
                value: Some(b"v".to_vec())
            }]
        );
    }
}
