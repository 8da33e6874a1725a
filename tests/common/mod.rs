//! Shared test support: a real Apache Kafka node on loopback (one per test binary, killed
//! when the test binary exits; see [`broker`]), topic and record helpers, and a scripted
//! handler that records every call.
#![allow(dead_code)]

pub mod broker;
pub mod dashboard;
pub mod registry_server;
pub mod schema_registry;
pub mod security;
#[allow(unused_imports)]
pub use broker::{group_lag, Kafka};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kafka_dlq::{Handler, HandlerError, Record};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

/// Sends the library's logs to the test output when RUST_LOG is set.
pub fn init_logs() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        if std::env::var("RUST_LOG").is_ok() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// The broker of this test binary: `KAFKA_DLQ_TEST_BROKERS` when set (your own cluster),
/// else an Apache Kafka node started on first use and killed when the binary exits (its log
/// kept, and its path printed, when a test fails).
pub fn brokers() -> String {
    static BROKER: OnceLock<Result<String, String>> = OnceLock::new();
    shared_broker(&BROKER, "KAFKA_DLQ_TEST_BROKERS", Kafka::start)
}

/// The share-group broker of this test binary: an Apache Kafka
/// [`SHARE_KAFKA_VERSION`](broker::SHARE_KAFKA_VERSION) node formatted with `share.version=2`,
/// with 3 s acquisition locks ([`Kafka::start_share`]) and the secured listeners of
/// [`security::start_secured`] beside the plaintext one returned here;
/// `KAFKA_DLQ_TEST_SHARE_BROKERS` when set.
pub fn share_brokers() -> String {
    static BROKER: OnceLock<Result<String, String>> = OnceLock::new();
    shared_broker(&BROKER, "KAFKA_DLQ_TEST_SHARE_BROKERS", || {
        let fixture = security::fixture();
        security::start_secured(&fixture.pki, fixture.oidc, true)
    })
}

/// A broker of this binary on which a week passes in a minute: an idle group's committed
/// offsets expire a minute after its last commit (`offsets.retention.minutes=1`, looked at
/// every 5 s), and a topic created with the broker's defaults keeps its records 60 s
/// (segments of 10 s, looked at every 5 s). Always a node of its own
/// (`KAFKA_DLQ_TEST_EXPIRING_BROKERS` to give one so configured).
#[allow(dead_code)]
pub fn expiring_brokers() -> String {
    static BROKER: OnceLock<Result<String, String>> = OnceLock::new();
    shared_broker(&BROKER, "KAFKA_DLQ_TEST_EXPIRING_BROKERS", || {
        Kafka::start_with(
            false,
            &[],
            "offsets.retention.minutes=1
offsets.retention.check.interval.ms=5000
log.retention.ms=60000
log.segment.ms=10000
log.retention.check.interval.ms=5000
",
            Vec::new(),
            &[],
        )
    })
}

/// The brokers this binary started.
static LOCAL: Mutex<Vec<&'static Kafka>> = Mutex::new(Vec::new());

/// The broker at `brokers` if this binary started it (`None` for `KAFKA_DLQ_TEST_BROKERS`):
/// for a test that reaches into its storage.
pub fn local_kafka(brokers: &str) -> Option<&'static Kafka> {
    LOCAL
        .lock()
        .unwrap()
        .iter()
        .find(|k| k.brokers() == brokers)
        .copied()
}

