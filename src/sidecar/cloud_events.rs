//! CloudEvents on their way from Kafka to HTTP: a record in the Kafka protocol binding's
//! **binary mode** (`ce_specversion`, `ce_id`, `ce_type`, … headers, the data as the value)
//! reaches the target in the HTTP binding's binary mode — each `ce_<name>` header as
//! `ce-<name>`, its value percent-encoded where HTTP needs it (the binding's rule: bytes
//! outside printable ASCII, `"` and `%`), and the record's `content-type` header as the
//! request's `Content-Type`. A record in **structured mode** (`content-type:
//! application/cloudevents+json`, the whole event as the value) goes as it is, with that
//! content type. Pure: headers in, HTTP headers out.

use crate::record::RecordHeader;

/// The Kafka binding's prefix of a CloudEvents attribute header.
const KAFKA_PREFIX: &str = "ce_";
/// The header holding the event's content type in both bindings' Kafka form.
const CONTENT_TYPE: &str = "content-type";

/// What a record that is a CloudEvent adds to its request: the `ce-*` HTTP headers (binary
/// mode) and the `Content-Type` to send in place of `--content-type`. `None` for a record that
/// is not a CloudEvent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpEvent {
    /// `(ce-<name>, value)`, in the record's order.
    pub headers: Vec<(String, String)>,
    /// The record's `content-type`, when it has one.
    pub content_type: Option<String>,
}

/// The HTTP form of `headers`' CloudEvent: binary mode when they carry `ce_specversion`,
/// structured mode when `content-type` is `application/cloudevents…`; `None` otherwise.
pub fn http_event(headers: &[RecordHeader]) -> Option<HttpEvent> {
    let content_type = headers
        .iter()
        .rev()
        .find(|h| h.key == CONTENT_TYPE.as_bytes())
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_string);
    let binary = headers
        .iter()
        .any(|h| h.key == format!("{KAFKA_PREFIX}specversion").as_bytes());
    let structured = content_type
        .as_deref()
        .is_some_and(|t| t.trim_start().starts_with("application/cloudevents"));
    if !binary && !structured {
        return None;
    }
    let headers = if binary {
        headers
            .iter()
            .filter_map(|h| {
                let name = std::str::from_utf8(&h.key)
                    .ok()?
                    .strip_prefix(KAFKA_PREFIX)?;
                let valid_name = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
                valid_name.then(|| {
                    (
                        format!("ce-{name}"),
                        encode(h.value.as_deref().unwrap_or_default()),
                    )
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    Some(HttpEvent {
        headers,
        content_type,
    })
}

/// The HTTP binding's encoding of an attribute value: printable ASCII but `"` and `%` as it
/// is, every other byte (of its UTF-8) as `%XX`.
fn encode(value: &[u8]) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(key: &str, value: &str) -> RecordHeader {
        RecordHeader {
            key: key.as_bytes().to_vec(),
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_binary_mode_event_becomes_ce_headers_and_its_content_type() {
        let event = http_event(&[
            h("ce_specversion", "1.0"),
            h("ce_id", "A234-1234"),
            h("ce_type", "com.example.order.créée"),
            h("ce_source", "/orders \"eu\" 100%"),
            h("content-type", "application/json"),
            h("tenant", "acme"),
            h("ce_Bad-Name", "x"),
        ])
        .unwrap();
        assert_eq!(
            event.headers,
            vec![
                ("ce-specversion".to_string(), "1.0".to_string()),
                ("ce-id".to_string(), "A234-1234".to_string()),
                (
                    "ce-type".to_string(),
                    "com.example.order.cr%C3%A9%C3%A9e".to_string()
                ),
                (
                    "ce-source".to_string(),
                    "/orders %22eu%22 100%25".to_string()
                ),
            ],
            "attribute names are lower-case letters and digits: others are not attributes"
        );
        assert_eq!(event.content_type.as_deref(), Some("application/json"));
    }

    #[test]
    fn a_structured_event_keeps_its_content_type_and_a_plain_record_is_none() {
        let event = http_event(&[h(
            "content-type",
            "application/cloudevents+json; charset=utf-8",
        )])
        .unwrap();
        assert!(event.headers.is_empty());
        assert_eq!(
            event.content_type.as_deref(),
            Some("application/cloudevents+json; charset=utf-8")
        );
        assert_eq!(http_event(&[h("content-type", "application/json")]), None);
        assert_eq!(http_event(&[h("tenant", "acme")]), None);
    }
}
