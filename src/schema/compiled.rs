//! A registry's schema made ready to read bodies with, whichever of the three kinds it is.

use serde_json::Value as Json;

use super::avro::{self, AvroSchema};
use super::framing;
use super::json_schema::{self, JsonSchema};
use super::protobuf::{self, ProtobufSchema};

/// The registry's `schemaType` (absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// `AVRO`.
    Avro,
    /// `PROTOBUF`.
    Protobuf,
    /// `JSON` (JSON Schema).
    Json,
}

impl SchemaType {
    /// From the registry's `schemaType`; `None` (absent) is Avro. Another name is an error.
    pub fn from_registry(name: Option<&str>) -> Result<Self, String> {
        match name.unwrap_or("AVRO") {
            "AVRO" => Ok(SchemaType::Avro),
            "PROTOBUF" => Ok(SchemaType::Protobuf),
            "JSON" => Ok(SchemaType::Json),
            other => Err(format!(
                "schema type {other:?} is none of AVRO, PROTOBUF, JSON"
            )),
        }
    }

    /// `AVRO`, `PROTOBUF` or `JSON`, as the registry names it.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }
}

/// A schema ready to read bodies with.
#[derive(Debug)]
pub enum Compiled {
    /// An Avro schema.
    Avro(AvroSchema),
    /// A Protobuf file.
    Protobuf(ProtobufSchema),
    /// A JSON Schema (bodies are only read as JSON; values written are validated).
    Json(JsonSchema),
}

/// Compiles the schema `text` of type `schema_type` with the schemas its references name
/// (`(name, text)`: for Protobuf the name is the import's).
pub fn compile(
    schema_type: SchemaType,
    text: &str,
    references: &[(&str, &str)],
) -> Result<Compiled, String> {
    match schema_type {
        SchemaType::Avro => {
            let texts: Vec<&str> = references.iter().map(|(_, text)| *text).collect();
            avro::compile(text, &texts).map(Compiled::Avro)
        }
        SchemaType::Protobuf => protobuf::compile(text, references).map(Compiled::Protobuf),
        SchemaType::Json => json_schema::compile(text, references).map(Compiled::Json),
    }
}

/// Reads `body` (what follows the framing) with `compiled`, to JSON. A Protobuf schema's
/// message indexes are `header_rest` (the schema-id header after the GUID) when the record
/// has the header framing, else the start of the body.
pub fn decode(
    compiled: &Compiled,
    body: &[u8],
    header_rest: Option<&[u8]>,
) -> Result<Json, String> {
    match compiled {
        Compiled::Avro(schema) => avro::decode(schema, body),
        Compiled::Protobuf(schema) => match header_rest {
            Some(header) => {
                let (indexes, _) = framing::message_indexes(header)?;
                protobuf::decode(schema, &indexes, body)
            }
            None => {
                let (indexes, body) = framing::message_indexes(body)?;
                protobuf::decode(schema, &indexes, body)
            }
        },
        Compiled::Json(_) => json_schema::decode(body),
    }
}

/// Writes `json` as a body of `compiled` (without the framing): for Protobuf as the message
/// `indexes` name (the file's first when `None`). A value the schema refuses is an error
/// saying why.
pub fn encode(
    compiled: &Compiled,
    json: &Json,
    indexes: Option<&[usize]>,
) -> Result<Vec<u8>, String> {
    match compiled {
        Compiled::Avro(schema) => avro::encode(schema, json),
        Compiled::Protobuf(schema) => protobuf::encode(schema, indexes.unwrap_or(&[0]), json),
        Compiled::Json(schema) => json_schema::encode(schema, json),
    }
}
