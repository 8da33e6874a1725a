//! Interop with Spring Kafka's own code (tests/spring, Spring Kafka 4.1): a Spring
//! `@KafkaListener` reads the dead-letter topic kafka-dlq wrote and gets every
//! `KafkaHeaders.DLT_ORIGINAL_*` field right, in both `dlq_format`s; and a dead-letter topic
//! written by Spring's `DeadLetterPublishingRecoverer` is listed and replayed, byte for byte,
//! by `kafka-dlq dlq`; and Spring's own retry-topic listener adapter reads the due time and
//! coordinates of a record kafka-dlq wrote to a retry topic. Beside Spring, the other dialects
//! of dead letters: Kafka Streams' own KIP-1034 dead-letter queue (tests/spring holds the
//! Streams application too) and a Confluent data contract rule's `__rule.*` headers.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use kafka_dlq::dlq::DlqFormat;
use rdkafka::message::Message;

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::STANDARD;

/// Runs `SpringInterop <mode> <brokers> <topic> <count>` and returns its JSON lines.
fn spring(mode: &str, brokers: &str, topic: &str, count: usize) -> Vec<serde_json::Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/spring/target");
    assert!(
        dir.join("classes/kafkadlq/interop/SpringInterop.class")
            .exists(),
        "the Spring interop program is not built in {}: run ./scripts/test.sh (it runs `mvn \
         compile` in tests/spring)",
        dir.display()
    );
    let java = std::env::var("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .unwrap_or_else(|_| PathBuf::from("java"));
    let out = Command::new(java)
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!(
            "{}:{}/*",
            dir.join("classes").display(),
            dir.join("libs").display()
        ))
        .args(["kafkadlq.interop.SpringInterop", mode, brokers, topic])
        .arg(count.to_string())
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "SpringInterop {mode} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

