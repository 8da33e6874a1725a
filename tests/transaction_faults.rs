//! Exactly once when the transaction coordinator fails the way networks do, on Apache Kafka:
//! a commit whose answers are lost for longer than the client waits (a proxy in front of the
//! broker holds every answer once it has passed an `EndTxn` on), and a coordinator that stops
//! answering at all (the broker's process stopped). No input takes effect twice, and the
//! process's own probes answer throughout.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Kafka's `EndTxn` request (the commit or abort of a transaction).
const END_TXN: i16 = 26;

/// A TCP proxy in front of a broker that understands Kafka's framing: once armed, the first
/// `EndTxn` a client sends passes on to the broker, and from then on every answer to every
/// client waits until the hold is over (the requests still reach the broker: its side of the
/// world goes on).
#[derive(Clone, Default)]
struct Proxy {
    target: Arc<OnceLock<String>>,
    armed: Arc<Mutex<Option<Duration>>>,
    hold_until: Arc<Mutex<Option<tokio::time::Instant>>>,
    held: Arc<Mutex<bool>>,
}

impl Proxy {
    /// Listens on a free loopback port; its port.
    async fn start(&self) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = self.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let proxy = proxy.clone();
                tokio::spawn(async move { proxy.serve(client).await });
            }
        });
        port
    }

    /// The next `EndTxn` holds every answer for `hold`.
    fn arm(&self, hold: Duration) {
        *self.armed.lock().unwrap() = Some(hold);
    }

    fn held(&self) -> bool {
        *self.held.lock().unwrap()
    }

    async fn serve(&self, client: tokio::net::TcpStream) {
        let Some(target) = self.target.get() else {
            return; // the broker is not up yet: the client tries again
        };
        let Ok(broker) = tokio::net::TcpStream::connect(target).await else {
            return;
        };
        let (mut client_read, mut client_write) = client.into_split();
        let (mut broker_read, mut broker_write) = broker.into_split();
        let requests = {
            let proxy = self.clone();
            async move {
                while let Some(frame) = read_frame(&mut client_read).await {
                    let api_key = i16::from_be_bytes([frame[4], frame[5]]);
                    if api_key == END_TXN {
                        if let Some(hold) = proxy.armed.lock().unwrap().take() {
                            *proxy.hold_until.lock().unwrap() =
                                Some(tokio::time::Instant::now() + hold);
                            *proxy.held.lock().unwrap() = true;
                        }
                    }
                    if broker_write.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            }
        };
        let answers = {
            let proxy = self.clone();
            async move {
                while let Some(frame) = read_frame(&mut broker_read).await {
                    let until = *proxy.hold_until.lock().unwrap();
                    if let Some(until) = until {
                        tokio::time::sleep_until(until).await;
                    }
                    if client_write.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            }
        };
        tokio::join!(requests, answers);
    }
}

/// One Kafka frame (its 4-byte size and what follows), or `None` at the end of the stream.
async fn read_frame(from: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).await.ok()?;
    let n = i32::from_be_bytes(size).max(0) as usize;
    let mut frame = Vec::with_capacity(4 + n);
    frame.extend_from_slice(&size);
    frame.resize(4 + n, 0);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

/// A target that answers each input with one output to `out`, its key and value the input's.
async fn serve_target(out: &str) -> String {
    let out = out.to_string();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: axum::body::Bytes| {
            let out = out.clone();
            async move {
                let value = String::from_utf8_lossy(&body).to_string();
                serde_json::json!({"produce": [{"topic": out, "key": value, "value": {"from": value}}]})
                    .to_string()
            }
        }),
    );
    format!("http://{}/", serve_on_loopback(app).await)
}

