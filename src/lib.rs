//! # kafka-dlq
//!
//! Safe consumption of Kafka and Redpanda topics when things fail: an at-least-once
//! [`Consumer`] that hands each record to your [`Handler`], retries transient failures with
//! exponential backoff, and writes permanent failures and exhausted retries to a dead-letter
//! topic as a JSON [`Envelope`](dlq::Envelope). An offset is committed only once its record was
//! handled or acknowledged by the dead-letter topic, so no record is lost, and a record in
//! backoff holds back only its own partition, so no poison record stalls the rest.
//!
//! ```no_run
//! use kafka_dlq::{Consumer, ConsumerConfig, Handler, HandlerError, Record};
//!
//! struct Print;
//! impl Handler for Print {
//!     async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
//!         let value: serde_json::Value = record.json()?;
//!         println!("{} {value}", record.id);
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), kafka_dlq::ConsumerError> {
//! let config = ConsumerConfig::new("localhost:9092", "printer", ["parcel-events"]);
//! Consumer::new(config, Print)?
//!     .run(async { tokio::signal::ctrl_c().await.ok(); })
//!     .await
//! # }
//! ```
//!
//! The modules are named after the concepts: [`consumer`], [`handler`], [`record`],
//! [`failure`], [`backoff`], [`dlq`], [`dlq_reader`], [`retry_tier`], [`replay`], [`config`].
//!
//! Every client reaches a managed cluster the same way: TLS, SASL (PLAIN, SCRAM), OAuth from an
//! OpenID Connect provider, mutual TLS ([`config::Security`]), and reads batches of every codec.
//!
//! # Features
//!
//! By default the crate is this library alone, with librdkafka linking the system's OpenSSL
//! and libcurl. Features add the application's parts and the rest:
//!
//! | feature | what it adds |
//! |---|---|
//! | `sidecar` | `kafka_dlq::sidecar`: a handler that delivers records over HTTP |
//! | `server` | `kafka_dlq::server`: `/metrics` and the health probes |
//! | `monitor` | `kafka_dlq::monitor`: the DLQ monitor and its Slack alerts |
//! | `cli` | the `kafka-dlq` binary: all of the above |
//! | `otel` | `kafka_dlq::telemetry`: OpenTelemetry spans, exported over OTLP/HTTP |
//! | `share` | `kafka_dlq::consumer::ShareConsumer`: share groups (KIP-932) on the krafka crate; Rust 1.95 |
//! | `msk-iam` | `sasl_mechanism = "AWS_MSK_IAM"`: Amazon MSK's IAM access control (`kafka::msk_iam`) |
//! | `vendored` | OpenSSL, libcurl and zlib built from source and linked in |
//! | `broker-tests` | the tests that run Apache Kafka (`./scripts/test.sh`) |
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod breaker;
pub mod config;
#[cfg(feature = "console")]
pub mod console;
pub mod consumer;
pub mod dlq;
pub mod dlq_reader;
pub mod failure;
pub mod fingerprint;
pub mod handler;
pub mod kafka;
pub mod metrics;
#[cfg(feature = "monitor")]
pub mod monitor;
#[cfg(any(feature = "monitor", feature = "console"))]
pub mod outstanding;
pub mod park;
pub mod record;
pub mod replay;
pub mod retry_tier;
#[cfg(feature = "schema-registry")]
pub mod schema;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "sidecar")]
pub mod sidecar;
pub mod state;
pub mod stopped;
#[cfg(feature = "otel")]
pub mod telemetry;

pub use config::{ConfigError, ConsumerConfig};
pub use consumer::{Consumer, ConsumerError, TransactionError};
pub use failure::{DeadLetterKind, FailureKind, HandlerError};
pub use handler::{Handler, Output, Transactional, TransactionalHandler};
pub use record::{Record, RecordHeader};
