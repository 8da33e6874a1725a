//! Trace context from producer to handler and exporter (feature `otel`): a record's W3C
//! `traceparent` is the parent of its `process` span (OpenTelemetry's messaging conventions),
//! read back with an in-process exporter; `kafka-dlq run --otlp-endpoint` exports its spans
//! over OTLP/HTTP; and Jaeger, a real OTLP backend, shows a record from consume to dead letter
//! to replay through its query API.
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
    // A CONSUMER `process {topic}` span per record, its handler call an INTERNAL child.
    let name = format!("process {topic}");
    let process: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(process.len(), 2, "a process span per record: {spans:#?}");
    let child = process
        .iter()
        .find(|s| s.span_context.trace_id().to_string() == TRACE_ID)
        .expect("the traced record's span is in the producer's trace");
    assert_eq!(child.parent_span_id.to_string(), PARENT_ID);
    assert!(child.parent_span_is_remote);
    assert_eq!(child.span_kind, opentelemetry::trace::SpanKind::Consumer);
    let attribute = |span: &SpanData, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(
        attribute(child, "messaging.kafka.offset").as_deref(),
        Some("0")
    );
    assert_eq!(
        attribute(child, "messaging.system").as_deref(),
        Some("kafka")
    );
    assert_eq!(
        attribute(child, "messaging.destination.name"),
        Some(topic.clone())
    );
    let handle: Vec<&SpanData> = spans.iter().filter(|s| s.name == "handle").collect();
    assert_eq!(handle.len(), 2, "a span per handler call: {spans:#?}");
    assert!(handle
        .iter()
        .any(|h| h.parent_span_id == child.span_context.span_id()));
    let root = process
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
    assert!(received
        .iter()
        .all(|(kind, _)| kind == "application/x-protobuf"));
    let body: Vec<u8> = received.iter().flat_map(|(_, b)| b.clone()).collect();
    let trace_id: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&TRACE_ID[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(
        body.windows(16).any(|w| w == trace_id.as_slice()),
        "the exported span is in the producer's trace"
    );
    assert!(
        body.windows(6).any(|w| w == b"handle"),
        "the handler call's span"
    );
    let process = format!("process {topic}");
    assert!(
        body.windows(process.len()).any(|w| w == process.as_bytes()),
        "the record's process span"
    );
}

/// Jaeger v2 (`JAEGER_BIN`, which ./scripts/test.sh builds from the Go module proxy) on
/// loopback with in-memory storage: its OTLP/HTTP receiver and its query API.
struct Jaeger {
    child: std::process::Child,
    otlp: String,
    query: String,
    _dir: tempfile::TempDir,
}

impl Jaeger {
    fn start() -> Jaeger {
        let bin = std::env::var("JAEGER_BIN").unwrap_or_else(|_| "jaeger".into());
        // All three held bound until chosen, so the system cannot hand one out twice.
        let held: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let port = |i: usize| held[i].local_addr().unwrap().port();
        let (otlp, http, grpc) = (port(0), port(1), port(2));
        drop(held);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("jaeger.yaml");
        std::fs::write(
            &config,
            format!(
                "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {{receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}}
  telemetry: {{metrics: {{level: none}}, logs: {{level: warn}}}}
extensions:
  jaeger_query:
    storage: {{traces: store}}
    http: {{endpoint: 127.0.0.1:{http}}}
    grpc: {{endpoint: 127.0.0.1:{grpc}}}
  jaeger_storage:
    backends: {{store: {{memory: {{max_traces: 10000}}}}}}
receivers:
  otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:{otlp}}}}}}}
processors:
  batch: {{timeout: 100ms}}
exporters:
  jaeger_storage_exporter: {{trace_storage: store}}
"
            ),
        )
        .unwrap();
        let child = std::process::Command::new(&bin)
            .arg(format!("--config=file:{}", config.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("jaeger.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e}; run ./scripts/test.sh, which builds Jaeger"));
        Jaeger {
            child,
            otlp: format!("http://127.0.0.1:{otlp}/v1/traces"),
            query: format!("http://127.0.0.1:{http}"),
            _dir: dir,
        }
    }

    /// The spans of trace `id` as Jaeger's query API answers them (`GET /api/traces/{id}`).
    async fn spans(&self, id: &str) -> Vec<serde_json::Value> {
        let url = format!("{}/api/traces/{id}", self.query);
        let Ok(answer) = reqwest::get(&url).await else {
            return Vec::new();
        };
        let text = answer.text().await.unwrap_or_default();
        let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        body["data"][0]["spans"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A span's tag, as Jaeger shows it.
fn tag(span: &serde_json::Value, key: &str) -> Option<serde_json::Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| t["value"].clone())
}

/// The spans of `spans` named `name`.
fn named<'a>(spans: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    spans
        .iter()
        .filter(|s| s["operationName"] == name)
        .collect()
}

