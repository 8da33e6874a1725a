//! Share groups (KIP-932) with the real `kafka-dlq run --share-group` on Apache Kafka 4.4
//! (formatted with `share.version=2`, 3 s acquisition locks, 5 deliveries): several members
//! on **one** partition share its records, failures end as their kind says, slow calls keep
//! their locks, and a killed member's records go to the others.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::*;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(90);

/// One call of a downstream: which member made it, the record's value and its delivery.
#[derive(Debug, Clone)]
struct Call {
    member: usize,
    value: String,
    delivery: u16,
}

/// The downstream of every member (each member has its own address, so calls say who made
/// them). By the value's prefix: `ok` takes 20 ms, `perm` is refused (400), `flaky` is down
/// (503) for its first two calls, `doomed` always, `slow` takes 8 s (past the 3 s lock),
/// `hang` never answers member 0.
#[derive(Clone, Default)]
struct Downstream {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Downstream {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn calls_of(&self, value: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.value == value)
            .collect()
    }

    async fn url(&self, member: usize) -> String {
        let app = axum::Router::new()
            .route("/", axum::routing::post(answer))
            .with_state((self.clone(), member));
        format!("http://{}/", serve_on_loopback(app).await)
    }
}

async fn answer(
    State((d, member)): State<(Downstream, usize)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let value = String::from_utf8_lossy(&body).into_owned();
    let delivery = headers
        .get("X-Kafka-Delivery-Count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let earlier = {
        let mut calls = d.calls.lock().unwrap();
        let earlier = calls.iter().filter(|c| c.value == value).count();
        calls.push(Call {
            member,
            value: value.clone(),
            delivery,
        });
        earlier
    };
    let prefix = value.split('-').next().unwrap_or_default();
    match prefix {
        "perm" => StatusCode::BAD_REQUEST,
        "flaky" if earlier < 2 => StatusCode::SERVICE_UNAVAILABLE,
        "doomed" => StatusCode::SERVICE_UNAVAILABLE,
        "slow" => {
            tokio::time::sleep(Duration::from_secs(8)).await;
            StatusCode::OK
        }
        "hang" if member == 0 => std::future::pending().await,
        _ => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            StatusCode::OK
        }
    }
}

/// A member of a share group: `kafka-dlq run --share-group`, and its metrics port.
struct Member {
    child: tokio::process::Child,
    port: u16,
}

