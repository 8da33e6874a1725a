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

/// The requests only the transaction coordinator is sent: `InitProducerId`,
/// `AddPartitionsToTxn`, `AddOffsetsToTxn`, `EndTxn`, `TxnOffsetCommit`.
const TO_THE_TRANSACTION_COORDINATOR: [i16; 5] = [22, 24, 25, 26, 28];

/// A TCP proxy in front of a broker that understands Kafka's framing: once armed, the chosen
/// `EndTxn` a client sends passes on to the broker, and from then on the answers on every
/// connection that carries the transaction coordinator's requests wait until the hold is over
/// (the requests still reach the broker: its side of the world goes on), while the consumer's
/// fetches and heartbeats flow: a partition between the member and its transaction
/// coordinator only.
#[derive(Clone, Default)]
struct Proxy {
    target: Arc<OnceLock<String>>,
    /// The `EndTxn` requests to let by first, and how long to hold the answers after the next.
    armed: Arc<Mutex<Option<(u32, Duration)>>>,
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

    /// After `after` `EndTxn` requests, the next holds every answer for `hold`.
    fn arm(&self, after: u32, hold: Duration) {
        *self.armed.lock().unwrap() = Some((after, hold));
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
        // Whether this connection carries the transaction coordinator's requests.
        let coordinator = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let requests = {
            let proxy = self.clone();
            let coordinator = coordinator.clone();
            async move {
                while let Some(frame) = read_frame(&mut client_read).await {
                    let api_key = i16::from_be_bytes([frame[4], frame[5]]);
                    if TO_THE_TRANSACTION_COORDINATOR.contains(&api_key) {
                        coordinator.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    if api_key == END_TXN {
                        let mut armed = proxy.armed.lock().unwrap();
                        match armed.as_mut() {
                            Some((0, hold)) => {
                                *proxy.hold_until.lock().unwrap() =
                                    Some(tokio::time::Instant::now() + *hold);
                                *proxy.held.lock().unwrap() = true;
                                *armed = None;
                            }
                            Some((after, _)) => *after -= 1,
                            None => {}
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
                    let held = coordinator.load(std::sync::atomic::Ordering::SeqCst);
                    if let Some(until) = until.filter(|_| held) {
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

/// A target that answers each input with one output to `out`, its key and value the input's,
/// after `work`.
async fn serve_target(out: &str, work: Duration) -> String {
    let out = out.to_string();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: axum::body::Bytes| {
            let out = out.clone();
            async move {
                tokio::time::sleep(work).await;
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
    // A few milliseconds a call: the held commit falls in the middle of the stream.
    let url = serve_target(&out, Duration::from_millis(10)).await;
    // The sixth commit reaches the broker; its answer, and every answer of the transaction
    // coordinator, comes 130 s later: past four tries of librdkafka's 30 s, past its socket
    // timeout and its reconnections. The group's heartbeats and the fetches go on.
    proxy.arm(5, Duration::from_secs(130));
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
    let all = values.len() as i64;
    let done = eventually(Duration::from_secs(330), || progress() == all).await;
    terminate(&mut sidecar).await;
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(done, "committed to {} of {all}\n{said}", progress());
    assert!(proxy.held(), "the proxy held a commit's answers");
    let counts = outputs(&direct, &out, values.len());
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "inputs that took effect twice: {twice:?}");
    assert_eq!(counts.len(), values.len(), "every input took effect");
    assert!(said.contains("transaction_commit_retried"), "{said}");
}

/// Each input's output to `out` after a few milliseconds of work: when the broker stops,
/// both partitions' workers have records in hand to settle, and a commit is under way.
struct Echo {
    out: String,
}

impl kafka_dlq::TransactionalHandler for Echo {
    async fn handle(
        &self,
        record: &kafka_dlq::Record,
    ) -> Result<Vec<kafka_dlq::Output>, kafka_dlq::HandlerError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        Ok(vec![
            kafka_dlq::Output::new(&self.out, value.clone()).key(value)
        ])
    }
}

/// The runtime's other work goes on while the coordinator does not answer: a task that ticks
/// every 50 ms on the same two-thread runtime as the consumer's workers, and the health
/// probes, never wait for a commit (a lock held across the broker's calls blocked both
/// threads for as long as the broker was stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_goes_on_while_the_coordinator_stops_and_no_input_takes_effect_twice() {
    init_logs();
    let kafka = Kafka::start().expect("Kafka");
    kafka.keep_log_on_panic();
    let brokers = kafka.brokers();
    let topic = unique("frozen-in");
    let out = unique("frozen-out");
    let group = unique("frozen");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &out, 1).await;
    let produced = 3_000;
    let values: Vec<Out> = (0..produced)
        .map(|i| Out::new(i as i32 % 2, &format!("v-{i}")))
        .collect();
    produce(&brokers, &topic, values).await;
    let config = kafka_dlq::ConsumerConfig {
        exactly_once: true,
        transaction_interval: Duration::from_millis(100),
        ..test_config(&brokers, &group, &topic)
    };
    let consumer =
        kafka_dlq::Consumer::new(config, kafka_dlq::Transactional(Echo { out: out.clone() }))
            .expect("consumer");
    let metrics = consumer.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let total = || -> i64 { committed(&brokers, &group, &topic, 2).values().sum() };
    assert!(eventually(Duration::from_secs(60), || total() > 200).await);
    // The broker stops answering for 20 s, with transactions open and records in hand.
    let ticks = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                ticks.lock().unwrap().push(Instant::now());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    kafka.freeze();
    tokio::time::sleep(Duration::from_secs(20)).await;
    kafka.thaw();
    ticker.abort();
    let ticks = ticks.lock().unwrap().clone();
    let longest = ticks
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(Duration::MAX);
    println!(
        "while the broker was stopped for 20 s a task ticked {} times; the longest gap was {longest:?}; /healthz says {:?}",
        ticks.len(),
        metrics.health()
    );
    assert!(longest < Duration::from_secs(5), "{longest:?}");
    let all = produced as i64;
    let done = eventually(Duration::from_secs(120), || total() == all).await;
    let _ = stop.send(());
    running.await.unwrap().expect("run");
    assert!(done, "committed {} of {all}", total());
    let counts = outputs(&brokers, &out, produced);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "inputs that took effect twice: {twice:?}");
    assert_eq!(counts.len(), produced, "every input took effect");
}
