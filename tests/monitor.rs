//! The DLQ monitor against a real broker and a fake Slack: a real HTTP server on loopback that
//! records every request and answers as each test scripts it.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use common::*;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::monitor::{Monitor, MonitorConfig, Secret, SlackTarget};
use kafka_dlq::{DeadLetterKind, Record};

const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct Request {
    at: Instant,
    path: String,
    authorization: Option<String>,
    /// The message's text and every text in its blocks, one per line.
    text: String,
    /// The whole request body.
    json: serde_json::Value,
}

/// Answers to give first: status and Retry-After seconds.
type Script = Arc<Mutex<VecDeque<(u16, Option<u64>)>>>;

#[derive(Clone, Default)]
struct Slack {
    /// Every request, in order.
    requests: Arc<Mutex<Vec<Request>>>,
    /// The requests answered 200.
    ok: Arc<Mutex<Vec<Request>>>,
    /// Answers to give first, in order: status and Retry-After seconds. Then 200.
    script: Script,
}

impl Slack {
    fn fail_next(&self, answers: &[(u16, Option<u64>)]) {
        self.script.lock().unwrap().extend(answers.iter().copied());
    }
    fn delivered(&self) -> Vec<String> {
        self.ok
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.text.clone())
            .collect()
    }
    fn delivered_requests(&self) -> Vec<Request> {
        self.ok.lock().unwrap().clone()
    }
}

async fn answer(
    State(slack): State<Slack>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut text = json["text"].as_str().unwrap_or_default().to_string();
    texts_in(&json["blocks"], &mut text);
    let request = Request {
        at: Instant::now(),
        path: uri.path().to_string(),
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string()),
        text,
        json,
    };
    slack.requests.lock().unwrap().push(request.clone());
    if let Some((status, retry_after)) = slack.script.lock().unwrap().pop_front() {
        let mut response = (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            r#"{"ok":false,"error":"ratelimited"}"#,
        )
            .into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
        }
        return response;
    }
    slack.ok.lock().unwrap().push(request);
    if uri.path().ends_with("chat.postMessage") || uri.path().ends_with("chat.update") {
        (
            StatusCode::OK,
            [("content-type", "application/json")],
            r#"{"ok":true,"channel":"C1","ts":"1700000000.000100","message":{"ts":"1700000000.000100","text":"x"}}"#,
        )
            .into_response()
    } else {
        (StatusCode::OK, [("content-type", "text/plain")], "ok").into_response()
    }
}

/// Every `text` string in Block Kit `blocks`, appended to `out` a line each.
fn texts_in(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match v {
                    serde_json::Value::String(s) if key == "text" => {
                        out.push('\n');
                        out.push_str(s);
                    }
                    other => texts_in(other, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| texts_in(v, out)),
        _ => {}
    }
}

async fn fake_slack() -> (Slack, String) {
    let slack = Slack::default();
    let app = Router::new()
        .route("/api/chat.postMessage", post(answer))
        .route("/api/chat.update", post(answer))
        .route("/hooks/T1/B1/secret", post(answer))
        .with_state(slack.clone());
    let addr = serve_on_loopback(app).await;
    (slack, format!("http://{addr}"))
}

