//! W3C Trace Context carried by a record: the `traceparent` and `tracestate` headers that
//! instrumented producers set. The sidecar passes them on to its target, and a dead letter's
//! envelope keeps the trace id, so an operator can go from a dead letter to its trace.

use super::{Record, RecordHeader};

/// The `traceparent` header's name.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header's name.
pub const TRACESTATE: &str = "tracestate";

/// A record's trace context (W3C Trace Context, version `00`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The `traceparent` header as it came, e.g.
    /// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.
    pub traceparent: String,
    /// The trace id: 32 lower-case hex digits, not all zero.
    pub trace_id: String,
    /// The producer's span id: 16 lower-case hex digits, not all zero.
    pub parent_id: String,
    /// Whether the producer sampled the trace (flag `01`).
    pub sampled: bool,
    /// The `tracestate` header, when the record has one (vendor data, passed on as it is).
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The trace context of the current `tracing` span, when an OpenTelemetry layer records it
    /// and it is valid (feature `otel`): what a dead letter written in a `send` span carries.
    #[cfg(feature = "otel")]
    pub fn current() -> Option<TraceContext> {
        use opentelemetry::propagation::TextMapPropagator;
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = tracing::Span::current().context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = std::collections::HashMap::new();
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(&cx, &mut carrier);
        TraceContext::parse(
            carrier.get(TRACEPARENT)?,
            carrier.get(TRACESTATE).map(String::as_str),
        )
    }

    /// Parses a `traceparent` value; `None` when it is not a valid one (W3C Trace Context:
    /// `version-trace_id-parent_id-flags` in lower-case hex, version not `ff`, ids not all
    /// zero; a version above `00` may carry more fields after the flags).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let value = traceparent.trim();
        let mut parts = value.split('-');
        let version = parts.next()?;
        let trace_id = parts.next()?;
        let parent_id = parts.next()?;
        let flags = parts.next()?;
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || version == "ff" || !hex(trace_id, 32) || !hex(parent_id, 16) {
            return None;
        }
        if !hex(flags, 2) || (version == "00" && parts.next().is_some()) {
            return None;
        }
        if trace_id.bytes().all(|b| b == b'0') || parent_id.bytes().all(|b| b == b'0') {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceContext {
            traceparent: value.to_string(),
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            sampled: flags & 1 == 1,
            tracestate: tracestate.map(str::to_string),
        })
    }

    /// The trace context in `headers` (the first `traceparent` and `tracestate`); `None`
    /// without a valid `traceparent`.
    pub fn from_headers(headers: &[RecordHeader]) -> Option<TraceContext> {
        let text = |name: &str| {
            headers
                .iter()
                .find(|h| h.key.eq_ignore_ascii_case(name.as_bytes()))
                .and_then(|h| h.value.as_deref())
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        TraceContext::parse(text(TRACEPARENT)?, text(TRACESTATE))
    }
}

impl Record {
    /// The record's trace context, from its `traceparent` and `tracestate` headers.
    pub fn trace_context(&self) -> Option<TraceContext> {
        TraceContext::from_headers(&self.headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_the_w3c_example() {
        let t = TraceContext::parse(EXAMPLE, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, "00f067aa0ba902b7");
        assert!(t.sampled);
        assert_eq!(t.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    }

    #[test]
    fn refuses_what_the_spec_refuses() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad:?}");
        }
        assert!(
            TraceContext::parse(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-later",
                None
            )
            .is_some_and(|t| !t.sampled),
            "a later version may add fields"
        );
    }

    #[test]
    fn is_read_from_a_records_headers() {
        let headers = vec![
            RecordHeader {
                key: b"Traceparent".to_vec(),
                value: Some(EXAMPLE.as_bytes().to_vec()),
            },
            RecordHeader {
                key: b"tracestate".to_vec(),
                value: Some(b"a=1".to_vec()),
            },
        ];
        let t = TraceContext::from_headers(&headers).unwrap();
        assert_eq!(t.traceparent, EXAMPLE);
        assert_eq!(t.tracestate.as_deref(), Some("a=1"));
        assert_eq!(TraceContext::from_headers(&[]), None);
    }
}
