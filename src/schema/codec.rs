//! Decoding a record's value or key: find its schema in the framing, fetch and compile it
//! once (then from a bounded cache), read the body to JSON.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::cache::Bounded;
use super::compiled::{self, Compiled, SchemaType};
use super::framing::{self, SchemaRef};
use super::registry::{Registry, RegistryError, SubjectVersion};
use crate::record::RecordHeader;

/// How many compiled schemas a codec keeps by default.
pub const DEFAULT_CACHE_BOUND: usize = 1000;
/// How long a subject's latest version is taken as known before it is asked again: a version
/// registered meanwhile is used from then on.
pub const LATEST_FOR: Duration = Duration::from_secs(30);

/// Which part of a record is decoded: it picks the schema-id header (`__value_schema_id` or
/// `__key_schema_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The record's value.
    Value,
    /// The record's key.
    Key,
}

/// A schema as the codec holds it: compiled, with where the registry has it.
#[derive(Debug)]
pub struct Schema {
    /// The schema as the record named it.
    pub reference: SchemaRef,
    /// Its numeric id, when known (always with the prefix framing).
    pub id: Option<u32>,
    /// Its GUID, when the registry gave one.
    pub guid: Option<String>,
    /// AVRO, PROTOBUF or JSON.
    pub schema_type: SchemaType,
    /// The subject and version it is registered under, when the registry says.
    pub registered: Option<SubjectVersion>,
    compiled: Compiled,
}

/// A decoded value or key: its JSON and the schema it was written with.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The body as JSON.
    pub json: Json,
    /// The schema.
    pub schema: Arc<Schema>,
}

impl Decoded {
    /// Its schema as JSON: `{"type", "id", "guid", "subject", "version"}` (the unknown ones
    /// left out).
    pub fn schema_json(&self) -> Json {
        let schema = &self.schema;
        let mut out = serde_json::Map::new();
        out.insert("type".into(), schema.schema_type.as_str().into());
        if let Some(id) = schema.id {
            out.insert("id".into(), id.into());
        }
        if let Some(guid) = &schema.guid {
            out.insert("guid".into(), guid.clone().into());
        }
        if let Some(registered) = &schema.registered {
            out.insert("subject".into(), registered.subject.clone().into());
            out.insert("version".into(), registered.version.into());
        }
        Json::Object(out)
    }
}

/// Why a value or key was not decoded, in the two classes a record's failure has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The registry could not give the schema: try the record again later.
    #[error("{0}")]
    Unavailable(#[from] RegistryError),
    /// The bytes do not decode (no framing, bytes of another schema, a schema that does not
    /// compile): trying again will not help. The text says why.
    #[error("{0}")]
    Undecodable(String),
}

/// Why a value was not encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The registry could not give the schema: try again later.
    #[error("{0}")]
    Unavailable(RegistryError),
    /// The schema does not take the value, or there is no such schema: trying again will not
    /// help. The text says why.
    #[error("{0}")]
    Refused(String),
}

/// The schema a value is written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteSchema {
    /// The schema with this id.
    Id(u32),
    /// The schema registered under `subject` at `version` (`None`: the latest).
    Subject {
        /// The subject (`orders-value`).
        subject: String,
        /// Its version; `None` for the latest.
        version: Option<i32>,
    },
}

/// A subject's schema id at a version (`None`: the latest), with when the registry said so.
type SubjectVersions = Bounded<(String, Option<i32>), (u32, Instant)>;

/// Decodes values and keys framed for one registry, and encodes values for it.
#[derive(Debug)]
pub struct Codec {
    registry: Registry,
    schemas: Mutex<Bounded<SchemaRef, Arc<Schema>>>,
    /// Each subject's id at a version (the latest asked again after [`LATEST_FOR`]).
    versions: Mutex<SubjectVersions>,
}

