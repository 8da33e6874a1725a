//! The `kafka-dlq run` binary against a real broker and a real HTTP target on loopback.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Default)]
struct Target {
    requests: Arc<Mutex<Vec<(HeaderMap, String)>>>,
}

impl Target {
    fn count(&self, body: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, b)| b == body)
            .count()
    }
}

/// `ok…` → 200, `bad…` → 400, `busy…` → 503 twice then 200, `down…` → 503 always.
async fn answer(State(target): State<Target>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let body = String::from_utf8_lossy(&body).to_string();
    let seen = {
        let mut requests = target.requests.lock().unwrap();
        requests.push((headers, body.clone()));
        requests.iter().filter(|(_, b)| *b == body).count()
    };
    if body.starts_with("bad") {
        StatusCode::BAD_REQUEST
    } else if body.starts_with("down") || (body.starts_with("busy") && seen <= 2) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn serve(target: Target) -> String {
    let app = Router::new()
        .route("/events", post(answer))
        .with_state(target);
    let addr = serve_on_loopback(app).await;
    format!("http://{addr}/events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_delivers_over_http_classifies_answers_and_exits_cleanly_on_sigterm() {
    let brokers = brokers();
    let topic = unique("sidecar");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let mut keyed = Out::new(0, "ok-1");
    keyed.key = Some(b"parcel-1".to_vec());
    // An instrumented producer's trace context (W3C Trace Context's example).
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = Out::new(1, "bad-3");
    traced.headers = vec![
        (
            b"traceparent".to_vec(),
            Some(TRACEPARENT.as_bytes().to_vec()),
        ),
        (b"tracestate".to_vec(), Some(b"congo=t61rcWkgMzE".to_vec())),
    ];
    produce(
        &brokers,
        &topic,
        vec![
            keyed,
            Out::new(0, "busy-2"),
            traced,
            Out::new(1, "down-4"),
            Out::new(1, "ok-5"),
        ],
    )
    .await;
    let target = Target::default();
    let url = serve(target.clone()).await;

    let log_path = std::env::temp_dir().join(format!("{group}.log"));
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .arg("run")
        .args([
            "--group-id",
            &group,
            "--topics",
            &topic,
            "--target-url",
            &url,
        ])
        .args([
            "--max-retries",
            "2",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "50",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("KAFKA_BROKERS", &brokers)
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let delivered = eventually(WAIT, || {
        target.count("ok-5") == 1 && target.count("busy-2") == 3
    })
    .await;
    assert!(delivered, "requests: {:?}", target.requests.lock().unwrap());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 2), (1, 3)]))
        .await
    );
    let status = terminate(&mut child).await;
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    assert_eq!(status.code(), Some(0), "clean exit; logs:\n{logs}");
    assert!(logs.contains("shutdown_complete"));

    assert_eq!(target.count("ok-1"), 1);
    assert_eq!(target.count("bad-3"), 1, "4xx is permanent: one attempt");
    assert_eq!(
        target.count("down-4"),
        3,
        "5xx is transient: 1 + max_retries attempts"
    );
    let requests = target.requests.lock().unwrap().clone();
    let (headers, _) = requests.iter().find(|(_, b)| b == "ok-1").unwrap();
    assert_eq!(headers["x-kafka-topic"], topic.as_str());
    assert_eq!(headers["x-kafka-partition"], "0");
    assert_eq!(headers["x-kafka-offset"], "0");
    assert_eq!(headers["x-kafka-key"], "parcel-1");
    assert_eq!(headers["x-record-id"], format!("{topic}-0-0").as_str());
    assert!(
        headers.get("traceparent").is_none(),
        "no trace context, no header"
    );
    let (headers, _) = requests.iter().find(|(_, b)| b == "bad-3").unwrap();
    assert_eq!(
        headers["traceparent"], TRACEPARENT,
        "passed on to the target"
    );
    assert_eq!(headers["tracestate"], "congo=t61rcWkgMzE");

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    let envelopes: Vec<Envelope> = dlq
        .iter()
        .map(|m| Envelope::from_slice(m.payload().unwrap()).unwrap())
        .collect();
    assert_eq!(envelopes.len(), 2);
    let bad = envelopes.iter().find(|e| e.source.offset == 0).unwrap();
    assert_eq!(bad.error.kind, kafka_dlq::DeadLetterKind::Permanent);
    assert_eq!(bad.error.message, "target answered HTTP 400");
    assert_eq!(
        bad.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736"),
        "the dead letter leads back to its trace"
    );
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &format!("{topic}-dlt"),
        &bad.id,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        shown.contains("\"trace_id\": \"4bf92f3577b34da6a3ce929d0e0e4736\""),
        "{shown}"
    );
    let down = envelopes.iter().find(|e| e.source.offset == 1).unwrap();
    assert_eq!(down.error.kind, kafka_dlq::DeadLetterKind::RetriesExhausted);
    assert_eq!(down.error.attempts, 3);

    // Every line about a record carries topic, partition, offset, id and key.
    let line = logs
        .lines()
        .find(|l| l.contains("record_dead_lettered"))
        .expect("a dead-letter log line");
    let json: serde_json::Value = serde_json::from_str(line).unwrap();
    let span = &json["span"];
    assert_eq!(span["topic"], topic.as_str());
    for field in ["partition", "offset", "id", "key"] {
        assert!(!span[field].is_null(), "{field} missing in {line}");
    }
}

