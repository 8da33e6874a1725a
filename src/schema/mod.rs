//! Values and keys written for a Schema Registry, read as JSON: Avro, Protobuf and JSON
//! Schema, framed by a schema id in front of the bytes or a schema GUID in a header, their
//! schemas fetched over Confluent's REST API and kept compiled. See docs/schemas.md.
//!
//! Deciding is apart from doing: [`framing`], [`compiled`] and the three formats are pure and
//! tested beside their code; [`registry`] is the only part that talks to the network, and
//! [`codec`] puts them together with the two failure classes a record can have — the
//! registry unavailable (transient) or the bytes undecodable (permanent).

pub mod avro;
pub mod cache;
pub mod codec;
pub mod compiled;
pub mod dead_letter;
pub mod framing;
pub mod json_schema;
pub mod layer;
pub mod protobuf;
pub mod registry;

pub use codec::{
    Codec, DecodeError, Decoded, EncodeError, Field, WriteSchema, DEFAULT_CACHE_BOUND,
};
pub use compiled::SchemaType;
pub use dead_letter::decode_payload;
pub use framing::SchemaRef;
pub use layer::{DecodedHandler, DecodedRecord, Decoder, Decoding};
pub use registry::{Registry, RegistryError, RegistrySettings};
