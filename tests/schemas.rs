//! Schema Registry payloads through `kafka-dlq run --decode-values schema-registry`: records
//! written by confluent-kafka's reference serializers (Python), with schemas they register in
//! a registry that follows Confluent's REST API (tests/common/registry_server.rs, or the one
//! `KAFKA_DLQ_TEST_SCHEMA_REGISTRY` names), reach an HTTP target as JSON; undecodable ones are
//! dead-lettered with kind `deserialization`; a registry outage holds records, losing none.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::schema_registry::{read, registry, write, TestRegistry};
use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

async fn capture(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push((headers, value));
    StatusCode::OK
}

async fn target() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/records", post(capture))
        .with_state(seen.clone());
    (
        format!("http://{}/records", serve_on_loopback(app).await),
        seen,
    )
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_every_format_and_framing_reach_the_target_as_json() {
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let base = unique("schemas");
    let cases = [
        ("avro", "prefix"),
        ("avro", "header"),
        ("avro-references", "prefix"),
        ("protobuf", "prefix"),
        ("protobuf", "header"),
        ("json", "prefix"),
        ("json", "header"),
    ];
    let mut topics = Vec::new();
    for (format, framing) in cases {
        let topic = format!("{base}-{format}-{framing}");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        write(&registry_url, &brokers, &topic, format, framing, 3).await;
        topics.push(topic);
    }
    let (url, seen) = target().await;
    let group = unique("g");
    let mut child = sidecar_command(&brokers, &group, &topics.join(","), &url)
        .args([
            "--decode-values",
            "schema-registry",
            "--schema-registry-url",
            &registry_url,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let all = cases.len() * 3;
    let arrived = eventually(WAIT, || seen.lock().unwrap().len() >= all).await;
    let dead: Vec<String> = topics
        .iter()
        .flat_map(|t| read_all(&brokers, &format!("{t}-dlt")))
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string())
        .collect();
    assert!(
        arrived && dead.is_empty(),
        "every record reaches the target: {} of {all}; dead letters: {dead:?}",
        seen.lock().unwrap().len()
    );
    assert!(terminate(&mut child).await.success());
    let seen = seen.lock().unwrap().clone();
    for ((format, framing), topic) in cases.iter().zip(&topics) {
        let mut got: Vec<&(HeaderMap, Value)> = seen
            .iter()
            .filter(|(h, _)| header(h, "x-kafka-topic") == Some(topic.as_str()))
            .collect();
        got.sort_by_key(|(h, _)| header(h, "x-kafka-offset").unwrap().parse::<i64>().unwrap());
        assert_eq!(got.len(), 3, "{format} {framing}");
        for (i, (headers, value)) in got.iter().enumerate() {
            let expected = match *format {
                "avro" => json!({"id": i, "customer": {"name": format!("c{i}")}, "note": null}),
                "avro-references" => {
                    json!({"id": i, "customer": {"name": format!("c{i}")}, "note": format!("n{i}")})
                }
                "protobuf" => json!({"sku": format!("s{i}"), "quantity": i}),
                _ => json!({"id": i, "customer": {"name": format!("c{i}")}}),
            };
            assert_eq!(value, &expected, "{format} {framing} record {i}");
            assert_eq!(header(headers, "content-type"), Some("application/json"));
            let kind = match *format {
                "protobuf" => "PROTOBUF",
                "json" => "JSON",
                _ => "AVRO",
            };
            assert_eq!(header(headers, "x-kafka-value-schema-type"), Some(kind));
            // By the topic name strategy; a schema registered under several subjects (the
            // same Avro for two topics) is named by one of them.
            let subject = header(headers, "x-kafka-value-schema-subject").unwrap_or_default();
            assert!(
                subject.starts_with(&format!("{base}-{format}-")) && subject.ends_with("-value"),
                "{format} {framing}: {subject}"
            );
            assert_eq!(header(headers, "x-kafka-value-schema-version"), Some("1"));
            if *framing == "header" {
                assert!(header(headers, "x-kafka-value-schema-guid").is_some());
            }
            assert!(header(headers, "x-kafka-value-schema-id").is_some());
            assert_eq!(
                header(headers, "x-kafka-key"),
                Some(format!("k{i}").as_str())
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_records_are_dead_lettered_with_kind_deserialization_and_the_reason() {
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let topic = unique("undecodable");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlt, 1).await;
    // Offset 0: a good Avro record, which gives its schema id.
    write(&registry_url, &brokers, &topic, "avro", "prefix", 1).await;
    let good = read_all(&brokers, &topic);
    let good = good[0].payload().unwrap().to_vec();
    // Offset 1: plain JSON, no framing; offset 2: the good id before bytes of another
    // schema (a long cut short).
    let mut cut = good[..5].to_vec();
    cut.push(0x80);
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(0, "{\"id\": 1}"),
            Out {
                value: Some(cut),
                ..Out::new(0, "")
            },
        ],
    )
    .await;
    let (url, seen) = target().await;
    let group = unique("g");
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args([
            "--decode-values",
            "schema-registry",
            "--schema-registry-url",
            &registry_url,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&3))
        .await,
        "every record is settled"
    );
    assert!(terminate(&mut child).await.success());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the good record reaches the target"
    );
    let dead: Vec<Envelope> = read_all(&brokers, &dlt)
        .iter()
        .map(|m| Envelope::from_slice(m.payload().unwrap()).unwrap())
        .collect();
    assert_eq!(dead.len(), 2);
    for envelope in &dead {
        assert_eq!(
            envelope.error.kind.as_str(),
            "deserialization",
            "{envelope:?}"
        );
        assert_eq!(envelope.error.attempts, 1, "never retried");
    }
    assert!(
        dead[0]
            .error
            .message
            .contains("not framed for a schema registry"),
        "{}",
        dead[0].error.message
    );
    assert!(
        dead[0].error.message.contains("0x7b"),
        "{}",
        dead[0].error.message
    );
    assert!(
        dead[1]
            .error
            .message
            .contains("does not decode with schema id"),
        "{}",
        dead[1].error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_outage_holds_records_and_loses_none() {
    let brokers = brokers();
    // Our own registry whatever the environment says: the test stops and starts it.
    let mut registry = TestRegistry::start().await;
    let topic = unique("outage");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlt, 1).await;
    write(&registry.url(), &brokers, &topic, "avro", "prefix", 2).await;
    registry.stop().await;
    let (url, seen) = target().await;
    let group = unique("g");
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args([
            "--decode-values",
            "schema-registry",
            "--schema-registry-url",
            &registry.url(),
        ])
        .args([
            "--max-retries",
            "1000",
            "--backoff-initial-ms",
            "200",
            "--backoff-max-ms",
            "500",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sidecar's log, line by line, as it runs: the retries must show while the registry
    // is away, not merely a quiet spell.
    let log = Arc::new(Mutex::new(String::new()));
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stderr.take().unwrap()));
    let reading = {
        let log = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        })
    };
    let refusals = || {
        log.lock()
            .unwrap()
            .lines()
            .filter(|l| l.contains("the schema registry at") && l.contains("cannot be reached"))
            .count()
    };
    assert!(
        eventually(WAIT, || refusals() >= 5).await,
        "the sidecar retries while the registry is away: {}",
        log.lock().unwrap()
    );
    // Retried, not delivered, not dead-lettered, not committed.
    assert!(seen.lock().unwrap().is_empty());
    assert!(
        read_all(&brokers, &dlt).is_empty(),
        "an outage is not the record's fault"
    );
    assert!(
        committed(&brokers, &group, &topic, 1)
            .get(&0)
            .copied()
            .unwrap_or(-1)
            <= 0
    );
    registry.restart().await;
    assert!(
        eventually(WAIT, || seen.lock().unwrap().len() == 2).await,
        "both records arrive once the registry is back"
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await
    );
    assert!(terminate(&mut child).await.success());
    assert!(read_all(&brokers, &dlt).is_empty());
    reading.await.unwrap();
}

