//! Trace context from producer to handler and exporter (feature `otel`): a record's W3C
//! `traceparent` is the parent of its handler span, read back with an in-process exporter;
//! and `kafka-dlq run --otlp-endpoint` exports that span over OTLP/HTTP to a loopback
//! receiver.
#![cfg(feature = "otel")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt as _;

const WAIT: Duration = Duration::from_secs(60);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Keeps every exported span.
#[derive(Debug, Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Spans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

fn traced(partition: i32, value: &str) -> Out {
    Out {
        headers: vec![(
            b"traceparent".to_vec(),
            Some(TRACEPARENT.as_bytes().to_vec()),
        )],
        ..Out::new(partition, value)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_span_is_a_child_of_the_records_traceparent() {
    let spans = Spans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let brokers = brokers();
    let topic = unique("traced");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![traced(0, "ok-1"), Out::new(0, "ok-2")],
    )
    .await;
    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        trace_records: true,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-2") == 1).await);
    running.stop().await;
    provider.force_flush().unwrap();

    let spans = spans.0.lock().unwrap().clone();
    let handle: Vec<&SpanData> = spans.iter().filter(|s| s.name == "handle").collect();
    assert_eq!(handle.len(), 2, "a span per handler call: {spans:#?}");
    let child = handle
        .iter()
        .find(|s| s.span_context.trace_id().to_string() == TRACE_ID)
        .expect("the traced record's span is in the producer's trace");
    assert_eq!(child.parent_span_id.to_string(), PARENT_ID);
    assert!(child.parent_span_is_remote);
    let offset = child
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "offset")
        .map(|kv| kv.value.to_string());
    assert_eq!(offset.as_deref(), Some("0"));
    let root = handle
        .iter()
        .find(|s| s.span_context.trace_id().to_string() != TRACE_ID)
        .unwrap();
    assert_eq!(
        root.parent_span_id,
        opentelemetry::trace::SpanId::INVALID,
        "a record without trace context starts a trace of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exports_the_handler_span_over_otlp_http() {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    use axum::routing::post;

    type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
    let received: Received = Arc::default();
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let kind = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push((kind, body.to_vec()));
                ""
            }
        }),
    );
    let endpoint = format!("http://{}/v1/traces", serve_on_loopback(app).await);
    let target_app = axum::Router::new().route("/events", post(|| async { "ok" }));
    let target_url = format!("http://{}/events", serve_on_loopback(target_app).await);

    let brokers = brokers();
    let topic = unique("otlp");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(&brokers, &topic, vec![traced(0, "ok-1")]).await;
    let mut child = sidecar_command(&brokers, &group, &topic, &target_url)
        .args(["--otlp-endpoint", &endpoint])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&1))
        .await,
        "the record is handled"
    );
    // SIGTERM: a clean exit flushes the batch of spans.
    let status = terminate(&mut child).await;
    assert!(status.success(), "{status}");
    assert!(
        eventually(Duration::from_secs(10), || !received
            .lock()
            .unwrap()
            .is_empty())
        .await
    );
    let received = received.lock().unwrap().clone();
    let (kind, body) = &received[0];
    assert_eq!(kind, "application/x-protobuf");
    let trace_id: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&TRACE_ID[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(
        body.windows(16).any(|w| w == trace_id.as_slice()),
        "the exported span is in the producer's trace"
    );
    assert!(
        body.windows(6).any(|w| w == b"handle"),
        "the span is the handler call's"
    );
}
