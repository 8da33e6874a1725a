//! Exactly once on Apache Kafka, under both group protocols: a transactional handler's
//! outputs, the dead letters of records that fail, and the offsets commit together, while
//! members join, leave and crash.
//!
//! Inputs are `good…` (one output each), `bad…` (a permanent failure: dead-lettered) and
//! `flaky…` (two transient failures, then one output). Member A starts; B joins; A crashes
//! (its task dropped; its revocation commits what settled); C joins; B leaves. A
//! `read_committed` reader then finds each good or flaky input's output exactly once and each
//! bad input's dead letter exactly once, never both, with the group committed to the end.
//!
//! An output the broker refuses as too large aborts its transaction: a `read_committed`
//! reader then finds every other input's output once (the records refused in the same produce request go again, each in a transaction of
//! its own), and the refused input dead-lettered once, its partition not wedged.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use kafka_dlq::config::GroupProtocol;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::{HandlerError, Output, Record, Transactional, TransactionalHandler};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;

const PARTITIONS: i32 = 4;
const PER_PARTITION: usize = 150;

#[derive(Clone)]
struct Invoicing {
    out: String,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Invoicing {
    fn handled(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

impl TransactionalHandler for Invoicing {
    async fn handle(&self, record: &Record) -> Result<Vec<Output>, HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        let calls = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(value.clone()).or_default();
            *n += 1;
            *n
        };
        // Work that takes a while, so that membership changes find transactions open.
        tokio::time::sleep(Duration::from_millis(15)).await;
        if value.starts_with("bad") {
            return Err(HandlerError::permanent(format!("{value} is malformed")));
        }
        if value.starts_with("flaky") && calls <= 2 {
            return Err(HandlerError::transient("the downstream hiccuped"));
        }
        Ok(vec![
            Output::new(&self.out, format!("out-{value}")).key(value)
        ])
    }
}

/// Every value of `topic` a reader with `isolation` finds: at least `expected` (open
/// transactions of killed members hold a `read_committed` reader back until the broker aborts
/// them), then whatever comes within two idle seconds more.
fn read_values(brokers: &str, topic: &str, isolation: &str, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut values = Vec::new();
    let mut idle_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(90);
    while idle_since.elapsed() < Duration::from_secs(2) || values.len() < expected {
        assert!(
            Instant::now() < deadline,
            "read {} of {expected} records of {topic} ({isolation})",
            values.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("read");
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
            idle_since = Instant::now();
        }
    }
    values
}

async fn each_input_takes_effect_exactly_once(protocol: GroupProtocol) {
    let brokers = brokers();
    let topic = unique("eos-in");
    let out = unique("eos-out");
    let dlq = format!("{topic}-dlt");
    let group = unique("eos");
    create_topic(&brokers, &topic, PARTITIONS).await;
    create_topic(&brokers, &out, 2).await;
    let mut inputs = Vec::new();
    for p in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let kind = match i % 10 {
                3 => "bad",
                6 => "flaky",
                _ => "good",
            };
            inputs.push(Out::new(p, &format!("{kind}-p{p}-{i}")));
        }
    }
    let values: Vec<String> = inputs
        .iter()
        .map(|o| String::from_utf8(o.value.clone().unwrap()).unwrap())
        .collect();
    produce(&brokers, &topic, inputs).await;

    let handler = Invoicing {
        out: out.clone(),
        calls: Arc::default(),
    };
    let config = || {
        let mut config = kafka_dlq::ConsumerConfig {
            group_protocol: protocol,
            exactly_once: true,
            breaker_failure_ratio: 0.0,
            transaction_interval: Duration::from_millis(200),
            ..test_config(&brokers, &group, &topic)
        };
        if protocol == GroupProtocol::Classic {
            config.librdkafka.insert("session.timeout.ms", "6000");
        }
        config
    };
    let total = values.len();
    let start = || Running::start(config(), Transactional(handler.clone()));
    let wait = Duration::from_secs(120);
    let a = start();
    assert!(
        eventually(wait, || handler.handled() > total / 5).await,
        "A started"
    );
    let b = start();
    assert!(
        eventually(wait, || handler.handled() > total * 2 / 5).await,
        "B joined"
    );
    a.crash().await;
    let c = start();
    assert!(
        eventually(wait, || handler.handled() > total * 3 / 5).await,
        "C joined"
    );
    b.stop().await;
    let ends: HashMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION as i64)).collect();
    assert!(
        eventually(Duration::from_secs(180), || committed(
            &brokers, &group, &topic, PARTITIONS
        ) == ends)
        .await,
        "the group commits to the end: {:?}",
        committed(&brokers, &group, &topic, PARTITIONS)
    );
    c.stop().await;

    let bad = values.iter().filter(|v| v.starts_with("bad")).count();
    let outputs = read_values(&brokers, &out, "read_committed", total - bad);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for o in &outputs {
        *seen.entry(o.as_str()).or_default() += 1;
    }
    let letters: Vec<String> = read_values(&brokers, &dlq, "read_committed", bad)
        .iter()
        .map(|v| {
            let e = Envelope::from_slice(v.as_bytes()).expect("an envelope");
            String::from_utf8(e.payload_bytes().unwrap().unwrap()).unwrap()
        })
        .collect();
    let mut dead: HashMap<&str, usize> = HashMap::new();
    for l in &letters {
        *dead.entry(l.as_str()).or_default() += 1;
    }
    for v in &values {
        let output = seen.get(format!("out-{v}").as_str()).copied().unwrap_or(0);
        let letter = dead.get(v.as_str()).copied().unwrap_or(0);
        if v.starts_with("bad") {
            assert_eq!((output, letter), (0, 1), "{v}: one dead letter, no output");
        } else {
            assert_eq!((output, letter), (1, 0), "{v}: one output, no dead letter");
        }
    }
    assert_eq!(
        outputs.len() + letters.len(),
        total,
        "nothing else was committed"
    );
    eprintln!(
        "{protocol:?}: {} outputs committed, {} calls",
        outputs.len(),
        handler.calls.lock().unwrap().values().sum::<usize>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_input_takes_effect_exactly_once_across_crashes_classic() {
    each_input_takes_effect_exactly_once(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_input_takes_effect_exactly_once_across_crashes_consumer_protocol() {
    each_input_takes_effect_exactly_once(GroupProtocol::Consumer).await;
}

struct Plain;

impl kafka_dlq::Handler for Plain {
    async fn handle(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[test]
fn a_transactional_handler_without_exactly_once_is_refused() {
    let config = kafka_dlq::ConsumerConfig::new("127.0.0.1:9", "g", ["t"]);
    let handler = Transactional(Invoicing {
        out: "o".into(),
        calls: Arc::default(),
    });
    let Err(kafka_dlq::ConsumerError::Config(error)) = kafka_dlq::Consumer::new(config, handler)
    else {
        panic!("refused");
    };
    assert_eq!(error.key, "exactly_once", "{error}");
    let config = kafka_dlq::ConsumerConfig {
        exactly_once: true,
        ordering: kafka_dlq::config::Ordering::Key,
        ..kafka_dlq::ConsumerConfig::new("127.0.0.1:9", "g", ["t"])
    };
    let Err(kafka_dlq::ConsumerError::Config(error)) = kafka_dlq::Consumer::new(config, Plain)
    else {
        panic!("refused");
    };
    assert_eq!(error.key, "ordering", "{error}");
}

struct Oversized {
    out: String,
}

impl TransactionalHandler for Oversized {
    async fn handle(&self, record: &Record) -> Result<Vec<Output>, HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        // Past the output topic's max.message.bytes (2 kB), under the producer's own limit.
        let body = if value.starts_with("huge") {
            "x".repeat(8_000)
        } else {
            value.clone()
        };
        Ok(vec![
            Output::new(&self.out, format!("out-{body}")).key(value)
        ])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_the_broker_refuses_aborts_then_dead_letters_its_record_once() {
    let brokers = brokers();
    let topic = unique("eos-large-in");
    let out = unique("eos-large-out");
    let dlq = format!("{topic}-dlt");
    let group = unique("eos-large");
    create_topic(&brokers, &topic, 1).await;
    create_topic_with(&brokers, &out, 1, &[("max.message.bytes", "2000")]).await;
    let values: Vec<String> = (0..40)
        .map(|i| {
            if i == 25 {
                format!("huge-{i}")
            } else {
                format!("fine-{i}")
            }
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    let config = kafka_dlq::ConsumerConfig {
        exactly_once: true,
        // One transaction for all: the refused output takes the others' with it.
        transaction_records: 100,
        transaction_interval: Duration::from_millis(500),
        ..test_config(&brokers, &group, &topic)
    };
    init_logs();
    let consumer = kafka_dlq::Consumer::new(config, Transactional(Oversized { out: out.clone() }))
        .expect("consumer");
    let metrics = consumer.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let ends = HashMap::from([(0, values.len() as i64)]);
    assert!(
        eventually(Duration::from_secs(60), || committed(
            &brokers, &group, &topic, 1
        ) == ends)
        .await,
        "the partition is not wedged: {:?}",
        committed(&brokers, &group, &topic, 1)
    );
    let _ = stop.send(());
    running.await.unwrap().expect("run");
    let transactions = metrics.render();
    let aborted = transactions
        .lines()
        .find(|l| l.starts_with("kafka_dlq_transactions_total") && l.contains("aborted"))
        .unwrap_or_default()
        .to_string();
    // The refused request's transaction, and the one of the record sent again alone that
    // holds the large output (librdkafka may fail the transaction after each with "skipped
    // sequence numbers" while it bumps the producer's epoch: an abort more each).
    let aborted: f64 = aborted
        .rsplit(' ')
        .next()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0.0);
    assert!(
        (2.0..=4.0).contains(&aborted),
        "two transactions aborted, with librdkafka's recoveries at most four: {aborted}"
    );
    let outputs = read_values(&brokers, &out, "read_committed", values.len() - 1);
    let expected: Vec<String> = values
        .iter()
        .filter(|v| v.starts_with("fine"))
        .map(|v| format!("out-{v}"))
        .collect();
    assert_eq!(
        outputs, expected,
        "each other input's output once, in order"
    );
    let letters: Vec<Envelope> = read_values(&brokers, &dlq, "read_committed", 1)
        .iter()
        .map(|v| Envelope::from_slice(v.as_bytes()).expect("an envelope"))
        .collect();
    assert_eq!(letters.len(), 1, "the refused input's one dead letter");
    assert_eq!(letters[0].id, format!("{topic}-0-25"));
    assert!(
        letters[0].error.message.contains("too large"),
        "{:?}",
        letters[0].error
    );
}

/// The sidecars' target: `ok…` answers one record to produce; `flaky…` fails with 503
/// twice, then answers like `ok…`; `bad…` answers 400; `forbidden…` asks to produce to a
/// topic outside `--output-topics`. It counts calls across members.
#[derive(Clone)]
struct Target {
    out: String,
    calls: Arc<Mutex<HashMap<String, u32>>>,
}

async fn answer(
    axum::extract::State(t): axum::extract::State<Target>,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, String) {
    let value = String::from_utf8_lossy(&body).to_string();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let calls = {
        let mut calls = t.calls.lock().unwrap();
        let n = calls.entry(value.clone()).or_default();
        *n += 1;
        *n
    };
    let produce = |topic: &str| {
        serde_json::json!({"produce": [{"topic": topic, "key": value, "value": {"from": value}}]})
            .to_string()
    };
    match value.split('-').next().unwrap_or_default() {
        "bad" => (axum::http::StatusCode::BAD_REQUEST, "malformed".into()),
        "flaky" if calls <= 2 => (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new()),
        "forbidden" => (axum::http::StatusCode::OK, produce("payments")),
        _ => (axum::http::StatusCode::OK, produce(&t.out)),
    }
}

/// Produces `values` round-robin over `partitions` of `topic`, and serves a [`Target`]
/// producing to `out` on loopback: the target and its URL.
async fn produce_and_serve(
    brokers: &str,
    topic: &str,
    values: &[String],
    partitions: i32,
    out: &str,
) -> (Target, String) {
    produce(
        brokers,
        topic,
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Out::new(i as i32 % partitions, v))
            .collect(),
    )
    .await;
    let target = Target {
        out: out.to_string(),
        calls: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(answer))
        .with_state(target.clone());
    let url = format!("http://{}/", serve_on_loopback(app).await);
    (target, url)
}

fn spawn_eos_sidecar(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
    out: &str,
    protocol: &str,
    interval_ms: u64,
) -> (tokio::process::Child, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("{}.log", unique("eos-sidecar")));
    let mut command = sidecar_command(brokers, group, topic, url);
    if protocol == "classic" {
        command
            .args(["--kafka-option", "session.timeout.ms=6000"])
            .args(["--kafka-option", "heartbeat.interval.ms=1000"]);
    }
    let child = command
        .args(["--exactly-once", "--output-topics", out])
        .args(["--transaction-interval-ms", &interval_ms.to_string()])
        .args([
            "--max-retries",
            "3",
            "--backoff-initial-ms",
            "10",
            "--backoff-max-ms",
            "50",
        ])
        .args(["--breaker-failure-ratio", "0"])
        .args(["--group-protocol", protocol])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    (child, log)
}

fn signal(child: &tokio::process::Child, signal: i32) {
    // SAFETY: kill only sends a signal to the child's pid.
    unsafe {
        libc::kill(child.id().expect("the child runs") as i32, signal);
    }
}

/// The values of `dlq`'s dead letters (`read_committed`) and their error messages.
fn dead_letters(brokers: &str, dlq: &str, expected: usize) -> Vec<(String, String)> {
    read_values(brokers, dlq, "read_committed", expected)
        .iter()
        .map(|v| {
            let e = Envelope::from_slice(v.as_bytes()).expect("an envelope");
            let value = String::from_utf8(e.payload_bytes().unwrap().unwrap()).unwrap();
            (value, e.error.message)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_take_effect_exactly_once_through_kills_and_a_broker_restart() {
    for protocol in ["classic", "consumer"] {
        sidecars_through_kills(protocol).await;
    }
}

async fn sidecars_through_kills(protocol: &str) {
    const PARTITIONS: i32 = 6;
    let mut kafka = Kafka::start().unwrap();
    let brokers = kafka.brokers();
    let topic = unique("eos-chaos");
    let out = unique("eos-chaos-out");
    let dlq = format!("{topic}-dlt");
    let group = unique("eos-chaos");
    create_topic(&brokers, &topic, PARTITIONS).await;
    create_topic(&brokers, &out, 3).await;
    let values: Vec<String> = (0..3_000)
        .map(|i| match i % 20 {
            3 => format!("bad-{i}"),
            7 | 11 => format!("flaky-{i}"),
            13 if i % 100 == 13 => format!("forbidden-{i}"),
            _ => format!("ok-{i}"),
        })
        .collect();
    let (target, url) = produce_and_serve(&brokers, &topic, &values, PARTITIONS, &out).await;
    // Transactions of a second: a member killed while it works holds one open, with outputs.
    let spawn = || spawn_eos_sidecar(&brokers, &group, &topic, &url, &out, protocol, 1_000);
    let mut members: Vec<_> = (0..3).map(|_| spawn()).collect();
    let calls = || target.calls.lock().unwrap().len();
    assert!(
        eventually(Duration::from_secs(60), || calls() > values.len() / 10).await,
        "{protocol}: the members work before the first kill"
    );
    let mut rng = fastrand::Rng::with_seed(7);
    for kill in 1..=3 {
        tokio::time::sleep(Duration::from_millis(rng.u64(1_500..3_000))).await;
        let victim = rng.usize(..members.len());
        signal(&members[victim].0, libc::SIGKILL);
        let _ = members[victim].0.wait().await;
        members[victim] = spawn();
        if kill == 2 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            kafka.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            kafka = kafka.restart();
        }
    }
    let ends: HashMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, values.len() as i64 / PARTITIONS as i64))
        .collect();
    let logs: Vec<_> = members.iter().map(|(_, log)| log.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    while committed(&brokers, &group, &topic, PARTITIONS) != ends {
        for (member, log) in &mut members {
            if let Ok(Some(status)) = member.try_wait() {
                panic!("{protocol}: a sidecar exited by itself ({status}); its log: {log:?}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{protocol}: not settled: committed {:?} of {ends:?}; logs {logs:?}",
            committed(&brokers, &group, &topic, PARTITIONS)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (member, _) in &members {
        signal(member, libc::SIGTERM);
    }
    for (member, _) in &mut members {
        let _ = tokio::time::timeout(Duration::from_secs(30), member.wait()).await;
    }

    let failing = |v: &&String| v.starts_with("bad") || v.starts_with("forbidden");
    let good: Vec<&String> = values.iter().filter(|v| !failing(v)).collect();
    let outputs = read_values(&brokers, &out, "read_committed", good.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for o in &outputs {
        *seen.entry(o.as_str()).or_default() += 1;
    }
    let letters = dead_letters(&brokers, &dlq, values.len() - good.len());
    let mut dead: HashMap<&str, usize> = HashMap::new();
    for (value, why) in &letters {
        *dead.entry(value.as_str()).or_default() += 1;
        if value.starts_with("forbidden") {
            assert!(
                why.contains("is not one of --output-topics"),
                "{value}: {why}"
            );
        }
    }
    for v in &values {
        let output = seen
            .get(serde_json::json!({"from": v}).to_string().as_str())
            .copied()
            .unwrap_or(0);
        let letter = dead.get(v.as_str()).copied().unwrap_or(0);
        let expected = if failing(&v) { (0, 1) } else { (1, 0) };
        assert_eq!(
            (output, letter),
            expected,
            "{protocol}: {v}: (outputs, dead letters)"
        );
    }
    let uncommitted = read_values(&brokers, &out, "read_uncommitted", outputs.len());
    let calls: u32 = target.calls.lock().unwrap().values().sum();
    eprintln!(
        "eos chaos ({protocol}): {} inputs, 3 SIGKILLs, 1 broker restart: {} outputs and {} dead letters committed, each once; {} outputs written in all (aborted included); {calls} calls",
        values.len(),
        outputs.len(),
        letters.len(),
        uncommitted.len()
    );
    assert!(
        uncommitted.len() > outputs.len(),
        "{protocol}: the killed members' transactions wrote outputs that were then aborted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_until_its_partitions_moved_commits_nothing() {
    let brokers = brokers();
    let topic = unique("eos-zombie");
    let out = unique("eos-zombie-out");
    let group = unique("eos-zombie");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &out, 1).await;
    let values: Vec<String> = (0..400).map(|i| format!("ok-{i}")).collect();
    let (target, url) = produce_and_serve(&brokers, &topic, &values, 2, &out).await;
    let calls = || target.calls.lock().unwrap().len();
    // Long transactions: the zombie holds one open when it is stopped.
    let (mut zombie, zombie_log) =
        spawn_eos_sidecar(&brokers, &group, &topic, &url, &out, "classic", 2_000);
    assert!(
        eventually(Duration::from_secs(60), || calls() > 50).await,
        "the first member works"
    );
    signal(&zombie, libc::SIGSTOP);
    let stopped_at = calls();
    let (mut heir, _) = spawn_eos_sidecar(&brokers, &group, &topic, &url, &out, "classic", 2_000);
    // Past the zombie's session (6 s): its partitions moved to the heir, which handles again
    // what the zombie had not committed.
    tokio::time::sleep(Duration::from_secs(8)).await;
    signal(&zombie, libc::SIGCONT);
    let ends = HashMap::from([(0, 200), (1, 200)]);
    assert!(
        eventually(Duration::from_secs(120), || committed(
            &brokers, &group, &topic, 2
        ) == ends)
        .await,
        "the heir commits to the end: {:?}",
        committed(&brokers, &group, &topic, 2)
    );
    signal(&heir, libc::SIGTERM);
    let _ = tokio::time::timeout(Duration::from_secs(30), heir.wait()).await;
    signal(&zombie, libc::SIGTERM);
    let _ = tokio::time::timeout(Duration::from_secs(30), zombie.wait()).await;
    let outputs = read_values(&brokers, &out, "read_committed", values.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for o in &outputs {
        *seen.entry(o.as_str()).or_default() += 1;
    }
    for v in &values {
        let key = serde_json::json!({"from": v}).to_string();
        assert_eq!(seen.get(key.as_str()), Some(&1), "{v}: one output");
    }
    let log = std::fs::read_to_string(&zombie_log).unwrap();
    let fenced = log.contains("transaction_aborted") || log.contains("transaction_failed");
    eprintln!(
        "zombie: stopped after {stopped_at} calls; its log says it was fenced: {fenced}; {} outputs committed, each once",
        outputs.len()
    );
    assert!(
        fenced,
        "the zombie's transaction was refused: see {zombie_log:?}"
    );
}

/// Fails the first four calls of each `tier…` record (its three in-process retries used up:
/// to the retry topic), then produces one output; `ok…` produces one output at once.
struct Tiered {
    out: String,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl TransactionalHandler for Tiered {
    async fn handle(&self, record: &Record) -> Result<Vec<Output>, HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        let calls = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(value.clone()).or_default();
            *n += 1;
            *n
        };
        if value.starts_with("tier") && calls <= 4 {
            return Err(HandlerError::transient("not yet"));
        }
        Ok(vec![Output::new(&self.out, format!("out-{value}"))])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_through_a_retry_topic_takes_effect_once() {
    let brokers = brokers();
    let topic = unique("eos-tier");
    let out = unique("eos-tier-out");
    let group = unique("eos-tier");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &out, 1).await;
    let values: Vec<String> = (0..60)
        .map(|i| {
            if i % 6 == 0 {
                format!("tier-{i}")
            } else {
                format!("ok-{i}")
            }
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values
            .iter()
            .enumerate()
            .map(|(i, v)| Out::new(i as i32 % 2, v))
            .collect(),
    )
    .await;
    let calls = Arc::new(Mutex::new(HashMap::new()));
    let config = kafka_dlq::ConsumerConfig {
        exactly_once: true,
        retry_topic_delays_ms: "300".parse().unwrap(),
        breaker_failure_ratio: 0.0,
        ..test_config(&brokers, &group, &topic)
    };
    let consumer = Running::start(
        config,
        Transactional(Tiered {
            out: out.clone(),
            calls: calls.clone(),
        }),
    );
    let outputs_seen = || {
        calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(v, n)| !v.starts_with("tier") || **n > 4)
            .count()
    };
    assert!(
        eventually(Duration::from_secs(90), || outputs_seen() == values.len()).await,
        "every record handled, the tier ones from the retry topic: {} of {}",
        outputs_seen(),
        values.len()
    );
    let retry_topic = format!("{topic}-retry-0");
    let ends = HashMap::from([(0, 30), (1, 30)]);
    assert!(
        eventually(Duration::from_secs(60), || committed(
            &brokers, &group, &topic, 2
        ) == ends)
        .await,
        "the source is committed to the end"
    );
    consumer.stop().await;
    let outputs = read_values(&brokers, &out, "read_committed", values.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for o in &outputs {
        *seen.entry(o.as_str()).or_default() += 1;
    }
    for v in &values {
        assert_eq!(
            seen.get(format!("out-{v}").as_str()),
            Some(&1),
            "{v}: one output"
        );
    }
    let retried = read_values(&brokers, &retry_topic, "read_committed", 10);
    assert_eq!(
        retried.len(),
        10,
        "each tier record written to the retry topic once: {retried:?}"
    );
    assert!(retried.iter().all(|v| v.starts_with("tier")), "{retried:?}");
}

/// The target of [`outputs_the_broker_never_takes_dead_letter_their_records_once`]: each
/// input's output to `out` (compacted), keyed; `nokey-…` without a key, which a compacted
/// topic refuses (INVALID_RECORD); `huge-…` its whole value to `small`, larger than that topic
/// takes.
#[derive(Clone)]
struct Refusing {
    out: String,
    small: String,
    calls: Arc<Mutex<HashMap<String, u32>>>,
}

async fn refusing(
    axum::extract::State(t): axum::extract::State<Refusing>,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, String) {
    let value = String::from_utf8_lossy(&body).to_string();
    let name: String = value.chars().take(12).collect();
    *t.calls.lock().unwrap().entry(name.clone()).or_default() += 1;
    let produce = match value.split('-').next().unwrap_or_default() {
        "nokey" => serde_json::json!({"topic": t.out, "key": null, "value": {"from": name}}),
        "huge" => serde_json::json!({"topic": t.small, "key": name, "value": value}),
        _ => serde_json::json!({"topic": t.out, "key": name, "value": {"from": name}}),
    };
    (
        axum::http::StatusCode::OK,
        serde_json::json!({ "produce": [produce] }).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_the_broker_never_takes_dead_letter_their_records_once() {
    let brokers = brokers();
    let topic = unique("eos-refused-in");
    let out = unique("eos-invoices");
    let small = unique("eos-small");
    let dlq = format!("{topic}-dlt");
    let group = unique("eos-refused");
    create_topic(&brokers, &topic, 1).await;
    create_topic_with(&brokers, &out, 1, &[("cleanup.policy", "compact")]).await;
    create_topic_with(&brokers, &small, 1, &[("max.message.bytes", "2000")]).await;
    // Its dead letter with the payload does not fit either: only its reference does.
    let dlq_settings = [("max.message.bytes", "20000"), ("retention.ms", "-1")];
    create_topic_with(&brokers, &dlq, 1, &dlq_settings).await;
    let huge = format!("huge-{}", "x".repeat(50_000));
    let values: Vec<String> = (0..30)
        .map(|i| match i {
            7 | 21 => format!("nokey-{i}"),
            15 => huge.clone(),
            i => format!("ok-{i}"),
        })
        .collect();
    let records = values
        .iter()
        .enumerate()
        .map(|(i, v)| Out {
            key: Some(format!("k-{i}").into_bytes()),
            ..Out::new(0, v)
        })
        .collect();
    produce(&brokers, &topic, records).await;
    let target = Refusing {
        out: out.clone(),
        small: small.clone(),
        calls: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::post(refusing))
        .with_state(target.clone());
    let url = format!("http://{}/", serve_on_loopback(app).await);
    let log = std::env::temp_dir().join(format!("{}.log", unique("eos-refused")));
    let mut sidecar = sidecar_command(&brokers, &group, &topic, &url)
        .args([
            "--exactly-once",
            "--output-topics",
            &format!("{out},{small}"),
        ])
        .args(["--transaction-interval-ms", "200"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let ends = HashMap::from([(0, values.len() as i64)]);
    let done = eventually(Duration::from_secs(60), || {
        committed(&brokers, &group, &topic, 1) == ends
    })
    .await;
    terminate(&mut sidecar).await;
    assert!(
        done,
        "the group commits to the end within a minute: {:?}\n{}",
        committed(&brokers, &group, &topic, 1),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Every other input's output once; each refused one's dead letter once, saying why.
    let outputs = read_values(&brokers, &out, "read_committed", 27);
    assert_eq!(outputs.len(), 27, "{outputs:?}");
    assert!(read_values(&brokers, &small, "read_committed", 0).is_empty());
    let letters: Vec<Envelope> = read_values(&brokers, &dlq, "read_committed", 3)
        .iter()
        .map(|v| Envelope::from_slice(v.as_bytes()).expect("an envelope"))
        .collect();
    let mut ids: Vec<String> = letters.iter().map(|e| e.id.clone()).collect();
    ids.sort();
    let mut expected = vec![
        format!("{topic}-0-15"),
        format!("{topic}-0-21"),
        format!("{topic}-0-7"),
    ];
    expected.sort();
    assert_eq!(ids, expected, "each refused input dead-lettered once");
    for letter in &letters {
        let offset = letter.source.offset;
        match offset {
            15 => assert_eq!(
                letter.payload_encoding,
                kafka_dlq::dlq::Encoding::Reference,
                "too large, then its dead letter too: the reference"
            ),
            _ => assert!(
                letter.error.message.contains("InvalidRecord")
                    || letter.error.message.contains("validate"),
                "{}",
                letter.error.message
            ),
        }
    }
    // The target was not called for ever (the wedge called every input until the deadline:
    // hundreds of times). Each refused input costs a few aborts — its output refused, its
    // whole dead letter refused, one more when librdkafka must bump its epoch after them —
    // and each abort calls the inputs after it again. Three per refused input is the usual
    // count; a fourth or fifth comes when the next transaction's offsets reach the producer
    // before its epoch bump is done ("Failed to commit offsets to transaction … Erroneous
    // state", seen in CI: 11 calls of one input). Bounded either way; the core rebuild
    // (waiting for the bump) is where that extra abort goes away.
    let calls = target.calls.lock().unwrap().clone();
    let most = calls.values().max().copied().unwrap_or_default();
    println!("calls of the target per input: at most {most}: {calls:?}");
    assert!(most <= 5 * 3 + 1, "{calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_refuses_outputs_it_could_never_write_or_would_loop_on() {
    let brokers = brokers();
    let topic = unique("eos-typo-in");
    create_topic(&brokers, &topic, 1).await;
    let group = unique("eos-typo");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--brokers",
            &brokers,
            "--group-id",
            &group,
            "--topics",
            &topic,
            "--target-url",
            "http://127.0.0.1:9/",
            "--exactly-once",
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let missing = unique("invoice");
    let (code, _, err) = run(&["--output-topics", &missing]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("output_topics") && err.contains(&missing) && err.contains("does not exist"),
        "{err}"
    );
    let (code, _, err) = run(&["--output-topics", &topic]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("consumes"), "{err}");
    for forged in ["kafka-dlq-audit", "orders-dlt", "orders-retry-0"] {
        let (code, _, err) = run(&["--output-topics", forged]);
        assert_eq!(code, 2, "{forged}: {err}");
    }
    let (code, _, err) = run(&["--kafka-option", "isolation.level=read_uncommitted"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("isolation.level"), "{err}");
}