/// Each input's outputs on `out` (`read_committed`), counted by input.
fn outputs(brokers: &str, out: &str, expected: usize) -> HashMap<String, u32> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("read"))
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    consumer.subscribe(&[out]).unwrap();
    let mut counts = HashMap::new();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    // Past the expected count a little, to see a duplicate come.
    let quiet_after = Duration::from_secs(3);
    let mut last = Instant::now();
    while Instant::now() < deadline && (seen < expected || last.elapsed() < quiet_after) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            *counts.entry(key).or_insert(0) += 1;
            seen += 1;
            last = Instant::now();
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answers_are_lost_past_the_clients_patience_takes_effect_once() {
    init_logs();
    let proxy = Proxy::default();
    let port = proxy.start().await;
    let kafka = Kafka::start_behind(port, "").expect("Kafka");
    kafka.keep_log_on_panic();
    proxy.target.set(kafka.listener("PROXIED")).unwrap();
    let direct = kafka.brokers();
    let through = format!("127.0.0.1:{port}");
    let topic = unique("lost-answers-in");
    let out = unique("lost-answers-out");
    let group = unique("lost-answers");
    create_topic(&direct, &topic, 1).await;
    create_topic(&direct, &out, 1).await;
    let values: Vec<String> = (0..200).map(|i| format!("v-{i}")).collect();
    produce(
        &direct,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    let url = serve_target(&out).await;
    let log = std::env::temp_dir().join(format!("{}.log", unique("lost-answers")));
    let mut sidecar = sidecar_command(&through, &group, &topic, &url)
        .args(["--exactly-once", "--output-topics", &out])
        .args(["--transaction-interval-ms", "100"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let progress = || {
        committed(&direct, &group, &topic, 1)
            .get(&0)
            .copied()
            .unwrap_or(0)
    };
    assert!(eventually(Duration::from_secs(60), || progress() > 0).await);
    // The next commit reaches the broker; its answer, and every other, comes 130 s later:
    // past four tries of librdkafka's 30 s, past its socket timeout.
    proxy.arm(Duration::from_secs(130));
    let all = values.len() as i64;
    let done = eventually(Duration::from_secs(330), || progress() == all).await;
    terminate(&mut sidecar).await;
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(done, "committed to {} of {all}\n{said}", progress());
    assert!(proxy.held(), "the proxy held a commit's answers");
    assert!(said.contains("transaction_commit_retried"), "{said}");
    let counts = outputs(&direct, &out, values.len());
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "inputs that took effect twice: {twice:?}");
    assert_eq!(counts.len(), values.len(), "every input took effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_while_the_coordinator_stops_and_no_input_takes_effect_twice() {
    init_logs();
    let kafka = Kafka::start().expect("Kafka");
    kafka.keep_log_on_panic();
    let brokers = kafka.brokers();
    let topic = unique("frozen-in");
    let out = unique("frozen-out");
    let group = unique("frozen");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &out, 1).await;
    let url = serve_target(&out).await;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::env::temp_dir().join(format!("{}.log", unique("frozen")));
    let mut sidecar = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .arg("run")
        .args([
            "--brokers",
            &brokers,
            "--group-id",
            &group,
            "--topics",
            &topic,
        ])
        .args(["--target-url", &url])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .args(["--exactly-once", "--output-topics", &out])
        .args(["--transaction-interval-ms", "100"])
        .kill_on_drop(true)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    // A steady input, before and after the stop.
    let mut produced = 0;
    let mut produce_some = |n: usize| {
        let batch: Vec<Out> = (produced..produced + n)
            .map(|i| Out::new(i as i32 % 2, &format!("v-{i}")))
            .collect();
        produced += n;
        batch
    };
    for _ in 0..10 {
        produce(&brokers, &topic, produce_some(20)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = || -> i64 { committed(&brokers, &group, &topic, 2).values().sum() };
    assert!(eventually(Duration::from_secs(60), || total() > 0).await);
    // The broker stops answering for 20 s, with transactions open; the probes are asked
    // every quarter second.
    let health = format!("http://127.0.0.1:{metrics_port}/healthz");
    let client = reqwest::Client::new();
    kafka.freeze();
    let stopped = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    while stopped.elapsed() < Duration::from_secs(20) {
        let asked = Instant::now();
        let response = client
            .get(&health)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let took = asked.elapsed();
        slowest = slowest.max(took);
        assert!(
            response.is_ok_and(|r| r.status() == 200),
            "/healthz answered after {took:?} with the broker stopped"
        );
        answered += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    kafka.thaw();
    println!("/healthz answered {answered} times while the broker was stopped for 20 s; the slowest took {slowest:?}");
    assert!(slowest < Duration::from_secs(5), "{slowest:?}");
    for _ in 0..5 {
        produce(&brokers, &topic, produce_some(20)).await;
    }
    let all = produced as i64;
    let done = eventually(Duration::from_secs(120), || total() == all).await;
    terminate(&mut sidecar).await;
    assert!(
        done,
        "committed {} of {all}\n{}",
        total(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let counts = outputs(&brokers, &out, produced);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "inputs that took effect twice: {twice:?}");
    assert_eq!(counts.len(), produced, "every input took effect");
}