impl Codec {
    /// A codec of `registry`'s schemas keeping at most `cache_bound` of them compiled.
    pub fn new(registry: Registry, cache_bound: usize) -> Self {
        Self {
            registry,
            schemas: Mutex::new(Bounded::new(cache_bound)),
            versions: Mutex::new(Bounded::new(cache_bound)),
        }
    }

    /// Writes `json` with `schema`, framed with the id prefix, as Confluent's serializers do.
    /// For a Protobuf schema, `message` names the message (`shop.Order.Line`; the file's
    /// first when `None`).
    pub async fn encode(
        &self,
        schema: &WriteSchema,
        message: Option<&str>,
        json: &Json,
    ) -> Result<Vec<u8>, EncodeError> {
        let id = match schema {
            WriteSchema::Id(id) => *id,
            WriteSchema::Subject { subject, version } => self.id_of(subject, *version).await?,
        };
        let compiled = self.schema(SchemaRef::Id(id)).await.map_err(|e| match e {
            DecodeError::Unavailable(e) => EncodeError::Unavailable(e),
            DecodeError::Undecodable(why) => EncodeError::Refused(why),
        })?;
        let indexes = match (&compiled.compiled, message) {
            (Compiled::Protobuf(proto), Some(name)) => {
                Some(super::protobuf::indexes_of(proto, name).ok_or_else(|| {
                    EncodeError::Refused(format!("schema id {id} has no message {name}"))
                })?)
            }
            (Compiled::Protobuf(_), None) => Some(vec![0]),
            (_, Some(name)) => {
                return Err(EncodeError::Refused(format!(
                    "a message ({name}) is only for a Protobuf schema; schema id {id} is {}",
                    compiled.schema_type.as_str()
                )))
            }
            (_, None) => None,
        };
        let body = compiled::encode(&compiled.compiled, json, indexes.as_deref())
            .map_err(|why| EncodeError::Refused(format!("schema id {id}: {why}")))?;
        let mut bytes = framing::prefix(id, indexes.as_deref());
        bytes.extend(body);
        Ok(bytes)
    }

    /// Writes `json` as a new value of the record whose value was `original` (with `headers`):
    /// with the same schema, the same Protobuf message and the same framing — the id prefix
    /// again, or, with the header framing, the bare body (the record's schema-id header still
    /// names it). A value the schema refuses is [`EncodeError::Refused`] saying why.
    pub async fn reencode(
        &self,
        original: &[u8],
        headers: &[RecordHeader],
        json: &Json,
    ) -> Result<Vec<u8>, EncodeError> {
        let header = headers
            .iter()
            .find(|h| h.key == framing::VALUE_SCHEMA_ID_HEADER.as_bytes())
            .and_then(|h| h.value.as_deref());
        let framed = framing::locate(original, header).map_err(|why| {
            EncodeError::Refused(format!(
                "the value is not framed for a schema registry: {why}"
            ))
        })?;
        let schema = self.schema(framed.schema).await.map_err(|e| match e {
            DecodeError::Unavailable(e) => EncodeError::Unavailable(e),
            DecodeError::Undecodable(why) => EncodeError::Refused(why),
        })?;
        let indexes = match (&schema.compiled, framed.header_rest) {
            (Compiled::Protobuf(_), Some(rest)) => Some(
                framing::message_indexes(rest)
                    .map_err(EncodeError::Refused)?
                    .0,
            ),
            (Compiled::Protobuf(_), None) => Some(
                framing::message_indexes(framed.body)
                    .map_err(EncodeError::Refused)?
                    .0,
            ),
            _ => None,
        };
        let body = compiled::encode(&schema.compiled, json, indexes.as_deref())
            .map_err(|why| EncodeError::Refused(format!("schema {}: {why}", framed.schema)))?;
        Ok(match (framed.header_rest, framed.schema) {
            (None, SchemaRef::Id(id)) => {
                let mut bytes = framing::prefix(id, indexes.as_deref());
                bytes.extend(body);
                bytes
            }
            _ => body,
        })
    }

