//! The records a target's answer asks to produce, with `kafka-dlq run --exactly-once`: a 2xx
//! answer may carry
//! `{"produce": [{"topic": "T", "key": "k" | null, "value": <any JSON>, "headers": {"name": "value"}}]}`
//! (or `"value_base64"` for bytes; neither for a tombstone), written in the record's
//! transaction with its offset; a `value` is produced as the answer wrote it, byte for byte. An
//! item may add `"schema": {"subject": "S", "version": N, "message": "M"}` (or `{"id": N}`;
//! no `version`: the latest): its `value` is then encoded with that schema of the registry
//! before it is produced ([`encodings`]; the sidecar does the encoding). Pure: the answer's
//! bytes in, the outputs or a permanent failure out.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::failure::HandlerError;
use crate::handler::Output;
use crate::record::RecordHeader;
use crate::schema::WriteSchema;

/// An output's value to encode with a registry's schema before it is produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoding {
    /// The schema to write it with.
    pub schema: WriteSchema,
    /// For a Protobuf schema, the message (`shop.Order.Line`); the file's first when `None`.
    pub message: Option<String>,
    /// The value, as JSON.
    pub value: Value,
}

/// The outputs of `body` (read as [`outputs`] reads it) that ask to be encoded with a
/// registry's schema, by their place in `produce`. An answer [`outputs`] refuses has none.
pub fn encodings(body: &[u8]) -> Vec<(usize, Encoding)> {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let Some(items) = answer.get("produce").and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| encoding(item).ok().flatten().map(|e| (i, e)))
        .collect()
}

/// `item`'s encoding, if it asks for one; an error if its `schema` is not the shape above.
fn encoding(item: &Value) -> Result<Option<Encoding>, String> {
    let Some(schema) = item.get("schema") else {
        return Ok(None);
    };
    let schema = schema.as_object().ok_or("`schema` is not an object")?;
    if let Some(unknown) = schema
        .keys()
        .find(|k| !["id", "subject", "version", "message"].contains(&k.as_str()))
    {
        return Err(format!(
            "`schema` has an unknown field `{unknown}` (fields: id, subject, version, message)"
        ));
    }
    let number = |name: &str| -> Result<Option<u32>, String> {
        match schema.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| format!("`schema.{name}` is not a positive integer")),
        }
    };
    let write = match (number("id")?, schema.get("subject"), number("version")?) {
        (Some(id), None, None) => WriteSchema::Id(id),
        (None, Some(Value::String(subject)), version) if !subject.is_empty() => {
            WriteSchema::Subject {
                subject: subject.clone(),
                version: version.map(|v| v as i32),
            }
        }
        _ => {
            return Err(
                "`schema` needs an `id`, or a `subject` (and a `version`, else the latest)"
                    .to_string(),
            )
        }
    };
    let message = match schema.get("message") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return Err("`schema.message` is not a string".to_string()),
    };
    let value = match (item.get("value"), item.get("value_base64")) {
        (Some(value), None) => value.clone(),
        _ => return Err("`schema` encodes a `value` (JSON), and there is none".to_string()),
    };
    Ok(Some(Encoding {
        schema: write,
        message,
        value,
    }))
}

/// The records `body` (a 2xx answer, read up to 1 MiB) asks to produce, each to one of
/// `allowed`. An empty body, or a JSON object without `produce`, asks for none. Anything else
/// that is not the shape above — a body that is not JSON, JSON that is not an object
/// (`[]`, `"done"`, `null`), an item with an unknown field, a
/// topic outside `allowed` — is a permanent failure of the record, saying what is wrong:
/// nothing of it is produced.
pub fn outputs(body: &[u8], allowed: &[String]) -> Result<Vec<Output>, HandlerError> {
    let invalid = |why: String| HandlerError::permanent(format!("the target's answer {why}"));
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let answer: Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "is not JSON ({e}); with --exactly-once a 2xx answer is empty or JSON, `{{\"produce\": [...]}}` for records to produce"
        ))
    })?;
    let Some(answer) = answer.as_object() else {
        return Err(invalid(format!(
            "is JSON but not an object (`{}`); with --exactly-once a 2xx answer is empty or an object, `{{\"produce\": [...]}}` for records to produce",
            String::from_utf8_lossy(body).trim().chars().take(40).collect::<String>()
        )));
    };
    let Some(produce) = answer.get("produce") else {
        return Ok(Vec::new());
    };
    let items = produce
        .as_array()
        .ok_or_else(|| invalid("has a `produce` that is not an array".to_string()))?;
    // Each item's `value` as the target wrote it, byte for byte: parsed, it would come back
    // with its keys sorted and its long numbers rounded.
    let raw: RawAnswer = serde_json::from_slice(body).unwrap_or_default();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let value = raw
                .produce
                .get(i)
                .and_then(|item| item.value.as_deref())
                .map(|v| v.get().as_bytes().to_vec());
            output(item, value, allowed).map_err(|why| {
                invalid(format!(
                    "asks to produce an invalid record (produce[{i}]): {why}"
                ))
            })
        })
        .collect()
}