/// The address in `cell`: the variable `own` when set, else a node `start` starts on first
/// use, kept for the test binary's life.
fn shared_broker(
    cell: &OnceLock<Result<String, String>>,
    own: &str,
    start: fn() -> Result<Kafka, String>,
) -> String {
    init_logs();
    cell.get_or_init(|| {
        if let Ok(brokers) = std::env::var(own) {
            return Ok(brokers);
        }
        start().map(|kafka| {
            kafka.keep_log_on_panic();
            let brokers = kafka.brokers();
            // Kept for the binary's life (never dropped: the JVM dies with the binary).
            LOCAL.lock().unwrap().push(Box::leak(Box::new(kafka)));
            brokers
        })
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Serves `app` on a free loopback port until the test's runtime ends; returns its address.
pub async fn serve_on_loopback(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// `kafka-dlq run`, the sidecar, consuming `topic` in `group` from `brokers` and delivering
/// to `url`, its metrics on a free port, killed when its child is dropped; add flags, spawn.
pub fn sidecar_command(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"));
    command
        .arg("run")
        .args(["--brokers", brokers, "--group-id", group, "--topics", topic])
        .args(["--target-url", url, "--metrics-addr", "127.0.0.1:0"])
        .kill_on_drop(true);
    command
}

/// Runs the `kafka-dlq` binary with `args`: exit code, stdout, stderr.
pub fn cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Runs `kafka-dlq dlq replay --brokers <brokers> --dlq-topic <dlq> <extra…>`: exit code,
/// stdout, stderr.
pub fn replay_cli(brokers: &str, dlq: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["dlq", "replay", "--brokers", brokers, "--dlq-topic", dlq];
    args.extend_from_slice(extra);
    cli(&args)
}

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// Creates `topic` with `partitions` partitions.
pub async fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    create_topic_with(brokers, topic, partitions, &[]).await
}

/// Creates `topic` with `partitions` partitions and the topic settings `settings`.
pub async fn create_topic_with(
    brokers: &str,
    topic: &str,
    partitions: i32,
    settings: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let new = settings.iter().fold(
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
        |t, (k, v)| t.set(k, v),
    );
    let results = admin
        .create_topics(
            &[new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topic");
    for r in results {
        r.unwrap_or_else(|(name, e)| panic!("topic {name} not created: {e}"));
    }
}

/// A record to produce.
pub struct Out {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Header names are bytes: any bytes but NUL (see `kafka_dlq::kafka::headers`).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Out {
    pub fn new(partition: i32, value: &str) -> Self {
        Self {
            partition,
            key: Some(format!("key-{value}").into_bytes()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![],
        }
    }
}

/// Produces `records` in order and waits for every acknowledgement.
pub async fn produce(brokers: &str, topic: &str, records: Vec<Out>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    // Enqueued in order and acknowledged a thousand at a time: the idempotent producer keeps
    // each partition's order with requests in flight, and one round trip per record made
    // 20,000 records take a minute and a half.
    let mut in_flight = Vec::with_capacity(1_000);
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = kafka_dlq::kafka::headers::add(headers, k, v.as_deref());
        }
        let mut out = FutureRecord::<[u8], [u8]>::to(topic)
            .partition(r.partition)
            .headers(headers);
        if let Some(k) = r.key.as_deref() {
            out = out.key(k);
        }
        if let Some(v) = r.value.as_deref() {
            out = out.payload(v);
        }
        in_flight.push(
            producer
                .send_result(out)
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
        if in_flight.len() == 1_000 {
            acknowledged(std::mem::take(&mut in_flight)).await;
        }
    }
    acknowledged(in_flight).await;
}

async fn acknowledged(deliveries: Vec<rdkafka::producer::DeliveryFuture>) {
    for delivery in deliveries {
        delivery
            .await
            .expect("producer dropped")
            .map_err(|(e, _)| e)
            .expect("produce");
    }
}

/// Reads the first `expected` committed records of `topic` (a transactional topic: its commit
/// markers take offsets, so the watermarks do not count its records), without a group.
pub fn read_committed(brokers: &str, topic: &str, expected: usize) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < expected {
        assert!(
            Instant::now() < deadline,
            "read {} of {expected} committed records of {topic}",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            out.push(m.expect("read").detach());
        }
    }
    out
}

/// Reads every record of every partition of `topic` up to the high watermark, without a group.
pub fn read_all(brokers: &str, topic: &str) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut wanted = 0i64;
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        // A topic created a moment ago may not have its leader yet: asked again for 20 s.
        let asked = Instant::now();
        let (low, high) = loop {
            match consumer.fetch_watermarks(topic, *p, Duration::from_secs(10)) {
                Ok(ends) => break ends,
                Err(e) if asked.elapsed() < Duration::from_secs(20) => {
                    eprintln!("watermarks of {topic}/{p}: {e}; asking again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("watermarks of {topic}/{p}: {e}"),
            }
        };
        wanted += high - low;
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (out.len() as i64) < wanted {
        assert!(
            Instant::now() < deadline,
            "read {} of {wanted} records of {topic}",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            out.push(m.expect("read").detach());
        }
    }
    out.sort_by_key(|m| (m.partition(), m.offset()));
    out
}

/// The committed offsets of `group` on `topic`, by partition (missing: none committed);
/// retries while the group coordinator is not ready.
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> HashMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    // A broker that has just started answers "not coordinator" until it has loaded
    // __consumer_offsets: ask again for a while.
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(got) => break got,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("committed offsets of {group}: {e}"),
        }
    };
    got.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// The replay position of `group` on `dlq` in the default positions topic, by partition (the
/// next offset to read; missing: none kept).
#[allow(dead_code)]
pub async fn replay_position(brokers: &str, group: &str, dlq: &str) -> HashMap<i32, i64> {
    let mut store = kafka_dlq::state::PositionStore::new(
        brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
    );
    store.catch_up().await.expect("the positions topic reads");
    store
        .table()
        .group(dlq, group)
        .map(|g| g.partitions.iter().map(|(p, pos)| (*p, pos.next)).collect())
        .unwrap_or_default()
}

/// Writes `next` as the unfiltered replay's position on partition 0 of `dlq`, as `dlq replay`
/// would have.
#[allow(dead_code)]
pub async fn write_replay_position(brokers: &str, dlq: &str, next: i64) {
    let mut store = kafka_dlq::state::PositionStore::new(
        brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
    );
    let key = kafka_dlq::state::PositionKey {
        dlq_topic: dlq.to_string(),
        partition: 0,
        group: kafka_dlq::dlq_reader::REPLAY_GROUP.to_string(),
    };
    let record = kafka_dlq::state::PositionRecord {
        next,
        lost: Vec::new(),
        selection: None,
        run: None,
        operator: Some("test".into()),
        at: chrono::Utc::now(),
        migrated: false,
        honoured: Vec::new(),
    };
    store
        .write(&key, &record)
        .await
        .expect("the position is kept");
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes; says which.
pub async fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One handler call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub value: String,
    pub partition: i32,
    pub offset: i64,
    pub attempt: u32,
}

/// A handler whose behaviour is written in each record's value:
/// - `ok…` succeeds;
/// - `perm…` fails permanently;
/// - `trans<N>…` fails transiently N times, then succeeds;
/// - `always…` always fails transiently;
/// - `slow<MS>…` sleeps MS milliseconds, then succeeds;
/// - `panic…` panics.
#[derive(Clone, Default)]
pub struct Scripted {
    pub calls: Arc<Mutex<Vec<Call>>>,
}

impl Scripted {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn attempts(&self, value: &str) -> usize {
        self.calls().iter().filter(|c| c.value == value).count()
    }

    /// Values whose last call succeeded by the script.
    pub fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

fn leading_number(s: &str) -> u64 {
    s.chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or(0)
}

impl Handler for Scripted {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        let attempt = {
            let mut calls = self.calls.lock().unwrap();
            let attempt = calls.iter().filter(|c| c.value == value).count() as u32 + 1;
            calls.push(Call {
                value: value.clone(),
                partition: record.partition,
                offset: record.offset,
                attempt,
            });
            attempt
        };
        if let Some(rest) = value.strip_prefix("trans") {
            if (attempt as u64) <= leading_number(rest) {
                return Err(HandlerError::transient(format!(
                    "downstream busy (attempt {attempt})"
                )));
            }
        } else if value.starts_with("always") {
            return Err(HandlerError::transient("downstream down"));
        } else if value.starts_with("perm") {
            return Err(HandlerError::permanent(format!("rejected {value}")));
        } else if value.starts_with("panic") {
            panic!("scripted panic for {value}");
        } else if let Some(rest) = value.strip_prefix("slow") {
            tokio::time::sleep(Duration::from_millis(leading_number(rest))).await;
        }
        Ok(())
    }
}

/// Records calls like [`Scripted`] but succeeds every time (the fixed service).
pub struct AlwaysOk(pub Scripted);

impl Handler for AlwaysOk {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        self.0.calls.lock().unwrap().push(Call {
            value,
            partition: record.partition,
            offset: record.offset,
            attempt: 1,
        });
        Ok(())
    }
}

/// A consumer config for tests: small backoff delays, fast shutdown.
pub fn test_config(brokers: &str, group: &str, topic: &str) -> kafka_dlq::ConsumerConfig {
    kafka_dlq::ConsumerConfig {
        max_retries: 3,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        backoff_jitter: 0.0,
        shutdown_timeout: Duration::from_millis(5_000),
        ..kafka_dlq::ConsumerConfig::new(brokers, group, [topic])
    }
}

/// A running consumer and the means to stop it.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kafka_dlq::ConsumerError>>,
}

impl Running {
    pub fn start<H: kafka_dlq::handler::BatchHandler>(
        config: kafka_dlq::ConsumerConfig,
        handler: H,
    ) -> Running {
        init_logs();
        let consumer = kafka_dlq::Consumer::new(config, handler).expect("consumer");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run(async move {
            let _ = rx.await;
        }));
        Running {
            stop: Some(tx),
            task,
        }
    }

    /// Graceful shutdown; waits for it.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("shutdown within 30 s")
            .expect("task")
            .expect("run");
    }

    /// A crash: the consumer task is dropped without draining or committing.
    pub async fn crash(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        drop(self.stop.take());
    }
}

