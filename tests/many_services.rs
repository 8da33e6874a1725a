//! Several services (consumer groups) on one topic, with the real `kafka-dlq run` on Apache
//! Kafka: each retries and replays only its own failures, and `--to-source` is the one way to
//! reach them all.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use common::*;

const WAIT: Duration = Duration::from_secs(60);

/// A service's downstream on loopback, counting the calls per record value. When `strict`, it
/// answers `perm…` with 400 until `fixed`, and `flaky…` with 503 on its first two calls.
#[derive(Clone, Default)]
struct Downstream {
    calls: Arc<Mutex<HashMap<String, usize>>>,
    strict: bool,
    fixed: Arc<AtomicBool>,
}

impl Downstream {
    fn calls_of(&self, value: &str) -> usize {
        self.calls.lock().unwrap().get(value).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }
}

async fn answer(State(d): State<Downstream>, body: axum::body::Bytes) -> StatusCode {
    let value = String::from_utf8_lossy(&body).into_owned();
    let calls = {
        let mut all = d.calls.lock().unwrap();
        let n = all.entry(value.clone()).or_default();
        *n += 1;
        *n
    };
    if !d.strict {
        return StatusCode::OK;
    }
    if value.starts_with("perm") && !d.fixed.load(Ordering::SeqCst) {
        return StatusCode::BAD_REQUEST;
    }
    if value.starts_with("flaky") && calls <= 2 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::OK
}

async fn serve(downstream: Downstream) -> String {
    let app = axum::Router::new()
        .route("/", axum::routing::post(answer))
        .with_state(downstream);
    format!("http://{}/", serve_on_loopback(app).await)
}

