//! JSON Schema bodies: JSON after the framing. Decoding reads the JSON; it does not validate
//! it against the schema (neither does Confluent's deserializer unless told to): a value the
//! schema would refuse still reaches the service, a body that is not JSON never does.

use serde_json::Value as Json;

/// Reads `body` as JSON.
pub fn decode(body: &[u8]) -> Result<Json, String> {
    serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))
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
}
