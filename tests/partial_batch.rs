//! Partial batch responses (`HandlerError::partial`): a batch handler that names its failed
//! records costs one call plus their own retries, never a bisection; against a real broker.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::handler::BatchHandler;
use kafka_dlq::{ConsumerConfig, HandlerError, Record};
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(60);

/// A bulk writer that says which rows failed: `poison…` permanently, `down…` transiently every
/// time, `flaky…` transiently on its first call only; `stray…`, on its first call, names an
/// offset the batch does not hold; the others are stored.
#[derive(Clone, Default)]
struct Reporting {
    calls: Arc<Mutex<Vec<Vec<String>>>>,
    stored: Arc<Mutex<Vec<String>>>,
}

fn value(r: &Record) -> String {
    String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).to_string()
}

impl BatchHandler for Reporting {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let values: Vec<String> = records.iter().map(value).collect();
        let earlier = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(values.clone());
            calls.len() - 1
        };
        let seen_before = |v: &str| {
            self.calls.lock().unwrap()[..earlier]
                .iter()
                .any(|c| c.iter().any(|x| x == v))
        };
        let mut failures = Vec::new();
        for (record, v) in records.iter().zip(&values) {
            if v.starts_with("poison") {
                failures.push((
                    record.offset,
                    HandlerError::permanent(format!("row {v} rejected")),
                ));
            } else if v.starts_with("stray") && !seen_before(v) {
                // Names an offset the batch does not hold (say, its own bookkeeping's).
                failures.push((
                    record.offset + 1_000_000,
                    HandlerError::transient(format!("timeout on {v}")),
                ));
            } else if v.starts_with("down") || (v.starts_with("flaky") && !seen_before(v)) {
                failures.push((
                    record.offset,
                    HandlerError::transient(format!("timeout on {v}")),
                ));
            } else {
                self.stored.lock().unwrap().push(v.clone());
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(HandlerError::partial(failures))
        }
    }
}

/// Runs one batch of `values` and returns the handler's calls, what it stored and the dead
/// letters (value, attempts).
async fn run(name: &str, values: &[String]) -> (Vec<Vec<String>>, Vec<String>, Vec<(String, u32)>) {
    let brokers = brokers();
    let topic = unique(name);
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        values.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    let handler = Reporting::default();
    let config = ConsumerConfig {
        batch_size: values.len(),
        batch_linger: Duration::from_millis(2_000),
        max_retries: 2,
        breaker_failure_ratio: 0.0,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    let n = values.len() as i64;
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&n))
        .await,
        "{name}: every record settled"
    );
    running.stop().await;
    let dead = read_all(&brokers, &format!("{topic}-dlt"))
        .iter()
        .map(|m| {
            let env = Envelope::from_slice(m.payload().unwrap()).unwrap();
            let v = String::from_utf8(env.payload_bytes().unwrap().unwrap()).unwrap();
            (v, env.error.attempts)
        })
        .collect();
    let calls = handler.calls.lock().unwrap().clone();
    let stored = handler.stored.lock().unwrap().clone();
    (calls, stored, dead)
}

fn batch(n: usize, special: &[(usize, &str)]) -> Vec<String> {
    (0..n)
        .map(|i| match special.iter().find(|(at, _)| *at == i) {
            Some((_, kind)) => format!("{kind}-{i}"),
            None => format!("ok-{i}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_record_named_in_a_batch_of_a_hundred_costs_one_call_plus_its_retries() {
    let values = batch(100, &[(37, "down")]);
    let (calls, stored, dead) = run("partial-one", &values).await;
    assert_eq!(calls[0].len(), 100, "the whole batch in the first call");
    assert_eq!(
        calls.len(),
        3,
        "one batch call and the record's 2 retries, no bisection: {:?}",
        calls.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(calls[1..].iter().all(|c| c == &vec!["down-37".to_string()]));
    assert_eq!(stored.len(), 99, "the others stored once");
    assert_eq!(
        dead,
        vec![("down-37".to_string(), 3)],
        "1 + max_retries attempts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_named_records_each_get_their_own_policy() {
    let values = batch(100, &[(5, "poison"), (20, "flaky"), (60, "down")]);
    let (calls, stored, dead) = run("partial-several", &values).await;
    // 1 batch call, flaky-20 once more (then it succeeds), down-60 twice more; poison-5 none.
    assert_eq!(
        calls.len(),
        4,
        "{:?}",
        calls.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(
        calls
            .iter()
            .filter(|c| c == &&vec!["flaky-20".to_string()])
            .count(),
        1
    );
    assert!(
        !calls[1..]
            .iter()
            .any(|c| c.contains(&"poison-5".to_string())),
        "permanent: no retry"
    );
    let stored: BTreeSet<String> = stored.into_iter().collect();
    assert_eq!(
        stored.len(),
        98,
        "97 good ones and flaky-20 after its retry"
    );
    assert!(stored.contains("flaky-20"));
    let dead: BTreeSet<(String, u32)> = dead.into_iter().collect();
    assert_eq!(
        dead,
        BTreeSet::from([("poison-5".to_string(), 1), ("down-60".to_string(), 3)]),
        "permanent at once, transient after its retries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_response_naming_an_offset_outside_the_batch_settles_none_of_it() {
    let values = batch(20, &[(4, "stray")]);
    let (calls, _, dead) = run("partial-stray", &values).await;
    assert_eq!(calls[0].len(), 20, "the whole batch in the first call");
    for value in &values {
        assert!(
            calls[1..].iter().any(|c| c.contains(value)),
            "{value} was called again: the answer settled nothing: {calls:?}"
        );
    }
    assert!(
        dead.is_empty(),
        "a transient failure of the batch: {dead:?}"
    );
}
