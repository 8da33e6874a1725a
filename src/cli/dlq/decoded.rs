//! Dead letters shown with their Schema Registry payload decoded (`dlq list / show
//! --schema-registry-url`), and `dlq list --where` on the decoded fields.

use kafka_dlq::dlq::Envelope;
use kafka_dlq::schema::Codec;
use kafka_dlq::ConfigError;
use serde_json::{json, Value};

/// `--where PATH=VALUE`: the decoded value's field at the dotted `PATH` (`customer.id`; an
/// array's item by its index, `lines.0.sku`) equals `VALUE`, read as JSON when it is JSON
/// (`42`, `true`, `null`, `"42"`) and as text otherwise (`Ann`).
#[derive(Debug, Clone, PartialEq)]
pub struct Where {
    path: Vec<String>,
    value: Value,
}

impl Where {
    /// Parses `PATH=VALUE`; anything else is an error naming the setting.
    pub fn parse(text: &str) -> Result<Where, ConfigError> {
        let (path, value) = text.split_once('=').ok_or_else(|| {
            ConfigError::new("where", text, "expected PATH=VALUE, e.g. customer.id=42")
        })?;
        let path: Vec<String> = path.trim().split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::new(
                "where",
                text,
                "a path of field names separated by dots",
            ));
        }
        let value = serde_json::from_str(value.trim())
            .unwrap_or_else(|_| Value::String(value.trim().to_string()));
        Ok(Where { path, value })
    }

    /// Whether `json` has `value` at the path.
    pub fn matches(&self, json: &Value) -> bool {
        let mut here = json;
        for step in &self.path {
            here = match here {
                Value::Object(map) => match map.get(step) {
                    Some(v) => v,
                    None => return false,
                },
                Value::Array(items) => {
                    match step.parse::<usize>().ok().and_then(|i| items.get(i)) {
                        Some(v) => v,
                        None => return false,
                    }
                }
                _ => return false,
            };
        }
        *here == self.value
    }
}

/// `envelope`'s payload decoded with `codec` as `dlq list / show` print it: `{"json",
/// "schema"}`, `{"error"}` when it does not decode, `None` when it is not framed for a
/// registry (or a tombstone).
pub async fn decode(codec: &Codec, envelope: &Envelope) -> Option<Value> {
    Some(
        match kafka_dlq::schema::decode_payload(codec, envelope).await? {
            Ok(decoded) => json!({"json": decoded.json, "schema": decoded.schema_json()}),
            Err(e) => json!({"error": e.to_string()}),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_reads_a_dotted_path_and_a_json_or_text_value() {
        let order = json!({"id": 42, "customer": {"name": "Ann"}, "lines": [{"sku": "a"}]});
        for (text, hit) in [
            ("id=42", true),
            ("id=\"42\"", false),
            ("customer.name=Ann", true),
            ("customer.name=Bob", false),
            ("lines.0.sku=a", true),
            ("lines.1.sku=a", false),
            ("nope.deeper=1", false),
        ] {
            assert_eq!(Where::parse(text).unwrap().matches(&order), hit, "{text}");
        }
        assert_eq!(Where::parse("no equals sign").unwrap_err().key, "where");
        assert_eq!(Where::parse("a..b=1").unwrap_err().key, "where");
    }
}
