//! `kafka-dlq dlq list | show | replay` and the replay library against a real broker.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::record::retry::redrive_topic;
use kafka_dlq::replay::audit::{
    history, DEFAULT_AUDIT_TOPIC, HEADER_REPLAYED_AT, HEADER_REPLAYED_BY, HEADER_REPLAYED_FROM,
    HEADER_REPLAY_RUN,
};
use kafka_dlq::replay::{replay, Destination, Outcome, ReplayOptions, HEADER_REPLAY_COUNT};
use kafka_dlq::{DeadLetterKind, Record, RecordHeader};
use rdkafka::Message;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

fn header(m: &rdkafka::message::OwnedMessage, key: &str) -> Option<Vec<u8>> {
    m.headers()
        .and_then(|h| kafka_dlq::kafka::headers::find(h, key.as_bytes()))
        .flatten()
        .map(<[u8]>::to_vec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_and_replay_round_trip_through_a_fixed_consumer() {
    let brokers = brokers();
    let topic = unique("orders");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let mut poison = Out::new(0, "perm-2");
    poison.key = Some(vec![0xff, 0x01]);
    poison.headers = vec![
        ("trace".into(), Some(b"t-2".to_vec())),
        ("bin".into(), Some(vec![0x80])),
    ];
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "ok-1"), poison, Out::new(0, "always-3")],
    )
    .await;

    // The buggy version dead-letters two records.
    let buggy = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), buggy.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&3))
        .await
    );
    running.stop().await;
    produce(
        &brokers,
        &dlq,
        vec![Out::new(0, "garbage, not an envelope")],
    )
    .await;

    // list: a table, JSON lines, filters.
    let (code, table, err) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains(&format!("{topic}-0-1")) && table.contains("permanent"),
        "{table}"
    );
    assert!(table.contains("retries_exhausted"), "{table}");
    assert!(table.contains("not a kafka-dlq envelope"), "{table}");
    assert!(table.contains("3 dead letter(s)"), "{table}");
    let (_, json, _) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["envelope"]["error"]["kind"], "permanent");
    assert!(lines[2]["not_an_envelope"]["reason"].is_string());
    let (_, json, _) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
        "--kind",
        "retries_exhausted",
    ]);
    assert_eq!(json.lines().count(), 1);
    assert!(json.contains(&format!("{topic}-0-2")));
    let (_, json, _) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
        "--source-topic",
        "elsewhere",
    ]);
    assert_eq!(json.lines().count(), 0);
    let (_, json, _) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
        "--since",
        "2999-01-01T00:00:00Z",
    ]);
    assert_eq!(json.lines().count(), 0);
    let (code, _, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--kind",
        "sometimes",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--kind") && err.contains("sometimes"), "{err}");

    // show: one in full.
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &format!("{topic}-0-1"),
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["envelope"]["payload"], "perm-2");
    assert_eq!(shown["envelope"]["source"]["key_encoding"], "base64");
    let (code, _, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "no-such-id",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("no-such-id"), "{err}");

    // A dry run sends nothing.
    let (code, dry, err) = replay_cli(&brokers, &dlq, &["--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(dry.contains("would replay 2 of 3 scanned"), "{dry}");
    assert!(dry.contains("not envelopes 1"), "{dry}");
    assert_eq!(
        read_all(&brokers, &topic).len(),
        3,
        "a dry run sends nothing"
    );

    // The fixed version handles the replayed records.
    let fixed = Scripted::default();
    let running = Running::start(
        test_config(&brokers, &group, &topic),
        AlwaysOk(fixed.clone()),
    );
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 2 of 3 scanned"), "{out}");
    assert!(
        eventually(WAIT, || fixed.count() == 2).await,
        "{:?}",
        fixed.calls()
    );
    // Through the group's redrive topic, handled as the original records.
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &redrive, 1).get(&0)
            == Some(&2))
        .await
    );
    running.stop().await;
    let calls = fixed.calls();
    assert_eq!(
        calls
            .iter()
            .map(|c| (c.value.as_str(), c.offset))
            .collect::<Vec<_>>(),
        [("perm-2", 1), ("always-3", 2)],
        "the original offsets"
    );
    assert_eq!(
        read_all(&brokers, &topic).len(),
        3,
        "nothing back on the source topic"
    );

    // Byte for byte: key, headers, payload; plus the replay count.
    let all = read_all(&brokers, &redrive);
    let replayed = &all[0];
    assert_eq!(replayed.payload(), Some(&b"perm-2"[..]));
    assert_eq!(replayed.key(), Some(&[0xff, 0x01][..]));
    assert_eq!(header(replayed, "trace"), Some(b"t-2".to_vec()));
    assert_eq!(header(replayed, "bin"), Some(vec![0x80]));
    assert_eq!(header(replayed, HEADER_REPLAY_COUNT), Some(b"1".to_vec()));
    assert_eq!(all[1].payload(), Some(&b"always-3"[..]));

    // The DLQ accounting: only the record that is no envelope, never replayed, is still
    // outstanding; and a second run sends nothing.
    assert_eq!(outstanding(&brokers, &dlq).await, 1);
    let (_, again, _) = replay_cli(&brokers, &dlq, &[]);
    assert!(again.contains("replayed 0 of 0 scanned"), "{again}");
}