/// Sends SIGTERM to a `kafka-dlq` child and waits for its exit (panics after 30 s).
pub async fn terminate(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    // SAFETY: kill only sends a signal to the child's pid.
    unsafe {
        libc::kill(child.id().expect("the child runs") as i32, libc::SIGTERM);
    }
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits within 30 s of SIGTERM")
        .expect("wait for the child")
}

/// Produces `values` to `topic`'s `partition` through a producer compressing with `codec`,
/// lingering so that they share record batches; waits for every acknowledgement.
pub async fn produce_compressed(
    brokers: &str,
    topic: &str,
    partition: i32,
    codec: &str,
    values: &[String],
) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("compression.type", codec)
        .set("linger.ms", "50")
        .create()
        .unwrap();
    let sends = values.iter().map(|v| {
        producer.send(
            FutureRecord::<(), str>::to(topic)
                .partition(partition)
                .payload(v.as_str()),
            Duration::from_secs(10),
        )
    });
    for sent in futures_util::future::join_all(sends).await {
        sent.map_err(|(e, _)| e).expect("produce");
    }
}

/// Breaks the first record batch of `topic`'s `partition` in `kafka`'s log: its header (61
/// bytes) kept, so the broker still serves it, its compressed records overwritten, so no
/// client can decode it.
pub fn break_first_batch(kafka: &Kafka, topic: &str, partition: i32) {
    use std::io::{Seek, SeekFrom, Write};
    let segment = kafka
        .partition_dir(topic, partition)
        .join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    for b in &mut bytes[61 + 12..61 + 40] {
        *b = 0xA5;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all(&bytes).unwrap();
}

/// Deletes the records of `topic`'s partition 0 before `offset`, as retention does.
pub async fn delete_before(brokers: &str, topic: &str, offset: i64) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset))
        .unwrap();
    admin
        .delete_records(&tpl, &AdminOptions::new())
        .await
        .expect("records deleted");
}