fn dead_letter(source: &str, id: &str, kind: DeadLetterKind, message: &str) -> Out {
    let record = Record::new(source, 0, 1)
        .with_id(id)
        .with_payload(br#"{"email":"someone@example.com"}"#);
    Out {
        partition: 0,
        key: None,
        value: Some(Envelope::new(&record, kind, message, 1, "g").to_vec()),
        headers: vec![],
    }
}

fn config(brokers: &str, dlq: &str, slack: SlackTarget) -> MonitorConfig {
    MonitorConfig {
        group_id: unique("monitor"),
        window_ms: 1_000,
        min_interval_ms: 0,
        check_interval_ms: 300,
        slack,
        ..MonitorConfig::new(brokers, [dlq])
    }
}

fn web_api(base: &str) -> SlackTarget {
    SlackTarget::WebApi {
        token: Secret::new("xoxb-test-token"),
        channel: "#alerts".into(),
        api_url: format!("{base}/api/"),
    }
}

struct RunningMonitor {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kafka_dlq::monitor::MonitorError>>,
}

fn start(config: MonitorConfig) -> RunningMonitor {
    init_logs();
    let monitor = Monitor::new(config).expect("monitor");
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(monitor.run(async move {
        let _ = rx.await;
    }));
    RunningMonitor { stop, task }
}

impl RunningMonitor {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("monitor stops")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_gives_one_alert_then_a_second_burst_another_and_draining_a_resolved_message() {
    let brokers = brokers();
    let dlq = unique("orders-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let monitor = start(config(&brokers, &dlq, web_api(&base)));

    let mut burst = Vec::new();
    for i in 0..7 {
        burst.push(dead_letter(
            "orders",
            &format!("order-{i}"),
            DeadLetterKind::Permanent,
            &format!("malformed JSON at line {i}"),
        ));
    }
    for i in 0..3 {
        burst.push(dead_letter(
            "parcels",
            &format!("parcel-{i}"),
            DeadLetterKind::RetriesExhausted,
            "target answered HTTP 503",
        ));
    }
    produce(&brokers, &dlq, burst).await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let texts = slack.delivered();
    assert_eq!(texts.len(), 1, "one alert for the burst: {texts:#?}");
    let text = &texts[0];
    assert!(
        text.contains(&format!("10 new dead letters on {dlq} (10 outstanding)")),
        "{text}"
    );
    assert!(
        text.contains("`orders` 7") && text.contains("`parcels` 3"),
        "{text}"
    );
    assert!(
        text.contains("`permanent` 7") && text.contains("`retries_exhausted` 3"),
        "{text}"
    );
    assert!(
        text.contains("7× `permanent: malformed JSON at line #`"),
        "{text}"
    );
    assert!(text.contains("order-0"), "sample ids: {text}");
    assert!(text.contains(&format!(
        "kafka-dlq dlq replay --brokers {brokers} --dlq-topic {dlq}"
    )));
    assert!(
        !text.contains("someone@example.com"),
        "no payloads by default"
    );
    let request = &slack.delivered_requests()[0];
    assert_eq!(request.path, "/api/chat.postMessage");
    assert_eq!(
        request.authorization.as_deref(),
        Some("Bearer xoxb-test-token")
    );

    // A second burst after the window: a second alert.
    produce(
        &brokers,
        &dlq,
        vec![
            dead_letter(
                "orders",
                "order-7",
                DeadLetterKind::Permanent,
                "malformed JSON at line 9",
            ),
            dead_letter(
                "orders",
                "order-8",
                DeadLetterKind::Permanent,
                "malformed JSON at line 9",
            ),
        ],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 2).await);
    assert!(
        slack.delivered()[1].contains(&format!("2 new dead letters on {dlq} (12 outstanding)")),
        "{}",
        slack.delivered()[1]
    );

    // Replayed: the replay position reaches the end, and the monitor says so.
    write_replay_position(&brokers, &dlq, 12).await;
    assert!(eventually(WAIT, || slack.delivered().len() >= 3).await);
    assert!(
        slack.delivered()[2].contains("Resolved"),
        "{}",
        slack.delivered()[2]
    );
    monitor.stop().await;
}

/// An alert scope (`--alert-where`): one monitor per team on a shared DLT, each alerted on
/// and counting only its own dead letters; what it leaves out neither alerts nor counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_scope_alerts_on_and_counts_only_what_its_expression_keeps() {
    let brokers = brokers();
    let dlq = unique("shared-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let scope = kafka_dlq::dlq_reader::Filter {
        where_: Some(
            kafka_dlq::dlq_reader::Expression::compile(
                "topic == 'orders' && kind == 'permanent' && payload.email.endsWith('@example.com')",
            )
            .unwrap(),
        ),
        ..Default::default()
    };
    let monitor = start(MonitorConfig {
        scope: Some(scope),
        ..config(&brokers, &dlq, web_api(&base))
    });
    let mut burst = Vec::new();
    for i in 0..4 {
        burst.push(dead_letter(
            "orders",
            &format!("order-{i}"),
            DeadLetterKind::Permanent,
            "malformed JSON",
        ));
    }
    for i in 0..3 {
        burst.push(dead_letter(
            "parcels",
            &format!("parcel-{i}"),
            DeadLetterKind::Permanent,
            "target answered HTTP 400",
        ));
    }
    produce(&brokers, &dlq, burst).await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    let text = slack.delivered()[0].clone();
    assert!(
        text.contains(&format!("4 new dead letters on {dlq}")),
        "{text}"
    );
    assert!(!text.contains("parcels"), "out of scope: {text}");

    // Dead letters out of scope: no alert.
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "parcels",
            "parcel-9",
            DeadLetterKind::Permanent,
            "target answered HTTP 400",
        )],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(slack.delivered().len(), 1, "{:#?}", slack.delivered());

    // Replayed to the end: the four in scope are gone, so it is resolved, though the DLT was
    // never empty of the others.
    write_replay_position(&brokers, &dlq, 8).await;
    assert!(eventually(WAIT, || slack.delivered().len() >= 2).await);
    let resolved = slack.delivered()[1].clone();
    assert!(resolved.contains("Resolved"), "{resolved}");
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_rate_limit_is_waited_out_and_the_alert_delivered_once() {
    let brokers = brokers();
    let dlq = unique("ratelimit-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    slack.fail_next(&[(429, Some(2))]);
    let monitor = start(config(&brokers, &dlq, web_api(&base)));
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "orders",
            "o-1",
            DeadLetterKind::Permanent,
            "bad",
        )],
    )
    .await;

    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    let all = slack.requests.lock().unwrap().clone();
    assert_eq!(all.len(), 2, "one refused, one delivered");
    let waited = all[1].at - all[0].at;
    assert!(
        waited >= Duration::from_secs(2),
        "Retry-After honoured: waited {waited:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(slack.delivered().len(), 1, "delivered once");
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_outage_delays_the_alert_but_never_the_records() {
    let brokers = brokers();
    let topic = unique("outage");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    // Slack's webhook answers 503 five times (about 1 + 2 + 4 + 8 s of backoff), then 200.
    slack.fail_next(&[(503, None); 4]);
    let monitor = start(config(
        &brokers,
        &dlq,
        SlackTarget::Webhook {
            url: Secret::new(format!("{base}/hooks/T1/B1/secret")),
        },
    ));

    let mut records = vec![Out::new(0, "perm-1")];
    for i in 0..20 {
        records.push(Out::new(0, &format!("ok-{i}")));
    }
    produce(&brokers, &topic, records).await;
    let handler = Scripted::default();
    let consumer = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(
        eventually(WAIT, || handler.attempts("ok-19") == 1).await,
        "records flow while Slack is down"
    );
    assert!(
        slack.delivered().is_empty(),
        "Slack still down when the records were done"
    );
    consumer.stop().await;

    assert!(
        eventually(Duration::from_secs(40), || slack.delivered().len() == 1).await,
        "the alert arrives after recovery"
    );
    assert_eq!(slack.requests.lock().unwrap().len(), 5);
    assert!(slack.delivered()[0].contains("1 new dead letter on"));
    let request = &slack.delivered_requests()[0];
    assert_eq!(
        request.json["blocks"][0]["type"], "header",
        "Block Kit by webhook too"
    );
    assert!(
        request.json.get("thread_ts").is_none(),
        "a webhook has no threads"
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_go_to_the_alerts_thread_across_a_restart_and_resolved_updates_the_first_message(
) {
    const TS: &str = "1700000000.000100"; // what the fake Slack answers
    let brokers = brokers();
    let dlq = unique("thread-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let cfg = MonitorConfig {
        links: kafka_dlq::monitor::Links {
            runbook: "https://runbooks.example.com/kafka-dlq".into(),
            topic_page: Some("http://console.example.com/topics/{topic}".into()),
            console: Some("http://127.0.0.1:8090/dlq".into()),
        },
        ..config(&brokers, &dlq, web_api(&base))
    };
    let monitor = start(cfg.clone());
    produce(
        &brokers,
        &dlq,
        vec![
            dead_letter("orders", "o-1", DeadLetterKind::Permanent, "bad row 1"),
            dead_letter("orders", "o-2", DeadLetterKind::Permanent, "bad row 2"),
        ],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    let first = slack.delivered_requests()[0].json.clone();
    assert!(
        first.get("thread_ts").is_none(),
        "the alert opens the incident: {first}"
    );
    assert_eq!(
        first["text"],
        format!("2 new dead letters on {dlq} (2 outstanding)")
    );
    let blocks = first["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[1]["type"], "section", "fields");
    let errors = blocks[2]["text"]["text"].as_str().unwrap();
    assert!(
        errors.contains("2× `permanent: bad row #`") && errors.contains("e.g. `o-1`"),
        "{errors}"
    );
    let actions = blocks.last().unwrap();
    assert_eq!(actions["type"], "actions");
    assert_eq!(
        actions["elements"][0]["url"],
        "https://runbooks.example.com/kafka-dlq#kafkadlqdeadlettersgrowing"
    );
    assert_eq!(actions["elements"][1]["url"], "http://127.0.0.1:8090/dlq/");
    assert_eq!(
        actions["elements"][2]["url"],
        format!("http://127.0.0.1:8090/dlq/?dlq_topic={dlq}&fingerprint=permanent%3A+bad+row+%23"),
        "the console, filtered to the cause"
    );
    assert_eq!(
        actions["elements"][3]["url"],
        format!("http://console.example.com/topics/{dlq}")
    );
    assert!(
        !first.to_string().contains("someone@example.com"),
        "no payloads"
    );

    // More dead letters in the same incident: a reply in the alert's thread.
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "orders",
            "o-3",
            DeadLetterKind::Permanent,
            "bad row 3",
        )],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 2).await);
    assert_eq!(slack.delivered_requests()[1].json["thread_ts"], TS);

    // The thread survives a restart of the monitor.
    monitor.stop().await;
    let monitor = start(cfg);
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "orders",
            "o-4",
            DeadLetterKind::Permanent,
            "bad row 4",
        )],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 3).await);
    assert_eq!(
        slack.delivered_requests()[2].json["thread_ts"],
        TS,
        "restored from the monitor's committed position"
    );

    // Replayed: "resolved" in the thread, and the first message updated.
    write_replay_position(&brokers, &dlq, 4).await;
    assert!(
        eventually(WAIT, || slack.delivered().len() == 5).await,
        "{:#?}",
        slack.delivered()
    );
    let requests = slack.delivered_requests();
    assert_eq!(requests[3].path, "/api/chat.postMessage");
    assert_eq!(requests[3].json["thread_ts"], TS);
    assert!(
        requests[3].text.contains("Resolved"),
        "{}",
        requests[3].text
    );
    assert_eq!(requests[4].path, "/api/chat.update");
    assert_eq!(requests[4].json["ts"], TS);
    assert!(
        requests[4].text.contains("Resolved"),
        "{}",
        requests[4].text
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_monitor_does_not_repeat_its_alerts() {
    let brokers = brokers();
    let dlq = unique("restart-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let cfg = config(&brokers, &dlq, web_api(&base));
    let monitor = start(cfg.clone());
    produce(
        &brokers,
        &dlq,
        vec![
            dead_letter("orders", "o-1", DeadLetterKind::Permanent, "bad"),
            dead_letter("orders", "o-2", DeadLetterKind::Permanent, "bad"),
        ],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    monitor.stop().await;

    let monitor = start(cfg);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        slack.delivered().len(),
        1,
        "nothing announced twice: {:#?}",
        slack.delivered()
    );
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "orders",
            "o-3",
            DeadLetterKind::Permanent,
            "bad",
        )],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 2).await);
    assert!(
        slack.delivered()[1].contains("1 new dead letter on")
            && slack.delivered()[1].contains("(3 outstanding)"),
        "{}",
        slack.delivered()[1]
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_slack_the_alert_goes_to_the_log_and_the_position_advances() {
    let brokers = brokers();
    let dlq = unique("logonly-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let cfg = config(&brokers, &dlq, SlackTarget::Log);
    let group = cfg.group_id.clone();
    let monitor = start(cfg);
    produce(
        &brokers,
        &dlq,
        vec![dead_letter(
            "orders",
            "o-1",
            DeadLetterKind::Permanent,
            "bad",
        )],
    )
    .await;
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &dlq, 1).get(&0)
            == Some(&1))
        .await,
        "the logged alert counts as delivered"
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outage_breaker_is_announced_when_it_opens_and_closes() {
    use kafka_dlq::breaker::BreakerState;
    let brokers = brokers();
    let dlq = unique("breaker-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let (state, watch) = tokio::sync::watch::channel(BreakerState::Closed);
    init_logs();
    let monitor = Monitor::new(config(&brokers, &dlq, web_api(&base)))
        .unwrap()
        .with_breaker(watch);
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(monitor.run(async move {
        let _ = rx.await;
    }));
    state.send(BreakerState::Open).unwrap();
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    assert!(
        slack.delivered()[0].contains("Downstream outage"),
        "{:?}",
        slack.delivered()
    );
    state.send(BreakerState::Closed).unwrap();
    assert!(eventually(WAIT, || slack.delivered().len() == 2).await);
    assert!(slack.delivered()[1].contains("Downstream back"));
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_while_slack_is_down_and_the_next_run_delivers_the_alert() {
    let brokers = brokers();
    let dlq = unique("down-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    slack.fail_next(&[(503, None); 10_000]);
    let cfg = MonitorConfig {
        window_ms: 50,
        ..config(&brokers, &dlq, web_api(&base))
    };
    let monitor = start(cfg.clone());
    // One dead letter per window: one alert each, more than the delivery queue holds while
    // the first is retried against the failing Slack.
    for i in 0..24 {
        produce(
            &brokers,
            &dlq,
            vec![dead_letter(
                "orders",
                &format!("o-{i}"),
                DeadLetterKind::Permanent,
                "bad",
            )],
        )
        .await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(slack.delivered().is_empty());
    let _ = monitor.stop.send(());
    let stopped = tokio::time::timeout(Duration::from_secs(10), monitor.task).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the monitor stops within 10 s while Slack is down"
    );

    slack.script.lock().unwrap().clear();
    let monitor = start(cfg);
    assert!(
        eventually(WAIT, || !slack.delivered().is_empty()).await,
        "the alert given up at shutdown is delivered by the next run"
    );
    assert!(
        slack.delivered()[0].contains("new dead letter"),
        "{}",
        slack.delivered()[0]
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_dead_letter_is_announced_with_its_source_and_error() {
    let brokers = brokers();
    let dlq = unique("detached-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let monitor = start(config(&brokers, &dlq, web_api(&base)));
    // The detached form, as the consumer writes a record too large for an inline envelope:
    // the original value as the value, the envelope in the kafka_dlq-envelope header.
    let record = Record::new("parcels", 0, 5)
        .with_id("big-1")
        .with_payload(vec![0xee; 2_000]);
    let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "row too wide", 1, "g");
    produce(
        &brokers,
        &dlq,
        vec![Out {
            partition: 0,
            key: None,
            value: record.payload.clone(),
            headers: vec![(
                kafka_dlq::dlq::HEADER_ENVELOPE.as_bytes().to_vec(),
                Some(envelope.into_detached().to_vec()),
            )],
        }],
    )
    .await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    let text = &slack.delivered()[0];
    assert!(
        text.contains("`parcels` 1")
            && text.contains("row too wide")
            && !text.contains("unreadable"),
        "{text}"
    );
    monitor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_names_a_dead_letter_topic_that_does_not_exist_in_one_line() {
    let brokers = brokers();
    let dlq = unique("never-created-dlt");
    let log_path = std::env::temp_dir().join(format!("{dlq}.log"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["monitor", "--brokers", &brokers, "--dlq-topics", &dlq])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log_path).unwrap(),
        ))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let said = || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("dlq_topic_missing") && l.contains(&dlq))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(30), || said() == 1).await,
        "{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let status = terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));
    assert_eq!(said(), 1, "said once, not at every check");
}

/// Dead letters that retention deletes before anyone replayed them are gone, unhandled: the
/// monitor says they expired and counts them, and never calls that *went down* or *resolved*.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_deleted_by_retention_are_announced_as_expired_never_as_resolved() {
    let brokers = brokers();
    let dlq = unique("expiring-dlt");
    create_topic(&brokers, &dlq, 1).await;
    let (slack, base) = fake_slack().await;
    let monitor = start(config(&brokers, &dlq, web_api(&base)));
    let letters = (0..3)
        .map(|i| {
            dead_letter(
                "orders",
                &format!("order-{i}"),
                DeadLetterKind::Permanent,
                "rejected",
            )
        })
        .collect();
    produce(&brokers, &dlq, letters).await;
    assert!(eventually(WAIT, || slack.delivered().len() == 1).await);
    assert!(slack.delivered()[0].contains("(3 outstanding)"));

    // Retention takes the first two, unreplayed.
    delete_before(&brokers, &dlq, 2).await;
    assert!(eventually(WAIT, || slack.delivered().len() == 2).await);
    let expired = &slack.delivered()[1];
    assert!(
        expired.contains("2 dead letters expired") && expired.contains("1 outstanding"),
        "{expired}"
    );
    // Then the last: nothing outstanding, and still not a resolution.
    delete_before(&brokers, &dlq, 3).await;
    assert!(eventually(WAIT, || slack.delivered().len() == 3).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let texts = slack.delivered();
    assert_eq!(texts.len(), 3, "{texts:#?}");
    assert!(
        texts[2].contains("1 dead letter expired") && texts[2].contains("0 outstanding"),
        "{}",
        texts[2]
    );
    for text in &texts {
        assert!(
            !text.contains("Resolved") && !text.contains("went down"),
            "{text}"
        );
    }
    monitor.stop().await;
}