fn envelope_out(source: &str, i: usize, replays: Option<u32>) -> Out {
    let mut headers = vec![RecordHeader {
        key: "n".into(),
        value: Some(i.to_string().into_bytes()),
    }];
    if let Some(r) = replays {
        headers.push(RecordHeader {
            key: HEADER_REPLAY_COUNT.into(),
            value: Some(r.to_string().into_bytes()),
        });
    }
    let record = {
        let mut record = Record::new(source, 0, i as i64)
            .with_id(format!("rec-{i}"))
            .with_key(format!("k{i}").into_bytes())
            .with_payload(format!("{{\"n\":{i}}}").into_bytes());
        record.headers = headers;
        record
    };
    Out {
        partition: 0,
        key: record.key.clone(),
        value: Some(Envelope::new(&record, DeadLetterKind::Permanent, "bad", 1, "g").to_vec()),
        headers: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_replay_resumes_without_sending_anything_twice() {
    let brokers = brokers();
    let source = unique("source");
    let dlq = unique("interrupt-dlt");
    let target = unique("target");
    create_topic(&brokers, &dlq, 2).await;
    create_topic(&brokers, &target, 1).await;
    let records: Vec<Out> = (0..20)
        .map(|i| {
            let mut o = envelope_out(&source, i, None);
            o.partition = (i % 2) as i32;
            o
        })
        .collect();
    produce(&brokers, &dlq, records).await;

    // 10 a second: the first acknowledgement (a loopback round trip) is in long before the
    // 20th send is due, so the interruption lands while the replay still has records to send.
    let options = ReplayOptions {
        destination: Destination::Topic(target.clone()),
        rate_per_sec: Some(10),
        ..ReplayOptions::new(&brokers, &dlq)
    };
    let cancel = CancellationToken::new();
    let first = replay(
        &options,
        |done, _, _| {
            if done == 3 {
                cancel.cancel()
            }
        },
        &cancel,
    )
    .await
    .unwrap();
    assert!(first.interrupted, "{first:?}");
    // Sends in flight when it was interrupted are finished, not abandoned.
    assert!((3..20).contains(&first.replayed), "{first:?}");

    let second = replay(&options, |_, _, _| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert!(!second.interrupted);
    assert_eq!(
        second.replayed,
        20 - first.replayed,
        "resumed after what the first sent"
    );

    let sent = read_all(&brokers, &target);
    let mut ids: Vec<String> = sent
        .iter()
        .map(|m| String::from_utf8(header(m, "n").unwrap()).unwrap())
        .collect();
    ids.sort_by_key(|n| n.parse::<u32>().unwrap());
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected, "every record exactly once");

    // Who, when and from where: on every record, and the two runs on the audit topic.
    let (first_run, second_run) = (first.run.clone().unwrap(), second.run.clone().unwrap());
    assert_ne!(first_run, second_run);
    let text = |m: &rdkafka::message::OwnedMessage, name: &str| {
        String::from_utf8(header(m, name).unwrap_or_else(|| panic!("no {name}"))).unwrap()
    };
    let mut from_first = 0;
    for m in &sent {
        let run = text(m, HEADER_REPLAY_RUN);
        assert!(run == first_run || run == second_run, "{run}");
        from_first += usize::from(run == first_run);
        assert_eq!(
            text(m, HEADER_REPLAYED_BY),
            format!("{}@{}", options.operator, hostname())
        );
        let at = text(m, HEADER_REPLAYED_AT);
        assert!(chrono::DateTime::parse_from_rfc3339(&at).is_ok(), "{at}");
        assert!(text(m, HEADER_REPLAYED_FROM).starts_with(&format!("{dlq}/")));
    }
    assert_eq!(from_first as u64, first.replayed);
    let runs = history(
        &brokers,
        &options.librdkafka,
        &kafka_dlq::state::StateTopics::new(DEFAULT_AUDIT_TOPIC),
        Some(&dlq),
    )
    .unwrap()
    .runs;
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0].run, first_run);
    assert!(runs[0].interrupted && !runs[1].interrupted);
    assert_eq!(runs[0].replayed + runs[1].replayed, 20);
    assert_eq!(
        (runs[1].to.as_str(), runs[1].operator.as_str()),
        (target.as_str(), options.operator.as_str())
    );

    // The same, as an operator reads it.
    let (code, out, err) = cli(&["dlq", "history", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("interrupted") && out.contains("done") && out.contains("2 run(s)"),
        "{out}"
    );
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_guard_refuses_a_record_that_keeps_coming_back() {
    let brokers = brokers();
    let topic = unique("loop");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    produce(&brokers, &topic, vec![Out::new(0, "perm-forever")]).await;

    // A handler that still rejects the record: every replay brings it back.
    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    let options = ReplayOptions {
        max_replays: 2,
        ..ReplayOptions::new(&brokers, &dlq)
    };
    let mut dead_letters = 1;
    assert!(eventually(WAIT, || read_all_len(&brokers, &dlq) == dead_letters).await);
    for round in 1..=2 {
        let report = replay(&options, |_, _, _| {}, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(report.replayed, 1, "round {round}");
        dead_letters += 1;
        assert!(eventually(WAIT, || read_all_len(&brokers, &dlq) == dead_letters).await);
    }
    let report = replay(&options, |_, _, _| {}, &CancellationToken::new())
        .await
        .unwrap();
    running.stop().await;
    assert_eq!(report.replayed, 0);
    assert_eq!(report.refused, 1, "{report:?}");
    assert!(
        matches!(
            &report.passed_over[..],
            [Outcome::Refused { replays: 2, .. }]
        ),
        "{report:?}"
    );
    assert_eq!(
        handler.attempts("perm-forever"),
        3,
        "original + two replays"
    );
    assert_eq!(
        outstanding(&brokers, &dlq).await,
        1,
        "the refused dead letter was not resolved: it stays outstanding"
    );

    let last = read_all(&brokers, &dlq).pop().unwrap();
    let envelope = Envelope::from_slice(last.payload().unwrap()).unwrap();
    let count = envelope
        .headers()
        .unwrap()
        .into_iter()
        .find(|h| h.key == HEADER_REPLAY_COUNT.as_bytes())
        .and_then(|h| h.value);
    assert_eq!(
        count,
        Some(b"2".to_vec()),
        "the dead letter remembers its replays"
    );
}

fn read_all_len(brokers: &str, topic: &str) -> usize {
    read_all(brokers, topic).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_replay_sends_only_what_matches_and_keeps_its_own_position() {
    let brokers = brokers();
    let dlq = unique("filter-dlt");
    let target = unique("filtered");
    create_topic(&brokers, &dlq, 1).await;
    create_topic(&brokers, &target, 1).await;
    let mut records = vec![
        envelope_out("orders", 0, None),
        envelope_out("parcels", 1, None),
    ];
    records.push(envelope_out("orders", 2, None));
    produce(&brokers, &dlq, records).await;
    let options = ReplayOptions {
        destination: Destination::Topic(target.clone()),
        filter: kafka_dlq::dlq_reader::Filter {
            source_topic: Some("orders".into()),
            ..Default::default()
        },
        ..ReplayOptions::new(&brokers, &dlq)
    };
    assert_ne!(
        options.position_group(),
        kafka_dlq::dlq_reader::REPLAY_GROUP
    );
    let report = replay(&options, |_, _, _| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((report.replayed, report.filtered_out), (2, 1));
    let sent: HashMap<String, ()> = read_all(&brokers, &target)
        .iter()
        .map(|m| (String::from_utf8(m.key().unwrap().to_vec()).unwrap(), ()))
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(sent.contains_key("k0") && sent.contains_key("k2"));
}

/// The record `value` at `offset` of `source`'s partition 0, with `id`.
fn source_record(source: &str, offset: i64, id: &str, value: &str) -> Record {
    Record::new(source, 0, offset)
        .with_id(id)
        .with_payload(value.as_bytes())
}

/// `envelope` as a DLQ record.
fn letter_of(envelope: &Envelope) -> Out {
    Out {
        partition: 0,
        key: None,
        value: Some(envelope.to_vec()),
        headers: vec![],
    }
}

/// A dead letter of `source` for the record `value` at `offset`, as the consumer writes it.
fn letter(source: &str, offset: i64, value: &str) -> Out {
    let record = source_record(source, offset, &format!("{source}-0-{offset}"), value);
    letter_of(&Envelope::new(
        &record,
        DeadLetterKind::Permanent,
        "bad",
        1,
        "g",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replay_of_the_same_dlq_refuses_while_the_first_runs() {
    let brokers = brokers();
    let topic = unique("twice");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    produce(
        &brokers,
        &dlq,
        (0..12)
            .map(|i| letter(&topic, i, &format!("v{i}")))
            .collect(),
    )
    .await;
    // The first replay sends 2 a second: it runs for about 6 s.
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([
            "dlq",
            "replay",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlq,
            "--rate",
            "2",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let redrive = redrive_topic(&topic, "g");
    assert!(
        eventually(WAIT, || !read_all(&brokers, &redrive).is_empty()).await,
        "the first replay is sending"
    );
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_ne!(code, 0, "the second replay refuses: {out}");
    assert!(err.contains("another replay"), "{err}");
    let first = first.wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let sent: Vec<Vec<u8>> = read_all(&brokers, &redrive)
        .iter()
        .map(|m| m.payload().unwrap().to_vec())
        .collect();
    assert_eq!(sent.len(), 12, "each dead letter sent once");
    let distinct: std::collections::BTreeSet<_> = sent.iter().collect();
    assert_eq!(distinct.len(), 12);

    // Once it is over, the lock is free again (and the position is at the end).
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 0 of 0 scanned"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_lists_from_where_a_real_run_resumes() {
    let brokers = brokers();
    let topic = unique("dry");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    produce(
        &brokers,
        &dlq,
        vec![letter(&topic, 0, "a"), letter(&topic, 1, "b")],
    )
    .await;
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 2 of 2 scanned"), "{out}");
    produce(&brokers, &dlq, vec![letter(&topic, 2, "c")]).await;
    let (code, dry, err) = replay_cli(&brokers, &dlq, &["--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        dry.contains("would replay 1 of 1 scanned") && dry.contains(&format!("{topic}-0-2")),
        "only what a real run would send now: {dry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_that_does_not_decode_is_reported_and_passed_over() {
    let brokers = brokers();
    let topic = unique("undecodable");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let mut broken: serde_json::Value =
        serde_json::from_slice(letter(&topic, 0, "x").value.as_ref().unwrap()).unwrap();
    broken["payload_encoding"] = "base64".into();
    broken["payload"] = "%%% not base64 %%%".into();
    let broken = Out {
        partition: 0,
        key: None,
        value: Some(serde_json::to_vec(&broken).unwrap()),
        headers: vec![],
    };
    produce(
        &brokers,
        &dlq,
        vec![
            broken,
            letter(&topic, 1, "good"),
            Out::new(0, "no envelope"),
        ],
    )
    .await;
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("skipped {topic}-0-0")), "{out}");
    assert!(
        out.contains("replayed 1 of 3 scanned")
            && out.contains("undecodable 1")
            && out.contains("not envelopes 1"),
        "{out}"
    );
    let sent = read_all(&brokers, &redrive_topic(&topic, "g"));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload(), Some(&b"good"[..]));
    assert_eq!(
        outstanding(&brokers, &dlq).await,
        2,
        "passed over unsent, the undecodable one and the one that is no envelope stay outstanding"
    );
    // And stay so across another run.
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 0 of 0 scanned"), "{out}");
    assert_eq!(outstanding(&brokers, &dlq).await, 2);
}

/// The dead letters outstanding on `dlq`, as the monitor counts them.
async fn outstanding(brokers: &str, dlq: &str) -> u64 {
    kafka_dlq::monitor::outstanding(
        brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
        &[dlq.to_string()],
    )
    .await
    .expect("the broker answers")
}

/// A Spring application with Kafka transactions writing dead letters of `topic` to `dlq`.
struct SpringTransactions {
    producer: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: String,
    dlq: String,
}

impl SpringTransactions {
    const TIMEOUT: Duration = Duration::from_secs(30);

    fn new(brokers: &str, topic: &str, dlq: &str) -> Self {
        use rdkafka::producer::Producer;
        let producer: rdkafka::producer::ThreadedProducer<_> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("transactional.id", unique("tx"))
            .create()
            .unwrap();
        producer.init_transactions(Self::TIMEOUT).unwrap();
        Self {
            producer,
            topic: topic.to_string(),
            dlq: dlq.to_string(),
        }
    }

    /// Writes the dead letter of the record at `offset` of the topic, with `value`, in the
    /// transaction begun.
    fn write(&self, offset: i64, value: &str) {
        use kafka_dlq::dlq::spring;
        use rdkafka::message::{Header, OwnedHeaders};
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: spring::ORIGINAL_TOPIC,
                value: Some(self.topic.as_bytes()),
            })
            .insert(Header {
                key: spring::ORIGINAL_PARTITION,
                value: Some(&0_i32.to_be_bytes()),
            })
            .insert(Header {
                key: spring::ORIGINAL_OFFSET,
                value: Some(&offset.to_be_bytes()),
            })
            .insert(Header {
                key: spring::EXCEPTION_MESSAGE,
                value: Some(b"rejected"),
            });
        self.producer
            .send(
                rdkafka::producer::BaseRecord::<(), [u8]>::to(&self.dlq)
                    .payload(value.as_bytes())
                    .headers(headers),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlt_written_in_transactions_is_read_to_its_end_markers_and_aborted_records_included() {
    use rdkafka::producer::Producer;
    let brokers = brokers();
    let topic = unique("tx-orders");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    // A Spring application with transactions: three dead letters in one committed
    // transaction, then one in an aborted one. The log ends in the abort marker.
    let spring = SpringTransactions::new(&brokers, &topic, &dlq);
    spring.producer.begin_transaction().unwrap();
    for (offset, value) in [(0, "a"), (1, "b"), (2, "c")] {
        spring.write(offset, value);
    }
    spring
        .producer
        .commit_transaction(SpringTransactions::TIMEOUT)
        .unwrap();
    spring.producer.begin_transaction().unwrap();
    spring.write(3, "aborted");
    // Written before the abort, so the log holds it and ends in the abort marker: aborted at
    // once, the record could still be unsent, and Kafka 4.1 then refused the abort now and
    // then ("Producer attempted a transactional operation in an invalid state").
    spring.producer.flush(SpringTransactions::TIMEOUT).unwrap();
    spring
        .producer
        .abort_transaction(SpringTransactions::TIMEOUT)
        .unwrap();

    let started = std::time::Instant::now();
    let (code, table, err) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("3 dead letter(s)"), "{table}");
    assert!(table.contains(&format!("{topic}/0@2")), "{table}");
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &format!("{topic}-0-1"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains("rejected"), "{shown}");
    // Spring's dead letters without a group have no group to go back to: the replay stops at
    // the first, naming it, and sends nothing.
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("`{topic}-0-0`")) && err.contains("--to-source"),
        "{err}"
    );
    assert_eq!(
        replay_position(&brokers, kafka_dlq::dlq_reader::REPLAY_GROUP, &dlq)
            .await
            .get(&0),
        None,
        "nothing committed past it"
    );
    assert!(read_all(&brokers, &topic).is_empty(), "nothing sent");
    // So back to their source topic.
    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to-source"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 3 of 3 scanned"), "{out}");
    // Each tool ends at the partition's end instead of waiting 30 s for a record that is not
    // there (a bound far above the time they take, not a measurement).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let replayed: Vec<Vec<u8>> = read_all(&brokers, &topic)
        .iter()
        .map(|m| m.payload().unwrap().to_vec())
        .collect();
    assert_eq!(replayed, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(
        outstanding(&brokers, &dlq).await,
        0,
        "the markers and the aborted record are not outstanding dead letters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_whose_source_record_is_gone_is_reported_passed_over_and_stays_outstanding() {
    let brokers = brokers();
    let topic = unique("gone");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    // Offsets 0 and 1 of the source; the dead letter of 0 is a reference (too large to hold
    // its payload), that of 1 holds it.
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "big"), Out::new(0, "small")],
    )
    .await;
    let big = source_record(&topic, 0, &format!("{topic}-0-0"), "big");
    let envelope = Envelope::new(&big, DeadLetterKind::Permanent, "too big", 1, "g");
    let reference = letter_of(&envelope.reference());
    produce(&brokers, &dlq, vec![reference, letter(&topic, 1, "small")]).await;
    // Retention passes over the source's first record.
    delete_before(&brokers, &topic, 1).await;

    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("lost {topic}-0-0")) && out.contains("retention deleted offset 0"),
        "{out}"
    );
    assert!(
        out.contains("replayed 1 of 2 scanned") && out.contains("lost 1"),
        "{out}"
    );
    let sent: Vec<Vec<u8>> = read_all(&brokers, &redrive_topic(&topic, "g"))
        .iter()
        .map(|m| m.payload().unwrap().to_vec())
        .collect();
    assert_eq!(sent, vec![b"small".to_vec()], "only the one it could send");
    assert_eq!(
        outstanding(&brokers, &dlq).await,
        1,
        "the lost one is never counted as resolved"
    );
    // Running it again sends nothing twice and keeps it outstanding.
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 0 of 0 scanned"), "{out}");
    assert_eq!(outstanding(&brokers, &dlq).await, 1);
    // list still shows it, saying why it cannot be read.
    let (code, json, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        json.contains("\"unresolved\":\"the source record is gone"),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_name_a_dead_letter_topic_that_does_not_exist_in_one_line() {
    let brokers = brokers();
    let dlq = unique("never-created-dlt");
    for args in [
        vec!["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq],
        vec![
            "dlq",
            "show",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlq,
            "x-0-0",
        ],
        vec!["dlq", "replay", "--brokers", &brokers, "--dlq-topic", &dlq],
    ] {
        let started = std::time::Instant::now();
        let (code, _, err) = cli(&args);
        assert_ne!(code, 0, "{args:?}");
        let said = format!("the dead-letter topic `{dlq}` does not exist");
        assert!(err.contains(&said), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "{args:?}: no 30 s group wait"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_prints_a_producer_controlled_id_with_its_control_characters_escaped() {
    let brokers = brokers();
    let topic = unique("escape");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    // The id comes from a header the producer sets: here it clears the screen and retitles
    // the terminal.
    const ID: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}order-1";
    let record = source_record(&topic, 0, ID, "x");
    let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "bad", 1, "g");
    produce(&brokers, &dlq, vec![letter_of(&envelope)]).await;
    for extra in [&["--dry-run"][..], &[]] {
        let args = [
            &["dlq", "replay", "--brokers", &brokers, "--dlq-topic", &dlq][..],
            extra,
        ]
        .concat();
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
        assert!(
            out.contains("\\u{1b}[2J\\u{1b}]0;pwned\\u{7}order-1 ->"),
            "{out:?}"
        );
    }
}

/// A dead letter of `group` for the record at `partition`/`offset` of `source`, keyed `key`,
/// failed with `error`.
fn dead_letter_of(
    source: &str,
    group: &str,
    partition: i32,
    offset: i64,
    key: &str,
    error: &str,
) -> Out {
    let record = Record::new(source, partition, offset)
        .with_key(key)
        .with_payload(format!("{{\"offset\":{offset}}}"));
    let envelope = Envelope::new(&record, DeadLetterKind::RetriesExhausted, error, 4, group);
    Out {
        partition: 0,
        key: record.key.clone(),
        value: Some(envelope.to_vec()),
        headers: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_replay_select_by_group_partition_offsets_key_and_error_text() {
    let brokers = brokers();
    let source = unique("orders");
    let dlq = unique("shared-dlt");
    create_topic(&brokers, &source, 3).await;
    create_topic(&brokers, &dlq, 1).await;
    // One DLT that two services, billing and shipping, dead-letter into.
    produce(
        &brokers,
        &dlq,
        vec![
            dead_letter_of(
                &source,
                "billing",
                0,
                10,
                "customer-1",
                "ledger answered HTTP 503",
            ),
            dead_letter_of(
                &source,
                "billing",
                1,
                20,
                "customer-2",
                "ledger answered HTTP 500",
            ),
            dead_letter_of(&source, "billing", 1, 30, "customer-3", "card declined"),
            dead_letter_of(
                &source,
                "shipping",
                1,
                20,
                "customer-2",
                "carrier answered HTTP 503",
            ),
            dead_letter_of(&source, "shipping", 2, 40, "customer-4", "no such address"),
        ],
    )
    .await;
    let ids = |flags: &[&str]| -> Vec<String> {
        let mut args = vec![
            "dlq",
            "list",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlq,
            "--json",
        ];
        args.extend_from_slice(flags);
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "{flags:?}: {err}");
        out.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let e = &v["envelope"];
                format!(
                    "{}/{}@{}",
                    e["source"]["group"].as_str().unwrap(),
                    e["source"]["partition"],
                    e["source"]["offset"]
                )
            })
            .collect()
    };
    assert_eq!(
        ids(&["--group", "billing"]),
        ["billing/0@10", "billing/1@20", "billing/1@30"]
    );
    assert_eq!(
        ids(&["--group", "shipping", "--source-partition", "2"]),
        ["shipping/2@40"]
    );
    assert_eq!(
        ids(&["--source-offsets", "15..31", "--group", "billing"]),
        ["billing/1@20", "billing/1@30"]
    );
    assert_eq!(
        ids(&["--key", "customer-2"]),
        ["billing/1@20", "shipping/1@20"]
    );
    assert_eq!(
        ids(&["--error-contains", "HTTP 503"]),
        ["billing/0@10", "shipping/1@20"]
    );
    assert_eq!(
        ids(&["--error-matches", r"HTTP 50[03]$", "--group", "billing"]),
        ["billing/0@10", "billing/1@20"]
    );

    // The table says whose each dead letter is.
    let (_, table, _) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert!(
        table.contains("GROUP") && table.contains("shipping"),
        "{table}"
    );

    // A bad filter names the setting and the value.
    let (code, _, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--error-matches",
        "(open",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error_matches") && err.contains("(open"),
        "{err}"
    );
    let (code, _, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--source-offsets",
        "9..3",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("source_offsets"), "{err}");

    // Under the consumers' own template (every source into this one DLT): a replay that does
    // not know it sends nothing back to a source whose dead letters go elsewhere.
    let (code, out, err) = replay_cli(
        &brokers,
        &dlq,
        &[
            "--group",
            "billing",
            "--error-contains",
            "HTTP",
            "--dry-run",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would replay 0 of 5 scanned"), "{out}");
    assert!(out.contains("destination refused 2"), "{out}");
    // Replay with the same filter sends exactly those.
    let (code, out, err) = replay_cli(
        &brokers,
        &dlq,
        &[
            "--group",
            "billing",
            "--error-contains",
            "HTTP",
            "--dlq-topic-template",
            &dlq,
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("replayed 2 of 5 scanned; filtered out 3"),
        "{out}"
    );
    // To billing's redrive topic: shipping's never sees them.
    let mut sent: Vec<String> = read_all(&brokers, &redrive_topic(&source, "billing"))
        .iter()
        .map(|m| String::from_utf8(m.payload().unwrap().to_vec()).unwrap())
        .collect();
    sent.sort();
    assert_eq!(sent, [r#"{"offset":10}"#, r#"{"offset":20}"#]);
    assert!(read_all(&brokers, &redrive_topic(&source, "shipping")).is_empty());
}

/// Dead letters a transactional writer (Spring with transactions) has written but not yet
/// committed: the tools read up to the transaction, say so, and never commit past it; once
/// it commits, the next replay sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_stops_at_an_open_transaction_and_sends_its_dead_letters_once_committed() {
    use rdkafka::producer::Producer;
    let brokers = brokers();
    let topic = unique("open-tx");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let spring = SpringTransactions::new(&brokers, &topic, &dlq);
    spring.producer.begin_transaction().unwrap();
    spring.write(0, "committed");
    spring
        .producer
        .commit_transaction(SpringTransactions::TIMEOUT)
        .unwrap();
    // Offset 0 the record, 1 its commit marker; 2 and 3 in a transaction left open.
    spring.producer.begin_transaction().unwrap();
    spring.write(1, "open-1");
    spring.write(2, "open-2");
    spring.producer.flush(SpringTransactions::TIMEOUT).unwrap();

    let (code, table, err) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("1 dead letter(s)"), "{table}");
    let held = "partition 0 was read up to offset 2, its last stable offset: a transaction in progress holds the 2 offset(s) after it";
    assert!(err.contains(held), "list names the open transaction: {err}");

    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to-source"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 1 of 1 scanned"), "{out}");
    assert!(
        err.contains(held),
        "replay names the open transaction: {err}"
    );
    assert_eq!(
        replay_position(&brokers, kafka_dlq::dlq_reader::REPLAY_GROUP, &dlq)
            .await
            .get(&0),
        Some(&2),
        "the position stops at the last stable offset, never past it"
    );

    spring
        .producer
        .commit_transaction(SpringTransactions::TIMEOUT)
        .unwrap();
    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to-source"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 2 of 2 scanned"), "{out}");
    assert!(!err.contains("transaction in progress"), "{err}");
    let replayed: Vec<Vec<u8>> = read_all(&brokers, &topic)
        .iter()
        .map(|m| m.payload().unwrap().to_vec())
        .collect();
    assert_eq!(
        replayed,
        vec![
            b"committed".to_vec(),
            b"open-1".to_vec(),
            b"open-2".to_vec()
        ]
    );
    assert_eq!(outstanding(&brokers, &dlq).await, 0);
}

/// A Spring dead letter of `group` for the record at `offset` of `source`.
fn spring_letter(source: &str, group: &str, offset: i64, value: &str) -> Out {
    use kafka_dlq::dlq::spring;
    let header = |key: &str, value: Vec<u8>| (key.as_bytes().to_vec(), Some(value));
    Out {
        partition: 0,
        key: None,
        value: Some(value.as_bytes().to_vec()),
        headers: vec![
            header(spring::ORIGINAL_TOPIC, source.as_bytes().to_vec()),
            header(spring::ORIGINAL_PARTITION, 0_i32.to_be_bytes().to_vec()),
            header(spring::ORIGINAL_OFFSET, offset.to_be_bytes().to_vec()),
            header(spring::ORIGINAL_CONSUMER_GROUP, group.as_bytes().to_vec()),
            header(spring::EXCEPTION_MESSAGE, b"rejected".to_vec()),
        ],
    }
}

/// A default replay (to each group's redrive topic) of a Spring application's DLT: a group no
/// kafka-dlq consumer runs would never read its redrive topic, so the replay refuses before
/// sending anything, names `--to-source`, and creates nothing; where the group's redrive
/// topic exists (a kafka-dlq consumer of that group created it), the dead letter goes there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_replay_of_a_foreign_dlt_goes_only_to_a_group_kafka_dlq_runs() {
    let brokers = brokers();
    let topic = unique("spring-orders");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    produce(
        &brokers,
        &dlq,
        vec![spring_letter(&topic, "billing", 4, "a")],
    )
    .await;
    for dry in [&["--dry-run"][..], &[]] {
        let (code, out, err) = replay_cli(&brokers, &dlq, dry);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            err.contains(&format!("`{topic}-0-4`"))
                && err.contains("written by Spring Kafka for group `billing`")
                && err.contains("--to-source"),
            "{err}"
        );
    }
    let unread = redrive_topic(&topic, "billing");
    let metadata = {
        use rdkafka::consumer::Consumer;
        let admin: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .unwrap();
        admin
            .fetch_metadata(None, Duration::from_secs(10))
            .unwrap()
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .collect::<Vec<_>>()
    };
    assert!(!metadata.contains(&unread), "{unread} was not created");
    assert_eq!(
        replay_position(&brokers, kafka_dlq::dlq_reader::REPLAY_GROUP, &dlq)
            .await
            .get(&0),
        None,
        "nothing committed past it"
    );
    assert_eq!(outstanding(&brokers, &dlq).await, 1);

    // The group's kafka-dlq consumer ran (it created its redrive topic): the replay sends there.
    create_topic(&brokers, &unread, 1).await;
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 1 of 1 scanned"), "{out}");
    let redriven = read_all(&brokers, &unread);
    assert_eq!(redriven.len(), 1);
    assert_eq!(redriven[0].payload(), Some(&b"a"[..]));
}

/// A replay that stops on a dead letter quotes its producer-controlled id with the control
/// characters escaped, as the progress lines do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_error_prints_a_producer_controlled_id_escaped() {
    let brokers = brokers();
    let topic = unique("escape-error");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    const ID: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}order-1";
    let record = source_record(&topic, 0, ID, "x");
    // No group: the default replay stops on it, quoting its id.
    let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "bad", 1, "");
    produce(&brokers, &dlq, vec![letter_of(&envelope)]).await;
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(
        err.contains("\\u{1b}[2J\\u{1b}]0;pwned\\u{7}order-1"),
        "{err:?}"
    );
}