fn service(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
    protocol: &str,
) -> tokio::process::Child {
    let log = std::env::temp_dir().join(format!("{}.log", unique(group)));
    eprintln!("{group} log: {}", log.display());
    sidecar_command(brokers, group, topic, url)
        .args(["--group-protocol", protocol])
        // One retry in process, then two tiers: `flaky` is handled at its third call, in tier 0.
        .args(["--max-retries", "1", "--backoff-initial-ms", "20"])
        .args(["--retry-topic-delays", "300,300"])
        .args(["--breaker-failure-ratio", "0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .unwrap()
}

async fn stop(mut child: tokio::process::Child) {
    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("stops within 30 s")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_on_one_topic_sees_only_its_own_retries_and_replays() {
    for protocol in ["classic", "consumer"] {
        let brokers = brokers();
        let topic = unique("orders");
        let dlt = format!("{topic}-dlt");
        let (billing, shipping) = (unique("billing"), unique("shipping"));
        create_topic(&brokers, &topic, 2).await;
        let mut records = Vec::new();
        for i in 0..10 {
            records.push(Out::new(i % 2, &format!("ok-{i}")));
        }
        for i in 0..4 {
            records.push(Out::new(i % 2, &format!("flaky-{i}")));
            records.push(Out::new(i % 2, &format!("perm-{i}")));
        }
        produce(&brokers, &topic, records).await;
        let values: Vec<String> = (0..10)
            .map(|i| format!("ok-{i}"))
            .chain((0..4).map(|i| format!("flaky-{i}")))
            .chain((0..4).map(|i| format!("perm-{i}")))
            .collect();

        // Billing's downstream rejects `perm…` and is down for `flaky…` at first; shipping's
        // takes everything. Both dead-letter to the one default DLT, `<topic>-dlt`.
        let billing_down = Downstream {
            strict: true,
            ..Downstream::default()
        };
        let shipping_down = Downstream::default();
        let b = service(
            &brokers,
            &billing,
            &topic,
            &serve(billing_down.clone()).await,
            protocol,
        );
        let s = service(
            &brokers,
            &shipping,
            &topic,
            &serve(shipping_down.clone()).await,
            protocol,
        );
        let settled = eventually(WAIT, || {
            (0..4).all(|i| billing_down.calls_of(&format!("flaky-{i}")) == 3)
                && read_all(&brokers, &dlt).len() == 4
                && shipping_down.total() == 18
        })
        .await;
        assert!(
            settled,
            "{protocol}: billing {:?}, shipping {:?}",
            billing_down.calls.lock().unwrap(),
            shipping_down.calls.lock().unwrap()
        );
        // As often as its own failures require: `perm` once (permanent), `flaky` 3 times
        // (twice in the source topic, once in tier 0), the rest once.
        for value in &values {
            let expected = if value.starts_with("flaky") { 3 } else { 1 };
            assert_eq!(
                billing_down.calls_of(value),
                expected,
                "{protocol}: billing {value}"
            );
        }

        // Billing deploys its fix; its dead letters of source partition 1 are replayed to its
        // redrive topic, the first run interrupted (partition 0's go back to the source below).
        billing_down.fixed.store(true, Ordering::SeqCst);
        let replay_args = |extra: &[&str]| -> Vec<String> {
            [
                "dlq",
                "replay",
                "--brokers",
                &brokers,
                "--dlq-topic",
                &dlt,
                "--source-partition",
                "1",
            ]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
        };
        let mut first = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
            .args(replay_args(&["--rate", "1", "--operator", "alice"]))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Stopped (SIGTERM, as Ctrl-C) once its first record is acknowledged.
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            first.stdout.take().unwrap(),
        ));
        let mut stdout = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            stdout.push_str(&line);
            stdout.push('\n');
            if line.starts_with("replayed ") && line.contains(" -> ") {
                break;
            }
        }
        unsafe { libc::kill(first.id().unwrap() as i32, libc::SIGTERM) };
        while let Some(line) = lines.next_line().await.unwrap() {
            stdout.push_str(&line);
            stdout.push('\n');
        }
        let status = first.wait().await.unwrap();
        assert!(status.success(), "{protocol}: {stdout}");
        assert!(stdout.contains("interrupted"), "{protocol}: {stdout}");
        let (code, rest, err) = cli(&replay_args(&["--operator", "bob"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>());
        assert_eq!(code, 0, "{protocol}: {rest}{err}");
        assert!(
            eventually(WAIT, || [1, 3]
                .iter()
                .all(|i| billing_down.calls_of(&format!("perm-{i}")) == 2))
            .await,
            "{protocol}: billing {:?}",
            billing_down.calls.lock().unwrap()
        );
        // Everyone has read everything there is: the source, the retry and redrive topics.
        let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &billing);
        assert!(
            eventually(WAIT, || {
                let done = |group: &str, topic: &str, n: usize| {
                    committed(&brokers, group, topic, 2).values().sum::<i64>() == n as i64
                };
                done(&billing, &redrive, 2)
                    && done(&billing, &topic, 18)
                    && done(&shipping, &topic, 18)
                    && done(&shipping, &format!("{topic}-retry-0"), 4)
            })
            .await,
            "{protocol}: the groups did not catch up: billing {:?}, shipping {:?}",
            billing_down.calls.lock().unwrap(),
            shipping_down.calls.lock().unwrap()
        );
        for i in [1, 3] {
            assert_eq!(
                billing_down.calls_of(&format!("perm-{i}")),
                2,
                "{protocol}: billing handles each replayed dead letter exactly once"
            );
        }
        assert_eq!(
            shipping_down.total(),
            18,
            "{protocol}: shipping never sees billing's retries or replays: {:?}",
            shipping_down.calls.lock().unwrap()
        );
        assert_eq!(
            read_all(&brokers, &redrive).len(),
            2,
            "{protocol}: each sent once"
        );
        // What went there, as the operator lists it: billing's, replayed.
        let (code, listed, err) = cli(&[
            "dlq",
            "list",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &redrive,
            "--json",
            "--group",
            &billing,
        ]);
        assert_eq!(code, 0, "{err}");
        let listed: Vec<serde_json::Value> = listed
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(listed.len(), 2, "{protocol}: {listed:?}");
        for entry in &listed {
            let message = entry["envelope"]["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with("replayed to its group's redrive topic, due "),
                "{message}"
            );
            assert_eq!(entry["envelope"]["source"]["topic"], topic.as_str());
        }
        assert!(
            read_all(
                &brokers,
                &kafka_dlq::record::retry::redrive_topic(&topic, &shipping)
            )
            .is_empty(),
            "{protocol}: nothing for shipping"
        );

        // `dlq history` shows both runs, the interrupted one and the one that finished.
        let (code, history, err) = cli(&[
            "dlq",
            "history",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlt,
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        let runs: Vec<serde_json::Value> = history
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(runs.len(), 2, "{protocol}: {history}");
        assert_eq!(runs[0]["operator"], "alice");
        assert_eq!(runs[0]["interrupted"], true);
        assert_eq!(runs[1]["operator"], "bob");
        assert_eq!(runs[1]["interrupted"], false);
        assert_eq!(runs[0]["to"], "group");
        let sent = runs[0]["replayed"].as_u64().unwrap() + runs[1]["replayed"].as_u64().unwrap();
        assert_eq!(sent, 2, "{protocol}: {history}");

        // `--to-source` reaches every group reading the topic, and names them first.
        let (code, out, err) = replay_cli(
            &brokers,
            &dlt,
            &[
                "--to-source",
                "--error-contains",
                "400",
                "--source-partition",
                "0",
            ],
        );
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("replayed 2 of 4"), "{protocol}: {out}");
        assert!(
            err.contains("warning: sent back to")
                && err.contains(&billing)
                && err.contains(&shipping),
            "{protocol}: names both groups: {err}"
        );
        assert!(
            eventually(WAIT, || shipping_down.calls_of("perm-0") == 2
                && shipping_down.calls_of("perm-2") == 2
                && billing_down.calls_of("perm-0") == 2
                && billing_down.calls_of("perm-2") == 2)
            .await,
            "{protocol}: both groups handle what went back to the source: billing {:?}, shipping {:?}",
            billing_down.calls.lock().unwrap(),
            shipping_down.calls.lock().unwrap()
        );
        // Every dead letter went somewhere once: a replay of them all sends none again.
        let (code, out, err) = replay_cli(&brokers, &dlt, &[]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("replayed 0 of 4 scanned") && out.contains("already resolved 4"),
            "{protocol}: {out}"
        );
        stop(b).await;
        stop(s).await;
    }
}
