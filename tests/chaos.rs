//! Zero loss under chaos, on a live group: three `kafka-dlq run` sidecars consume one topic of
//! 6 partitions in one group at once; random members are SIGKILLed at random moments (five
//! kills, each member restarted at once) while the others go on, and the broker is SIGKILLed
//! and restarted once (so DLQ writes, fetches and commits fail for a stretch). 1% of the records
//! fail permanently, half of them slowly (the target takes 300 ms before its 400, so dead
//! letters are in flight at revocations); 5% fail transiently once; 2% fail four times, which
//! uses up their in-process retries and sends them through the retry topic
//! (`--retry-topic-delays 500`), read by the same members. At the end every record was
//! handled by the target or is in the DLQ, the DLQ holds exactly the permanent failures
//! (duplicates counted and printed), and Kafka's own `kafka-consumer-groups --describe` shows
//! lag 0 for the group on the topic and its retry topic. It runs under the classic protocol (cooperative-sticky), then under
//! KIP-848's consumer protocol.
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
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

/// `perm…` → 400 always; `trans…` → 503 the first time, then 200; `tier…` → 503 four times,
/// then 200; `ok…` → 200.
#[derive(Clone, Default)]
struct Target {
    seen: Arc<Mutex<HashMap<String, u32>>>,
    handled: Arc<Mutex<HashMap<String, u32>>>,
    /// Values handled from the retry topic.
    from_tier: Arc<Mutex<BTreeSet<String>>>,
}

async fn answer(State(t): State<Target>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let value = String::from_utf8_lossy(&body).to_string();
    let work = if value.starts_with("permslow") {
        300
    } else {
        10
    };
    tokio::time::sleep(Duration::from_millis(work)).await;
    let calls = {
        let mut seen = t.seen.lock().unwrap();
        let n = seen.entry(value.clone()).or_default();
        *n += 1;
        *n
    };
    let first = calls == 1;
    if value.starts_with("tier") && calls <= 4 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if headers.contains_key("x-kafka-retry-tier") {
        t.from_tier.lock().unwrap().insert(value.clone());
    }
    if value.starts_with("perm") {
        return StatusCode::BAD_REQUEST;
    }
    if value.starts_with("trans") && first {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    *t.handled.lock().unwrap().entry(value).or_default() += 1;
    StatusCode::OK
}

fn spawn_sidecar(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
    protocol: &str,
) -> tokio::process::Child {
    let mut command = sidecar_command(brokers, group, topic, url);
    if protocol == "classic" {
        command
            .args([
                "--kafka-option",
                &format!("session.timeout.ms={}", SESSION_TIMEOUT.as_millis()),
            ])
            .args(["--kafka-option", "heartbeat.interval.ms=1000"]);
    }
    command
        .args([
            "--max-retries",
            "3",
            "--retry-topic-delays",
            "500",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "50",
        ])
        .args(["--group-protocol", protocol])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(sidecar_log()))
        .spawn()
        .unwrap()
}

/// A new log file for a sidecar, in the temporary directory (the test prints their paths when
/// it fails).
fn sidecar_log() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("{}.log", unique("chaos-sidecar")));
    SIDECAR_LOGS.lock().unwrap().push(path.clone());
    std::fs::File::create(path).unwrap()
}

static SIDECAR_LOGS: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

/// The sidecar's `session.timeout.ms` under the classic protocol (the test broker's
/// `group.consumer.session.timeout.ms` is the same): how long a killed sidecar stays a member.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

