//! Avro bodies: the schema parsed with the schemas its references name, the body read with
//! it and turned into plain JSON.
//!
//! The JSON is what a service expects, not Avro's own JSON encoding: a record is an object, a
//! union is its branch's value (no `{"type": value}` wrapper), an enum its symbol, a map an
//! object; `bytes` and `fixed` (and the `decimal` and `duration` held in them) are base64
//! text; `uuid` its text; dates, times and timestamps the numbers Avro holds (days,
//! milliseconds or microseconds since the epoch or midnight).

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value as Json;

/// An Avro schema ready to read bodies with.
#[derive(Debug)]
pub struct AvroSchema {
    schema: Schema,
    /// The schemas its references name, for the named types it uses from them.
    references: Vec<Schema>,
}

/// Parses `text` with the schemas its references name (`references`, in any order).
pub fn compile(text: &str, references: &[&str]) -> Result<AvroSchema, String> {
    let (schema, references) = if references.is_empty() {
        (
            Schema::parse_str(text).map_err(|e| e.to_string())?,
            Vec::new(),
        )
    } else {
        Schema::parse_str_with_list(text, references).map_err(|e| e.to_string())?
    };
    Ok(AvroSchema { schema, references })
}

/// Reads `body` with `schema`, to its last byte (bytes left over mean it was written with
/// another schema).
pub fn decode(schema: &AvroSchema, body: &[u8]) -> Result<Json, String> {
    // The referenced schemas first: the names they define must be known before a schema that
    // uses them is resolved.
    let all: Vec<&Schema> = schema
        .references
        .iter()
        .chain(std::iter::once(&schema.schema))
        .collect();
    let reader = GenericDatumReader::builder(&schema.schema)
        .writer_schemata(all)
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    let mut rest = body;
    let value = reader
        .read_value(&mut rest)
        .map_err(|e| format!("not Avro of its schema: {e}"))?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes are left after the Avro value: it was written with another schema",
            rest.len()
        ));
    }
    Ok(json(value))
}

/// An Avro value as plain JSON (see the module's documentation).
fn json(value: Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(b),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => i.into(),
        Value::Long(l)
        | Value::TimeMicros(l)
        | Value::TimestampMillis(l)
        | Value::TimestampMicros(l)
        | Value::TimestampNanos(l)
        | Value::LocalTimestampMillis(l)
        | Value::LocalTimestampMicros(l)
        | Value::LocalTimestampNanos(l) => l.into(),
        Value::Float(f) => number(f64::from(f)),
        Value::Double(d) => number(d),
        Value::Bytes(bytes) | Value::Fixed(_, bytes) => Json::String(BASE64.encode(bytes)),
        Value::String(s) | Value::Enum(_, s) => Json::String(s),
        Value::Union(_, inner) => json(*inner),
        Value::Array(items) => Json::Array(items.into_iter().map(json).collect()),
        Value::Map(entries) => {
            Json::Object(entries.into_iter().map(|(k, v)| (k, json(v))).collect())
        }
        Value::Record(fields) => {
            Json::Object(fields.into_iter().map(|(k, v)| (k, json(v))).collect())
        }
        Value::Decimal(decimal) => {
            Json::String(BASE64.encode(Vec::<u8>::try_from(&decimal).unwrap_or_default()))
        }
        Value::BigDecimal(big) => Json::String(big.to_string()),
        Value::Duration(duration) => Json::String(BASE64.encode(<[u8; 12]>::from(duration))),
        Value::Uuid(uuid) => Json::String(uuid.hyphenated().to_string()),
    }
}

/// A float as a JSON number; NaN and the infinities, which JSON has no number for, as the
/// text Avro's own JSON encoding uses.
fn number(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or_else(|| Json::String(f.to_string()), Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = r#"{"type": "record", "name": "Order", "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "shop.Customer"},
            {"name": "note", "type": ["null", "string"], "default": null},
            {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}}
        ]}"#;
    const CUSTOMER: &str = r#"{"type": "record", "name": "Customer", "namespace": "shop",
        "fields": [{"name": "name", "type": "string"}, {"name": "tags", "type": {"type": "map", "values": "bytes"}}]}"#;

    #[test]
    fn a_record_with_a_referenced_type_reads_as_plain_json() {
        let schema = compile(ORDER, &[CUSTOMER]).unwrap();
        // id 21 (zigzag 42), customer {"name": "Ann", tags {"k": [1, 2]}}, note: branch 1 "hi",
        // state: symbol 1.
        let body = [
            42, 6, b'A', b'n', b'n', 2, 2, b'k', 4, 1, 2, 0, 2, 4, b'h', b'i', 2,
        ];
        let value = decode(&schema, &body).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"id": 21, "customer": {"name": "Ann", "tags": {"k": "AQI="}},
                "note": "hi", "state": "PAID"})
        );
    }

    #[test]
    fn bytes_of_another_schema_are_refused_saying_why() {
        let schema = compile(
            r#"{"type": "record", "name": "A", "fields": [{"name": "n", "type": "int"}]}"#,
            &[],
        )
        .unwrap();
        assert!(decode(&schema, &[2, 9])
            .unwrap_err()
            .contains("1 bytes are left"));
        assert!(decode(&schema, &[]).unwrap_err().contains("not Avro"));
    }

    #[test]
    fn a_schema_that_does_not_parse_is_an_error() {
        assert!(compile("{\"type\": \"record\"}", &[]).is_err());
    }
}
