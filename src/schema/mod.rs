//! Values and keys written for a Schema Registry, read as JSON: Avro, Protobuf and JSON
//! Schema, framed by a schema id in front of the bytes or a schema GUID in a header, their
//! schemas fetched over Confluent's REST API and kept compiled. See docs/schemas.md.
//!
//! Deciding is apart from doing: [`framing`], [`compiled`] and the three formats are pure and
//! tested beside their code; [`registry`] is the only part that talks to the network, and
//! [`decoder`] puts them together with the two failure classes a record can have — the
//! registry unavailable (transient) or the bytes undecodable (permanent).

pub mod avro;
pub mod cache;
pub mod compiled;
pub mod decoder;
pub mod framing;
pub mod json_schema;
pub mod protobuf;
pub mod registry;

pub use compiled::SchemaType;
pub use decoder::{DecodeError, Decoded, Decoder, Field, DEFAULT_CACHE_BOUND};
pub use framing::SchemaRef;
pub use registry::{Registry, RegistryError, RegistrySettings};
