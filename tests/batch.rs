//! Batch handling with poison isolation, the example SQLite sink, and the outage breaker,
//! against a real broker.

mod common;

#[path = "../examples/sqlite_sink/sink.rs"]
#[allow(dead_code)]
mod sink;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::handler::BatchHandler;
use kafka_dlq::{ConsumerConfig, HandlerError, Record};
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(60);

/// A bulk writer: a batch fails as a whole when any record in it is poison (`poison…`
/// permanently, `down…` transiently); records every call.
#[derive(Clone, Default)]
struct Bulk {
    calls: Arc<Mutex<Vec<Vec<String>>>>,
    stored: Arc<Mutex<Vec<String>>>,
}

impl Bulk {
    fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
    fn stored(&self) -> Vec<String> {
        self.stored.lock().unwrap().clone()
    }
}

impl BatchHandler for Bulk {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let values: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).to_string())
            .collect();
        self.calls.lock().unwrap().push(values.clone());
        if let Some(bad) = values.iter().find(|v| v.starts_with("poison")) {
            return Err(HandlerError::permanent(format!(
                "row {bad} violates a constraint"
            )));
        }
        if let Some(bad) = values.iter().find(|v| v.starts_with("down")) {
            return Err(HandlerError::transient(format!("timeout writing {bad}")));
        }
        self.stored.lock().unwrap().extend(values);
        Ok(())
    }
}

fn batch_config(brokers: &str, group: &str, topic: &str, batch_size: usize) -> ConsumerConfig {
    ConsumerConfig {
        batch_size,
        batch_linger: Duration::from_millis(2_000),
        max_buffered_records: 1_000,
        max_retries: 2,
        breaker_failure_ratio: 0.0,
        ..test_config(brokers, group, topic)
    }
}

fn ceil_log2(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize
}