    /// The id of `subject` at `version`: asked once (the latest again after [`LATEST_FOR`]).
    async fn id_of(&self, subject: &str, version: Option<i32>) -> Result<u32, EncodeError> {
        let key = (subject.to_string(), version);
        if let Some((id, asked)) = self.versions.lock().expect("versions").get(&key) {
            if version.is_some() || asked.elapsed() < LATEST_FOR {
                return Ok(id);
            }
        }
        let fetched = self
            .registry
            .fetch_version(subject, version)
            .await
            .map_err(|e| match e {
                RegistryError::NotFound { .. } => EncodeError::Refused(e.to_string()),
                e => EncodeError::Unavailable(e),
            })?;
        let id = fetched.body.id.ok_or_else(|| {
            EncodeError::Refused(format!(
                "the registry gave no id for subject {subject}'s schema"
            ))
        })?;
        self.versions
            .lock()
            .expect("versions")
            .insert(key, (id, Instant::now()));
        Ok(id)
    }

    /// The registry's URL, redacted.
    pub fn registry_url(&self) -> &str {
        self.registry.shown()
    }

    /// Decodes `bytes`, the record's `field`, whose headers are `headers`. A null value or
    /// key (`None`) is JSON `null` and needs no schema.
    pub async fn decode(
        &self,
        field: Field,
        bytes: Option<&[u8]>,
        headers: &[RecordHeader],
    ) -> Result<Option<Decoded>, DecodeError> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let name = match field {
            Field::Value => framing::VALUE_SCHEMA_ID_HEADER,
            Field::Key => framing::KEY_SCHEMA_ID_HEADER,
        };
        let header = headers
            .iter()
            .find(|h| h.key == name.as_bytes())
            .and_then(|h| h.value.as_deref());
        let framed = framing::locate(bytes, header).map_err(|why| {
            DecodeError::Undecodable(format!(
                "the {} is not framed for a schema registry: {why}",
                field.noun()
            ))
        })?;
        let schema = self.schema(framed.schema).await?;
        let json =
            compiled::decode(&schema.compiled, framed.body, framed.header_rest).map_err(|why| {
                DecodeError::Undecodable(format!(
                    "the {} does not decode with schema {} ({}): {why}",
                    field.noun(),
                    framed.schema,
                    schema.schema_type.as_str()
                ))
            })?;
        Ok(Some(Decoded { json, schema }))
    }

    /// The compiled schema `reference` names: from the cache, or fetched and compiled.
    async fn schema(&self, reference: SchemaRef) -> Result<Arc<Schema>, DecodeError> {
        if let Some(schema) = self.schemas.lock().expect("schema cache").get(&reference) {
            return Ok(schema);
        }
        let fetched = self.registry.fetch(reference).await?;
        let undecodable = |why: String| {
            DecodeError::Undecodable(format!("schema {reference} cannot be read: {why}"))
        };
        let schema_type =
            SchemaType::from_registry(fetched.body.schema_type.as_deref()).map_err(undecodable)?;
        let references: Vec<(&str, &str)> = fetched
            .references
            .iter()
            .map(|(name, text)| (name.as_str(), text.as_str()))
            .collect();
        let compiled = compiled::compile(schema_type, &fetched.body.schema, &references)
            .map_err(undecodable)?;
        let schema = Arc::new(Schema {
            reference,
            id: match reference {
                SchemaRef::Id(id) => Some(id),
                SchemaRef::Guid(_) => fetched.body.id,
            },
            guid: fetched.body.guid.clone(),
            schema_type,
            registered: fetched.registered,
            compiled,
        });
        self.schemas
            .lock()
            .expect("schema cache")
            .insert(reference, schema.clone());
        Ok(schema)
    }
}

impl Field {
    fn noun(self) -> &'static str {
        match self {
            Field::Value => "value",
            Field::Key => "key",
        }
    }
}