#[test]
fn run_rejects_bad_settings_naming_the_flag_and_value() {
    let cases: [(&[&str], &str); 4] = [
        (&["--brokers", "nohost"], "--brokers"),
        (&["--max-retries", "many"], "--max-retries"),
        (
            &["--backoff-initial-ms", "5000", "--backoff-max-ms", "10"],
            "--backoff-max-ms",
        ),
        (&["--target-url", "ftp://x"], "--target-url"),
    ];
    for (args, flag) in cases {
        let base = [
            ("--brokers", "localhost:9092"),
            ("--group-id", "g"),
            ("--topics", "t"),
            ("--target-url", "http://localhost:1/"),
        ];
        let mut full = vec!["run"];
        for (f, v) in base.iter().filter(|(f, _)| !args.contains(f)) {
            full.extend([*f, *v]);
        }
        full.extend_from_slice(args);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
            .args(&full)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        let value = args[args.len() - 1];
        assert!(
            stderr.contains(value),
            "{args:?} should name {value}: {stderr}"
        );
    }
}

/// Answers a batch: 400 when any record in it is `bad…`, else 200; records every array.
async fn answer_batch(State(target): State<Target>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let items: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array");
    let bad = items
        .iter()
        .any(|i| i["payload"].as_str().is_some_and(|p| p.starts_with("bad")));
    target
        .requests
        .lock()
        .unwrap()
        .push((headers, String::from_utf8_lossy(&body).to_string()));
    if bad {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_in_batch_mode_posts_json_arrays_and_isolates_the_bad_record() {
    let brokers = brokers();
    let topic = unique("sidecar-batch");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values: Vec<String> = (0..20)
        .map(|i| {
            if i == 13 {
                format!("bad-{i}")
            } else {
                format!("ok-{i}")
            }
        })
        .collect();
    // Record 0's key is not UTF-8, record 1's is text.
    let keys: [Option<Vec<u8>>; 2] = [Some(vec![0xff, 0x00, 0xfe]), Some(b"parcel-1".to_vec())];
    produce(
        &brokers,
        &topic,
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Out {
                key: keys.get(i).cloned().flatten(),
                ..Out::new(0, v)
            })
            .collect(),
    )
    .await;
    let target = Target::default();
    let app = Router::new()
        .route("/batch", post(answer_batch))
        .with_state(target.clone());
    let url = format!("http://{}/batch", serve_on_loopback(app).await);

    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args(["--batch-size", "10", "--batch-linger-ms", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&20))
        .await
    );
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));

    let requests = target.requests.lock().unwrap().clone();
    let (headers, first) = &requests[0];
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-kafka-first-offset"], "0");
    let first: Vec<serde_json::Value> = serde_json::from_str(first).unwrap();
    assert_eq!(first.len(), 10, "a full batch");
    assert_eq!(first[0]["id"], format!("{topic}-0-0").as_str());
    assert_eq!(first[0]["payload"], "ok-0");
    assert_eq!(first[0]["payload_encoding"], "utf8");
    assert_eq!(first[0]["key"], serde_json::Value::Null);
    assert_eq!(first[0]["key_base64"], "/wD+", "bytes, never mangled");
    assert_eq!(first[1]["key"], "parcel-1");
    assert!(first[1].get("key_base64").is_none());
    let offsets: Vec<i64> = first
        .iter()
        .map(|i| i["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>(), "ordered by offset");

    // Every good record was in exactly one accepted batch.
    let mut accepted: Vec<String> = requests
        .iter()
        .filter_map(|(_, body)| {
            let items: Vec<serde_json::Value> = serde_json::from_str(body).unwrap();
            let bad = items
                .iter()
                .any(|i| i["payload"].as_str().unwrap().starts_with("bad"));
            (!bad).then(|| {
                items
                    .iter()
                    .map(|i| i["payload"].as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            })
        })
        .flatten()
        .collect();
    accepted.sort();
    let mut good: Vec<String> = values
        .iter()
        .filter(|v| v.starts_with("ok"))
        .cloned()
        .collect();
    good.sort();
    assert_eq!(accepted, good);
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1);
    let env = Envelope::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(env.payload_bytes().unwrap(), Some(b"bad-13".to_vec()));
    assert_eq!(env.error.message, "target answered HTTP 400");
}

/// 301, 302 or 303 to `/elsewhere` by the record (`r301…`); `/elsewhere` answers 200 to any
/// method, as a misconfigured target would.
async fn redirect(
    State(target): State<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = String::from_utf8_lossy(&body).to_string();
    target
        .requests
        .lock()
        .unwrap()
        .push((headers, body.clone()));
    let status = match &body[..4.min(body.len())] {
        "r301" => StatusCode::MOVED_PERMANENTLY,
        "r302" => StatusCode::FOUND,
        _ => StatusCode::SEE_OTHER,
    };
    (status, [(axum::http::header::LOCATION, "/elsewhere")]).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_never_a_delivery() {
    let brokers = brokers();
    let topic = unique("redirect");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values = ["r301-a", "r302-b", "r303-c", "r301-d", "r302-e", "r303-f"];
    produce(
        &brokers,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    let target = Target::default();
    let elsewhere = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = elsewhere.clone();
    let app = Router::new()
        .route("/events", post(redirect))
        .route(
            "/elsewhere",
            axum::routing::any(move |method: axum::http::Method| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(method.to_string());
                    StatusCode::OK
                }
            }),
        )
        .with_state(target.clone());
    let addr = serve_on_loopback(app).await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["run", "--group-id", &group, "--topics", &topic])
        .args(["--target-url", &format!("http://{addr}/events")])
        .args([
            "--max-retries",
            "1",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "20",
        ])
        .args([
            "--breaker-failure-ratio",
            "0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .env("KAFKA_BROKERS", &brokers)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&6))
        .await,
        "requests: {:?}",
        target.requests.lock().unwrap()
    );
    child.kill().await.unwrap();
    assert!(
        elsewhere.lock().unwrap().is_empty(),
        "no redirect was followed: {:?}",
        elsewhere.lock().unwrap()
    );
    for v in values {
        assert_eq!(
            target.count(v),
            2,
            "{v}: 1 + max_retries POSTs, no delivery"
        );
    }
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(
        dlq.len(),
        6,
        "every redirected record is dead-lettered, none settled"
    );
    for m in &dlq {
        let envelope = Envelope::from_slice(m.payload().unwrap()).unwrap();
        assert_eq!(
            envelope.error.kind,
            kafka_dlq::DeadLetterKind::RetriesExhausted
        );
        assert!(
            envelope.error.message.contains("redirect to /elsewhere"),
            "{}",
            envelope.error.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_logs_once_per_kind_of_trouble_not_twenty_lines_a_second() {
    // Nothing listens on this port: the broker is down for the whole run.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log_path = std::env::temp_dir().join(format!("{}.log", unique("outage")));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["run", "--group-id", "g", "--topics", "t"])
        .args(["--target-url", "http://127.0.0.1:1/"])
        .args(["--brokers", &format!("127.0.0.1:{port}")])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    unsafe {
        libc::kill(child.id().unwrap() as i32, libc::SIGTERM);
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    let trouble: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
        .collect();
    assert!(
        trouble
            .iter()
            .any(|l| l.contains("Connect") || l.contains("brokers are down")),
        "the outage is said: {logs}"
    );
    assert!(
        trouble.len() <= 12,
        "{} warning lines in 12 s of outage:\n{}",
        trouble.len(),
        trouble.join("\n")
    );
}

/// Answers a batch with AWS Lambda's partial batch response: 200 naming each `poison…` record
/// (permanent) and `bad…` record (transient); 200 `ok` (not JSON: the whole batch failed,
/// transiently) when any record is `garbled…`.
async fn answer_lambda(
    State(target): State<Target>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let items: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array");
    target
        .requests
        .lock()
        .unwrap()
        .push((headers, String::from_utf8_lossy(&body).to_string()));
    let payload = |i: &serde_json::Value| i["payload"].as_str().unwrap_or_default().to_string();
    if items.iter().any(|i| payload(i).starts_with("garbled")) {
        return (StatusCode::OK, "ok".into());
    }
    let failures: Vec<serde_json::Value> = items
        .iter()
        .filter_map(|i| {
            let p = payload(i);
            if p.starts_with("poison") {
                Some(serde_json::json!({"itemIdentifier": i["id"], "kind": "permanent", "message": format!("{p} rejected")}))
            } else if p.starts_with("bad") {
                Some(serde_json::json!({"itemIdentifier": i["id"]}))
            } else {
                None
            }
        })
        .collect();
    (
        StatusCode::OK,
        serde_json::json!({ "batchItemFailures": failures }).to_string(),
    )
}

/// `kafka-dlq run` in batch mode: batches of 10 (1 s linger), 2 retries 10–50 ms apart.
fn batch_sidecar(brokers: &str, group: &str, topic: &str, url: &str) -> tokio::process::Child {
    sidecar_command(brokers, group, topic, url)
        .args(["--batch-size", "10", "--batch-linger-ms", "1000"])
        .args([
            "--max-retries",
            "2",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "50",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_in_batch_mode_takes_lambdas_partial_batch_response() {
    let brokers = brokers();
    let topic = unique("sidecar-lambda");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values: Vec<String> = (0..20)
        .map(|i| match i {
            3 => format!("poison-{i}"),
            13 => format!("bad-{i}"),
            17 => format!("garbled-{i}"),
            _ => format!("ok-{i}"),
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    let target = Target::default();
    let app = Router::new()
        .route("/lambda", post(answer_lambda))
        .with_state(target.clone());
    let url = format!("http://{}/lambda", serve_on_loopback(app).await);

    let mut child = batch_sidecar(&brokers, &group, &topic, &url);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&20))
        .await
    );
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));

    let requests: Vec<Vec<String>> = target
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| {
            let items: Vec<serde_json::Value> = serde_json::from_str(body).unwrap();
            items
                .iter()
                .map(|i| i["payload"].as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    // The first batch named its poison record: one call for the ten, none more for it.
    assert_eq!(requests[0].len(), 10);
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.contains(&"poison-3".to_string()))
            .count(),
        1,
        "a named permanent failure: no bisection, no retry: {requests:?}"
    );
    // bad-13 was named transient: retried on its own twice (1 + max_retries attempts).
    assert_eq!(
        requests
            .iter()
            .filter(|r| r == &&vec!["bad-13".to_string()])
            .count(),
        2,
        "{requests:?}"
    );
    // garbled-17's batches got a body that is not a partial response: bisected down to it,
    // then retried on its own, as a transient failure is (1 + max_retries attempts).
    assert_eq!(
        requests
            .iter()
            .filter(|r| r == &&vec!["garbled-17".to_string()])
            .count(),
        3,
        "{requests:?}"
    );

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    let dead: std::collections::BTreeMap<String, (kafka_dlq::DeadLetterKind, u32)> = dlq
        .iter()
        .map(|m| {
            let env = Envelope::from_slice(m.payload().unwrap()).unwrap();
            let v = String::from_utf8(env.payload_bytes().unwrap().unwrap()).unwrap();
            (v, (env.error.kind, env.error.attempts))
        })
        .collect();
    use kafka_dlq::DeadLetterKind::{Permanent, RetriesExhausted};
    assert_eq!(dead.get("poison-3"), Some(&(Permanent, 1)), "{dead:?}");
    assert_eq!(dead.get("bad-13"), Some(&(RetriesExhausted, 3)), "{dead:?}");
    assert_eq!(
        dead.get("garbled-17"),
        Some(&(RetriesExhausted, 3)),
        "{dead:?}"
    );
    assert_eq!(dead.len(), 3, "{dead:?}");
}

/// A batch target answering its calls, in turn, with the bodies in `answers` (the last one
/// from then on); it records each call's payloads.
#[derive(Clone)]
struct Scripted {
    answers: Arc<Vec<&'static str>>,
    calls: Arc<Mutex<Vec<Vec<String>>>>,
}

async fn answer_scripted(State(target): State<Scripted>, body: Bytes) -> (StatusCode, String) {
    let items: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array");
    let payloads: Vec<String> = items
        .iter()
        .map(|i| i["payload"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut calls = target.calls.lock().unwrap();
    let answer = target.answers[calls.len().min(target.answers.len() - 1)];
    calls.push(payloads);
    (StatusCode::OK, answer.to_string())
}

/// Runs `kafka-dlq run --batch-size 10` over `n` records against a target answering
/// `answers`, until every record is committed; returns the calls and the dead letters.
async fn run_scripted(
    name: &str,
    n: usize,
    answers: Vec<&'static str>,
) -> (Vec<Vec<String>>, usize) {
    let brokers = brokers();
    let topic = unique(name);
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        (0..n).map(|i| Out::new(0, &format!("r-{i}"))).collect(),
    )
    .await;
    let target = Scripted {
        answers: Arc::new(answers),
        calls: Arc::default(),
    };
    let app = Router::new()
        .route("/batch", post(answer_scripted))
        .with_state(target.clone());
    let url = format!("http://{}/batch", serve_on_loopback(app).await);
    let mut child = batch_sidecar(&brokers, &group, &topic, &url);
    let all = n as i64;
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&all))
        .await,
        "{name}: every record committed"
    );
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));
    let calls = target.calls.lock().unwrap().clone();
    (calls, read_all(&brokers, &format!("{topic}-dlt")).len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lambdas_success_answers_settle_every_record_of_the_batch() {
    // AWS: an empty list, a null list, an empty response and a null response are complete
    // success; a target that predates partial responses answers an object without the list.
    let answers = vec![
        "{}",
        "null",
        r#"{"batchItemFailures":null}"#,
        r#"{"ok":true}"#,
        "",
    ];
    let (calls, dead) = run_scripted("sidecar-lambda-ok", 40, answers).await;
    assert_eq!(dead, 0, "nothing dead-lettered: {calls:?}");
    let mut delivered: Vec<&String> = calls.iter().flatten().collect();
    delivered.sort();
    delivered.dedup();
    assert_eq!(delivered.len(), 40);
    assert_eq!(
        calls.iter().map(Vec::len).sum::<usize>(),
        40,
        "each record delivered once, no batch split: {calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_answer_or_an_unknown_id_fails_the_whole_batch_and_its_records_come_again() {
    // Not JSON; an id that is no record's (an offset); an empty id; then success.
    let answers = vec![
        "OK",
        r#"{"batchItemFailures":[{"itemIdentifier":"41"}]}"#,
        r#"{"batchItemFailures":[{"itemIdentifier":""}]}"#,
        "{}",
    ];
    let (calls, dead) = run_scripted("sidecar-lambda-invalid", 20, answers).await;
    assert_eq!(dead, 0, "a whole-batch failure is transient: {calls:?}");
    for failed in &calls[..3] {
        for record in failed {
            let times = calls.iter().flatten().filter(|r| *r == record).count();
            assert!(
                times >= 2,
                "{record}, in a batch that failed, was delivered again: {calls:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_target_url_appear_nowhere() {
    const SECRET: &str = "s3cret-pw";
    // A key in the query string, as Azure Functions and many webhooks take it.
    const TOKEN: &str = "t0ken-in-query";
    let brokers = brokers();
    let topic = unique("sidecar-secret");
    let group = unique("g");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    produce(&brokers, &topic, vec![Out::new(0, "unreachable")]).await;
    // Nothing listens on port 1: every POST fails to connect, naming the target.
    let url = format!("http://user:{SECRET}@127.0.0.1:1/events?code={TOKEN}");

    // A setting's error names the flag, not the password.
    let (code, _, err) = cli(&[
        "run",
        "--brokers",
        &brokers,
        "--group-id",
        &group,
        "--topics",
        &topic,
        "--target-url",
        // A scheme the sidecar does not speak (https:// it does).
        &format!("ftp://user:{SECRET}@127.0.0.1:1/?code={TOKEN}"),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("target_url") && err.contains("***@127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains(SECRET) && !err.contains(TOKEN), "{err}");

    let log_path = std::env::temp_dir().join(format!("{group}.log"));
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args(["--max-retries", "0", "--breaker-failure-ratio", "0"])
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || read_all(&brokers, &dlq).len() == 1).await,
        "the unreachable record is dead-lettered"
    );
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("***@127.0.0.1:1"),
        "the log names the target: {log}"
    );
    assert!(!log.contains(SECRET), "the log holds the password: {log}");
    assert!(!log.contains(TOKEN), "the log holds the query's key: {log}");
    let dead = &read_all(&brokers, &dlq)[0];
    let mut shown = String::from_utf8_lossy(dead.payload().unwrap()).to_string();
    for header in kafka_dlq::RecordHeader::read_all(dead.headers().unwrap()) {
        shown.push_str(&String::from_utf8_lossy(&header.value.unwrap_or_default()));
    }
    assert!(
        shown.contains("127.0.0.1:1"),
        "the dead letter names the target: {shown}"
    );
    assert!(
        !shown.contains(SECRET) && !shown.contains(TOKEN),
        "the dead letter holds a credential: {shown}"
    );
    let (code, out, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &format!("{topic}-0-0"),
    ]);
    assert_eq!(code, 0, "{err}");
    for text in [&out, &err] {
        assert!(
            !text.contains(SECRET) && !text.contains(TOKEN),
            "{out}{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_process_though_a_metrics_client_holds_a_half_sent_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let brokers = brokers();
    let topic = unique("sidecar-hold");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let url = serve(Target::default()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .arg("run")
        .args([
            "--brokers",
            &brokers,
            "--group-id",
            &group,
            "--topics",
            &topic,
        ])
        .args(["--target-url", &url, "--metrics-addr", &metrics])
        .args(["--shutdown-timeout-ms", "3000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let connect = || tokio::net::TcpStream::connect(metrics.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    while connect().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the metrics endpoint listens"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let half_sent = |mut stream: tokio::net::TcpStream| async move {
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        stream
    };

    // A request head that never ends is cut off, so it cannot hold a connection for ever.
    let mut stalled = half_sent(connect().await.unwrap()).await;
    let mut rest = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_secs(40), stalled.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the server closes a connection whose head never ends"
    );

    // One held at shutdown does not keep the process alive.
    let _held = half_sent(connect().await.unwrap()).await;
    let _idle = connect().await.unwrap();
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));
}

/// The partitions of `topic`, `None` when it does not exist.
fn partition_count(brokers: &str, topic: &str) -> Option<usize> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let client: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let t = metadata.topics().first()?;
    (t.error().is_none() && !t.partitions().is_empty()).then(|| t.partitions().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_is_created_like_its_source_or_refused_by_name() {
    let brokers = brokers();
    let url = serve(Target::default()).await;
    let run = |topic: &str, group: &str, create: &str, stderr: Stdio| {
        sidecar_command(&brokers, group, topic, &url)
            .args(["--create-dlq-topics", create])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap()
    };

    // Off: the consumer refuses to start, naming the topic, in one line.
    let topic = unique("no-dlt");
    create_topic(&brokers, &topic, 3).await;
    let refused = run(&topic, &unique("g"), "false", Stdio::piped());
    let out = tokio::time::timeout(WAIT, refused.wait_with_output())
        .await
        .expect("exits")
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    let said = format!("the dead-letter topic {topic}-dlt does not exist");
    let line = err.lines().find(|l| l.contains(&said));
    assert!(
        line.is_some_and(|l| l.contains("create_dlq_topics")),
        "{err}"
    );
    assert_eq!(partition_count(&brokers, &format!("{topic}-dlt")), None);

    // On (the default): created with the source's three partitions (the broker's own
    // default would be one), before any record needs it.
    let mut created = run(&topic, &unique("g"), "true", Stdio::null());
    assert!(
        eventually(WAIT, || partition_count(&brokers, &format!("{topic}-dlt"))
            == Some(3))
        .await,
        "the DLQ topic is created with the source's partition count"
    );
    let status = terminate(&mut created).await;
    assert_eq!(status.code(), Some(0));
}

/// The target is a service beside the sidecar: its records (and the URL's credentials) go to
/// it directly, whatever `HTTP_PROXY` says in the image; only `--target-proxy` sends them
/// through a proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_is_reached_directly_whatever_http_proxy_says_unless_a_proxy_is_named() {
    let brokers = brokers();
    let topic = unique("proxy");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    let target = Target::default();
    let url = serve(target.clone()).await;
    // A proxy that answers 200 to anything, keeping what it was asked.
    let proxied = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = proxied.clone();
    let proxy = serve_on_loopback(Router::new().fallback(move |uri: axum::http::Uri| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(uri.to_string());
            StatusCode::OK
        }
    }))
    .await;
    let proxy = format!("http://{proxy}");

    produce(&brokers, &topic, vec![Out::new(0, "ok-direct")]).await;
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("ALL_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&1))
        .await
    );
    child.kill().await.unwrap();
    assert_eq!(target.count("ok-direct"), 1);
    assert!(
        proxied.lock().unwrap().is_empty(),
        "HTTP_PROXY was not followed: {:?}",
        proxied.lock().unwrap()
    );

    produce(&brokers, &topic, vec![Out::new(0, "ok-proxied")]).await;
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args(["--target-proxy", &proxy])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await
    );
    child.kill().await.unwrap();
    assert_eq!(target.count("ok-proxied"), 0);
    let asked = proxied.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].ends_with("/events"), "{asked:?}");
}

/// Headers with every byte the protocol allows: a hundred of them, duplicates, empty and null
/// values, binary values and a name that is not UTF-8.
fn every_kind_of_header() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut headers = vec![
        (b"tenant-id".to_vec(), Some(b"acme".to_vec())),
        (b"Tenant-Id".to_vec(), Some(b"other case".to_vec())),
        (b"tenant-id".to_vec(), Some(b"a duplicate".to_vec())),
        (b"empty".to_vec(), Some(Vec::new())),
        (b"null".to_vec(), None),
        (b"binary".to_vec(), Some((0..=255).collect())),
        (vec![0xff, 0xfe, b','], Some(vec![0x00, b'=', b'%'])),
        (b"ce_type".to_vec(), Some("order.créée".as_bytes().to_vec())),
    ];
    for i in headers.len()..100 {
        headers.push((
            format!("h{i}").into_bytes(),
            Some(format!("v{i}").into_bytes()),
        ));
    }
    headers
}

/// Echoes each record's headers back as its exactly-once output: decodes `X-Kafka-Headers`
/// and answers `{"produce": [{"topic": OUT, "headers": [...]}]}` in the sidecar's own list form.
async fn echo_headers(
    State((out, seen)): State<(String, Arc<Mutex<Vec<HeaderMap>>>)>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    seen.lock().unwrap().push(headers.clone());
    let decoded = headers
        .get(kafka_dlq::sidecar::record_headers::HTTP_HEADER)
        .map(|v| kafka_dlq::sidecar::record_headers::decode(v.to_str().unwrap()).unwrap())
        .unwrap_or_default();
    let list = kafka_dlq::sidecar::record_headers::json(&decoded);
    (
        StatusCode::OK,
        serde_json::json!({"produce": [{"topic": out, "value": "echo", "headers": list}]})
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_reaches_the_target_and_comes_back_through_an_output_byte_identical() {
    let brokers = brokers();
    let topic = unique("headers");
    let group = unique("g");
    let out = format!("{topic}-out");
    for t in [&topic, &format!("{topic}-dlt"), &out] {
        create_topic(&brokers, t, 1).await;
    }
    let sent = every_kind_of_header();
    produce(
        &brokers,
        &topic,
        vec![Out {
            headers: sent.clone(),
            ..Out::new(0, "order-1")
        }],
    )
    .await;
    let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let app = Router::new()
        .route("/events", post(echo_headers))
        .with_state((out.clone(), seen.clone()));
    let url = format!("http://{}/events", serve_on_loopback(app).await);
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args(["--exactly-once", "--output-topics", &out])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&1))
        .await,
        "the record is handled"
    );
    assert!(terminate(&mut child).await.success());
    // One HTTP header field carries all hundred, whatever their bytes.
    let request = seen.lock().unwrap()[0].clone();
    assert_eq!(
        request
            .get_all(kafka_dlq::sidecar::record_headers::HTTP_HEADER)
            .iter()
            .count(),
        1
    );
    let outputs = read_committed(&brokers, &out, 1);
    let got: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        kafka_dlq::RecordHeader::read_all(outputs[0].headers().unwrap())
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
    assert_eq!(got, sent, "in order, duplicates kept, byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_items_carry_their_records_headers_unless_turned_off() {
    let brokers = brokers();
    for forward in [true, false] {
        let topic = unique("batch-headers");
        let group = unique("g");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        produce(
            &brokers,
            &topic,
            vec![Out {
                headers: every_kind_of_header(),
                ..Out::new(0, "ok-1")
            }],
        )
        .await;
        let target = Target::default();
        let app = Router::new()
            .route("/batch", post(answer_batch))
            .with_state(target.clone());
        let url = format!("http://{}/batch", serve_on_loopback(app).await);
        let mut child = sidecar_command(&brokers, &group, &topic, &url)
            .args(["--batch-size", "10", "--batch-linger-ms", "100"])
            .args(["--forward-headers", &forward.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
                == Some(&1))
            .await
        );
        assert!(terminate(&mut child).await.success());
        let requests = target.requests.lock().unwrap().clone();
        let items: Vec<serde_json::Value> = serde_json::from_str(&requests[0].1).unwrap();
        if forward {
            let headers = items[0]["headers"].as_array().unwrap();
            assert_eq!(headers.len(), 100);
            assert_eq!(
                headers[0],
                serde_json::json!({"name": "tenant-id", "value": "acme"})
            );
            assert_eq!(
                headers[4],
                serde_json::json!({"name": "null", "value": null})
            );
            // NUL, `=` and `%` are UTF-8: text; a name that is not UTF-8: base64.
            assert_eq!(
                headers[6],
                serde_json::json!({"name_base64": "//4s", "value": "\u{0}=%"})
            );
            assert_eq!(
                headers[5]["value_base64"].as_str().map(|b| b.len()),
                Some(344),
                "256 bytes of every value, base64"
            );
        } else {
            assert!(items[0].get("headers").is_none(), "{}", items[0]);
        }
    }
}

/// Serves `app` over TLS on loopback with the test CA's `server` certificate, requiring a
/// client certificate the CA signed when `client_ca`.
async fn serve_tls(
    app: Router,
    pki: &common::security::Pki,
    require_client: bool,
) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.path("server.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let config = if require_client {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(pki.ca()).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    }
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client without the certificate asked for fails here: nothing is served.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_with_a_private_ca_and_one_that_asks_for_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = common::security::Pki::create(dir.path()).unwrap();
    // The client's key, unencrypted (what the sidecar reads).
    let plain_key = dir.path().join("client-plain.key");
    let converted = std::process::Command::new("openssl")
        .args(["pkey", "-in", &pki.client_key(), "-passin"])
        .arg(format!("pass:{}", common::security::CLIENT_KEY_PASSWORD))
        .arg("-out")
        .arg(&plain_key)
        .status()
        .unwrap();
    assert!(converted.success());
    let brokers = brokers();
    for require_client in [false, true] {
        let topic = unique("https");
        let group = unique("g");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        produce(&brokers, &topic, vec![Out::new(0, "ok-1")]).await;
        let target = Target::default();
        let app = Router::new()
            .route("/events", post(answer))
            .with_state(target.clone());
        let addr = serve_tls(app, &pki, require_client).await;
        let url = format!("https://localhost:{}/events", addr.port());
        let run = |extra: &[&str]| {
            let mut command = sidecar_command(&brokers, &group, &topic, &url);
            command
                .args(["--target-ca-location", &pki.ca()])
                .args(extra)
                .args(["--max-retries", "1", "--backoff-initial-ms", "10"])
                .args(["--breaker-failure-ratio", "0"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            command.spawn().unwrap()
        };
        if require_client {
            // Without its certificate the target refuses the handshake: transient, retried,
            // then dead-lettered naming the TLS failure — never delivered.
            let mut child = run(&[]);
            assert!(
                eventually(WAIT, || read_all(&brokers, &format!("{topic}-dlt")).len()
                    == 1)
                .await
            );
            terminate(&mut child).await;
            assert_eq!(target.count("ok-1"), 0);
            let dead = read_all(&brokers, &format!("{topic}-dlt"));
            let envelope = Envelope::from_slice(dead[0].payload().unwrap()).unwrap();
            assert!(
                envelope.error.message.contains("POST https://localhost"),
                "{}",
                envelope.error.message
            );
        }
        // With it: delivered (the next record, when the first was dead-lettered above).
        let value = if require_client { "ok-2" } else { "ok-1" };
        if require_client {
            produce(&brokers, &topic, vec![Out::new(0, value)]).await;
        }
        let certificate = pki.client_certificate();
        let mut child = run(&[
            "--target-certificate-location",
            &certificate,
            "--target-key-location",
            plain_key.to_str().unwrap(),
        ]);
        assert!(
            eventually(WAIT, || target.count(value) >= 1).await,
            "delivered over TLS (client certificate asked for: {require_client})"
        );
        assert!(terminate(&mut child).await.success());
    }
    // The system's CAs do not know the private CA: refused, named.
    let topic = unique("https-untrusted");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(&brokers, &topic, vec![Out::new(0, "ok-1")]).await;
    let target = Target::default();
    let app = Router::new()
        .route("/events", post(answer))
        .with_state(target.clone());
    let addr = serve_tls(app, &pki, false).await;
    let mut child = sidecar_command(
        &brokers,
        &group,
        &topic,
        &format!("https://localhost:{}/events", addr.port()),
    )
    .args([
        "--max-retries",
        "1",
        "--backoff-initial-ms",
        "10",
        "--breaker-failure-ratio",
        "0",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    assert!(
        eventually(WAIT, || read_all(&brokers, &format!("{topic}-dlt")).len()
            == 1)
        .await
    );
    terminate(&mut child).await;
    assert_eq!(
        target.count("ok-1"),
        0,
        "never delivered to a target it cannot trust"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_events_reach_the_target_in_the_http_bindings_modes() {
    let brokers = brokers();
    let topic = unique("cloudevents");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let h = |k: &str, v: &str| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()));
    produce(
        &brokers,
        &topic,
        vec![
            // The Kafka binding's binary mode: attributes as ce_ headers, the data as the value.
            Out {
                headers: vec![
                    h("ce_specversion", "1.0"),
                    h("ce_id", "order-1"),
                    h("ce_type", "com.example.order.créée"),
                    h("ce_source", "/orders"),
                    h("content-type", "application/xml"),
                ],
                ..Out::new(0, "ok-<order/>")
            },
            // Structured mode: the whole event as the value.
            Out {
                headers: vec![h("content-type", "application/cloudevents+json")],
                ..Out::new(0, r#"ok-{"specversion":"1.0","id":"order-2"}"#)
            },
            Out::new(0, "ok-plain"),
        ],
    )
    .await;
    let target = Target::default();
    let url = serve(target.clone()).await;
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&3))
        .await
    );
    assert!(terminate(&mut child).await.success());
    let requests = target.requests.lock().unwrap().clone();
    let of = |body: &str| {
        requests
            .iter()
            .find(|(_, b)| b == body)
            .map(|(h, _)| h.clone())
            .unwrap()
    };
    let binary = of("ok-<order/>");
    assert_eq!(binary["ce-specversion"], "1.0");
    assert_eq!(binary["ce-id"], "order-1");
    assert_eq!(binary["ce-type"], "com.example.order.cr%C3%A9%C3%A9e");
    assert_eq!(binary["ce-source"], "/orders");
    assert_eq!(binary["content-type"], "application/xml");
    let structured = of(r#"ok-{"specversion":"1.0","id":"order-2"}"#);
    assert_eq!(structured["content-type"], "application/cloudevents+json");
    assert!(structured.get("ce-id").is_none());
    let plain = of("ok-plain");
    assert_eq!(plain["content-type"], "application/json", "--content-type");
    assert!(plain.get("ce-specversion").is_none());
}
