//! A dead letter as the console's API answers it: every field of its envelope, its key and
//! headers decoded, its payload as [`PayloadView`], and whether it is outstanding. Text is
//! returned as JSON strings, never as markup; the page shows it as text.

use base64::Engine as _;
use serde_json::{json, Value};

use super::payload::{Editable, PayloadView};
use crate::dlq_reader::{DlqContent, DlqEntry};
use crate::state::ledger::Resolution;

/// Bytes as `{"text": …}` when they are UTF-8, else `{"base64": …}`; `null` for none.
fn bytes(value: Option<&[u8]>) -> Value {
    match value {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(text) => json!({ "text": text }),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
        },
    }
}

/// `entry` for the API. Without `payloads` (a viewer, unless `show_payloads`), its payload,
/// key and header values are left out (`"hidden": true`); with `full`, the payload is
/// included (the detail view), else only the summary fields.
pub fn to_json(
    entry: &DlqEntry,
    resolution: Option<&Resolution>,
    payloads: bool,
    full: bool,
) -> Value {
    let (kind, message) = entry.content.cause();
    let mut out = json!({
        "dlq_topic": entry.topic,
        "partition": entry.partition,
        "offset": entry.offset,
        "id": entry.id(),
        "kind": kind,
        "message": message,
        "fingerprint": entry.content.fingerprint(),
        "outstanding": resolution.is_none(),
        "resolution": resolution,
        "written_at": entry.timestamp,
        "hidden": !payloads,
    });
    let format = match &entry.content {
        DlqContent::Envelope(_) => "kafka-dlq",
        DlqContent::Foreign { format, .. } => format.as_str(),
        DlqContent::NotAnEnvelope { .. } => "not an envelope",
    };
    out["format"] = json!(format);
    if let Some(unresolved) = &entry.unresolved {
        out["unresolved"] = json!(unresolved.to_string());
    }
    let Some(e) = entry.content.envelope() else {
        if let DlqContent::NotAnEnvelope { reason, preview } = &entry.content {
            out["not_an_envelope"] = json!(reason);
            if payloads && full {
                out["payload"] = json!(PayloadView::Text {
                    text: preview.clone(),
                    why: format!("the start of a record that is not an envelope: {reason}"),
                });
            }
        }
        return out;
    };
    out["timestamp"] = json!(e.timestamp);
    out["group"] = json!(e.source.group);
    out["source"] = json!({
        "topic": e.source.topic,
        "partition": e.source.partition,
        "offset": e.source.offset,
        "timestamp": e.source.timestamp,
    });
    out["attempts"] = json!(e.error.attempts);
    out["delivery_count"] = json!(e.error.delivery_count);
    out["trace_id"] = json!(e.trace_id);
    out["history"] = json!(e.history);
    out["retry_copy"] = json!(e.retry_copy);
    if !full {
        return out;
    }
    let headers = e.headers();
    out["headers"] = match &headers {
        Ok(headers) => Value::Array(
            headers
                .iter()
                .map(|h| {
                    json!({
                        "name": bytes(Some(&h.key)),
                        "value": if payloads { bytes(h.value.as_deref()) } else { Value::Null },
                    })
                })
                .collect(),
        ),
        Err(why) => json!({ "error": why.to_string() }),
    };
    if !payloads {
        return out;
    }
    out["key"] = match e.key_bytes() {
        Ok(key) => bytes(key.as_deref()),
        Err(why) => json!({ "error": why.to_string() }),
    };
    match e.payload_bytes() {
        Ok(payload) => {
            out["payload"] = json!(PayloadView::of(payload.as_deref()));
            out["editable"] = json!(Editable::of(payload.as_deref()));
        }
        Err(why) => {
            out["payload"] = json!({ "as": "undecodable", "why": why.to_string() });
            out["editable"] = json!(Editable::None {
                why: format!("the payload does not decode: {why}")
            });
        }
    }
    out
}

/// Adds `envelope`'s payload decoded with `codec` to `out` (a dead letter's JSON from
/// [`to_json`]): `decoded` is `{"json", "schema"}`, or `{"error"}` when it does not decode,
/// and `editable` becomes `{"as": "decoded", "json", "schema"}` — the JSON to edit, encoded
/// again with the same schema on redrive. A payload that is not framed for a registry is
/// left as it was shown.
pub async fn decode(
    codec: &crate::schema::Codec,
    envelope: &crate::dlq::Envelope,
    out: &mut Value,
) {
    let Some(decoded) = crate::schema::decode_payload(codec, envelope).await else {
        return;
    };
    match decoded {
        Ok(decoded) => {
            let pretty = serde_json::to_string_pretty(&decoded.json).expect("JSON");
            let schema = decoded.schema_json();
            out["decoded"] = json!({ "json": pretty, "schema": schema });
            out["editable"] = json!({ "as": "decoded", "json": pretty, "schema": schema });
        }
        Err(e) => out["decoded"] = json!({ "error": e.to_string() }),
    }
}

/// The envelope of `entry` as JSON lines' one line for an export: the DLQ coordinates and the
/// envelope exactly as written (a record that is not an envelope: its coordinates and why).
pub fn export_line(entry: &DlqEntry) -> String {
    let line = match entry.content.envelope() {
        Some(e) => json!({
            "dlq_topic": entry.topic, "partition": entry.partition, "offset": entry.offset,
            "envelope": e,
        }),
        None => json!({
            "dlq_topic": entry.topic, "partition": entry.partition, "offset": entry.offset,
            "not_an_envelope": entry.content.cause().1,
        }),
    };
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::failure::DeadLetterKind;
    use crate::record::{Record, RecordHeader};

    fn entry() -> DlqEntry {
        let mut record = Record::new("orders", 2, 40)
            .with_id("<img src=x onerror=alert(1)>")
            .with_key("\u{1b}[31mred")
            .with_payload(b"<script>window.pwned=1</script>".to_vec());
        record.headers.push(RecordHeader {
            key: vec![0xff, b'<'],
            value: Some(b"\x1b]0;title\x07".to_vec()),
        });
        DlqEntry {
            topic: "orders-dlt".into(),
            partition: 0,
            offset: 7,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(Envelope::new(
                &record,
                DeadLetterKind::Permanent,
                "<b>bad</b>",
                1,
                "billing",
            ))),
            unresolved: None,
        }
    }

    #[test]
    fn hostile_text_stays_text_in_every_field() {
        let v = to_json(&entry(), None, true, true);
        assert_eq!(v["id"], "<img src=x onerror=alert(1)>");
        assert_eq!(v["message"], "<b>bad</b>");
        assert_eq!(v["key"]["text"], "\u{1b}[31mred");
        assert_eq!(v["headers"][0]["name"]["base64"], "/zw=");
        assert_eq!(v["headers"][0]["value"]["text"], "\u{1b}]0;title\u{7}");
        assert_eq!(v["payload"]["as"], "text");
        assert_eq!(v["payload"]["text"], "<script>window.pwned=1</script>");
        let text = v.to_string();
        assert!(
            text.contains("\\u001b[31mred"),
            "escapes stay escaped in JSON: {text}"
        );
    }

    #[test]
    fn a_viewer_without_payloads_sees_no_payload_key_or_header_value() {
        let v = to_json(&entry(), None, false, true);
        assert_eq!(v["hidden"], true);
        assert!(v.get("payload").is_none() && v.get("key").is_none());
        assert_eq!(v["headers"][0]["value"], Value::Null);
        assert_eq!(v["message"], "<b>bad</b>");
    }
}