/// An answer's items with their `value`s as written.
#[derive(Default, serde::Deserialize)]
struct RawAnswer {
    #[serde(default)]
    produce: Vec<RawItem>,
}

#[derive(serde::Deserialize)]
struct RawItem {
    #[serde(default)]
    value: Option<Box<RawValue>>,
}

/// One header of a `headers` list: `{"name" | "name_base64", "value" | "value_base64"}`, a
/// `null` or absent value for a header without one.
fn header_item(item: &Value) -> Result<RecordHeader, String> {
    let item = item.as_object().ok_or("is not an object")?;
    if let Some(unknown) = item
        .keys()
        .find(|k| !["name", "name_base64", "value", "value_base64"].contains(&k.as_str()))
    {
        return Err(format!(
            "has an unknown field `{unknown}` (fields: name, name_base64, value, value_base64)"
        ));
    }
    let bytes = |text: Option<&Value>, base64: Option<&Value>, what: &str| match (text, base64) {
        (Some(_), Some(_)) => Err(format!("has both `{what}` and `{what}_base64`")),
        (Some(Value::String(t)), None) => Ok(Some(t.clone().into_bytes())),
        (None | Some(Value::Null), None) => Ok(None),
        (None, Some(Value::String(b))) => BASE64
            .decode(b)
            .map(Some)
            .map_err(|e| format!("`{what}_base64` is not base64: {e}")),
        _ => Err(format!("`{what}` is not a string")),
    };
    let key = bytes(item.get("name"), item.get("name_base64"), "name")?.ok_or("has no `name`")?;
    let value = bytes(item.get("value"), item.get("value_base64"), "value")?;
    Ok(RecordHeader { key, value })
}

