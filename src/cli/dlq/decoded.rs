//! Dead letters shown with their Schema Registry payload decoded (`dlq list / show
//! --schema-registry-url`), which `--where` reads as `decoded`.

use kafka_dlq::dlq::Envelope;
use kafka_dlq::schema::Codec;
use serde_json::{json, Value};

/// `envelope`'s payload decoded with `codec` as `dlq list / show` print it: `{"json",
/// "schema"}`, `{"error"}` when it does not decode, `None` when it is not framed for a
/// registry (or a tombstone).
pub(super) async fn decode(codec: &Codec, envelope: &Envelope) -> Option<Value> {
    Some(
        match kafka_dlq::schema::decode_payload(codec, envelope).await? {
            Ok(decoded) => json!({"json": decoded.json, "schema": decoded.schema_json()}),
            Err(e) => json!({"error": e.to_string()}),
        },
    )
}
