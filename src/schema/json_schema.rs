//! JSON Schema bodies: JSON after the framing. Decoding reads the JSON; it does not validate
//! it against the schema (neither does Confluent's deserializer unless told to): a value the
//! schema would refuse still reaches the service, a body that is not JSON never does.
//! Encoding (an edited or produced value) validates: a value the schema refuses is refused.

use serde_json::Value as Json;

/// A JSON Schema ready to validate values with.
#[derive(Debug)]
pub struct JsonSchema {
    validator: jsonschema::Validator,
}

/// Compiles `text` with the schemas its references name (`(name, text)`: a `$ref` to `name`
/// finds that schema).
pub fn compile(text: &str, references: &[(&str, &str)]) -> Result<JsonSchema, String> {
    let schema: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut options = jsonschema::options();
    for (name, text) in references {
        let contents: Json =
            serde_json::from_str(text).map_err(|e| format!("reference {name} is not JSON: {e}"))?;
        let resource = jsonschema::Resource::from_contents(contents)
            .map_err(|e| format!("reference {name}: {e}"))?;
        options = options.with_resource(*name, resource);
    }
    let validator = options.build(&schema).map_err(|e| e.to_string())?;
    Ok(JsonSchema { validator })
}

/// Reads `body` as JSON.
pub fn decode(body: &[u8]) -> Result<Json, String> {
    serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))
}

/// `json` as a body of `schema`, if the schema takes it; else every reason it does not, with
/// where (`/id: "x" is not of type "integer"`).
pub fn encode(schema: &JsonSchema, json: &Json) -> Result<Vec<u8>, String> {
    let refusals: Vec<String> = schema
        .validator
        .iter_errors(json)
        .map(|e| format!("{}: {e}", e.instance_path))
        .collect();
    if !refusals.is_empty() {
        return Err(format!(
            "the schema refuses the value: {}",
            refusals.join("; ")
        ));
    }
    Ok(serde_json::to_vec(json).expect("JSON serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_reads_and_other_bytes_say_why() {
        assert_eq!(
            decode(b"{\"a\": [1]}").unwrap(),
            serde_json::json!({"a": [1]})
        );
        assert!(decode(&[0xff]).unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn a_value_the_schema_refuses_is_refused_saying_where() {
        let schema = compile(
            r#"{"type": "object", "properties": {"id": {"type": "integer"}, "customer": {"$ref": "customer.json"}}}"#,
            &[("customer.json", r#"{"type": "object", "required": ["name"]}"#)],
        )
        .unwrap();
        assert_eq!(
            encode(&schema, &serde_json::json!({"id": 1})).unwrap(),
            b"{\"id\":1}"
        );
        let why = encode(&schema, &serde_json::json!({"id": "x", "customer": {}})).unwrap_err();
        assert!(why.contains("/id"), "{why}");
        assert!(why.contains("name"), "{why}");
    }
}
