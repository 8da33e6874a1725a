//! The spans a record's settling runs in. Always a `record` span for the log lines about a
//! failing record; with `trace_records` on, spans in OpenTelemetry's messaging semantic
//! conventions (v1.44), which a `tracing-opentelemetry` layer exports as they are named:
//!
//! - a CONSUMER span `process {topic}` per record (or per batch call), a child of the record's
//!   W3C trace context (feature `otel`), with `messaging.system`, `messaging.operation.name`
//!   and `.type` (`process`), `messaging.destination.name`, `messaging.consumer.group.name`,
//!   `messaging.destination.partition.id`, `messaging.kafka.offset`, `messaging.message.id`,
//!   `messaging.kafka.message.key` (a UTF-8 key), `messaging.kafka.message.tombstone` (only when
//!   it is one) and, when the record leaves unhandled, `error.type` (its dead-letter kind) with
//!   an error status;
//! - an INTERNAL span `handle` per handler call inside it, `error.type` (`transient`,
//!   `permanent`) when the call fails;
//! - a PRODUCER span `send {topic}` per dead-letter or retry-topic write, a child of the
//!   process span; the dead letter carries its trace context in its `traceparent` header.
//!
//! `OTEL_SEMCONV_STABILITY_OPT_IN` (comma-separated) with `messaging/dup` also gives the
//! spans the fields they had before the conventions (`topic`, `partition`, `offset`, `id`), for
//! queries written against them; `messaging` (or nothing) gives the conventions alone.

use crate::record::Record;

/// How the spans of a consumer's records are made: `None` in [`super::Caller`] when
/// `trace_records` is off.
#[derive(Debug, Clone)]
pub(crate) struct Spans {
    group: String,
    /// The fields of before the conventions too (`messaging/dup`).
    legacy: bool,
}

impl Spans {
    /// The spans of `group`'s records, reading `OTEL_SEMCONV_STABILITY_OPT_IN`.
    pub(crate) fn new(group: &str) -> Self {
        let opt_in = std::env::var("OTEL_SEMCONV_STABILITY_OPT_IN").unwrap_or_default();
        Self::with_opt_in(group, &opt_in)
    }

    fn with_opt_in(group: &str, opt_in: &str) -> Self {
        Self {
            group: group.to_string(),
            legacy: opt_in.split(',').any(|o| o.trim() == "messaging/dup"),
        }
    }

    /// The CONSUMER span `process {topic}` of `records` (one, or a batch call's), a child of
    /// the first record's trace context.
    pub(crate) fn process(&self, records: &[Record]) -> tracing::Span {
        let first = &records[0];
        let span = tracing::info_span!(
            "process",
            otel.name = %format_args!("process {}", first.topic),
            otel.kind = "consumer",
            otel.status_code = tracing::field::Empty,
            messaging.system = "kafka",
            messaging.operation.name = "process",
            messaging.operation.type = "process",
            messaging.destination.name = %first.topic,
            messaging.consumer.group.name = %self.group,
            messaging.destination.partition.id = %first.partition,
            messaging.kafka.offset = first.offset,
            messaging.message.id = %first.id,
            messaging.kafka.message.key = tracing::field::Empty,
            messaging.kafka.message.tombstone = tracing::field::Empty,
            messaging.batch.message_count = tracing::field::Empty,
            error.type = tracing::field::Empty,
            delivery = tracing::field::Empty,
            topic = tracing::field::Empty,
            partition = tracing::field::Empty,
            offset = tracing::field::Empty,
            id = tracing::field::Empty,
        );
        if records.len() > 1 {
            span.record("messaging.batch.message_count", records.len());
        } else {
            if let Some(key) = first
                .key
                .as_deref()
                .and_then(|k| std::str::from_utf8(k).ok())
            {
                span.record("messaging.kafka.message.key", key);
            }
            if first.payload.is_none() {
                span.record("messaging.kafka.message.tombstone", true);
            }
        }
        if let Some(delivery) = first.delivery_count {
            span.record("delivery", delivery);
        }
        if self.legacy {
            span.record("topic", first.topic.as_str());
            span.record("partition", first.partition);
            span.record("offset", first.offset);
            span.record("id", first.id.as_str());
        }
        #[cfg(feature = "otel")]
        if let Some(trace) = first.trace_context() {
            crate::telemetry::set_parent(&span, &trace);
        }
        span
    }

    /// The INTERNAL span of one handler call of `records`, inside their process span.
    pub(crate) fn handle(&self, records: &[Record]) -> tracing::Span {
        tracing::info_span!(
            "handle",
            otel.kind = "internal",
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
            records = records.len(),
        )
    }
}

/// Marks `span` failed with `error_type` (a low-cardinality class: the failure kind).
pub(crate) fn failed(span: &tracing::Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
}

/// The span of one record's settling, which its retries and its exit's write run in: every
/// line about the record carries its topic, partition, offset, id and key (and a share group's
/// record its delivery). With `spans`, the record's `process` span ([`Spans::process`]).
pub(crate) fn record_span(record: &Record, spans: Option<&Spans>) -> tracing::Span {
    if let Some(spans) = spans {
        return spans.process(std::slice::from_ref(record));
    }
    let span = tracing::info_span!(
        "record",
        topic = %record.topic,
        partition = record.partition,
        offset = record.offset,
        id = %record.id,
        key = %record.key_for_logs(),
        delivery = tracing::field::Empty,
    );
    if let Some(delivery) = record.delivery_count {
        span.record("delivery", delivery);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_fields_come_only_with_messaging_dup() {
        assert!(!Spans::with_opt_in("g", "").legacy);
        assert!(!Spans::with_opt_in("g", "messaging").legacy);
        assert!(Spans::with_opt_in("g", "http, messaging/dup").legacy);
    }
}