/// `item`'s record, its `value` the bytes `raw_value` (as the answer wrote it) when known.
fn output(item: &Value, raw_value: Option<Vec<u8>>, allowed: &[String]) -> Result<Output, String> {
    let item = item.as_object().ok_or("not an object")?;
    if let Some(unknown) = item.keys().find(|k| {
        !["topic", "key", "value", "value_base64", "headers", "schema"].contains(&k.as_str())
    }) {
        return Err(format!(
            "unknown field `{unknown}` (fields: topic, key, value, value_base64, headers, schema)"
        ));
    }
    encoding(&Value::Object(item.clone()))?;
    let topic = item
        .get("topic")
        .and_then(Value::as_str)
        .ok_or("`topic` is missing or not a string")?;
    if !allowed.iter().any(|t| t == topic) {
        return Err(format!(
            "topic {topic:?} is not one of --output-topics ({})",
            allowed.join(", ")
        ));
    }
    let key = match item.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(key)) => Some(key.clone().into_bytes()),
        Some(_) => return Err("`key` is not a string or null".to_string()),
    };
    let value = match (item.get("value"), item.get("value_base64")) {
        (Some(_), Some(_)) => return Err("has both `value` and `value_base64`".to_string()),
        (Some(value), None) => Some(raw_value.unwrap_or_else(|| value.to_string().into_bytes())),
        (None, Some(Value::String(encoded))) => Some(
            BASE64
                .decode(encoded)
                .map_err(|e| format!("`value_base64` is not base64: {e}"))?,
        ),
        (None, Some(_)) => return Err("`value_base64` is not a string".to_string()),
        (None, None) => None,
    };
    let mut headers = Vec::new();
    match item.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("header {name:?} is not a string"))?;
                headers.push(RecordHeader {
                    key: name.clone().into_bytes(),
                    value: Some(value.as_bytes().to_vec()),
                });
            }
        }
        // The form the sidecar sends a batch item's headers in: in order, duplicates kept,
        // any bytes.
        Some(Value::Array(items)) => {
            for (i, header) in items.iter().enumerate() {
                headers.push(header_item(header).map_err(|why| format!("headers[{i}] {why}"))?);
            }
        }
        Some(_) => return Err("`headers` is not an object or a list".to_string()),
    }
    Ok(Output {
        topic: topic.to_string(),
        key,
        value,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    #[test]
    fn a_value_is_produced_as_the_target_wrote_it() {
        let body = br#"{"produce":[{"topic":"out","value":{"b":1,"a":123456789012345678901234}}]}"#;
        let out = outputs(body, &["out".to_string()]).unwrap();
        assert_eq!(
            out[0].value.as_deref(),
            Some(&br#"{"b":1,"a":123456789012345678901234}"#[..])
        );
    }

    #[test]
    fn an_output_may_ask_for_its_value_encoded_with_a_schema() {
        let body = br#"{"produce":[{"topic":"out","value":1},
            {"topic":"out","value":{"id":7},"schema":{"subject":"out-value"}},
            {"topic":"out","value":{"sku":"a"},"schema":{"id":3,"message":"shop.Order.Line"}}]}"#;
        assert_eq!(outputs(body, &["out".to_string()]).unwrap().len(), 3);
        let found = encodings(body);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0, 1);
        assert_eq!(
            found[0].1.schema,
            WriteSchema::Subject {
                subject: "out-value".into(),
                version: None
            }
        );
        assert_eq!(found[1].1.schema, WriteSchema::Id(3));
        assert_eq!(found[1].1.message.as_deref(), Some("shop.Order.Line"));
        for (bad, why) in [
            (
                r#"{"topic":"out","value_base64":"AA==","schema":{"id":1}}"#,
                "there is none",
            ),
            (r#"{"topic":"out","value":1,"schema":{"id":0}}"#, "positive"),
            (
                r#"{"topic":"out","value":1,"schema":{"id":1,"subject":"s"}}"#,
                "needs an `id`",
            ),
            (
                r#"{"topic":"out","value":1,"schema":{"ids":1}}"#,
                "unknown field `ids`",
            ),
        ] {
            let body = format!(r#"{{"produce":[{bad}]}}"#);
            let e = outputs(body.as_bytes(), &["out".to_string()]).unwrap_err();
            assert!(e.message().contains(why), "{bad}: {e}");
        }
    }

    fn allowed() -> Vec<String> {
        vec!["invoices".to_string(), "audit".to_string()]
    }

    #[test]
    fn an_answer_without_produce_produces_nothing() {
        for body in [&b""[..], b"  \n", b"{}", b"{\"status\": \"ok\"}"] {
            assert_eq!(outputs(body, &allowed()).unwrap(), vec![], "{body:?}");
        }
    }

    #[test]
    fn records_are_produced_as_asked() {
        let body = br#"{"produce": [
            {"topic": "invoices", "key": "o-1", "value": {"cents": 250, "lines": [1, 2]},
             "headers": {"source": "billing"}},
            {"topic": "audit", "key": null, "value_base64": "AP8="},
            {"topic": "audit", "key": "gone"}
        ]}"#;
        let out = outputs(body, &allowed()).unwrap();
        assert_eq!(
            out[0],
            Output::new("invoices", br#"{"cents": 250, "lines": [1, 2]}"#.to_vec())
                .key("o-1")
                .header("source", "billing")
        );
        assert_eq!(out[1].value.as_deref(), Some(&[0x00, 0xff][..]));
        assert_eq!(out[1].key, None);
        assert_eq!(
            (out[2].key.as_deref(), out[2].value.as_deref()),
            (Some(&b"gone"[..]), None)
        );
    }

    #[test]
    fn headers_as_a_list_are_produced_in_order_with_any_bytes() {
        let body = br#"{"produce": [{"topic": "audit", "value": 1, "headers": [
            {"name": "tenant", "value": "acme"},
            {"name": "tenant", "value": "again"},
            {"name_base64": "/w==", "value_base64": "AP4="},
            {"name": "empty", "value": ""},
            {"name": "null", "value": null},
            {"name": "absent"}
        ]}]}"#;
        let out = outputs(body, &allowed()).unwrap();
        let h = |key: &[u8], value: Option<&[u8]>| RecordHeader {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        };
        assert_eq!(
            out[0].headers,
            vec![
                h(b"tenant", Some(b"acme")),
                h(b"tenant", Some(b"again")),
                h(&[0xff], Some(&[0x00, 0xfe])),
                h(b"empty", Some(b"")),
                h(b"null", None),
                h(b"absent", None),
            ]
        );
        // What the sidecar sends a batch item as is what an answer may give back.
        let sent = super::super::record_headers::json(&out[0].headers);
        let echoed = format!(r#"{{"produce": [{{"topic": "audit", "headers": {sent}}}]}}"#);
        assert_eq!(
            outputs(echoed.as_bytes(), &allowed()).unwrap()[0].headers[..5],
            out[0].headers[..5]
        );
        for (bad, why) in [
            (r#"[{"value": "v"}]"#, "headers[0] has no `name`"),
            (r#"[{"name": "a", "value": 1}]"#, "`value` is not a string"),
            (r#"[{"name": "a", "vlaue": "v"}]"#, "unknown field `vlaue`"),
            (r#"[{"name": "a", "value_base64": "%%"}]"#, "not base64"),
        ] {
            let body = format!(r#"{{"produce": [{{"topic": "audit", "headers": {bad}}}]}}"#);
            let error = outputs(body.as_bytes(), &allowed()).unwrap_err();
            assert!(error.message().contains(why), "{bad}: {}", error.message());
        }
    }

    #[test]
    fn a_string_value_is_written_as_its_json_text() {
        let out = outputs(
            br#"{"produce": [{"topic": "audit", "value": "hi"}]}"#,
            &allowed(),
        )
        .unwrap();
        assert_eq!(out[0].value.as_deref(), Some(&b"\"hi\""[..]));
    }

    #[test]
    fn an_invalid_answer_is_a_permanent_failure_that_says_why() {
        let cases: [(&[u8], &str); 13] = [
            (b"ok", "is not JSON"),
            (b"[]", "is JSON but not an object (`[]`)"),
            (b"\"done\"", "not an object"),
            (b"42", "not an object"),
            (b"null", "not an object"),
            (br#"{"produce": {}}"#, "not an array"),
            (
                br#"{"produce": [{"topic": "payments", "value": 1}]}"#,
                "\"payments\" is not one of --output-topics (invoices, audit)",
            ),
            (br#"{"produce": [{"value": 1}]}"#, "`topic` is missing"),
            (
                br#"{"produce": [{"topic": "audit", "vlaue": 1}]}"#,
                "unknown field `vlaue`",
            ),
            (
                br#"{"produce": [{"topic": "audit", "key": 7}]}"#,
                "`key` is not a string",
            ),
            (
                br#"{"produce": [{"topic": "audit", "value": 1, "value_base64": "AA=="}]}"#,
                "both",
            ),
            (
                br#"{"produce": [{"topic": "audit", "value_base64": "%%"}]}"#,
                "not base64",
            ),
            (
                br#"{"produce": [{"topic": "audit", "headers": {"h": 1}}]}"#,
                "header \"h\" is not a string",
            ),
        ];
        for (body, why) in cases {
            let error = outputs(body, &allowed()).unwrap_err();
            assert_eq!(error.kind(), FailureKind::Permanent);
            assert!(
                error.message().contains(why),
                "{}: {}",
                String::from_utf8_lossy(body),
                error.message()
            );
        }
        let error = outputs(br#"{"produce": [{"topic": "audit"}, 3]}"#, &allowed()).unwrap_err();
        assert!(
            error.message().contains("produce[1]"),
            "{}",
            error.message()
        );
    }
}
