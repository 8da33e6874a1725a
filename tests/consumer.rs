//! The consumer against a real Kafka-protocol broker (tansu, sqlite storage) on loopback.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(30);

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn header(m: &rdkafka::message::OwnedMessage, key: &str) -> Option<String> {
    header_bytes(m, key).map(|v| String::from_utf8_lossy(&v).to_string())
}

fn header_bytes(m: &rdkafka::message::OwnedMessage, key: &str) -> Option<Vec<u8>> {
    m.headers()
        .and_then(|h| kafka_dlq::kafka::headers::find(h, key.as_bytes()))
        .flatten()
        .map(<[u8]>::to_vec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_handles_every_record_once_and_commits_to_the_end() {
    let brokers = brokers();
    let topic = unique("happy");
    let group = unique("g");
    create_topic(&brokers, &topic, 3).await;
    let mut out = Vec::new();
    for (i, v) in values("ok", 30).iter().enumerate() {
        out.push(Out::new(i as i32 % 3, v));
    }
    produce(&brokers, &topic, out).await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(
        eventually(WAIT, || handler.count() >= 30).await,
        "handled {}",
        handler.count()
    );
    running.stop().await;

    let calls = handler.calls();
    assert_eq!(calls.len(), 30, "each record exactly once: {calls:?}");
    for v in values("ok", 30) {
        assert_eq!(handler.attempts(&v), 1, "{v}");
    }
    let committed = committed(&brokers, &group, &topic, 3);
    assert_eq!(committed, HashMap::from([(0, 10), (1, 10), (2, 10)]));
    assert!(read_all_or_empty(&brokers, &format!("{topic}-dlt")).is_empty());
}

/// The DLQ topic may not exist when nothing was dead-lettered.
fn read_all_or_empty(brokers: &str, topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
    let exists = {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .unwrap();
        let md = c
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .unwrap();
        md.topics()
            .first()
            .map(|t| t.error().is_none() && !t.partitions().is_empty())
            .unwrap_or(false)
    };
    if exists {
        read_all(brokers, topic)
    } else {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_is_dead_lettered_after_one_attempt_with_envelope_and_headers() {
    let brokers = brokers();
    let topic = unique("perm");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let mut poison = Out::new(0, "perm-1");
    poison.key = Some(b"parcel-77".to_vec());
    poison.headers = vec![
        ("trace-id".into(), Some(b"abc".to_vec())),
        ("event-id".into(), Some(b"evt-123".to_vec())),
    ];
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "ok-0"), poison, Out::new(0, "ok-2")],
    )
    .await;

    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        id_header: Some("event-id".into()),
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-2") == 1).await);
    running.stop().await;

    assert_eq!(
        handler.attempts("perm-1"),
        1,
        "a permanent failure is tried once"
    );
    assert_eq!(
        committed(&brokers, &group, &topic, 1),
        HashMap::from([(0, 3)])
    );

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1);
    let dead = &dlq[0];
    assert_eq!(
        dead.key(),
        Some(&b"parcel-77"[..]),
        "same key as the source"
    );
    assert_eq!(
        header(dead, "trace-id").as_deref(),
        Some("abc"),
        "original headers kept"
    );
    assert_eq!(
        header(dead, "kafka_dlt-original-topic"),
        Some(topic.clone())
    );
    assert_eq!(
        header_bytes(dead, "kafka_dlt-original-partition"),
        Some(0_i32.to_be_bytes().to_vec()),
        "Spring's encoding: a 4-byte big-endian int"
    );
    assert_eq!(
        header_bytes(dead, "kafka_dlt-original-offset"),
        Some(1_i64.to_be_bytes().to_vec()),
        "Spring's encoding: an 8-byte big-endian long"
    );
    let timestamp = header_bytes(dead, "kafka_dlt-original-timestamp").unwrap();
    let timestamp = i64::from_be_bytes(timestamp.try_into().expect("8 bytes"));
    assert!(
        (timestamp - chrono::Utc::now().timestamp_millis()).abs() < 600_000,
        "the source record's create time, epoch ms: {timestamp}"
    );
    assert_eq!(
        header(dead, "kafka_dlt-original-timestamp-type").as_deref(),
        Some("CreateTime")
    );
    assert_eq!(
        header(dead, "kafka_dlt-exception-fqcn").as_deref(),
        Some("kafka_dlq.PermanentFailure")
    );
    assert_eq!(
        header(dead, "kafka_dlt-original-consumer-group"),
        Some(group.clone())
    );
    assert_eq!(
        header(dead, "kafka_dlt-exception-message").as_deref(),
        Some("rejected perm-1")
    );

    let json: serde_json::Value = serde_json::from_slice(dead.payload().unwrap()).unwrap();
    assert_eq!(json["id"], "evt-123", "id from the configured header");
    assert_eq!(json["payload"], "perm-1");
    assert_eq!(json["payload_encoding"], "utf8");
    assert_eq!(json["error"]["kind"], "permanent");
    assert_eq!(json["error"]["message"], "rejected perm-1");
    assert_eq!(json["error"]["attempts"], 1);
    let ts = json["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
        "{ts}"
    );
    assert_eq!(json["source"]["topic"], topic);
    assert_eq!(json["source"]["partition"], 0);
    assert_eq!(json["source"]["offset"], 1);
    assert_eq!(json["source"]["key"], "parcel-77");
    assert_eq!(json["source"]["group"], group);
    assert!(json["source"]["timestamp"].is_string());
    assert_eq!(json["source"]["headers"][0]["key"], "trace-id");
    assert_eq!(json["source"]["headers"][0]["value"], "abc");

    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/dlq-envelope.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "envelope violates the schema: {errors:?}"
    );

    let envelope = Envelope::from_slice(dead.payload().unwrap()).unwrap();
    assert_eq!(
        envelope.payload_bytes().unwrap().as_deref(),
        Some(&b"perm-1"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_twice_then_success_takes_three_attempts_and_nothing_is_dead_lettered() {
    let brokers = brokers();
    let topic = unique("trans");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "trans2-a"), Out::new(0, "ok-b")],
    )
    .await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-b") == 1).await);
    running.stop().await;

    assert_eq!(handler.attempts("trans2-a"), 3);
    assert_eq!(
        committed(&brokers, &group, &topic, 1),
        HashMap::from([(0, 2)])
    );
    assert!(read_all_or_empty(&brokers, &format!("{topic}-dlt")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_transient_is_dead_lettered_after_one_plus_max_retries_attempts() {
    let brokers = brokers();
    let topic = unique("always");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "always-x"), Out::new(0, "ok-y")],
    )
    .await;

    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        max_retries: 4,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-y") == 1).await);
    running.stop().await;

    assert_eq!(handler.attempts("always-x"), 5, "1 + max_retries attempts");
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1);
    let json: serde_json::Value = serde_json::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(json["error"]["kind"], "retries_exhausted");
    assert_eq!(json["error"]["attempts"], 5);
    assert_eq!(json["error"]["message"], "downstream down");
    assert_eq!(
        committed(&brokers, &group, &topic, 1),
        HashMap::from([(0, 2)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_partition_are_handled_in_offset_order_across_retries() {
    let brokers = brokers();
    let topic = unique("order");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let script = [
        "ok-0", "trans2-1", "ok-2", "perm-3", "trans1-4", "ok-5", "always-6", "ok-7",
    ];
    produce(
        &brokers,
        &topic,
        script.iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-7") == 1).await);
    running.stop().await;

    let offsets: Vec<i64> = handler.calls().iter().map(|c| c.offset).collect();
    let mut sorted = offsets.clone();
    sorted.sort();
    assert_eq!(offsets, sorted, "calls in offset order, retries included");
    assert_eq!(offsets.len(), 1 + 3 + 1 + 1 + 2 + 1 + 4 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_in_backoff_does_not_hold_back_the_others() {
    let brokers = brokers();
    let topic = unique("isolate");
    let group = unique("g");
    create_topic(&brokers, &topic, 3).await;
    let mut out = vec![Out::new(0, "always-stuck"), Out::new(0, "ok-behind")];
    for i in 0..20 {
        out.push(Out::new(1 + i % 2, &format!("ok-{i}")));
    }
    produce(&brokers, &topic, out).await;

    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        max_retries: 10,
        backoff_initial: Duration::from_millis(60_000),
        backoff_max: Duration::from_millis(60_000),
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    let others_done = eventually(WAIT, || {
        (0..20).all(|i| handler.attempts(&format!("ok-{i}")) == 1)
    })
    .await;
    assert!(eventually(WAIT, || handler.attempts("always-stuck") >= 1).await);
    let stuck_attempts = handler.attempts("always-stuck");
    let behind = handler.attempts("ok-behind");
    running.stop().await;

    assert!(
        others_done,
        "partitions 1 and 2 flowed while partition 0 was in backoff"
    );
    assert_eq!(
        stuck_attempts, 1,
        "partition 0 is waiting out a 60 s backoff"
    );
    assert_eq!(
        behind, 0,
        "the record behind it waits: order within the partition"
    );
    let committed = committed(&brokers, &group, &topic, 3);
    assert_eq!(committed.get(&1), Some(&10));
    assert_eq!(committed.get(&2), Some(&10));
    assert_eq!(committed.get(&0), None, "nothing settled on partition 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_consumer_leaves_unsettled_records_to_the_next_one() {
    let brokers = brokers();
    let topic = unique("crash");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(0, "ok-a"),
            Out::new(0, "always-b"),
            Out::new(0, "ok-c"),
        ],
    )
    .await;

    let first = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        backoff_initial: Duration::from_millis(60_000),
        backoff_max: Duration::from_millis(60_000),
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config.clone(), first.clone());
    assert!(eventually(WAIT, || first.attempts("always-b") == 1).await);
    // Let the periodic commit of "ok-a" happen, then crash mid-backoff.
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&1))
        .await,
        "the settled record is committed, the one in backoff is not"
    );
    running.crash().await;

    // The next consumer: the record in backoff and everything after it come again.
    let second = Scripted::default();
    let succeed_all = kafka_dlq::ConsumerConfig {
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(succeed_all, AlwaysOk(second.clone()));
    assert!(eventually(WAIT, || second.attempts("ok-c") == 1).await);
    running.stop().await;
    let seen: Vec<String> = second.calls().iter().map(|c| c.value.clone()).collect();
    assert_eq!(
        seen,
        vec!["always-b", "ok-c"],
        "redelivered from the unsettled record"
    );
    assert_eq!(
        committed(&brokers, &group, &topic, 1),
        HashMap::from([(0, 3)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_dead_letters_the_record_and_keeps_running() {
    let brokers = brokers();
    let topic = unique("panic");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "panic-1"), Out::new(0, "ok-2")],
    )
    .await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(eventually(WAIT, || handler.attempts("ok-2") == 1).await);
    running.stop().await;

    assert_eq!(handler.attempts("panic-1"), 1);
    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1);
    let env = Envelope::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(env.error.kind, kafka_dlq::DeadLetterKind::Permanent);
    assert_eq!(
        env.error.message,
        "handler panicked: scripted panic for panic-1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_payloads_keys_and_tombstones_reach_the_dead_letter_topic_intact() {
    let brokers = brokers();
    let topic = unique("bytes");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let binary = Out {
        partition: 0,
        key: Some(vec![0xff, 0xfe]),
        value: Some(vec![b'p', b'e', b'r', b'm', 0x00, 0xff]),
        headers: vec![("raw".into(), Some(vec![0x80])), ("null".into(), None)],
    };
    let json = Out {
        partition: 0,
        key: None,
        value: Some(br#"{"kind":"perm","n": [1, 2.50]}"#.to_vec()),
        headers: vec![],
    };
    produce(&brokers, &topic, vec![binary, json]).await;

    struct RejectAll;
    impl kafka_dlq::Handler for RejectAll {
        async fn handle(&self, _: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
            Err(kafka_dlq::HandlerError::permanent("no"))
        }
    }
    let running = Running::start(test_config(&brokers, &group, &topic), RejectAll);
    let dlq_topic = format!("{topic}-dlt");
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await
    );
    running.stop().await;
    let dlq = read_all(&brokers, &dlq_topic);
    assert_eq!(dlq.len(), 2);

    let first = Envelope::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(first.payload_encoding, kafka_dlq::dlq::Encoding::Base64);
    assert_eq!(
        first.payload_bytes().unwrap(),
        Some(vec![b'p', b'e', b'r', b'm', 0x00, 0xff])
    );
    assert_eq!(first.key_bytes().unwrap(), Some(vec![0xff, 0xfe]));
    assert_eq!(dlq[0].key(), Some(&[0xff, 0xfe][..]));
    let headers = first.headers().unwrap();
    assert_eq!(headers[0].value, Some(vec![0x80]));
    assert_eq!(headers[1].value, None);

    let second = Envelope::from_slice(dlq[1].payload().unwrap()).unwrap();
    assert_eq!(second.payload_encoding, kafka_dlq::dlq::Encoding::Json);
    assert_eq!(
        second.payload_bytes().unwrap().unwrap(),
        br#"{"kind":"perm","n": [1, 2.50]}"#.to_vec(),
        "JSON payloads embedded byte for byte"
    );
    assert_eq!(dlq[1].key(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_abandons_records_in_backoff_to_the_new_owner_without_dead_lettering() {
    let brokers = brokers();
    let topic = unique("rebalance");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(0, "ok-a"),
            Out::new(0, "always-p0"),
            Out::new(1, "ok-b"),
            Out::new(1, "always-p1"),
        ],
    )
    .await;

    // The first member takes both partitions; both failing records wait out a long backoff.
    let first = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        backoff_initial: Duration::from_millis(60_000),
        backoff_max: Duration::from_millis(60_000),
        ..test_config(&brokers, &group, &topic)
    };
    let a = Running::start(config, first.clone());
    assert!(
        eventually(WAIT, || first.attempts("always-p0") == 1
            && first.attempts("always-p1") == 1)
        .await
    );

    // A second member joins: one partition moves to it, with its record in backoff.
    let second = Scripted::default();
    let b = Running::start(
        test_config(&brokers, &group, &topic),
        AlwaysOk(second.clone()),
    );
    assert!(
        eventually(Duration::from_secs(60), || second
            .calls()
            .iter()
            .any(|c| c.value.starts_with("always")))
        .await,
        "the new owner gets the abandoned record"
    );
    let moved = second
        .calls()
        .iter()
        .find(|c| c.value.starts_with("always"))
        .unwrap()
        .clone();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            .get(&moved.partition)
            == Some(&2))
        .await,
        "settled offsets of the moved partition were committed: {:?}",
        committed(&brokers, &group, &topic, 2)
    );
    let ok_redone = second
        .calls()
        .iter()
        .filter(|c| c.value.starts_with("ok"))
        .count();
    a.stop().await;
    b.stop().await;

    assert_eq!(
        ok_redone, 0,
        "records settled before the rebalance were committed, not handled again"
    );
    assert!(
        read_all_or_empty(&brokers, &format!("{topic}-dlt")).is_empty(),
        "nothing dead-lettered because of the rebalance"
    );
}

/// Keeps every record it is given; rejects those whose value starts with `x`.
#[derive(Clone, Default)]
struct Keep(std::sync::Arc<std::sync::Mutex<Vec<kafka_dlq::Record>>>);

impl kafka_dlq::Handler for Keep {
    async fn handle(&self, record: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
        self.0.lock().unwrap().push(record.clone());
        if record
            .payload
            .as_deref()
            .is_some_and(|p| p.first() == Some(&b'x'))
        {
            return Err(kafka_dlq::HandlerError::permanent("rejected"));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_binary_and_header_heavy_records_reach_the_handler_and_the_dlq_intact() {
    let brokers = brokers();
    let topic = unique("hostile");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let many: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..2_000)
        .map(|i| {
            (
                format!("h{i}").into_bytes(),
                Some(vec![0xff, (i % 256) as u8]),
            )
        })
        .collect();
    let records = vec![
        Out {
            partition: 0,
            key: Some(vec![]),
            value: Some(vec![]),
            headers: vec![],
        },
        Out {
            partition: 0,
            key: Some(vec![0xc3, 0x28]),
            value: Some(vec![0, 159, 146, 150]),
            headers: many.clone(),
        },
        Out {
            partition: 0,
            key: Some(vec![0xfe]),
            value: Some(b"x\xff\x00".to_vec()),
            headers: many.clone(),
        },
        Out {
            partition: 0,
            key: None,
            value: Some(b"x".repeat(300_000)),
            headers: vec![],
        },
    ];
    produce(&brokers, &topic, records).await;

    let keep = Keep::default();
    let running = Running::start(test_config(&brokers, &group, &topic), keep.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&4))
        .await
    );
    running.stop().await;

    let seen = keep.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].payload.as_deref(), Some(&b""[..]), "a 0-byte value");
    assert_eq!(
        seen[1].key.as_deref(),
        Some(&[0xc3, 0x28][..]),
        "a non-UTF-8 key"
    );
    assert_eq!(seen[1].headers.len(), 2_000, "thousands of headers");
    assert_eq!(
        seen[1].headers[1999].value,
        Some(vec![0xff, (1999 % 256) as u8])
    );

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 2);
    let binary = Envelope::from_slice(dlq[0].payload().unwrap()).unwrap();
    assert_eq!(binary.payload_bytes().unwrap(), Some(b"x\xff\x00".to_vec()));
    assert_eq!(binary.key_bytes().unwrap(), Some(vec![0xfe]));
    let headers = binary.headers().unwrap();
    assert_eq!(headers.len(), 2_000);
    assert_eq!(headers[7].value, Some(vec![0xff, 7]));
    let large = Envelope::from_slice(dlq[1].payload().unwrap()).unwrap();
    assert_eq!(
        large.payload_bytes().unwrap().unwrap().len(),
        300_000,
        "a large value, intact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_near_the_size_limit_reaches_the_handler_and_the_dlq_intact() {
    // librdkafka's producers refuse records over `message.max.bytes` (1,000,000 by default):
    // this binary value fits as a record, but its base64 envelope (a third larger) does not,
    // so the dead letter is written in the detached form.
    let brokers = brokers();
    let topic = unique("near-limit");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    let value: Vec<u8> = std::iter::once(b'x')
        .chain((1..990_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 | 0x80))
        .collect();
    produce(
        &brokers,
        &topic,
        vec![
            Out {
                partition: 0,
                key: Some(vec![0xfe, 0x01]),
                value: Some(value.clone()),
                headers: vec![("trace".into(), Some(vec![0xff]))],
            },
            Out::new(0, "ok-after"),
        ],
    )
    .await;

    let keep = Keep::default();
    let running = Running::start(test_config(&brokers, &group, &topic), keep.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await,
        "the record was dead-lettered and the partition went on"
    );
    running.stop().await;
    let seen = keep.0.lock().unwrap().clone();
    assert_eq!(
        seen[0].payload.as_deref(),
        Some(&value[..]),
        "the handler got it intact"
    );

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1);
    assert_eq!(
        dlq[0].payload(),
        Some(&value[..]),
        "the value itself, byte for byte"
    );
    assert_eq!(dlq[0].key(), Some(&[0xfe, 0x01][..]));
    let header = kafka_dlq::kafka::headers::find(
        dlq[0].headers().unwrap(),
        kafka_dlq::dlq::HEADER_ENVELOPE.as_bytes(),
    )
    .flatten()
    .expect("the envelope header");
    let detached = Envelope::from_slice(header).unwrap();
    assert_eq!(
        detached.payload_encoding,
        kafka_dlq::dlq::Encoding::Detached
    );
    assert_eq!(detached.source.offset, 0);

    // Operators read it as any other dead letter.
    let mut reader = kafka_dlq::dlq_reader::DlqReader::open(
        &brokers,
        &Default::default(),
        &format!("{topic}-dlt"),
    )
    .unwrap();
    let entry = reader.next_entry().await.unwrap().unwrap();
    let kafka_dlq::dlq_reader::DlqContent::Envelope(envelope) = entry.content else {
        panic!("not read as an envelope");
    };
    assert_eq!(envelope.payload_encoding, kafka_dlq::dlq::Encoding::Base64);
    assert_eq!(envelope.payload_bytes().unwrap(), Some(value));
    assert_eq!(envelope.key_bytes().unwrap(), Some(vec![0xfe, 0x01]));
    assert_eq!(envelope.headers().unwrap()[0].value, Some(vec![0xff]));
}

