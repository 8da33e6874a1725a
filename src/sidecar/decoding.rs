//! Values and keys decoded with a schema registry ([`crate::schema::Decoder`]) before they
//! reach the target (`--decode-values schema-registry`, `--decode-keys schema-registry`):
//! the target gets JSON
//! and the schema's id, subject, version and type beside it. A record whose schema cannot be
//! fetched fails transiently (retried with backoff, nothing lost); one whose bytes do not
//! decode never reaches the target and is dead-lettered with kind `deserialization`.

use crate::schema::Decoded;

/// The HTTP headers naming `decoded`'s schema, each under `prefix` (`X-Kafka-Value-Schema` or
/// `X-Kafka-Key-Schema`): `-Type`, and `-Id`, `-Guid`, `-Subject`, `-Version` where known.
pub fn schema_headers(prefix: &str, decoded: &Decoded) -> Vec<(String, String)> {
    let schema = &decoded.schema;
    let mut headers = vec![(
        format!("{prefix}-Type"),
        schema.schema_type.as_str().to_string(),
    )];
    if let Some(id) = schema.id {
        headers.push((format!("{prefix}-Id"), id.to_string()));
    }
    if let Some(guid) = &schema.guid {
        headers.push((format!("{prefix}-Guid"), guid.clone()));
    }
    if let Some(registered) = &schema.registered {
        headers.push((format!("{prefix}-Subject"), registered.subject.clone()));
        headers.push((format!("{prefix}-Version"), registered.version.to_string()));
    }
    headers
}
