//! Avro bodies: the schema parsed with the schemas its references name, the body read with
//! it and turned into plain JSON.
//!
//! The JSON is what a service expects, not Avro's own JSON encoding: a record is an object, a
//! union is its branch's value (no `{"type": value}` wrapper), an enum its symbol, a map an
//! object; `bytes` and `fixed` (and the `decimal` and `duration` held in them) are base64
//! text; `uuid` its text; dates, times and timestamps the numbers Avro holds (days,
//! milliseconds or microseconds since the epoch or midnight). [`encode`] reads that same JSON
//! back, so a decoded value edited and encoded again keeps its bytes fields.

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, NamesRef, ResolvedSchema};
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value as Json;

/// An Avro schema ready to read and write bodies with: parsed, its named types (its own and
/// its references') resolved once, here, not for every record.
pub struct AvroSchema {
    resolved: Resolved,
}

/// The schemas and what borrows them: the reader, the writer and the names [`encode`] walks.
#[ouroboros::self_referencing]
struct Resolved {
    /// The schemas the references name, then the schema itself, last: the names a
    /// reference defines must be known before a schema that uses them is resolved.
    schemata: Vec<Schema>,
    #[borrows(schemata)]
    #[covariant]
    names: ResolvedSchema<'this>,
    #[borrows(schemata)]
    #[covariant]
    reader: GenericDatumReader<'this>,
    #[borrows(schemata)]
    #[covariant]
    writer: GenericDatumWriter<'this>,
}

impl std::fmt::Debug for AvroSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSchema")
            .field("schema", &self.resolved.borrow_schemata().last())
            .finish_non_exhaustive()
    }
}

/// Parses `text` with the schemas its references name (`references`, in any order).
pub fn compile(text: &str, references: &[&str]) -> Result<AvroSchema, String> {
    let (schema, mut schemata) = if references.is_empty() {
        (
            Schema::parse_str(text).map_err(|e| e.to_string())?,
            Vec::new(),
        )
    } else {
        Schema::parse_str_with_list(text, references).map_err(|e| e.to_string())?
    };
    schemata.push(schema);
    let resolved = ResolvedTryBuilder {
        schemata,
        names_builder: |all: &Vec<Schema>| ResolvedSchema::new_with_schemata(all.iter().collect()),
        reader_builder: |all: &Vec<Schema>| {
            GenericDatumReader::builder(all.last().expect("the schema"))
                .writer_schemata(all.iter().collect())
                .and_then(|b| b.build())
        },
        writer_builder: |all: &Vec<Schema>| {
            GenericDatumWriter::builder(all.last().expect("the schema"))
                .schemata(all.iter().collect())
                .and_then(|b| b.build())
        },
    }
    .try_build()
    .map_err(|e| e.to_string())?;
    Ok(AvroSchema { resolved })
}

