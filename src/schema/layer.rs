//! A decoding layer for a Rust handler: [`Decoding`] wraps a [`DecodedHandler`] and gives it
//! each record with its value (and key) decoded, with the same two failure classes the
//! sidecar has — the registry unavailable is transient, bytes that do not decode are
//! dead-lettered with kind `deserialization` and never reach the handler.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kafka_dlq::schema::{Codec, Decoding, DecodedHandler, DecodedRecord, Registry, RegistrySettings};
//! use kafka_dlq::{HandlerError, Record};
//!
//! struct Orders;
//! impl DecodedHandler for Orders {
//!     async fn handle(&self, record: &Record, decoded: &DecodedRecord) -> Result<(), HandlerError> {
//!         let order = decoded.value.as_ref().map(|v| &v.json);
//!         println!("{} {:?}", record.id, order);
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> Result<(), kafka_dlq::ConfigError> {
//! let registry = Registry::new(&RegistrySettings {
//!     url: "http://registry:8081".into(),
//!     timeout: std::time::Duration::from_secs(10),
//!     ..Default::default()
//! })?;
//! let handler = Decoding::values(Arc::new(Codec::new(registry, 1000)), Orders);
//! // kafka_dlq::Consumer::new(config, handler) …
//! # let _ = handler; Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;

use super::codec::{Codec, DecodeError, Decoded, Field};
use crate::failure::HandlerError;
use crate::handler::Handler;
use crate::record::Record;

/// A record's decoded parts; `None` where not decoded or null.
#[derive(Debug, Default)]
pub struct DecodedRecord {
    /// The value, when values are decoded and it is not null.
    pub value: Option<Decoded>,
    /// The key, when keys are decoded and it is not null.
    pub key: Option<Decoded>,
}

/// Handles a record with its decoded parts.
pub trait DecodedHandler: Send + Sync + 'static {
    /// Handles `record`, whose decoded parts are `decoded`; the outcome means what a
    /// [`Handler`]'s does.
    fn handle(
        &self,
        record: &Record,
        decoded: &DecodedRecord,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

/// What is decoded of each record, and with which registry's codec: the one value the
/// sidecar's target and [`Decoding`] both hold.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// The registry's codec, shared by every worker.
    pub codec: Arc<Codec>,
    /// Decode values.
    pub values: bool,
    /// Decode keys.
    pub keys: bool,
}

impl Decoder {
    /// Decodes `record`'s value (when `values`) and key (when `keys`); a failure as the
    /// record's ([`failure`]).
    pub async fn decode(&self, record: &Record) -> Result<DecodedRecord, HandlerError> {
        let value = if self.values {
            self.codec
                .decode(Field::Value, record.payload.as_deref(), &record.headers)
                .await
                .map_err(failure)?
        } else {
            None
        };
        let key = if self.keys {
            self.codec
                .decode(Field::Key, record.key.as_deref(), &record.headers)
                .await
                .map_err(failure)?
        } else {
            None
        };
        Ok(DecodedRecord { value, key })
    }
}

/// A [`Handler`] that decodes each record's value (and key) with a registry, then calls the
/// [`DecodedHandler`] it wraps.
pub struct Decoding<H> {
    decoder: Decoder,
    inner: H,
}

impl<H> Decoding<H> {
    /// Decodes what `decoder` says, then calls `inner`.
    pub fn new(decoder: Decoder, inner: H) -> Self {
        Self { decoder, inner }
    }

    /// Decodes values only.
    pub fn values(codec: Arc<Codec>, inner: H) -> Self {
        Self::new(
            Decoder {
                codec,
                values: true,
                keys: false,
            },
            inner,
        )
    }
}

impl<H: DecodedHandler> Handler for Decoding<H> {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let decoded = self.decoder.decode(record).await?;
        self.inner.handle(record, &decoded).await
    }
}

/// A decoding failure as the record's: the registry unavailable is transient, bytes that do
/// not decode are [`HandlerError::undecodable`].
pub fn failure(error: DecodeError) -> HandlerError {
    match error {
        DecodeError::Unavailable(e) => HandlerError::transient(e),
        DecodeError::Undecodable(why) => HandlerError::undecodable(why),
    }
}
