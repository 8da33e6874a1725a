//! Zero loss under chaos: the real `kafka-dlq run` process is killed with SIGKILL at random
//! moments five times and restarted, and the broker itself is restarted once (so DLQ writes
//! and everything else fail for a stretch). At the end every record was handled by the target
//! or is in the DLQ, the DLQ holds exactly the permanent failures, and duplicates are counted.
//!
//! The target takes 3 ms per record, so the work spans several sidecars: the kills and the broker
//! restart fall while records are being handled and dead-lettered.
//!
//! A killed sidecar leaves its group member behind until its session times out. tansu 0.6 drops
//! such a member correctly when the next member joins after the timeout, but when it notices the
//! timeout on a live member's heartbeat it keeps the dead member's partitions assigned to nobody
//! for good (no new generation). So, as an orchestrator restarting a crashed pod would, the test
//! starts the next sidecar only once the killed one's session (6 s) is over.
//!
//! Short form by default (5,000 records); `CHAOS_RECORDS=50000 cargo test --test chaos` for the
//! long form.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

/// `perm…` → 400 always; `trans…` → 503 the first time, then 200; `ok…` → 200.
#[derive(Clone, Default)]
struct Target {
    seen: Arc<Mutex<HashMap<String, u32>>>,
    handled: Arc<Mutex<HashMap<String, u32>>>,
}

async fn answer(State(t): State<Target>, body: Bytes) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(3)).await;
    let value = String::from_utf8_lossy(&body).to_string();
    let first = {
        let mut seen = t.seen.lock().unwrap();
        let n = seen.entry(value.clone()).or_default();
        *n += 1;
        *n == 1
    };
    if value.starts_with("perm") {
        return StatusCode::BAD_REQUEST;
    }
    if value.starts_with("trans") && first {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    *t.handled.lock().unwrap().entry(value).or_default() += 1;
    StatusCode::OK
}

fn spawn_sidecar(brokers: &str, group: &str, topic: &str, url: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .arg("run")
        .args([
            "--brokers",
            brokers,
            "--group-id",
            group,
            "--topics",
            topic,
            "--target-url",
            url,
        ])
        .args([
            "--max-retries",
            "3",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "50",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args([
            "--kafka-option",
            &format!("session.timeout.ms={}", SESSION_TIMEOUT.as_millis()),
        ])
        .args(["--kafka-option", "heartbeat.interval.ms=1000"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The sidecar's `session.timeout.ms`: how long a killed sidecar stays a group member.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

fn sigkill(child: &tokio::process::Child) {
    unsafe {
        libc::kill(child.id().unwrap() as i32, libc::SIGKILL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_is_lost_when_the_sidecar_is_killed_and_the_broker_restarts() {
    let n: usize = std::env::var("CHAOS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let mut tansu = Tansu::start().unwrap();
    let brokers = tansu.brokers();
    let topic = unique("chaos");
    let group = unique("g");
    create_topic(&brokers, &topic, 4).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values: Vec<String> = (0..n)
        .map(|i| match i {
            _ if i % 100 == 0 => format!("perm-{i}"),
            _ if i % 20 == 1 => format!("trans-{i}"),
            _ => format!("ok-{i}"),
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Out::new((i % 4) as i32, v))
            .collect(),
    )
    .await;

    let target = Target::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/", post(answer))
        .with_state(target.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let mut rng = fastrand::Rng::with_seed(42);
    let mut sidecar = spawn_sidecar(&brokers, &group, &topic, &url);
    for kill in 1..=5 {
        tokio::time::sleep(Duration::from_millis(rng.u64(1_500..4_000))).await;
        sigkill(&sidecar);
        let _ = sidecar.wait().await;
        tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(1)).await;
        if kill == 3 {
            // The broker goes away for a stretch while the next sidecar runs: DLQ writes,
            // fetches and commits all fail until it is back.
            sidecar = spawn_sidecar(&brokers, &group, &topic, &url);
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            tansu.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            tansu = tansu.restart();
            continue;
        }
        sidecar = spawn_sidecar(&brokers, &group, &topic, &url);
    }

    let deadline = Instant::now() + Duration::from_secs(240);
    let end = (n / 4) as i64;
    while committed(&brokers, &group, &topic, 4)
        != HashMap::from([(0, end), (1, end), (2, end), (3, end)])
    {
        assert!(
            Instant::now() < deadline,
            "not settled: committed {:?}",
            committed(&brokers, &group, &topic, 4)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    unsafe {
        libc::kill(sidecar.id().unwrap() as i32, libc::SIGTERM);
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), sidecar.wait()).await;

    let handled = target.handled.lock().unwrap().clone();
    let dlq: Vec<String> = read_all(&brokers, &format!("{topic}-dlt"))
        .iter()
        .map(|m| {
            let env = Envelope::from_slice(m.payload().unwrap()).unwrap();
            String::from_utf8(env.payload_bytes().unwrap().unwrap()).unwrap()
        })
        .collect();
    let dead: BTreeSet<&String> = dlq.iter().collect();
    let permanent: BTreeSet<&String> = values.iter().filter(|v| v.starts_with("perm")).collect();
    assert_eq!(
        dead, permanent,
        "the DLQ holds exactly the permanent failures"
    );
    let lost: Vec<&String> = values
        .iter()
        .filter(|v| !v.starts_with("perm") && !handled.contains_key(*v))
        .collect();
    assert!(
        lost.is_empty(),
        "lost {} records, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let duplicate_handlings: u32 = handled.values().map(|c| c - 1).sum();
    let duplicate_dead_letters = dlq.len() - dead.len();
    eprintln!(
        "chaos: {n} records, 5 SIGKILLs, 1 broker restart: 0 lost, {} handled, {} dead-lettered; duplicates: {duplicate_handlings} handlings, {duplicate_dead_letters} dead letters",
        handled.len(),
        dead.len()
    );
    drop(tansu);
}