/// Batches compressed by each codec a producer may use (Java clients, Connect and a topic's
/// own `compression.type=zstd` among them) are all read: every record handled, the group
/// committed to the end. The dead-letter producer compresses with zstd too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_every_codec_are_read_and_committed_to_the_end() {
    let brokers = brokers();
    let topic = unique("codecs");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        for partition in 0..2 {
            let mut records = values(&format!("ok-{codec}-{partition}"), 99);
            records.push(format!("perm-{codec}-{partition}"));
            produce_compressed(&brokers, &topic, partition, codec, &records).await;
        }
    }
    let handler = Scripted::default();
    let mut config = test_config(&brokers, &group, &topic);
    config.librdkafka.insert("compression.type", "zstd");
    let running = Running::start(config, handler.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 400), (1, 400)]))
        .await,
        "committed {:?} of 400 per partition; handled {}",
        committed(&brokers, &group, &topic, 2),
        handler.count()
    );
    running.stop().await;
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        for partition in 0..2 {
            for v in values(&format!("ok-{codec}-{partition}"), 99) {
                assert_eq!(handler.attempts(&v), 1, "{v}");
            }
        }
    }
    let dead = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(
        dead.len(),
        8,
        "one dead letter per codec and partition, zstd-compressed"
    );
}

/// A record batch whose bytes are corrupt (here: a gzip batch whose compressed bytes were
/// overwritten in the broker's log) cannot be decoded. Its partition stops there, loudly:
/// `/readyz` names it and the offset, the metric counts it, nothing past it is committed; the
/// other partition goes on. Once the group's offset is moved past the batch, the partition
/// reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_cannot_be_decoded_stops_its_partition_loudly_and_only_it() {
    let brokers = brokers();
    let Some(kafka) = local_kafka(&brokers) else {
        eprintln!("skipped: the broker's log cannot be reached on KAFKA_DLQ_TEST_BROKERS");
        return;
    };
    let topic = unique("corrupt");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    produce_compressed(&brokers, &topic, 1, "gzip", &values("lost-cause", 10)).await;
    produce(&brokers, &topic, vec![Out::new(1, "ok-after-the-batch")]).await;
    produce(
        &brokers,
        &topic,
        values("ok-p0", 20).iter().map(|v| Out::new(0, v)).collect(),
    )
    .await;
    break_first_batch(kafka, &topic, 1);

    let handler = Scripted::default();
    let consumer =
        kafka_dlq::Consumer::new(test_config(&brokers, &group, &topic), handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let subject = format!("{topic}-1 is stopped at offset 0");
    assert!(
        eventually(WAIT, || metrics
            .not_ready()
            .iter()
            .any(|r| r.contains(&subject)))
        .await,
        "/readyz names the partition: {:?}",
        metrics.not_ready()
    );
    assert!(metrics.total("kafka_dlq_undecodable_batches_total") >= 1.0);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2).get(&0)
            == Some(&20))
        .await,
        "the other partition goes on"
    );
    assert!(committed(&brokers, &group, &topic, 2)
        .get(&1)
        .is_none_or(|o| *o == 0));
    assert_eq!(
        handler.attempts("ok-after-the-batch"),
        0,
        "nothing past the batch"
    );
    let reason = metrics.not_ready().join("; ");
    assert!(reason.contains("cannot be decoded"), "{reason}");
    let _ = stop.send(());
    task.await.unwrap().unwrap();

    // The operator's way out: the group's offset past the batch (docs/operating.md).
    {
        use rdkafka::consumer::{BaseConsumer, Consumer as _};
        let mover: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 1, rdkafka::Offset::Offset(10))
            .unwrap();
        mover
            .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            .unwrap();
    }
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(
        eventually(WAIT, || handler.attempts("ok-after-the-batch") == 1).await,
        "past the batch, the partition reads again"
    );
    running.stop().await;
    assert_eq!(committed(&brokers, &group, &topic, 2).get(&1), Some(&11));
}