/// A reference is read back with the operator's credentials: whoever can write the DLT must
/// not make the tools copy a record of any other topic out. It is followed only to a source
/// topic whose dead-letter topic (under `--dlq-topic-template`) is the one read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_naming_another_topic_than_the_dlts_source_is_never_followed() {
    let brokers = brokers();
    let topic = unique("orders");
    let dlq = format!("{topic}-dlt");
    let secret = unique("payroll");
    for t in [&topic, &dlq, &secret] {
        create_topic(&brokers, t, 1).await;
    }
    produce(&brokers, &secret, vec![Out::new(0, "salary-of-the-ceo")]).await;
    // A reference in orders' DLT that claims to come from payroll.
    let forged = Envelope::new(
        &source_record(&secret, 0, "forged-1", "x"),
        DeadLetterKind::Permanent,
        "e",
        1,
        "g",
    );
    produce(&brokers, &dlq, vec![letter_of(&forged.reference())]).await;

    let (code, shown, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!shown.contains("salary-of-the-ceo"), "{shown}");
    assert!(shown.contains("not followed"), "{shown}");
    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to", &unique("elsewhere")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lost forged-1") && out.contains("lost 1") && out.contains("replayed 0 of 1"),
        "{out}"
    );
    // Consumers whose template sends every topic's dead letters to this one topic: then the
    // reference is theirs to write, and followed.
    let (code, shown, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--dlq-topic-template",
        &dlq,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!shown.contains("not followed"), "{shown}");
    assert!(shown.contains("salary-of-the-ceo"), "{shown}");
}
