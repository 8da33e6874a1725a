//! OpenTelemetry (feature `otel`): the parent of a handled record's span is the record's W3C
//! trace context, and the sidecar exports its spans over OTLP/HTTP.
//!
//! With [`ConsumerConfig::trace_records`](crate::ConsumerConfig) on, every record runs in a
//! `process` span of OpenTelemetry's messaging conventions (the consumer's `settle::spans`).
//! With this feature, a record with a valid `traceparent` makes that span a child of the
//! producer's span, so a subscriber with a `tracing-opentelemetry` layer exports it into the
//! producer's trace (a batch call takes the first record's context), and a dead letter
//! carries the trace context of the span that wrote it
//! ([`TraceContext::current`](crate::record::TraceContext::current)). [`otlp_provider`] builds the
//! exporter `kafka-dlq run --otlp-endpoint` uses; a library user installs their own layer.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::record::{TraceContext, TRACEPARENT, TRACESTATE};

/// The OpenTelemetry context that `trace` stands for: a remote parent.
pub fn parent(trace: &TraceContext) -> opentelemetry::Context {
    let mut carrier = HashMap::new();
    carrier.insert(TRACEPARENT.to_string(), trace.traceparent.clone());
    if let Some(state) = &trace.tracestate {
        carrier.insert(TRACESTATE.to_string(), state.clone());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// Makes `span` a child of `trace`'s remote span, when the subscriber has an OpenTelemetry
/// layer (otherwise nothing happens).
pub fn set_parent(span: &tracing::Span, trace: &TraceContext) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let _ = span.set_parent(parent(trace));
}

/// A tracer provider that exports spans in batches over OTLP/HTTP (protobuf) to `endpoint`,
/// the full URL (`http://collector:4318/v1/traces`), as service `service_name`.
pub fn otlp_provider(
    endpoint: &str,
    service_name: &str,
) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service_name.to_string())
                .build(),
        )
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn the_parent_is_the_producers_span() {
        let trace = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        let cx = parent(&trace);
        let span = cx.span();
        let remote = span.span_context();
        assert!(remote.is_remote() && remote.is_sampled());
        assert_eq!(
            remote.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(remote.span_id().to_string(), "00f067aa0ba902b7");
    }
}
