//! Key-ordered concurrency against a real broker: records of one key keep their order, records
//! of different keys of one partition run concurrently, and no stored offset passes a record
//! that is not settled.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use kafka_dlq::config::Ordering;
use kafka_dlq::{ConsumerConfig, Handler, HandlerError, Record};

const WAIT: Duration = Duration::from_secs(60);

/// Sleeps 20 ms per record (a downstream call), records the order per key and the most
/// records in flight at once; `stuck…` values fail transiently.
#[derive(Clone, Default)]
struct Slow {
    order: Arc<Mutex<HashMap<String, Vec<u32>>>>,
    in_flight: Arc<Mutex<(u32, u32)>>,
    handled: Arc<Mutex<u32>>,
}

impl Handler for Slow {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let value =
            String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).to_string();
        if value.starts_with("stuck") {
            return Err(HandlerError::transient("downstream busy for this key"));
        }
        {
            let mut f = self.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.in_flight.lock().unwrap().0 -= 1;
        let (key, seq) = value.split_once('/').unwrap();
        self.order
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .push(seq.parse().unwrap());
        *self.handled.lock().unwrap() += 1;
        Ok(())
    }
}

fn keyed(key: &str, value: &str) -> Out {
    Out {
        partition: 0,
        key: Some(key.as_bytes().to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_in_order_different_keys_concurrently() {
    let brokers = brokers();
    let topic = unique("keyed");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    let records: Vec<Out> = (0..200)
        .map(|i| {
            let key = format!("k{}", i % 20);
            keyed(&key, &format!("{key}/{}", i / 20))
        })
        .collect();
    produce(&brokers, &topic, records).await;

    let handler = Slow::default();
    let config = ConsumerConfig {
        ordering: Ordering::Key,
        max_in_flight: 16,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&200))
        .await
    );
    running.stop().await;

    let order = handler.order.lock().unwrap().clone();
    assert_eq!(order.len(), 20);
    for (key, seqs) in &order {
        assert_eq!(seqs, &(0..10).collect::<Vec<u32>>(), "key {key} in order");
    }
    let most = handler.in_flight.lock().unwrap().1;
    assert!(
        most > 1 && most <= 16,
        "different keys ran concurrently, bounded: {most}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_offset_never_passes_an_unsettled_record() {
    let brokers = brokers();
    let topic = unique("keyed-stuck");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    let mut records = vec![keyed("a", "a/0"), keyed("b", "stuck-b/0")];
    for i in 1..30 {
        records.push(keyed(&format!("c{}", i % 5), &format!("c{}/{i}", i % 5)));
    }
    produce(&brokers, &topic, records).await;

    let handler = Slow::default();
    let config = ConsumerConfig {
        ordering: Ordering::Key,
        max_in_flight: 8,
        backoff_initial: Duration::from_millis(60_000),
        backoff_max: Duration::from_millis(60_000),
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(
        eventually(WAIT, || *handler.handled.lock().unwrap() == 30).await,
        "the other keys go on while key b waits"
    );
    // The periodic commit has had time to run: it must stop before the stuck record (offset 1).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(committed(&brokers, &group, &topic, 1).get(&0), Some(&1));
    running.stop().await;
    assert_eq!(
        committed(&brokers, &group, &topic, 1).get(&0),
        Some(&1),
        "still after shutdown"
    );
}

/// Counts the calls that started and the calls that ran to their end.
#[derive(Clone, Default)]
struct Finishing {
    started: Arc<Mutex<u32>>,
    finished: Arc<Mutex<u32>>,
}

impl Handler for Finishing {
    async fn handle(&self, _: &Record) -> Result<(), HandlerError> {
        *self.started.lock().unwrap() += 1;
        tokio::time::sleep(Duration::from_millis(6_000)).await;
        *self.finished.lock().unwrap() += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_ordered_calls_in_flight_at_a_revocation_run_to_their_end() {
    let brokers = brokers();
    let topic = unique("revoked-keys");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    produce(
        &brokers,
        &topic,
        (0..8)
            .map(|i| Out::new(i % 2, &format!("k{i}/0")))
            .collect(),
    )
    .await;
    let config = || {
        let mut c = ConsumerConfig {
            ordering: Ordering::Key,
            breaker_failure_ratio: 0.0,
            ..test_config(&brokers, &group, &topic)
        };
        c.librdkafka.insert("session.timeout.ms", "6000");
        // A member joining makes the first rejoin at its next heartbeat: soon, while its
        // calls (6 s each) are in flight.
        c.librdkafka.insert("heartbeat.interval.ms", "500");
        c
    };
    let first = Finishing::default();
    let a = Running::start(config(), first.clone());
    assert!(
        eventually(WAIT, || *first.started.lock().unwrap() == 8).await,
        "every record's call is in flight on the first member"
    );
    // A second member joins: one partition is revoked from the first while its calls run.
    let second = Finishing::default();
    let b = Running::start(config(), second.clone());
    assert!(
        eventually(WAIT, || *first.finished.lock().unwrap() == 8).await,
        "every call the first member started ran to its end: {} of {}",
        first.finished.lock().unwrap(),
        first.started.lock().unwrap()
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 4), (1, 4)]))
        .await
    );
    b.stop().await;
    a.stop().await;
}