fn sigkill(child: &tokio::process::Child) {
    unsafe {
        libc::kill(child.id().unwrap() as i32, libc::SIGKILL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_is_lost_when_members_and_the_broker_are_killed_under_both_protocols() {
    for protocol in ["classic", "consumer"] {
        chaos(protocol).await;
    }
}

const PARTITIONS: i32 = 6;
const MEMBERS: usize = 3;

async fn chaos(protocol: &str) {
    let n: usize = std::env::var("CHAOS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let mut kafka = Kafka::start().unwrap();
    let brokers = kafka.brokers();
    let topic = unique("chaos");
    let group = unique("g");
    create_topic(&brokers, &topic, PARTITIONS).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values: Vec<String> = (0..n)
        .map(|i| match i {
            _ if i % 200 == 0 => format!("permslow-{i}"),
            _ if i % 100 == 0 => format!("perm-{i}"),
            _ if i % 20 == 1 => format!("trans-{i}"),
            _ if i % 50 == 7 => format!("tier-{i}"),
            _ => format!("ok-{i}"),
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Out::new(i as i32 % PARTITIONS, v))
            .collect(),
    )
    .await;

    let target = Target::default();
    let app = Router::new()
        .route("/", post(answer))
        .with_state(target.clone());
    let url = format!("http://{}/", serve_on_loopback(app).await);

    let mut rng = fastrand::Rng::with_seed(42);
    let spawn = || spawn_sidecar(&brokers, &group, &topic, &url, protocol);
    let mut members: Vec<tokio::process::Child> = (0..MEMBERS).map(|_| spawn()).collect();
    for kill in 1..=5 {
        tokio::time::sleep(Duration::from_millis(rng.u64(1_000..3_000))).await;
        let victim = rng.usize(..MEMBERS);
        sigkill(&members[victim]);
        let _ = members[victim].wait().await;
        members[victim] = spawn();
        if kill == 3 {
            // The broker goes away for a stretch while the members run: DLQ writes, fetches
            // and commits all fail until it is back.
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            kafka.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            kafka = kafka.restart();
        }
    }

    let deadline = Instant::now() + Duration::from_secs(300);
    let ends: HashMap<i32, i64> = (0..PARTITIONS)
        .map(|p| {
            (
                p,
                values
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i as i32 % PARTITIONS == p)
                    .count() as i64,
            )
        })
        .collect();
    while committed(&brokers, &group, &topic, PARTITIONS) != ends {
        for member in &mut members {
            if let Ok(Some(status)) = member.try_wait() {
                panic!(
                    "{protocol}: a sidecar exited by itself ({status}); logs: {:?}",
                    SIDECAR_LOGS.lock().unwrap()
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "{protocol}: not settled: committed {:?} of {ends:?}; sidecar logs: {:?}",
            committed(&brokers, &group, &topic, PARTITIONS),
            SIDECAR_LOGS.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The source is all settled, so every retry record is written: the retry topic next.
    let retry_topic = format!("{topic}-retry-0");
    let mut retry_ends: HashMap<i32, i64> = HashMap::new();
    for m in read_all(&brokers, &retry_topic) {
        let end = retry_ends.entry(m.partition()).or_default();
        *end = (*end).max(m.offset() + 1);
    }
    while committed(&brokers, &group, &retry_topic, PARTITIONS) != retry_ends {
        assert!(
            Instant::now() < deadline,
            "{protocol}: retry topic not settled: committed {:?} of {retry_ends:?}",
            committed(&brokers, &group, &retry_topic, PARTITIONS),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let lag = group_lag(&brokers, &group);
    assert_eq!(
        lag.len(),
        PARTITIONS as usize * 3,
        "{protocol}: every partition of the topic, its retry topic and the group's redrive topic described: {lag:?}"
    );
    // The redrive topic never held a record: nothing to commit there.
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    assert!(
        lag.iter()
            .all(|(t, _, lag)| *lag == Some(0) || (*t == redrive && lag.is_none())),
        "{protocol}: kafka-consumer-groups shows lag 0: {lag:?}"
    );
    for member in &members {
        unsafe {
            libc::kill(member.id().unwrap() as i32, libc::SIGTERM);
        }
    }
    for member in &mut members {
        let _ = tokio::time::timeout(Duration::from_secs(30), member.wait()).await;
    }

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
        "{protocol}: the DLQ holds exactly the permanent failures"
    );
    let lost: Vec<&String> = values
        .iter()
        .filter(|v| !v.starts_with("perm") && !handled.contains_key(*v))
        .collect();
    assert!(
        lost.is_empty(),
        "{protocol}: lost {} records, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let tiered: BTreeSet<String> = target.from_tier.lock().unwrap().clone();
    let tier_values = values.iter().filter(|v| v.starts_with("tier")).count();
    // Not "most of them": a tier record whose calls a kill or a rebalance interrupted, or whose
    // retry-topic write a revocation abandoned (the broker down meanwhile), is consumed again
    // from its source, where its fifth call succeeds (the target counts calls across members).
    // How many depends on what the members held when the broker went down (once 36 of 100).
    assert!(
        !tiered.is_empty(),
        "{protocol}: tier records were handled from the retry topic: none of {tier_values}"
    );
    let duplicate_handlings: u32 = handled.values().map(|c| c - 1).sum();
    let duplicate_dead_letters = dlq.len() - dead.len();
    eprintln!(
        "chaos ({protocol}): {n} records, {MEMBERS} members, 5 SIGKILLs, 1 broker restart: 0 lost, {} handled ({} from the retry topic), {} dead-lettered; duplicates: {duplicate_handlings} handlings, {duplicate_dead_letters} dead letters; lag 0",
        handled.len(),
        tiered.len(),
        dead.len()
    );
    drop(kafka);
    for log in SIDECAR_LOGS.lock().unwrap().drain(..) {
        let _ = std::fs::remove_file(log);
    }
}
