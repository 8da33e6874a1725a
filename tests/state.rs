//! kafka-dlq's state after a week, on a broker where a week passes in a minute
//! (`expiring_brokers`): idle groups' committed offsets expire, and topics made with the
//! broker's defaults lose their records. Replay positions, discards and redrives must outlive
//! both: nothing comes back as outstanding and nothing is sent twice.

mod common;
#[path = "console/mod.rs"]
#[allow(dead_code)]
mod console;

use std::time::Duration;

use common::*;
use console::*;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::dlq_reader::REPLAY_GROUP;
use kafka_dlq::record::retry::redrive_topic;
use kafka_dlq::{DeadLetterKind, Record};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::ClientConfig;
use serde_json::json;

/// How long the broker may take to forget an idle group (a minute, looked at every 5 s).
const EXPIRY: Duration = Duration::from_secs(180);

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap()
}

/// `topic`'s setting `key`, as the broker describes it.
async fn setting(brokers: &str, topic: &str, key: &str) -> Option<String> {
    let described = admin(brokers)
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap();
    let resource = described.into_iter().next().unwrap().unwrap();
    resource.get(key).and_then(|e| e.value.clone())
}

/// A dead letter of `source` at `offset`, dead-lettered by `group` with `error`.
fn dead_letter(source: &str, group: &str, offset: i64, error: &str) -> Out {
    let record = Record::new(source, 0, offset)
        .with_id(format!("{source}-0-{offset}"))
        .with_payload(format!("{{\"offset\":{offset}}}"));
    Out {
        partition: 0,
        key: None,
        value: Some(Envelope::new(&record, DeadLetterKind::Permanent, error, 1, group).to_vec()),
        headers: vec![],
    }
}

/// The positions an older kafka-dlq kept: a committed offset of the replay group.
fn commit_as_an_older_version(brokers: &str, dlq: &str, next: i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", REPLAY_GROUP)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(dlq, 0, rdkafka::Offset::Offset(next))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync).unwrap();
}

