//! A dead letter is always writable: a record too large for the dead-letter topic even in the
//! detached form is written as a reference (coordinates and error, no payload), its partition
//! goes on, and `dlq show` / `dlq replay` read the record back from the source topic.

mod common;

use std::time::Duration;

use common::*;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(30);

/// Creates `dlq` with a 4 KiB record limit, too small for the tests' records even detached.
async fn create_small_dlq(brokers: &str, dlq: &str) {
    create_topic_with(brokers, dlq, 1, &[("max.message.bytes", "4096")]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_even_detached_is_dead_lettered_as_a_reference_and_replayed_from_its_source(
) {
    let brokers = brokers();
    let topic = unique("huge");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_small_dlq(&brokers, &dlq).await;
    let value: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let huge = Out {
        partition: 0,
        key: Some(b"k".to_vec()),
        value: Some([b"perm".as_slice(), &value].concat()),
        headers: vec![(b"big".to_vec(), Some(vec![0xab; 3_000]))],
    };
    produce(&brokers, &topic, vec![huge, Out::new(0, "ok-after")]).await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await,
        "the partition goes on past the record"
    );
    running.stop().await;
    assert_eq!(handler.attempts("ok-after"), 1);

    let letters = read_all(&brokers, &dlq);
    assert_eq!(letters.len(), 1);
    let raw: serde_json::Value = serde_json::from_slice(letters[0].payload().unwrap()).unwrap();
    assert_eq!(raw["payload_encoding"], "reference", "{raw}");
    assert_eq!(raw["payload"], serde_json::Value::Null);
    assert_eq!(raw["source"]["offset"], 0);
    assert_eq!(raw["error"]["kind"], "permanent");
    assert!(letters[0].payload().unwrap().len() < 4096);

    // show and replay resolve it from the source topic.
    let id = format!("{topic}-0-0");
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &id,
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        shown["envelope"]["payload_encoding"], "base64",
        "resolved: {shown}"
    );
    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to-source"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 1 of 1 scanned"), "{out}");
    let source = read_all(&brokers, &topic);
    assert_eq!(source.len(), 3);
    assert_eq!(
        source[2].payload(),
        Some([b"perm".as_slice(), &value].concat().as_slice()),
        "the original value, byte for byte"
    );
    let headers = kafka_dlq::RecordHeader::read_all(rdkafka::Message::headers(&source[2]).unwrap());
    assert_eq!(headers[0].key, b"big");
    assert_eq!(headers[0].value, Some(vec![0xab; 3_000]));
}

/// A record dead-lettered from a retry tier as a reference is filled in from its copy on the
/// retry topic, the younger one: `dlq show` still has its value and headers (without the retry
/// headers) after the source topic's retention removed the original.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_from_a_retry_tier_is_filled_in_from_its_retry_copy_once_the_source_is_gone() {
    let brokers = brokers();
    let topic = unique("huge-tiered");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_small_dlq(&brokers, &dlq).await;
    let value: Vec<u8> = [b"always".as_slice(), &[0xcd; 20_000]].concat();
    let huge = Out {
        partition: 0,
        key: Some(b"k".to_vec()),
        value: Some(value.clone()),
        headers: vec![(b"big".to_vec(), Some(vec![0xab; 3_000]))],
    };
    produce(&brokers, &topic, vec![huge]).await;
    let config = kafka_dlq::ConsumerConfig {
        retry_topic_delays_ms: "300".parse().unwrap(),
        max_retries: 0,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, Scripted::default());
    assert!(
        eventually(WAIT, || read_all(&brokers, &dlq).len() == 1).await,
        "dead-lettered from its tier"
    );
    running.stop().await;
    let letters = read_all(&brokers, &dlq);
    let raw: serde_json::Value = serde_json::from_slice(letters[0].payload().unwrap()).unwrap();
    assert_eq!(raw["payload_encoding"], "reference", "{raw}");
    assert_eq!(
        raw["retry_copy"]["topic"],
        format!("{topic}-retry-0"),
        "{raw}"
    );

    // The source topic's retention takes the original.
    delete_before(&brokers, &topic, 1).await;

    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &format!("{topic}-0-0"),
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let envelope: kafka_dlq::dlq::Envelope =
        serde_json::from_value(shown["envelope"].clone()).unwrap();
    assert_eq!(envelope.payload_bytes().unwrap(), Some(value));
    let headers = envelope.headers().unwrap();
    let keys: Vec<&[u8]> = headers.iter().map(|h| h.key.as_slice()).collect();
    assert_eq!(keys, [b"big".as_slice()], "the original headers only");
    assert_eq!(headers[0].value, Some(vec![0xab; 3_000]));
}