/// Its parent's span id.
fn parent(span: &serde_json::Value) -> Option<String> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jaeger_shows_a_record_from_consume_to_dead_letter_to_replay() {
    use axum::routing::post;
    let jaeger = Jaeger::start();
    // The service: rejects `perm…` (400, dead-lettered at once) until it is "fixed".
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let is_fixed = fixed.clone();
    let target = axum::Router::new().route(
        "/events",
        post(move |body: axum::body::Bytes| {
            let fixed = is_fixed.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                if body.starts_with(b"perm") && !fixed {
                    axum::http::StatusCode::BAD_REQUEST
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let target_url = format!("http://{}/events", serve_on_loopback(target).await);

    let brokers = brokers();
    let topic = unique("jaeger");
    let group = unique("g");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlt, 1).await;
    produce(
        &brokers,
        &topic,
        vec![traced(0, "perm-1"), Out::new(0, "ok-2")],
    )
    .await;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sidecar = |opt_in: &str| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"));
        command
            .arg("run")
            .args([
                "--brokers",
                &brokers,
                "--group-id",
                &group,
                "--topics",
                &topic,
            ])
            .args(["--target-url", &target_url])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--otlp-endpoint", &jaeger.otlp])
            .env("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        command.spawn().unwrap()
    };

    // Consumed, rejected, dead-lettered.
    let mut first = sidecar("");
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await,
        "both records settled"
    );
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(terminate(&mut first).await.success());
    // OpenTelemetry's messaging metrics beside ours.
    let line = |name: &str, label: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains(label))
            .unwrap_or_else(|| panic!("no {name} with {label}:\n{metrics}"))
            .to_string()
    };
    assert!(line("messaging_client_consumed_messages_total", &topic).ends_with(" 2"));
    assert!(line(
        "messaging_process_duration_seconds_count",
        "error_type=\"permanent\""
    )
    .ends_with(" 1"));

    let dead = read_all(&brokers, &dlt);
    assert_eq!(dead.len(), 1);
    let spans = {
        let mut spans = Vec::new();
        for _ in 0..100 {
            spans = jaeger.spans(TRACE_ID).await;
            if named(&spans, &format!("send {dlt}")).len() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        spans
    };
    // The record's CONSUMER span, a child of the producer's, in the conventions.
    let process = named(&spans, &format!("process {topic}"));
    assert_eq!(process.len(), 1, "{spans:#?}");
    let process = process[0];
    assert_eq!(parent(process).as_deref(), Some(PARENT_ID));
    for (key, value) in [
        ("span.kind", serde_json::json!("consumer")),
        ("messaging.system", serde_json::json!("kafka")),
        ("messaging.operation.name", serde_json::json!("process")),
        ("messaging.operation.type", serde_json::json!("process")),
        ("messaging.destination.name", serde_json::json!(topic)),
        ("messaging.consumer.group.name", serde_json::json!(group)),
        ("messaging.destination.partition.id", serde_json::json!("0")),
        ("messaging.kafka.offset", serde_json::json!(0)),
        (
            "messaging.message.id",
            serde_json::json!(format!("{topic}-0-0")),
        ),
        ("error.type", serde_json::json!("permanent")),
        ("otel.status_code", serde_json::json!("ERROR")),
    ] {
        assert_eq!(tag(process, key), Some(value), "{key}: {process:#}");
    }
    assert_eq!(
        tag(process, "topic"),
        None,
        "no old fields without messaging/dup"
    );
    // Its handler call, and the PRODUCER span of its dead letter.
    let handle = named(&spans, "handle");
    assert_eq!(handle.len(), 1, "{spans:#?}");
    assert_eq!(
        parent(handle[0]),
        process["spanID"].as_str().map(str::to_string)
    );
    assert_eq!(
        tag(handle[0], "error.type"),
        Some(serde_json::json!("permanent"))
    );
    let send = named(&spans, &format!("send {dlt}"))[0];
    assert_eq!(parent(send), process["spanID"].as_str().map(str::to_string));
    assert_eq!(tag(send, "span.kind"), Some(serde_json::json!("producer")));
    assert_eq!(
        tag(send, "messaging.destination.name"),
        Some(serde_json::json!(dlt))
    );
    assert_eq!(
        tag(send, "messaging.kafka.offset"),
        Some(serde_json::json!(0))
    );
    // The dead letter carries the send span's trace context.
    let headers =
        kafka_dlq::RecordHeader::read_all(rdkafka::message::Message::headers(&dead[0]).unwrap());
    let traceparent = headers
        .iter()
        .find(|h| h.key == b"traceparent")
        .and_then(|h| h.value.clone())
        .map(|v| String::from_utf8(v).unwrap())
        .expect("the dead letter's traceparent");
    assert_eq!(
        traceparent,
        format!("00-{TRACE_ID}-{}-01", send["spanID"].as_str().unwrap())
    );

    // Fixed, replayed: handled again in the same trace (old fields asked for too).
    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, out, err) = replay_cli(&brokers, &dlt, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let mut second = sidecar("messaging/dup");
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &redrive, 1).get(&0)
            == Some(&1))
        .await,
        "the replayed dead letter is handled"
    );
    assert!(terminate(&mut second).await.success());
    let first_id = process["spanID"].clone();
    let mut again = Vec::new();
    for _ in 0..100 {
        let spans = jaeger.spans(TRACE_ID).await;
        // The redriven record is handled as its original record (the redrive topic is how it
        // came back, not what it is).
        again = named(&spans, &format!("process {topic}"))
            .into_iter()
            .filter(|s| s["spanID"] != first_id)
            .cloned()
            .collect();
        if !again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(again.len(), 1, "the replay continues the producer's trace");
    assert_eq!(parent(&again[0]).as_deref(), Some(PARENT_ID));
    assert_eq!(tag(&again[0], "error.type"), None, "handled this time");
    assert_eq!(
        tag(&again[0], "topic"),
        Some(serde_json::json!(topic)),
        "messaging/dup"
    );
}