/// The outstanding dead letters `dlq list` shows, by id.
fn listed(brokers: &str, dlq: &str) -> Vec<String> {
    let (code, out, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        brokers,
        "--dlq-topic",
        dlq,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["envelope"]["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The console's count of outstanding dead letters once its inbox is current.
async fn console_outstanding(api: &Api) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, status) = api.get("/api/status", As::Bearer(VIEWER)).await;
        if status["current_at"].is_string() {
            return status["outstanding"].as_u64().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the console's inbox is never built: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_and_discarded_dead_letters_stay_so_after_kafka_forgets_idle_groups() {
    let brokers = expiring_brokers();
    let source = unique("orders");
    let dlq = format!("{source}-dlt");
    create_topic_with(&brokers, &source, 1, &[("retention.ms", "-1")]).await;
    // As the consumer creates a DLT: kept for ever.
    create_topic_with(&brokers, &dlq, 1, &[("retention.ms", "-1")]).await;
    // A topic with the broker's defaults, to see its retention run.
    let control = unique("defaults");
    create_topic(&brokers, &control, 1).await;
    produce(&brokers, &control, vec![Out::new(0, "forgotten")]).await;
    // 0..4 replayed by an older kafka-dlq, 4..8 billing's, 8..12 shipping's.
    let mut letters = Vec::new();
    for offset in 0..4 {
        letters.push(dead_letter(&source, "billing", offset, "an old cause"));
    }
    for offset in 4..8 {
        letters.push(dead_letter(&source, "billing", offset, "ledger down"));
    }
    for offset in 8..12 {
        letters.push(dead_letter(&source, "shipping", offset, "no such address"));
    }
    produce(&brokers, &dlq, letters).await;
    commit_as_an_older_version(&brokers, &dlq, 4);

    // An operator discards shipping's in the console: test data.
    let (console, base) = console_on(&brokers, &dlq, "", &[]).await;
    let api = Api::new(&base);
    assert_eq!(
        console_outstanding(&api).await,
        8,
        "the older position is read"
    );
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq, "group": "shipping" }, "reason": "test data" }),
        )
        .await;
    assert_eq!((status, &v["discarded"]), (200, &json!(4)), "{v}");

    // The default replay moves the older position, sends billing's four, not shipping's.
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 4 of 8 scanned"), "{out}");
    assert!(out.contains("already resolved 4"), "{out}");
    let redriven = redrive_topic(&source, "billing");
    assert_eq!(read_all(&brokers, &redriven).len(), 4);
    assert!(read_all(&brokers, &redrive_topic(&source, "shipping")).is_empty());
    assert_eq!(
        replay_position(&brokers, REPLAY_GROUP, &dlq).await.get(&0),
        Some(&12)
    );
    drop(console);

    // A week later: the broker forgot the replay group, and retention ran.
    assert!(
        eventually(EXPIRY, || committed(&brokers, REPLAY_GROUP, &dlq, 1)
            .is_empty())
        .await,
        "the broker expires the idle replay group's offsets"
    );
    assert!(
        eventually(EXPIRY, || read_all(&brokers, &control).is_empty()).await,
        "retention deletes what a topic with the broker's defaults holds"
    );

    // Nothing is outstanding: for `dlq list`, the monitor and a console started afresh.
    assert_eq!(listed(&brokers, &dlq), Vec::<String>::new());
    let counted = kafka_dlq::monitor::count(
        &brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
        std::slice::from_ref(&dlq),
    )
    .await
    .unwrap();
    assert_eq!(counted.outstanding, 0, "{counted:?}");
    let (_console, base) = console_on(&brokers, &dlq, "", &[]).await;
    let api = Api::new(&base);
    assert_eq!(console_outstanding(&api).await, 0);
    let (status, all) = api
        .get(
            &format!("/api/dead-letters?dlq_topic={dlq}&state=all&limit=20"),
            As::Bearer(OPERATOR),
        )
        .await;
    assert_eq!(status, 200, "{all}");
    let by: Vec<&str> = all["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["resolution"]["by"].as_str().unwrap())
        .collect();
    assert_eq!(by.len(), 12, "{all}");
    assert_eq!(by.iter().filter(|b| **b == "replayed").count(), 8, "{by:?}");
    assert_eq!(
        by.iter().filter(|b| **b == "discarded").count(),
        4,
        "{by:?}"
    );

    // And a second replay sends nothing.
    let (code, out, err) = replay_cli(&brokers, &dlq, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 0 of 0 scanned"), "{out}");
    assert_eq!(read_all(&brokers, &redriven).len(), 4);

    // The state topics keep what they hold for ever.
    let state = kafka_dlq::state::StateTopics::default();
    assert_eq!(
        setting(&brokers, &state.audit, "retention.ms")
            .await
            .as_deref(),
        Some("-1")
    );
    assert_eq!(
        setting(&brokers, &state.audit, "retention.bytes")
            .await
            .as_deref(),
        Some("-1")
    );
    assert_eq!(
        setting(&brokers, &state.positions, "cleanup.policy")
            .await
            .as_deref(),
        Some("compact")
    );
    let (code, out, err) = cli(&["dlq", "history", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 run(s)"),
        "the discard and two replays: {out}"
    );

    // Restored, shipping's are outstanding again, though the replay passed them (unsent); a
    // redrive of them sends them, once.
    let (_, history) = api.get("/api/history", As::Bearer(VIEWER)).await;
    let discard = history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "discard")
        .unwrap()["run"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, v) = api
        .post(
            &format!("/api/discards/{discard}/restore"),
            As::Bearer(OPERATOR),
            json!({ "reason": "not test data after all" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(eventually(WAIT, || listed(&brokers, &dlq).len() == 4).await);
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq, "group": "shipping" } }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let done = api.redrive_end(v["id"].as_str().unwrap()).await;
    assert_eq!(done["sent"], 4, "{done}");
    assert_eq!(
        read_all(&brokers, &redrive_topic(&source, "shipping")).len(),
        4
    );
    assert!(eventually(WAIT, || listed(&brokers, &dlq).is_empty()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_topic_that_deletes_records_fails_the_config_check_with_the_line_that_fixes_it() {
    let brokers = expiring_brokers();
    let dlq = unique("checked-dlt");
    create_topic_with(&brokers, &dlq, 1, &[("retention.ms", "-1")]).await;
    // An audit topic someone made with the broker's defaults: 60 s here, a week by default.
    let audit = unique("audit");
    create_topic(&brokers, &audit, 1).await;
    let check = || {
        cli(&[
            "config",
            "check",
            "--connect",
            "dlq",
            "list",
            "--brokers",
            &brokers,
            "--dlq-topic",
            &dlq,
            "--audit-topic",
            &audit,
        ])
    };
    let (code, out, err) = check();
    assert_eq!(code, 1, "{out}{err}");
    let fix_line = out
        .lines()
        .find(|l| l.contains(&audit) && l.contains("fix: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert!(fix_line.contains("retention.ms=60000"), "{fix_line}");
    assert!(err.contains("would delete what they hold"), "{err}");

    // Every tool says so when it starts.
    let (code, _, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        "--audit-topic",
        &audit,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("state_topic_retention"), "{err}");

    // The line it gives fixes it.
    let fix = fix_line.split("fix: ").nth(1).unwrap();
    // `kafka-configs.sh ARGS…`: the tool's class with the same arguments.
    let args: Vec<&str> = fix.split_whitespace().skip(1).collect();
    common::broker::kafka_tool("kafka.admin.ConfigCommand", &args);
    let (code, out, err) = check();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("kept for ever"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_written_before_the_audit_key_is_kept_once_sealed() {
    let brokers = expiring_brokers();
    let source = unique("sealed-orders");
    let dlq = format!("{source}-dlt");
    create_topic_with(&brokers, &dlq, 1, &[("retention.ms", "-1")]).await;
    produce(
        &brokers,
        &dlq,
        (0..4)
            .map(|o| dead_letter(&source, "billing", o, "test data"))
            .collect(),
    )
    .await;
    let audit = unique("sealed-audit");
    const KEY: &str = "the-tools-own-key-0123456789abcdef";
    // Discarded before the key was set.
    let (console, base) = console_on(&brokers, &dlq, "", &["--audit-topic", &audit]).await;
    let api = Api::new(&base);
    assert_eq!(console_outstanding(&api).await, 4);
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq, "group": "billing" }, "reason": "test data" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    drop(console);
    // With the key, the unsealed discard resolves nothing...
    let keyed = ["--audit-topic", audit.as_str(), "--audit-key", KEY];
    let (console, base) = console_on(&brokers, &dlq, "", &keyed).await;
    let api = Api::new(&base);
    assert_eq!(
        console_outstanding(&api).await,
        4,
        "an unsealed discard is ignored"
    );
    drop(console);
    // ...until `dlq seal` seals what was written before.
    let (code, out, err) = cli(&[
        "dlq",
        "seal",
        "--brokers",
        &brokers,
        "--audit-topic",
        &audit,
        "--audit-key",
        KEY,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sealed 1 run(s)"), "{out}");
    let (code, _, err) = cli(&[
        "dlq",
        "seal",
        "--brokers",
        &brokers,
        "--audit-topic",
        &audit,
    ]);
    assert_eq!(code, 2, "no key: {err}");
    let (_console, base) = console_on(&brokers, &dlq, "", &keyed).await;
    let api = Api::new(&base);
    assert!(
        eventually_async(WAIT, || async {
            api.get("/api/status", As::Bearer(VIEWER)).await.1["outstanding"] == 0
        })
        .await,
        "the sealed discard holds"
    );
}