/// Answers each record with an output to encode: `{"id": <offset>}` plus the customer for the
/// first, a value its schema refuses (a string id) for the second.
async fn produce_with_schema(
    State((out, subject)): State<(String, String)>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let offset: i64 = header(&headers, "x-kafka-offset").unwrap().parse().unwrap();
    let value = if offset == 0 {
        json!({"id": 41, "customer": {"name": "edited"}})
    } else {
        json!({"id": "not a long", "customer": {"name": "x"}})
    };
    let answer =
        json!({"produce": [{"topic": out, "value": value, "schema": {"subject": subject}}]});
    (StatusCode::OK, answer.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_outputs_are_encoded_with_the_registry_and_a_refused_one_is_dead_lettered() {
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let topic = unique("encode");
    let out = format!("{topic}-out");
    let dlt = format!("{topic}-dlt");
    for t in [&topic, &out, &dlt] {
        create_topic(&brokers, t, 1).await;
    }
    // Two records whose schema (subject <topic>-value) the outputs are written with.
    write(&registry_url, &brokers, &topic, "avro", "prefix", 2).await;
    let app = Router::new()
        .route("/records", post(produce_with_schema))
        .with_state((out.clone(), format!("{topic}-value")));
    let url = format!("http://{}/records", serve_on_loopback(app).await);
    let group = unique("g");
    let mut child = sidecar_command(&brokers, &group, &topic, &url)
        .args(["--exactly-once", "--output-topics", &out])
        .args(["--schema-registry-url", &registry_url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&2))
        .await,
        "both records are settled"
    );
    assert!(terminate(&mut child).await.success());
    // Confluent's own deserializer reads the output back, with the registry.
    let values = read(&registry_url, &brokers, &out, "avro", 1).await;
    assert_eq!(
        values,
        vec![json!({"id": 41, "customer": {"name": "edited"}, "note": null})]
    );
    assert_eq!(
        read_committed(&brokers, &out, 1).len(),
        1,
        "the refused output is not produced"
    );
    let dead: Vec<Envelope> = read_committed(&brokers, &dlt, 1)
        .iter()
        .map(|m| Envelope::from_slice(m.payload().unwrap()).unwrap())
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].source.offset, 1);
    assert_eq!(dead[0].error.kind.as_str(), "permanent");
    assert!(
        dead[0].error.message.contains("produce[0]")
            && dead[0].error.message.contains("id: expected an integer"),
        "{}",
        dead[0].error.message
    );
}