async fn spring_reads_what_kafka_dlq_wrote(format: DlqFormat) {
    let brokers = brokers();
    let topic = unique("spring-reads");
    let group = unique("g");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &dlt, 2).await;
    let key = vec![0xff, 0x00, b'k'];
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(1, "ok-1"),
            Out {
                key: Some(key.clone()),
                headers: vec![(b"trace-id".to_vec(), Some(b"t-9".to_vec()))],
                ..Out::new(1, "perm-a")
            },
            Out::new(1, "always-b"),
        ],
    )
    .await;
    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        dlq_format: format,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(
        eventually(Duration::from_secs(60), || read_all(&brokers, &dlt).len()
            == 2)
        .await,
        "two dead letters"
    );
    running.stop().await;
    let sources = read_all(&brokers, &topic);
    let source_ts = |offset: i64| {
        sources
            .iter()
            .find(|m| m.offset() == offset)
            .and_then(|m| m.timestamp().to_millis())
            .unwrap()
    };

    let mut read = spring("read-dlt", &brokers, &dlt, 2);
    read.sort_by_key(|v| v["offset"].as_i64());
    assert_eq!(read.len(), 2, "{read:?}");
    let (perm, always) = (&read[0], &read[1]);
    for (got, offset) in [(perm, 1), (always, 2)] {
        assert_eq!(got["topic"], topic.as_str(), "{got}");
        assert_eq!(
            got["partition"], 1,
            "KafkaHeaders.DLT_ORIGINAL_PARTITION as int: {got}"
        );
        assert_eq!(
            got["offset"], offset,
            "KafkaHeaders.DLT_ORIGINAL_OFFSET as long: {got}"
        );
        assert_eq!(got["timestamp"], source_ts(offset), "{got}");
        assert_eq!(got["timestamp_type"], "CreateTime", "{got}");
        assert_eq!(got["group"], group.as_str(), "{got}");
    }
    assert_eq!(perm["fqcn"], "kafka_dlq.PermanentFailure");
    assert_eq!(perm["message"], "rejected perm-a");
    assert!(perm["stacktrace"]
        .as_str()
        .unwrap()
        .starts_with("kafka_dlq.PermanentFailure: rejected perm-a"));
    assert_eq!(perm["key"], b64(&key), "the source key, byte for byte");
    assert_eq!(always["fqcn"], "kafka_dlq.RetriesExhausted");
    assert_eq!(always["message"], "downstream down");
    let value = B64.decode(perm["value"].as_str().unwrap()).unwrap();
    match format {
        DlqFormat::Envelope => {
            let envelope: serde_json::Value = serde_json::from_slice(&value).unwrap();
            assert_eq!(envelope["payload"], "perm-a", "{envelope}");
        }
        DlqFormat::Spring => assert_eq!(value, b"perm-a", "Spring's layout: the original value"),
        _ => unreachable!(),
    }

    // Our own tools read both layouts the same.
    let (code, json, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<String> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["envelope"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_listener_reads_every_dlt_header_kafka_dlq_wrote() {
    spring_reads_what_kafka_dlq_wrote(DlqFormat::Envelope).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_listener_reads_the_spring_layout_with_the_original_value() {
    spring_reads_what_kafka_dlq_wrote(DlqFormat::Spring).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_a_dlt_that_springs_recoverer_wrote_byte_for_byte() {
    let brokers = brokers();
    let topic = unique("spring-writes");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &dlt, 2).await;
    let originals = vec![
        Out {
            partition: 0,
            key: Some(vec![0x00, 0xfe, b'k']),
            value: Some(vec![0xc3, 0x28, 0x00, 0xff]),
            headers: vec![
                (b"trace-id".to_vec(), Some(b"t-1".to_vec())),
                (b"empty".to_vec(), None),
                // Java clients read header names as UTF-8 strings (an invalid name comes back
                // as U+FFFD), so the name is valid UTF-8; the value is any bytes.
                (
                    "naïve-ключ".as_bytes().to_vec(),
                    Some(vec![0x01, 0x02, 0xff]),
                ),
            ],
        },
        Out {
            partition: 1,
            key: None,
            value: Some(br#"{"order":7}"#.to_vec()),
            headers: vec![],
        },
        Out {
            partition: 1,
            key: Some(b"k3".to_vec()),
            value: None,
            headers: vec![(b"h".to_vec(), Some(b"v".to_vec()))],
        },
    ];
    let expected: Vec<_> = originals
        .iter()
        .map(|o| (o.key.clone(), o.value.clone(), o.headers.clone()))
        .collect();
    produce(&brokers, &topic, originals).await;
    spring("write-dlt", &brokers, &topic, 3);

    let (code, json, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 3, "{json}");
    for entry in &listed {
        assert_eq!(entry["written_by"], "Spring Kafka", "{entry}");
        let envelope = &entry["envelope"];
        assert_eq!(envelope["source"]["topic"], topic.as_str());
        assert_eq!(envelope["error"]["kind"], "unclassified");
        let message = envelope["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("java.lang.IllegalStateException: ")
                && message.contains("spring rejected offset"),
            "Spring's exception class and message: {message}"
        );
        assert!(envelope["source"]["group"]
            .as_str()
            .unwrap()
            .starts_with("spring-dlt-writer-"));
    }
    let (code, table, err) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlt]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("unclassified")
            && table.contains("java.lang.IllegalStateException")
            && table.contains("3 dead letter(s)"),
        "{table}"
    );

    // A Spring application does not read kafka-dlq's redrive topics: back to the source.
    let (code, out, err) = replay_cli(&brokers, &dlt, &["--json", "--to-source"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["replayed"], 3, "{report}");

    let all = read_all(&brokers, &topic);
    assert_eq!(all.len(), 6, "three originals and three replays");
    let replayed: Vec<_> = all
        .iter()
        .filter(|m| {
            m.headers().is_some_and(|h| {
                kafka_dlq::RecordHeader::read_all(h)
                    .iter()
                    .any(|h| h.key == kafka_dlq::replay::HEADER_REPLAY_COUNT.as_bytes())
            })
        })
        .collect();
    assert_eq!(replayed.len(), 3);
    for (key, value, headers) in expected {
        let found = replayed
            .iter()
            .find(|m| {
                m.key().map(<[u8]>::to_vec) == key && m.payload().map(<[u8]>::to_vec) == value
            })
            .unwrap_or_else(|| panic!("no replay of key {key:?} value {value:?}"));
        let mut got: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            kafka_dlq::RecordHeader::read_all(found.headers().unwrap())
                .into_iter()
                .map(|h| (h.key, h.value))
                .collect();
        // Less the replay's own: its count and its audit (kafka_dlq-replay-run, -replayed-*).
        got.retain(|(k, _)| !k.starts_with(b"kafka_dlq-replay"));
        assert_eq!(
            got, headers,
            "the source headers, without Spring's kafka_dlt-*"
        );
    }
}

/// The replays (records with kafka-dlq's replay count header) on `topic`.
fn replays_on(brokers: &str, topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
    read_all(brokers, topic)
        .into_iter()
        .filter(|m| {
            m.headers().is_some_and(|h| {
                kafka_dlq::RecordHeader::read_all(h)
                    .iter()
                    .any(|h| h.key == kafka_dlq::replay::HEADER_REPLAY_COUNT.as_bytes())
            })
        })
        .collect()
}

/// `kafka-dlq dlq list --json` of `dlt`, one value per dead letter.
fn listed(brokers: &str, dlt: &str) -> Vec<serde_json::Value> {
    let (code, json, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        brokers,
        "--dlq-topic",
        dlt,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    json.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_queue_kafka_streams_wrote_is_listed_shown_and_replayed_byte_for_byte() {
    let brokers = brokers();
    let topic = unique("streams");
    let dlt = format!("{topic}-dlt");
    for t in [&topic, &dlt, &format!("{topic}-out")] {
        create_topic(&brokers, t, 2).await;
    }
    // Integer values as Kafka Streams' serde writes them (4 bytes, big-endian): one that is
    // not 4 bytes (its deserializer fails) and a negative one (its processor refuses it).
    let int = |v: i32| Some(v.to_be_bytes().to_vec());
    let records = vec![
        Out {
            partition: 0,
            key: Some(b"order-1".to_vec()),
            value: int(5),
            headers: vec![],
        },
        Out {
            partition: 1,
            key: Some(b"order-2".to_vec()),
            value: Some(b"xy".to_vec()),
            headers: vec![],
        },
        Out {
            partition: 1,
            key: Some(b"order-3".to_vec()),
            value: int(-3),
            headers: vec![],
        },
        Out {
            partition: 0,
            key: Some(b"order-4".to_vec()),
            value: int(7),
            headers: vec![],
        },
    ];
    produce(&brokers, &topic, records).await;
    let written = spring("streams-dlt", &brokers, &topic, 2);
    assert_eq!(written.len(), 2, "{written:?}");
    for line in &written {
        assert_eq!(
            line["headers"]["__streams.errors.topic"],
            topic.as_str(),
            "{line}"
        );
    }

    let entries = listed(&brokers, &dlt);
    assert_eq!(entries.len(), 2, "{entries:?}");
    let by_key = |key: &str| {
        entries
            .iter()
            .find(|e| e["envelope"]["source"]["key"] == key)
            .unwrap_or_else(|| panic!("no dead letter of {key}: {entries:?}"))
    };
    let undecodable = by_key("order-2");
    let refused = by_key("order-3");
    for (entry, offset) in [(undecodable, 0), (refused, 1)] {
        assert_eq!(entry["written_by"], "Kafka Streams", "{entry}");
        let source = &entry["envelope"]["source"];
        assert_eq!(source["topic"], topic.as_str());
        assert_eq!(
            (source["partition"].as_i64(), source["offset"].as_i64()),
            (Some(1), Some(offset)),
            "{entry}"
        );
        assert_eq!(entry["envelope"]["id"], format!("{topic}-1-{offset}"));
    }
    let reason = |e: &serde_json::Value| {
        e["envelope"]["error"]["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        reason(undecodable).starts_with("org.apache.kafka.common.errors.SerializationException: "),
        "the class and the message: {}",
        reason(undecodable)
    );
    assert_eq!(
        reason(refused),
        "java.lang.IllegalArgumentException: negative amount -3"
    );

    let id = format!("{topic}-1-1");
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt,
        &id,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        shown.contains("negative amount -3") && shown.contains(&topic),
        "{shown}"
    );

    // Kafka Streams reads no redrive topic of ours: back to the source, once fixed.
    let (code, out, err) = replay_cli(&brokers, &dlt, &["--json", "--to-source"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["replayed"], 2, "{report}");
    let replays = replays_on(&brokers, &topic);
    assert_eq!(replays.len(), 2);
    for (key, value) in [
        (&b"order-2"[..], b"xy".to_vec()),
        (b"order-3", (-3_i32).to_be_bytes().to_vec()),
    ] {
        assert!(
            replays
                .iter()
                .any(|m| m.key() == Some(key) && m.payload() == Some(&value[..])),
            "the bytes Kafka Streams failed, back on the source"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letters_of_a_data_contract_rule_are_listed_and_replayed() {
    let brokers = brokers();
    let topic = unique("contract");
    let dlt = format!("{topic}-dlq");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlt, 1).await;
    // As Confluent's DlqAction writes them: the record's key, value and headers, and the
    // rule's `__rule.*` headers; no source partition or offset (a WRITE rule fails before the
    // record is written).
    let rule = |value: &str, exception: Option<&str>| {
        let mut headers = vec![
            (
                b"traceparent".to_vec(),
                Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_vec()),
            ),
            (b"__rule.name".to_vec(), Some(b"checkSsnLen".to_vec())),
            (b"__rule.mode".to_vec(), Some(b"WRITE".to_vec())),
            (
                b"__rule.subject".to_vec(),
                Some(format!("{topic}-value").into_bytes()),
            ),
            (b"__rule.topic".to_vec(), Some(topic.clone().into_bytes())),
        ];
        if let Some(e) = exception {
            headers.push((b"__rule.exception".to_vec(), Some(e.as_bytes().to_vec())));
        }
        Out {
            partition: 0,
            key: Some(b"customer-9".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers,
        }
    };
    produce(
        &brokers,
        &dlt,
        vec![
            rule(
                r#"{"ssn":"12345"}"#,
                Some("Expr failed: 'size(message.ssn) == 9'"),
            ),
            rule(r#"{"ssn":"1"}"#, None),
        ],
    )
    .await;

    let entries = listed(&brokers, &dlt);
    assert_eq!(entries.len(), 2, "{entries:?}");
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(entry["written_by"], "data contract rule", "{entry}");
        let envelope = &entry["envelope"];
        assert_eq!(envelope["id"], format!("{dlt}-rule-0-{i}"));
        assert_eq!(envelope["source"]["topic"], topic.as_str());
        assert_eq!(envelope["error"]["kind"], "permanent");
    }
    assert_eq!(
        entries[0]["envelope"]["error"]["message"],
        format!("data contract rule `checkSsnLen` (WRITE) of subject {topic}-value failed: Expr failed: 'size(message.ssn) == 9'")
    );
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt,
        &format!("{dlt}-rule-0-1"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains("checkSsnLen"), "{shown}");

    // The rule's DLQ topic is named as its rule says: the template tells whose it is.
    let (code, out, err) = replay_cli(
        &brokers,
        &dlt,
        &[
            "--json",
            "--to-source",
            "--dlq-topic-template",
            "{topic}-dlq",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let replays = replays_on(&brokers, &topic);
    assert_eq!(replays.len(), 2, "{out}");
    for m in &replays {
        let headers = kafka_dlq::RecordHeader::read_all(m.headers().unwrap());
        assert!(
            headers.iter().any(|h| h.key == b"traceparent"),
            "the record's own headers"
        );
        assert!(
            !headers.iter().any(|h| h.key.starts_with(b"__rule.")),
            "not the rule's"
        );
        assert_eq!(m.key(), Some(&b"customer-9"[..]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn springs_retry_topic_adapter_reads_the_due_time_of_our_retry_records() {
    let brokers = brokers();
    let topic = unique("spring-retry");
    let group = unique("g");
    let retry_topic = format!("{topic}-retry-0");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(&brokers, &topic, vec![Out::new(1, "always-r")]).await;
    // Straight to a ten-minute tier: the record stays there while Spring reads it.
    let config = kafka_dlq::ConsumerConfig {
        retry_topic_delays_ms: "600000".parse().unwrap(),
        max_retries: 0,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, Scripted::default());
    assert!(
        eventually(Duration::from_secs(60), || read_all(&brokers, &retry_topic)
            .len()
            == 1)
        .await,
        "the record reached its retry topic"
    );
    running.stop().await;
    let written = &read_all(&brokers, &retry_topic)[0];
    let account: serde_json::Value = written
        .headers()
        .and_then(|h| {
            use rdkafka::message::Headers as _;
            h.iter()
                .find(|h| h.key == "kafka_dlq-retry")
                .and_then(|h| h.value)
        })
        .map(|v| serde_json::from_slice(v).unwrap())
        .expect("our account of the retry record");
    let due: chrono::DateTime<chrono::Utc> = account["due"].as_str().unwrap().parse().unwrap();

    let read = spring("read-retry", &brokers, &retry_topic, 1);
    assert_eq!(read.len(), 1, "{read:?}");
    let seen = &read[0];
    assert_eq!(
        seen["due"],
        due.timestamp_millis(),
        "Spring decodes our retry_topic-backoff-timestamp to the due time we wrote"
    );
    assert_eq!(seen["attempts"], 2, "Spring's delivery count for tier 0");
    assert_eq!(seen["topic"], topic.as_str());
    assert_eq!(seen["partition"], 1);
    assert_eq!(seen["offset"], 0);
    assert_eq!(seen["value"], b64(b"always-r"));
}

/// A handled value and the retry topic it came from (`None`: the source topic).
type Handled = (String, Option<String>);

/// Records each call's value and the retry topic it came from.
#[derive(Clone, Default)]
struct FromWhere(std::sync::Arc<std::sync::Mutex<Vec<Handled>>>);

impl kafka_dlq::Handler for FromWhere {
    async fn handle(&self, record: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
        let value = String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default());
        self.0.lock().unwrap().push((
            value.into_owned(),
            record.retry.as_ref().map(|r| r.topic.clone()),
        ));
        Ok(())
    }
}

/// Spring gives a retry endpoint a suffixed group id (`<group>-retry-0`), but its retry-topic
/// recoverer appends no second `kafka_dlt-original-consumer-group`: a record it moved on to
/// `<topic>-retry-1` still names the main listener's group, first and alone. A kafka-dlq
/// consumer of that group, taking over from Spring with the same tiers, handles it from there
/// rather than pass it over as another group's (review E11, which does not hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_springs_retry_endpoint_moved_on_is_handled_by_its_group_from_the_later_tier() {
    let brokers = brokers();
    let topic = unique("spring-tiers");
    let group = format!("{topic}-g");
    for name in [
        topic.clone(),
        format!("{topic}-retry-0"),
        format!("{topic}-retry-1"),
        format!("{topic}-dlt"),
    ] {
        create_topic(&brokers, &name, 1).await;
    }
    produce(&brokers, &topic, vec![Out::new(0, "moved-twice")]).await;
    spring("write-retry", &brokers, &topic, 1);
    let moved = read_all(&brokers, &format!("{topic}-retry-1"));
    assert_eq!(moved.len(), 1);
    let groups: Vec<String> = {
        use rdkafka::message::Headers as _;
        moved[0]
            .headers()
            .unwrap()
            .iter()
            .filter(|h| h.key == "kafka_dlt-original-consumer-group")
            .map(|h| String::from_utf8_lossy(h.value.unwrap()).into_owned())
            .collect()
    };
    assert_eq!(
        groups,
        vec![group.clone()],
        "only the main listener's group"
    );

    let config = kafka_dlq::ConsumerConfig {
        retry_topic_delays_ms: "1000,1000".parse().unwrap(),
        ..test_config(&brokers, &group, &topic)
    };
    let handler = FromWhere::default();
    let running = Running::start(config, handler.clone());
    let retry_1 = format!("{topic}-retry-1");
    let from_retry_1 = || {
        handler
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|(v, from)| v == "moved-twice" && from.as_deref() == Some(retry_1.as_str()))
    };
    assert!(
        eventually(Duration::from_secs(60), from_retry_1).await,
        "handled from {retry_1}: {:?}",
        handler.0.lock().unwrap()
    );
    assert!(
        eventually(Duration::from_secs(30), || committed(
            &brokers, &group, &retry_1, 1
        )
        .get(&0)
            == Some(&1))
        .await
    );
    running.stop().await;
}
