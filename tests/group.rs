//! Consumer groups with several live members, on Apache Kafka, under both group protocols
//! (classic with the cooperative-sticky assignor, and KIP-848's consumer protocol).
//!
//! Member A starts alone; B and C join while records are in flight; B leaves (graceful stop)
//! and C crashes (its task dropped, nothing drained or committed) while the others go on. The
//! records are chosen so that the membership changes find partitions with records
//! (a) waiting in backoff (`trans1…`: one transient failure), (b) waiting for a dead letter's
//! acknowledgement (`perm…`), (c) in flight in key-ordered mode, (d) inside a batch being
//! bisected, and (e) in a handler call that outlives the revocation (`slow…`, up to 400 ms).
//!
//! In every case: nothing is lost (every record handled or dead-lettered, and the group's
//! committed offsets reach the end), nothing is dead-lettered because of a rebalance (the DLQ
//! holds exactly the `perm…` records), and order holds across the hand-over: the first call of
//! each record comes after the first call of every earlier record of its partition (of its key
//! in key-ordered mode).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::*;
use kafka_dlq::config::{GroupProtocol, Ordering};
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

const PARTITIONS: i32 = 4;
const PER_PARTITION: usize = 60;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    InOrder,
    ByKey,
    Batches,
}

fn value(partition: i32, i: usize, mode: Mode) -> String {
    let kind = match i % 12 {
        3 => "trans1".to_string(),
        7 => "perm".to_string(),
        9 => "slow400".to_string(),
        // Key-ordered records run concurrently: each takes longer so the work spans the
        // membership changes.
        _ if mode == Mode::ByKey => "slow300".to_string(),
        _ => "slow60".to_string(),
    };
    format!("{kind}-p{partition}-{i}")
}

fn config(
    brokers: &str,
    group: &str,
    topic: &str,
    protocol: GroupProtocol,
    mode: Mode,
) -> kafka_dlq::ConsumerConfig {
    let mut config = kafka_dlq::ConsumerConfig {
        group_protocol: protocol,
        // A dead letter or a retry must never be caused by the outage breaker here.
        breaker_failure_ratio: 0.0,
        ..test_config(brokers, group, topic)
    };
    if protocol == GroupProtocol::Classic {
        // The KIP-848 session is the broker's (6 s in the test broker); the same here.
        config.librdkafka.insert("session.timeout.ms", "6000");
    }
    match mode {
        Mode::InOrder => {}
        Mode::ByKey => {
            config.ordering = Ordering::Key;
            config.max_in_flight = 8;
        }
        Mode::Batches => {
            config.batch_size = 6;
            config.batch_linger = Duration::from_millis(20);
        }
    }
    config
}

async fn members_join_leave_and_crash(protocol: GroupProtocol, mode: Mode) {
    let brokers = brokers();
    let topic = unique("group");
    let dlq_topic = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, PARTITIONS).await;
    create_topic(&brokers, &dlq_topic, 1).await;
    let mut records = Vec::new();
    let mut key_of = HashMap::new();
    for p in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let v = value(p, i, mode);
            let mut out = Out::new(p, &v);
            // Five keys per partition: key order is tested within a partition.
            let key = format!("k{p}-{}", i % 5).into_bytes();
            key_of.insert(v, key.clone());
            out.key = Some(key);
            records.push(out);
        }
    }
    let total = records.len();
    produce(&brokers, &topic, records).await;

    let handler = Scripted::default();
    let start =
        |h: &Scripted| Running::start(config(&brokers, &group, &topic, protocol, mode), h.clone());
    let settled_share = |h: &Scripted| {
        let calls = h.calls();
        let distinct: BTreeSet<(i32, i64)> =
            calls.iter().map(|c| (c.partition, c.offset)).collect();
        distinct.len() as f64 / total as f64
    };
    let wait = Duration::from_secs(120);
    let a = start(&handler);
    assert!(
        eventually(wait, || settled_share(&handler) > 0.1).await,
        "A started"
    );
    let b = start(&handler);
    assert!(
        eventually(wait, || settled_share(&handler) > 0.3).await,
        "B joined"
    );
    let c = start(&handler);
    assert!(
        eventually(wait, || settled_share(&handler) > 0.5).await,
        "C joined"
    );
    b.stop().await;
    assert!(
        eventually(wait, || settled_share(&handler) > 0.7).await,
        "B left"
    );
    c.crash().await;
    let ends: HashMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION as i64)).collect();
    assert!(
        eventually(Duration::from_secs(180), || committed(
            &brokers, &group, &topic, PARTITIONS
        ) == ends)
        .await,
        "the group commits to the end: {:?}",
        committed(&brokers, &group, &topic, PARTITIONS)
    );
    a.stop().await;

    // Nothing lost: every record was handled successfully or dead-lettered.
    let calls = handler.calls();
    let letters: Vec<String> = read_all(&brokers, &dlq_topic)
        .iter()
        .map(|m| {
            let e = Envelope::from_slice(m.payload().unwrap()).unwrap();
            String::from_utf8(e.payload_bytes().unwrap().unwrap()).unwrap()
        })
        .collect();
    let dead: BTreeSet<&String> = letters.iter().collect();
    let permanent: BTreeSet<String> = key_of
        .keys()
        .filter(|v| v.starts_with("perm"))
        .cloned()
        .collect();
    assert_eq!(
        dead,
        permanent.iter().collect(),
        "the DLQ holds exactly the permanent failures: none dead-lettered by a rebalance"
    );
    for v in key_of.keys().filter(|v| !v.starts_with("perm")) {
        let needed = if v.starts_with("trans1") { 2 } else { 1 };
        assert!(
            handler.attempts(v) >= needed,
            "{v} was handled ({} calls)",
            handler.attempts(v)
        );
    }

    // Order across the hand-overs: first calls in offset order per partition (per key).
    let mut first: Vec<&Call> = Vec::new();
    let mut seen = BTreeSet::new();
    for call in &calls {
        if seen.insert((call.partition, call.offset)) {
            first.push(call);
        }
    }
    let mut last: HashMap<Vec<u8>, i64> = HashMap::new();
    for call in first {
        let lane = match mode {
            Mode::ByKey => key_of[&call.value].clone(),
            _ => format!("p{}", call.partition).into_bytes(),
        };
        if let Some(before) = last.insert(lane.clone(), call.offset) {
            assert!(
                call.offset > before,
                "{} (offset {}) was first called after offset {before} of its {}",
                call.value,
                call.offset,
                String::from_utf8_lossy(&lane)
            );
        }
    }
    let duplicates = calls.len() - seen.len();
    eprintln!(
        "{} records, {} calls, {duplicates} repeated calls (retries and redeliveries), {} dead letters",
        total,
        calls.len(),
        letters.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_group_changes_lose_nothing_in_order() {
    members_join_leave_and_crash(GroupProtocol::Classic, Mode::InOrder).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_group_changes_lose_nothing_in_order() {
    members_join_leave_and_crash(GroupProtocol::Consumer, Mode::InOrder).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_group_changes_lose_nothing_by_key() {
    members_join_leave_and_crash(GroupProtocol::Classic, Mode::ByKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_group_changes_lose_nothing_by_key() {
    members_join_leave_and_crash(GroupProtocol::Consumer, Mode::ByKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_group_changes_lose_nothing_in_batches() {
    members_join_leave_and_crash(GroupProtocol::Classic, Mode::Batches).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_group_changes_lose_nothing_in_batches() {
    members_join_leave_and_crash(GroupProtocol::Consumer, Mode::Batches).await;
}