impl Member {
    /// Waits until `/readyz` answers 200: the member has joined and has its partitions.
    async fn ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.port);
        let ready = async {
            loop {
                if let Ok(r) = reqwest::get(&url).await {
                    if r.status() == 200 {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::time::timeout(WAIT, ready)
            .await
            .expect("the member gets ready");
    }

    /// A metric's value summed over its series: `name{labels…}` lines of `/metrics`.
    async fn metric(&self, name: &str, label: &str) -> f64 {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn stop(mut self) {
        assert!(terminate(&mut self.child).await.success());
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `kafka-dlq run --share-group <group>`, delivering to `url`, its log in a file of its own.
fn member(brokers: &str, group: &str, topic: &str, url: &str, extra: &[&str]) -> Member {
    let log = std::env::temp_dir().join(format!("{}.log", unique(group)));
    eprintln!("member of {group}: log {}", log.display());
    let port = free_port();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .arg("run")
        .args([
            "--brokers",
            brokers,
            "--share-group",
            group,
            "--topics",
            topic,
        ])
        .args([
            "--target-url",
            url,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--max-retries", "2", "--backoff-initial-ms", "20"])
        .args(["--breaker-failure-ratio", "0"])
        .args(extra)
        .env("RUST_LOG", "info,kafka_dlq=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Member { child, port }
}

/// The dead letters of `dlt`, by id: (kind, message, attempts, delivery_count).
fn dead_letters(brokers: &str, dlt: &str) -> HashMap<String, (String, String, u64, u64)> {
    read_all(brokers, dlt)
        .iter()
        .map(|m| {
            let envelope: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            let error = &envelope["error"];
            (
                envelope["payload"].as_str().unwrap_or_default().to_string(),
                (
                    error["kind"].as_str().unwrap().to_string(),
                    error["message"].as_str().unwrap().to_string(),
                    error["attempts"].as_u64().unwrap(),
                    error["delivery_count"].as_u64().unwrap_or(0),
                ),
            )
        })
        .collect()
}

/// Values as plain text records, all on partition 0.
fn values(values: &[String]) -> Vec<Out> {
    values.iter().map(|v| Out::new(0, v)).collect()
}

/// The group's share-partition start offset and lag on `topic`'s partition 0: the end of the
/// partition and 0 once every record is acknowledged for good (accepted or archived).
async fn share_state(brokers: &str, group: &str, topic: &str) -> (i64, Option<i64>) {
    let kafka = krafka::Kafka::builder(brokers).connect().await.unwrap();
    let offsets = kafka
        .admin()
        .describe_share_group_offsets(group, Default::default())
        .await
        .unwrap();
    let state = offsets
        .into_iter()
        .find(|(tp, _)| tp.topic == topic && tp.partition == 0)
        .map(|(_, state)| state.unwrap());
    let state = state.expect("the group holds state for the partition");
    (state.start_offset, state.lag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_on_one_partition_share_the_work_and_fail_as_classified() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let mut all: Vec<String> = (0..60).map(|i| format!("ok-{i}")).collect();
    all.extend((0..4).map(|i| format!("perm-{i}")));
    all.extend((0..4).map(|i| format!("flaky-{i}")));

    let downstream = Downstream::default();
    let mut members = Vec::new();
    for m in 0..3 {
        let url = downstream.url(m).await;
        members.push(member(
            &brokers,
            &group,
            &topic,
            &url,
            &["--max-in-flight", "2"],
        ));
    }
    for m in &members {
        m.ready().await;
    }
    produce(&brokers, &topic, values(&all)).await;
    let dlt = format!("{topic}-dlt");
    let done = eventually(WAIT, || {
        let calls = downstream.calls();
        let handled = |v: &String| calls.iter().any(|c| &c.value == v);
        all.iter().all(handled)
            && (0..4).all(|i| downstream.calls_of(&format!("flaky-{i}")).len() >= 3)
    })
    .await;
    assert!(
        done,
        "every record reached the downstream: {:?}",
        downstream.calls().len()
    );
    assert!(
        eventually(WAIT, || read_all(&brokers, &dlt).len() >= 4).await,
        "the 4 permanent failures are dead-lettered"
    );
    let mut accepted = 0.0;
    for m in &members {
        accepted += m
            .metric("kafka_dlq_share_acknowledgements_total", "ack=\"accept\"")
            .await;
    }
    for m in members {
        m.stop().await;
    }

    let calls = downstream.calls();
    let by_member: Vec<usize> = (0..3)
        .map(|m| calls.iter().filter(|c| c.member == m).count())
        .collect();
    eprintln!("calls by member: {by_member:?}");
    for (m, mine) in by_member.iter().enumerate() {
        assert!(*mine > 0, "member {m} handled some records: {by_member:?}");
    }
    let duplicates = all
        .iter()
        .filter(|v| v.starts_with("ok"))
        .filter(|v| downstream.calls_of(v).len() > 1)
        .count();
    eprintln!("records handled more than once: {duplicates}");
    for i in 0..4 {
        let flaky = downstream.calls_of(&format!("flaky-{i}"));
        assert_eq!(
            flaky.len(),
            3,
            "flaky-{i}: two failures, then handled: {flaky:?}"
        );
        assert!(flaky.iter().all(|c| c.delivery == 1), "{flaky:?}");
        assert_eq!(downstream.calls_of(&format!("perm-{i}")).len(), 1);
    }
    let letters = dead_letters(&brokers, &dlt);
    assert_eq!(letters.len(), 4, "{letters:?}");
    for i in 0..4 {
        let (kind, message, attempts, delivery) = &letters[&format!("perm-{i}")];
        assert_eq!(kind, "permanent");
        assert!(message.contains("400"), "{message}");
        assert_eq!((*attempts, *delivery), (1, 1));
    }
    assert!(
        accepted >= all.len() as f64,
        "{accepted} accepted of {}",
        all.len()
    );
    assert_eq!(
        share_state(&brokers, &group, &topic).await,
        (all.len() as i64, Some(0)),
        "every record acknowledged for good"
    );
}