/// Runs one batch of `n` records with poison at `poison` (indexes) and checks the outcome.
/// Returns the number of handler calls.
async fn run_scenario(name: &str, n: usize, poison: &[usize], transient: bool) -> usize {
    let brokers = brokers();
    let topic = unique(name);
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let values: Vec<String> = (0..n)
        .map(|i| match (poison.contains(&i), transient) {
            (true, false) => format!("poison-{i}"),
            (true, true) => format!("down-{i}"),
            (false, _) => format!("ok-{i}"),
        })
        .collect();
    produce(
        &brokers,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;

    let bulk = Bulk::default();
    let running = Running::start(batch_config(&brokers, &group, &topic, n), bulk.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&(n as i64)))
        .await,
        "{name}: every record settled"
    );
    running.stop().await;

    let first = bulk.calls.lock().unwrap()[0].len();
    assert_eq!(first, n, "{name}: the first call had the whole batch");
    let stored = bulk.stored();
    let good: Vec<&String> = values.iter().filter(|v| v.starts_with("ok")).collect();
    assert_eq!(
        stored.len(),
        good.len(),
        "{name}: every good record handled once"
    );
    assert_eq!(
        stored.iter().collect::<BTreeSet<_>>(),
        good.iter().copied().collect::<BTreeSet<_>>()
    );
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    let dead: BTreeSet<String> = dlq
        .iter()
        .map(|m| {
            let env = Envelope::from_slice(m.payload().unwrap()).unwrap();
            String::from_utf8(env.payload_bytes().unwrap().unwrap()).unwrap()
        })
        .collect();
    let expected: BTreeSet<String> = poison.iter().map(|i| values[*i].clone()).collect();
    assert_eq!(
        dead, expected,
        "{name}: exactly the poison records dead-lettered"
    );
    if transient {
        for m in &dlq {
            let env = Envelope::from_slice(m.payload().unwrap()).unwrap();
            assert_eq!(
                env.error.attempts, 3,
                "{name}: 1 + max_retries attempts when isolated"
            );
        }
    }
    bulk.calls()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_poison_record_in_a_hundred_costs_about_two_log2_calls() {
    let calls = run_scenario("one-poison", 100, &[37], true).await;
    // The documented bound: the first call, 2·⌈log2 n⌉ calls to isolate it (its own first
    // attempt included), then its max_retries retries.
    let bound = 1 + 2 * ceil_log2(100) + 2;
    assert!(calls <= bound, "{calls} calls > bound {bound}");
    eprintln!("one poison in 100: {calls} handler calls (bound {bound})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_poison_records_are_both_isolated() {
    let calls = run_scenario("two-poison", 100, &[10, 80], false).await;
    let bound = 1 + 2 * 2 * ceil_log2(100);
    assert!(calls <= bound, "{calls} calls > bound {bound}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_first_and_last_are_isolated() {
    let calls = run_scenario("first-last", 64, &[0, 63], false).await;
    let bound = 1 + 2 * 2 * ceil_log2(64);
    assert!(calls <= bound, "{calls} calls > bound {bound}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_poison_batch_dead_letters_every_record() {
    let all: Vec<usize> = (0..16).collect();
    let calls = run_scenario("all-poison", 16, &all, false).await;
    assert_eq!(calls, 2 * 16 - 1, "the whole bisection tree, once");
}

/// The sink, with a fault: after storing the first batch it either reports a timeout (the
/// classic "failed although committed") or never answers (the process dies before the offset
/// is committed).
#[derive(Clone)]
struct Faulty {
    sink: sink::SqliteSink,
    fault: &'static str,
    tripped: Arc<AtomicBool>,
}

impl BatchHandler for Faulty {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        self.sink.handle_batch(records).await?;
        if !self.tripped.swap(true, Ordering::SeqCst) {
            match self.fault {
                "timeout" => return Err(HandlerError::transient("timeout after the commit")),
                _ => std::future::pending::<()>().await,
            }
        }
        Ok(())
    }
}

fn events(n: usize, bad: Option<usize>) -> Vec<Out> {
    (0..n)
        .map(|i| {
            let status = if Some(i) == bad {
                "teleported"
            } else {
                "in_transit"
            };
            let mut o = Out::new(
                0,
                &format!(r#"{{"parcel_id":"P-{i}","status":"{status}"}}"#),
            );
            o.headers = vec![("event-id".into(), Some(format!("evt-{i}").into_bytes()))];
            o
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_sink_stores_a_redelivered_record_once() {
    let brokers = brokers();
    let topic = unique("sqlite");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(&brokers, &topic, events(50, Some(20))).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("deliveries.db");
    let config = ConsumerConfig {
        id_header: Some("event-id".into()),
        ..batch_config(&brokers, &group, &topic, 50)
    };

    // A crash between the insert and the offset commit.
    let crashing = Faulty {
        sink: sink::SqliteSink::open(&db).unwrap(),
        fault: "crash",
        tripped: Arc::new(AtomicBool::new(false)),
    };
    let running = Running::start(config.clone(), crashing.clone());
    assert!(eventually(WAIT, || crashing.tripped.load(Ordering::SeqCst)).await);
    let rows_before_crash = crashing.sink.rows();
    running.crash().await;
    assert_eq!(
        committed(&brokers, &group, &topic, 1).get(&0),
        None,
        "nothing committed"
    );
    assert!(rows_before_crash > 0, "rows were stored before the crash");

    // The next consumer gets the same records again.
    let sink = sink::SqliteSink::open(&db).unwrap();
    let running = Running::start(config, sink.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&50))
        .await
    );
    running.stop().await;
    assert_eq!(sink.rows(), 49, "one row per good record, no duplicate");
    assert_eq!(
        sink.duplicates(),
        rows_before_crash,
        "every redelivered row recognised"
    );
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(
        dlq.len(),
        1,
        "the row the CHECK constraint rejects is dead-lettered"
    );
    let env = Envelope::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(env.id, "evt-20");
    assert!(
        env.error.message.contains("CHECK constraint"),
        "{}",
        env.error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_after_the_commit_does_not_store_twice() {
    let brokers = brokers();
    let topic = unique("sqlite-timeout");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    produce(&brokers, &topic, events(10, None)).await;
    let dir = tempfile::tempdir().unwrap();
    let faulty = Faulty {
        sink: sink::SqliteSink::open(&dir.path().join("d.db")).unwrap(),
        fault: "timeout",
        tripped: Arc::new(AtomicBool::new(false)),
    };
    let config = ConsumerConfig {
        id_header: Some("event-id".into()),
        ..batch_config(&brokers, &group, &topic, 10)
    };
    let running = Running::start(config, faulty.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&10))
        .await
    );
    running.stop().await;
    assert_eq!(faulty.sink.rows(), 10);
    assert_eq!(
        faulty.sink.duplicates(),
        10,
        "the retried batch was recognised"
    );
}

/// A downstream that answers 503 while `down` is set.
#[derive(Clone, Default)]
struct Downstream {
    down: Arc<AtomicBool>,
    handled: Arc<Mutex<HashMap<String, u32>>>,
    calls_while_down: Arc<Mutex<u32>>,
}

impl kafka_dlq::Handler for Downstream {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        if self.down.load(Ordering::SeqCst) {
            *self.calls_while_down.lock().unwrap() += 1;
            return Err(HandlerError::transient("downstream answered 503"));
        }
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        *self.handled.lock().unwrap().entry(value).or_default() += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_opens_the_breaker_instead_of_draining_the_topic_into_the_dlq() {
    let brokers = brokers();
    let topic = unique("outage");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        (0..60)
            .map(|i| Out::new(i % 2, &format!("ok-{i}")))
            .collect(),
    )
    .await;

    let downstream = Downstream::default();
    downstream.down.store(true, Ordering::SeqCst);
    // Two partitions fail at once; a record needs 11 calls (about half a second) to use up its
    // retries, the breaker opens after 4 calls from two records.
    let config = ConsumerConfig {
        max_retries: 10,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(50),
        breaker_min_calls: 4,
        breaker_window: Duration::from_millis(10_000),
        breaker_probe_initial: Duration::from_millis(200),
        breaker_probe_max: Duration::from_millis(800),
        ..test_config(&brokers, &group, &topic)
    };
    let consumer = kafka_dlq::Consumer::new(config, downstream.clone()).unwrap();
    let metrics = consumer.metrics();
    let mut breaker = consumer.breaker_state();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));

    tokio::time::timeout(
        WAIT,
        breaker.wait_for(|s| *s == kafka_dlq::breaker::BreakerState::Open),
    )
    .await
    .expect("the breaker opens")
    .unwrap();
    // The outage goes on for a while: only probes reach the downstream.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls_during_outage = *downstream.calls_while_down.lock().unwrap();
    assert_eq!(
        metrics.total("kafka_dlq_records_dead_lettered_total"),
        0.0,
        "nothing dead-lettered for the outage"
    );
    assert!(
        calls_during_outage < 30,
        "probing, not hammering: {calls_during_outage} calls"
    );
    assert_eq!(metrics.total("kafka_dlq_breaker_open"), 1.0);

    downstream.down.store(false, Ordering::SeqCst);
    tokio::time::timeout(
        WAIT,
        breaker.wait_for(|s| *s == kafka_dlq::breaker::BreakerState::Closed),
    )
    .await
    .expect("the breaker closes by itself")
    .unwrap();
    assert!(
        eventually(WAIT, || downstream.handled.lock().unwrap().len() == 60).await,
        "consumption resumed and every record was handled"
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 30), (1, 30)]))
        .await
    );
    let _ = tx.send(());
    run.await.unwrap().unwrap();
    assert!(downstream.handled.lock().unwrap().values().all(|n| *n == 1));
    assert_eq!(metrics.total("kafka_dlq_records_dead_lettered_total"), 0.0);
    assert!(metrics.total("kafka_dlq_breaker_opened_total") >= 1.0);
    assert!(read_all(&brokers, &format!("{topic}-dlt")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_on_a_one_partition_topic_opens_the_breaker_at_the_default_min_calls() {
    let brokers = brokers();
    let topic = unique("one-partition-outage");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        (0..20).map(|i| Out::new(0, &format!("ok-{i}"))).collect(),
    )
    .await;
    let downstream = Downstream::default();
    downstream.down.store(true, Ordering::SeqCst);
    // The default breaker (20 calls in 30 s); one partition makes 4 calls per record here.
    let config = ConsumerConfig {
        breaker_probe_initial: Duration::from_millis(200),
        breaker_probe_max: Duration::from_millis(800),
        ..test_config(&brokers, &group, &topic)
    };
    assert_eq!(config.breaker_min_calls, 20);
    let consumer = kafka_dlq::Consumer::new(config, downstream.clone()).unwrap();
    let metrics = consumer.metrics();
    let mut breaker = consumer.breaker_state();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));
    tokio::time::timeout(
        WAIT,
        breaker.wait_for(|s| *s == kafka_dlq::breaker::BreakerState::Open),
    )
    .await
    .expect("the breaker opens")
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        metrics.total("kafka_dlq_records_dead_lettered_total") <= 1.0,
        "at most the first record of the outage is dead-lettered, not one after another: {}",
        metrics.total("kafka_dlq_records_dead_lettered_total")
    );
    downstream.down.store(false, Ordering::SeqCst);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&20))
        .await,
        "the rest is handled once the downstream is back"
    );
    let _ = tx.send(());
    run.await.unwrap().unwrap();
    assert!(downstream.handled.lock().unwrap().len() >= 19);
}