/// A Rust handler behind the decoding layer: what it saw of each record.
#[derive(Clone, Default)]
struct Orders {
    seen: Arc<Mutex<Vec<(i64, Value, Option<String>)>>>,
}

impl kafka_dlq::schema::DecodedHandler for Orders {
    async fn handle(
        &self,
        record: &kafka_dlq::Record,
        decoded: &kafka_dlq::schema::DecodedRecord,
    ) -> Result<(), kafka_dlq::HandlerError> {
        let value = decoded.value.as_ref().expect("a decoded value");
        let subject = value.schema.registered.as_ref().map(|r| r.subject.clone());
        self.seen
            .lock()
            .unwrap()
            .push((record.offset, value.json.clone(), subject));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_handler_behind_the_decoding_layer_gets_json_and_never_an_undecodable_record() {
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let topic = unique("layer");
    let dlt = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlt, 1).await;
    write(&registry_url, &brokers, &topic, "protobuf", "prefix", 1).await;
    produce(&brokers, &topic, vec![Out::new(0, "not framed")]).await;
    write(&registry_url, &brokers, &topic, "protobuf", "header", 1).await;
    let registry = kafka_dlq::schema::Registry::new(&kafka_dlq::schema::RegistrySettings {
        url: registry_url.clone(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    })
    .unwrap();
    let codec = Arc::new(kafka_dlq::schema::Codec::new(registry, 10));
    let orders = Orders::default();
    let running = Running::start(
        test_config(&brokers, &unique("g"), &topic),
        kafka_dlq::schema::Decoding::values(codec, orders.clone()),
    );
    assert!(eventually(WAIT, || orders.seen.lock().unwrap().len() == 2).await);
    assert!(eventually(WAIT, || read_all(&brokers, &dlt).len() == 1).await);
    running.stop().await;
    let seen = orders.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, 0);
    assert_eq!(seen[0].1, json!({"sku": "s0", "quantity": 0}));
    assert_eq!(seen[1].0, 2);
    assert_eq!(seen[1].1, json!({"sku": "s0", "quantity": 0}));
    assert!(seen
        .iter()
        .all(|(_, _, subject)| subject.as_deref() == Some(&format!("{topic}-value")[..])));
    let dead = Envelope::from_slice(read_all(&brokers, &dlt)[0].payload().unwrap()).unwrap();
    assert_eq!(dead.source.offset, 1);
    assert_eq!(dead.error.kind.as_str(), "deserialization");
}

struct RefuseAll;

impl kafka_dlq::Handler for RefuseAll {
    async fn handle(&self, _: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
        Err(kafka_dlq::HandlerError::permanent("refused"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_list_and_show_decode_payloads_and_filter_on_decoded_fields() {
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let topic = unique("list-decoded");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    write(&registry_url, &brokers, &topic, "avro", "header", 3).await;
    let running = Running::start(test_config(&brokers, &group, &topic), RefuseAll);
    assert!(eventually(WAIT, || read_all(&brokers, &dlq).len() == 3).await);
    running.stop().await;
    let (code, out, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
        "--schema-registry-url",
        &registry_url,
        "--where",
        "decoded.customer.name == 'c1' && kind == 'permanent'",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(
        lines[0]["decoded"]["json"],
        json!({"id": 1, "customer": {"name": "c1"}, "note": null})
    );
    assert_eq!(lines[0]["decoded"]["schema"]["type"], "AVRO");
    assert!(
        lines[0]["decoded"]["schema"]["guid"].is_string(),
        "the header framing's GUID"
    );
    let id = lines[0]["envelope"]["id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&[
        "dlq",
        "show",
        &id,
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--schema-registry-url",
        &registry_url,
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["decoded"]["json"]["customer"]["name"], "c1");
    // Without a registry a filter on decoded fields is refused, naming what is missing; a
    // syntax error names its column.
    let refused = |expression: &str| {
        let (code, _, err) = cli(&[
            "dlq",
            "list",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlq,
            "--where",
            expression,
        ]);
        assert_eq!(code, 2, "{err}");
        err
    };
    let err = refused("decoded.id == 1");
    assert!(err.contains("--schema-registry-url"), "{err}");
    let err = refused("kind == 'permanent' &&& x");
    assert!(err.contains("where") && err.contains("column 23"), "{err}");
}