/// Reads `body` with `schema`, to its last byte (bytes left over mean it was written with
/// another schema).
pub fn decode(schema: &AvroSchema, body: &[u8]) -> Result<Json, String> {
    let mut rest = body;
    let value = schema
        .resolved
        .borrow_reader()
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

/// Writes `json` (in the plain JSON [`decode`] gives) as an Avro body of `schema`. A value the
/// schema does not take is refused, saying where (`customer.name: expected a string`).
pub fn encode(schema: &AvroSchema, json: &Json) -> Result<Vec<u8>, String> {
    let resolved = &schema.resolved;
    let root = resolved.borrow_schemata().last().expect("the schema");
    let value = to_avro(json, root, resolved.borrow_names().get_names(), "")?;
    resolved
        .borrow_writer()
        .write_value_to_vec(value)
        .map_err(|e| format!("the value does not fit the schema: {e}"))
}

/// `json` as the Avro value of `schema` at `path` (for the error).
fn to_avro(
    json: &Json,
    schema: &Schema,
    names: &NamesRef<'_>,
    path: &str,
) -> Result<Value, String> {
    let at = |what: &str| {
        let place = if path.is_empty() { "the value" } else { path };
        format!("{place}: expected {what}, got {json}")
    };
    let int = || json.as_i64().ok_or_else(|| at("an integer"));
    let int32 = || int().and_then(|i| i32::try_from(i).map_err(|_| at("an integer of 32 bits")));
    let bytes = || {
        json.as_str()
            .and_then(|s| BASE64.decode(s).ok())
            .ok_or_else(|| at("base64 text"))
    };
    Ok(match schema {
        Schema::Null if json.is_null() => Value::Null,
        Schema::Null => return Err(at("null")),
        Schema::Boolean => Value::Boolean(json.as_bool().ok_or_else(|| at("true or false"))?),
        Schema::Int => Value::Int(int32()?),
        Schema::Date => Value::Date(int32()?),
        Schema::TimeMillis => Value::TimeMillis(int32()?),
        Schema::Long => Value::Long(int()?),
        Schema::TimeMicros => Value::TimeMicros(int()?),
        Schema::TimestampMillis => Value::TimestampMillis(int()?),
        Schema::TimestampMicros => Value::TimestampMicros(int()?),
        Schema::TimestampNanos => Value::TimestampNanos(int()?),
        Schema::LocalTimestampMillis => Value::LocalTimestampMillis(int()?),
        Schema::LocalTimestampMicros => Value::LocalTimestampMicros(int()?),
        Schema::LocalTimestampNanos => Value::LocalTimestampNanos(int()?),
        Schema::Float => Value::Float(float(json).ok_or_else(|| at("a number"))? as f32),
        Schema::Double => Value::Double(float(json).ok_or_else(|| at("a number"))?),
        Schema::Bytes => Value::Bytes(bytes()?),
        Schema::String => Value::String(json.as_str().ok_or_else(|| at("a string"))?.to_string()),
        Schema::Uuid(_) => Value::Uuid(
            json.as_str()
                .and_then(|s| apache_avro::Uuid::parse_str(s).ok())
                .ok_or_else(|| at("a UUID"))?,
        ),
        Schema::Fixed(fixed) => {
            let bytes = bytes()?;
            if bytes.len() != fixed.size {
                return Err(at(&format!("{} bytes in base64", fixed.size)));
            }
            Value::Fixed(fixed.size, bytes)
        }
        Schema::Decimal(_) => Value::Decimal(apache_avro::Decimal::from(bytes()?)),
        Schema::Duration(_) => {
            let bytes: [u8; 12] = bytes()?.try_into().map_err(|_| at("12 bytes in base64"))?;
            Value::Duration(apache_avro::Duration::from(bytes))
        }
        Schema::BigDecimal => {
            return Err(at("a big-decimal, which kafka-dlq does not write"));
        }
        Schema::Enum(e) => {
            let symbol = json.as_str().ok_or_else(|| at("an enum symbol"))?;
            let index = e
                .symbols
                .iter()
                .position(|s| s == symbol)
                .ok_or_else(|| at(&format!("one of {:?}", e.symbols)))?;
            Value::Enum(index as u32, symbol.to_string())
        }
        Schema::Array(array) => {
            let items = json.as_array().ok_or_else(|| at("an array"))?;
            Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| to_avro(item, &array.items, names, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Schema::Map(map) => {
            let entries = json.as_object().ok_or_else(|| at("an object"))?;
            Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        to_avro(v, &map.types, names, &join(path, k)).map(|v| (k.clone(), v))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Schema::Union(union) => {
            let mut refusals = Vec::new();
            for (i, branch) in union.variants().iter().enumerate() {
                match to_avro(json, branch, names, path) {
                    Ok(value) => return Ok(Value::Union(i as u32, Box::new(value))),
                    Err(why) => refusals.push(why),
                }
            }
            return Err(format!(
                "{}: fits none of the union's branches ({})",
                if path.is_empty() { "the value" } else { path },
                refusals.join("; ")
            ));
        }
        Schema::Record(record) => {
            let object = json.as_object().ok_or_else(|| at("an object"))?;
            if let Some(unknown) = object.keys().find(|k| !record.lookup.contains_key(*k)) {
                return Err(format!(
                    "{}: {} has no field {unknown:?}",
                    if path.is_empty() { "the value" } else { path },
                    record.name.fullname(None)
                ));
            }
            let mut fields = Vec::with_capacity(record.fields.len());
            for field in &record.fields {
                let here = join(path, &field.name);
                let value = match (object.get(&field.name), &field.default) {
                    (Some(value), _) => to_avro(value, &field.schema, names, &here)?,
                    (None, Some(default)) => default_value(default, &field.schema, names, &here)?,
                    (None, None) => return Err(format!("{here}: missing, and it has no default")),
                };
                fields.push((field.name.clone(), value));
            }
            Value::Record(fields)
        }
        Schema::Ref { name } => {
            let named =
                lookup(names, name).ok_or_else(|| format!("{path}: unknown type {name:?}"))?;
            return to_avro(json, named, names, path);
        }
    })
}

/// A field's default: Avro's JSON, where a union's default is its first branch's.
fn default_value(
    default: &Json,
    schema: &Schema,
    names: &NamesRef<'_>,
    path: &str,
) -> Result<Value, String> {
    match schema {
        Schema::Union(union) => {
            let first = union.variants().first().ok_or("an empty union")?;
            to_avro(default, first, names, path).map(|v| Value::Union(0, Box::new(v)))
        }
        // Avro's JSON writes bytes defaults as ISO-8859-1 text.
        Schema::Bytes => Ok(Value::Bytes(
            default
                .as_str()
                .unwrap_or_default()
                .chars()
                .map(|c| c as u8)
                .collect(),
        )),
        _ => to_avro(default, schema, names, path),
    }
}

fn lookup<'a>(names: &NamesRef<'a>, name: &Name) -> Option<&'a Schema> {
    names.get(name).copied()
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// A JSON number, or the text Avro's JSON uses for NaN and the infinities.
fn float(json: &Json) -> Option<f64> {
    json.as_f64().or_else(|| match json.as_str()? {
        "NaN" => Some(f64::NAN),
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    })
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
    fn decoded_json_encodes_back_to_the_same_bytes() {
        let schema = compile(ORDER, &[CUSTOMER]).unwrap();
        let body = [
            42, 6, b'A', b'n', b'n', 2, 2, b'k', 4, 1, 2, 0, 2, 4, b'h', b'i', 2,
        ];
        let json = decode(&schema, &body).unwrap();
        assert_eq!(encode(&schema, &json).unwrap(), body);
        // A missing field with a default takes it; the union's null branch.
        let mut edited = json.clone();
        edited.as_object_mut().unwrap().remove("note");
        let bytes = encode(&schema, &edited).unwrap();
        assert_eq!(decode(&schema, &bytes).unwrap()["note"], Json::Null);
    }

    #[test]
    fn a_value_the_schema_refuses_says_where() {
        let schema = compile(ORDER, &[CUSTOMER]).unwrap();
        let wrong =
            serde_json::json!({"id": "x", "customer": {"name": "A", "tags": {}}, "state": "NEW"});
        assert!(encode(&schema, &wrong)
            .unwrap_err()
            .contains("id: expected an integer"));
        let wrong =
            serde_json::json!({"id": 1, "customer": {"name": 5, "tags": {}}, "state": "NEW"});
        assert!(encode(&schema, &wrong)
            .unwrap_err()
            .contains("customer.name: expected a string"));
        let wrong =
            serde_json::json!({"id": 1, "customer": {"name": "A", "tags": {}}, "state": "GONE"});
        assert!(encode(&schema, &wrong)
            .unwrap_err()
            .contains("state: expected one of"));
        let wrong = serde_json::json!({"id": 1, "extra": 1, "customer": {"name": "A", "tags": {}}, "state": "NEW"});
        assert!(encode(&schema, &wrong)
            .unwrap_err()
            .contains("no field \"extra\""));
    }

    #[test]
    fn a_schema_that_does_not_parse_is_an_error() {
        assert!(compile("{\"type\": \"record\"}", &[]).is_err());
    }
}
