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
/// `hang` never answers member 0, `job` takes 500 ms.
#[derive(Clone, Default)]
struct Downstream {
    calls: Arc<Mutex<Vec<Call>>>,
    /// Once set, every call succeeds.
    fixed: Arc<std::sync::atomic::AtomicBool>,
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
    if d.fixed.load(std::sync::atomic::Ordering::SeqCst) {
        return StatusCode::OK;
    }
    match prefix {
        "perm" => StatusCode::BAD_REQUEST,
        "flaky" if earlier < 2 => StatusCode::SERVICE_UNAVAILABLE,
        "doomed" => StatusCode::SERVICE_UNAVAILABLE,
        "slow" => {
            tokio::time::sleep(Duration::from_secs(8)).await;
            StatusCode::OK
        }
        "hang" if member == 0 => std::future::pending().await,
        "job" => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            StatusCode::OK
        }
        _ => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            StatusCode::OK
        }
    }
}

/// A member of a share group: `kafka-dlq run --share-group`, its metrics port and its log.
struct Member {
    child: tokio::process::Child,
    port: u16,
    log: std::path::PathBuf,
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

    /// Its `/metrics` page.
    async fn page(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        reqwest::get(&url).await.unwrap().text().await.unwrap()
    }

    /// A metric's value summed over its series: `name{labels…}` lines of `/metrics`.
    async fn metric(&self, name: &str, label: &str) -> f64 {
        let text = self.page().await;
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
    member_with(brokers, group, topic, url, extra, &[])
}

/// [`member`] with the variables `env`.
fn member_with(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Member {
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
        .args(if extra.contains(&"--max-retries") {
            &[][..]
        } else {
            &["--max-retries", "2"][..]
        })
        .args(["--backoff-initial-ms", "20", "--breaker-failure-ratio", "0"])
        .args(extra)
        .env("RUST_LOG", "info,kafka_dlq=debug")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Member { child, port, log }
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

/// The group's share-partition start offset and lag on `topic`'s partition 0.
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

/// Waits (up to 30 s: the broker persists share state in the background) until the group's
/// share partition of `topic` has no lag past `end` records: every one of them acknowledged
/// for good (accepted or archived), none available or acquired. Returns the lag seen last.
async fn acknowledged_up_to(brokers: &str, group: &str, topic: &str, end: i64) -> Option<i64> {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (start, lag) = share_state(brokers, group, topic).await;
        let done = lag == Some(0) && start > 0 && start <= end;
        if done || tokio::time::Instant::now() > until {
            return lag;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sets the share group's configuration `key` to `value`.
async fn set_group_config(brokers: &str, group: &str, key: &str, value: &str) {
    let kafka = krafka::Kafka::builder(brokers).connect().await.unwrap();
    let set = kafka
        .admin()
        .incremental_alter_configs(
            [(
                krafka::admin::ConfigResource::group(group),
                vec![krafka::admin::ConfigOp::set(key, value)],
            )],
            Default::default(),
        )
        .await
        .unwrap();
    for result in set.into_values() {
        result.unwrap();
    }
}

/// Sets the group's broker dead-letter queue (KIP-1191) to `topic`.
async fn set_broker_dlq(brokers: &str, group: &str, topic: &str) {
    set_group_config(brokers, group, "errors.deadletterqueue.topic.name", topic).await;
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
    // The downstream sees a call before its member has the answer and acknowledges it, so the
    // last acceptances may still be on their way.
    let accepted = accepted_eventually(&members, all.len() as f64).await;
    // The dashboard's share panels ask for what a member serves.
    let page = members[0].page().await;
    let unserved: Vec<_> = common::dashboard::share_families()
        .difference(&common::dashboard::families_served(&page))
        .cloned()
        .collect();
    assert!(
        unserved.is_empty(),
        "the dashboard asks a share member for {unserved:?}:\n{page}"
    );
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
        acknowledged_up_to(&brokers, &group, &topic, all.len() as i64).await,
        Some(0),
        "every record acknowledged for good"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_up_retries_are_released_until_the_last_delivery_then_dead_lettered() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    let url = downstream.url(0).await;
    // Two calls per delivery (one retry), five deliveries (the broker's limit).
    let m = member(&brokers, &group, &topic, &url, &["--max-retries", "1"]);
    m.ready().await;
    produce(
        &brokers,
        &topic,
        values(&["doomed-0".to_string(), "ok-0".to_string()]),
    )
    .await;
    let dlt = format!("{topic}-dlt");
    assert!(
        eventually(WAIT, || read_all(&brokers, &dlt).len() == 1).await,
        "doomed-0 is dead-lettered"
    );
    let released = m
        .metric("kafka_dlq_share_acknowledgements_total", "ack=\"release\"")
        .await;
    m.stop().await;
    let calls = downstream.calls_of("doomed-0");
    let deliveries: Vec<u16> = calls.iter().map(|c| c.delivery).collect();
    assert_eq!(deliveries, [1, 1, 2, 2, 3, 3, 4, 4, 5, 5], "{calls:?}");
    assert_eq!(released, 4.0, "released after each delivery but the last");
    let (kind, message, attempts, delivery) = &dead_letters(&brokers, &dlt)["doomed-0"];
    assert_eq!(kind, "retries_exhausted");
    assert!(message.contains("503"), "{message}");
    assert_eq!((*attempts, *delivery), (2, 5));
    assert_eq!(downstream.calls_of("ok-0").len(), 1);
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, 2).await,
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_slower_than_the_lock_keeps_its_record() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    let a = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(0).await,
        &["--max-in-flight", "1"],
    );
    let b = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(1).await,
        &["--max-in-flight", "1"],
    );
    a.ready().await;
    b.ready().await;
    // 8 s in the handler against a 3 s lock: renewed twice or more meanwhile.
    produce(&brokers, &topic, values(&["slow-0".to_string()])).await;
    assert!(
        eventually(WAIT, || downstream.calls_of("slow-0").len() == 1).await,
        "slow-0 is called"
    );
    // Past the call's end and two locks more: no second delivery to either member.
    tokio::time::sleep(Duration::from_secs(14)).await;
    let calls = downstream.calls_of("slow-0");
    assert_eq!(calls.len(), 1, "never handled twice meanwhile: {calls:?}");
    assert_eq!(calls[0].delivery, 1);
    let renewed = a
        .metric("kafka_dlq_share_acknowledgements_total", "ack=\"renew\"")
        .await
        + b.metric("kafka_dlq_share_acknowledgements_total", "ack=\"renew\"")
            .await;
    assert!(renewed >= 2.0, "its lock renewed: {renewed}");
    a.stop().await;
    b.stop().await;
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, 1).await,
        Some(0)
    );
}

/// The records of one batch: `first`, then four `job`s (500 ms each).
fn batch_behind(first: &str) -> Vec<String> {
    std::iter::once(first.to_string())
        .chain((1..=4).map(|i| format!("job-{i}")))
        .collect()
}

/// [`member`] acquiring up to 8 records a fetch and handling them one at a time.
fn one_at_a_time(brokers: &str, group: &str, topic: &str, url: &str) -> Member {
    let flags = ["--max-in-flight", "1", "--share-acquire-records", "8"];
    member(brokers, group, topic, url, &flags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_waiting_their_turn_behind_a_slow_call_keep_their_locks() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    // Written before any member joins: the first fetch acquires all five, `slow-0` (8 s,
    // past the 3 s lock) first.
    produce(&brokers, &topic, values(&batch_behind("slow-0"))).await;
    let downstream = Downstream::default();
    let a = one_at_a_time(&brokers, &group, &topic, &downstream.url(0).await);
    assert!(
        eventually(WAIT, || downstream.calls_of("slow-0").len() == 1).await,
        "slow-0 is called"
    );
    // A second member, idle: it would be given any job whose lock ran out while it waited
    // behind slow-0.
    let b = one_at_a_time(&brokers, &group, &topic, &downstream.url(1).await);
    b.ready().await;
    assert!(
        eventually(WAIT, || downstream.calls().len() >= 5).await,
        "every record is called"
    );
    // Two locks more: nothing is delivered again.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let calls = downstream.calls();
    let mut seen: Vec<String> = calls.iter().map(|c| c.value.clone()).collect();
    seen.sort();
    let mut batch = batch_behind("slow-0");
    batch.sort();
    assert_eq!(seen, batch, "each record called once: {calls:?}");
    assert!(
        calls.iter().all(|c| c.member == 0 && c.delivery == 1),
        "all by member 0 on their first delivery, one after another: {calls:?}"
    );
    let renewed = a
        .metric("kafka_dlq_share_acknowledgements_total", "ack=\"renew\"")
        .await;
    assert!(
        renewed >= 8.0,
        "the four waiting jobs' locks renewed as well as slow-0's: {renewed}"
    );
    a.stop().await;
    b.stop().await;
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, 5).await,
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_mid_batch_has_the_whole_batch_delivered_to_another() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    // Member 0's downstream never answers `hang-0`: the jobs behind it wait their turn.
    produce(&brokers, &topic, values(&batch_behind("hang-0"))).await;
    let downstream = Downstream::default();
    let mut a = one_at_a_time(&brokers, &group, &topic, &downstream.url(0).await);
    assert!(
        eventually(WAIT, || downstream.calls_of("hang-0").len() == 1).await,
        "member 0 calls for hang-0"
    );
    let b = one_at_a_time(&brokers, &group, &topic, &downstream.url(1).await);
    b.ready().await;
    a.child.start_kill().unwrap(); // SIGKILL, mid-batch
    a.child.wait().await.unwrap();
    assert!(
        eventually(WAIT, || downstream.calls().len() >= 6).await,
        "the batch's locks expire and member 1 is given all of it: {:?}",
        downstream.calls()
    );
    let calls = downstream.calls();
    assert_eq!(calls.len(), 6, "hang-0 twice, each job once: {calls:?}");
    assert!(
        calls[1..].iter().all(|c| c.member == 1 && c.delivery == 2),
        "the rest by member 1, on delivery 2: {calls:?}"
    );
    b.stop().await;
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, 5).await,
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_mid_call_has_its_record_delivered_to_another() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    // Member 0's downstream never answers `hang-0`; member 1's does.
    let mut a = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(0).await,
        &["--max-in-flight", "1"],
    );
    a.ready().await;
    produce(&brokers, &topic, values(&["hang-0".to_string()])).await;
    assert!(
        eventually(WAIT, || downstream.calls_of("hang-0").len() == 1).await,
        "member 0 calls for hang-0"
    );
    let b = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(1).await,
        &["--max-in-flight", "1"],
    );
    b.ready().await;
    a.child.start_kill().unwrap(); // SIGKILL, mid-call
    a.child.wait().await.unwrap();
    assert!(
        eventually(WAIT, || downstream.calls_of("hang-0").len() == 2).await,
        "its lock expires and the record is delivered to member 1"
    );
    let calls = downstream.calls_of("hang-0");
    assert_eq!((calls[1].member, calls[1].delivery), (1, 2), "{calls:?}");
    b.stop().await;
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, 1).await,
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_dead_letter_comes_back_through_the_groups_redrive_topic() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    let m = member(&brokers, &group, &topic, &downstream.url(0).await, &[]);
    m.ready().await;
    produce(&brokers, &topic, values(&["perm-0".to_string()])).await;
    let dlt = format!("{topic}-dlt");
    assert!(eventually(WAIT, || read_all(&brokers, &dlt).len() == 1).await);
    downstream
        .fixed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (code, out, err) = replay_cli(&brokers, &dlt, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    assert_eq!(read_all(&brokers, &redrive).len(), 1, "{out}");
    assert!(
        eventually(WAIT, || downstream.calls_of("perm-0").len() == 2).await,
        "the member handles it again, from the group's redrive topic"
    );
    m.stop().await;
    assert_eq!(
        read_all(&brokers, &dlt).len(),
        1,
        "handled, not dead-lettered again"
    );
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &redrive, 1).await,
        Some(0)
    );
}

/// Share groups on a managed cluster: krafka's share client and the dead-letter producer
/// (librdkafka) take the same connection settings, here SCRAM-SHA-512 over TLS, OAUTHBEARER
/// from the token endpoint over TLS, and Amazon MSK IAM tokens, on Kafka 4.4's secured
/// listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_runs_over_tls_with_scram_oauth_and_msk_iam() {
    use common::security::{self, Listener};
    let brokers = share_brokers();
    let Some(kafka) = local_kafka(&brokers) else {
        eprintln!("skipped: KAFKA_DLQ_TEST_SHARE_BROKERS has no secured listeners of ours");
        return;
    };
    let fixture = security::fixture();
    let ca = fixture.pki.ca();
    let endpoint = fixture.oidc.token_endpoint();
    let scram = security::scram_flags(&ca);
    let oauth = [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "OAUTHBEARER",
        "--oauth-token-endpoint",
        &endpoint,
        "--oauth-client-id",
        security::OIDC_LONG_CLIENT_ID,
        "--oauth-scope",
        security::OIDC_SCOPE,
    ];
    let scram_secret = [("KAFKA_SASL_PASSWORD", security::SCRAM_PASSWORD)];
    let oauth_secret = [
        ("KAFKA_OAUTH_CLIENT_SECRET", security::OIDC_CLIENT_SECRET),
        // The token endpoint's CA, as the system's store (OAUTHBEARER's recipe sets none).
        ("SSL_CERT_FILE", ca.as_str()),
    ];
    let msk = security::msk_iam_flags(&ca);
    let msk_secret = [
        ("AWS_ACCESS_KEY_ID", security::AWS_ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", security::AWS_SECRET_ACCESS_KEY),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/aws-credentials",
        ),
    ];
    for (listener, flags, secrets) in [
        (Listener::SaslSsl, &scram[..], &scram_secret[..]),
        (Listener::Oauth, &oauth[..], &oauth_secret[..]),
        (Listener::MskIam, &msk[..], &msk_secret[..]),
    ] {
        let secured = kafka.listener(listener.name());
        let topic = unique("parcels");
        let group = unique("couriers");
        create_topic(&brokers, &topic, 1).await;
        let downstream = Downstream::default();
        let m = member_with(
            &secured,
            &group,
            &topic,
            &downstream.url(0).await,
            flags,
            secrets,
        );
        m.ready().await;
        produce(
            &brokers,
            &topic,
            values(&["ok-1".to_string(), "perm-2".to_string()]),
        )
        .await;
        let dlt = format!("{topic}-dlt");
        assert!(
            eventually(WAIT, || read_all(&brokers, &dlt).len() == 1
                && downstream.calls_of("ok-1").len() == 1)
            .await,
            "{listener:?}: handled and dead-lettered"
        );
        assert_eq!(
            acknowledged_up_to(&brokers, &group, &topic, 2).await,
            Some(0)
        );
        let log = m.log.clone();
        m.stop().await;
        let log = std::fs::read_to_string(log).unwrap();
        for secret in security::SECRETS {
            assert!(
                !log.contains(secret),
                "{listener:?}: the member's log shows a secret"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_share_dlq_broker_the_brokers_dead_letter_queue_takes_them() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    let broker_dlq = format!("dlq.{topic}");
    create_topic(&brokers, &topic, 1).await;
    set_broker_dlq(&brokers, &group, &broker_dlq).await;
    let downstream = Downstream::default();
    let m = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(0).await,
        &["--share-dlq", "broker", "--max-retries", "0"],
    );
    m.ready().await;
    produce(
        &brokers,
        &topic,
        values(&["perm-0".to_string(), "doomed-0".to_string()]),
    )
    .await;
    assert!(
        eventually(WAIT, || {
            std::panic::catch_unwind(|| read_all(&brokers, &broker_dlq).len()).unwrap_or(0) == 2
        })
        .await,
        "both reach the broker's dead-letter queue"
    );
    let rejected = m
        .metric("kafka_dlq_share_acknowledgements_total", "ack=\"reject\"")
        .await;
    m.stop().await;
    assert_eq!(rejected, 1.0, "perm-0 rejected at once");
    assert_eq!(downstream.calls_of("perm-0").len(), 1);
    assert_eq!(
        downstream.calls_of("doomed-0").len(),
        5,
        "once per delivery"
    );
    // Nothing in ours, and `dlq list` reads the broker's.
    let dlt = format!("{topic}-dlt");
    assert!(std::panic::catch_unwind(|| read_all(&brokers, &dlt)).map_or(true, |m| m.is_empty()));
    let (code, out, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &broker_dlq,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("rejected by client"), "{out}");
    assert!(
        out.contains("permanent") && out.contains("retries_exhausted"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_chaos_members_and_the_broker_killed_lose_no_record() {
    // A broker of its own: this test kills it.
    let kafka = Kafka::start_share().expect("a share-group broker");
    kafka.keep_log_on_panic();
    let brokers = kafka.brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    let broker_dlq = format!("dlq.{topic}");
    create_topic(&brokers, &topic, 1).await;
    // The broker's dead-letter queue as the backstop for a member killed on a record's last
    // delivery (the only way a record can leave without our dead letter).
    set_broker_dlq(&brokers, &group, &broker_dlq).await;
    let mut rng = fastrand::Rng::with_seed(26);
    // 500 ms per job, 12 at a time: the work lasts past the 30 s of chaos.
    let all: Vec<String> = (0..600)
        .map(|i| match rng.u8(0..20) {
            0 => format!("perm-{i}"),
            1 | 2 => format!("flaky-{i}"),
            _ => format!("job-{i}"),
        })
        .collect();
    let downstream = Downstream::default();
    let extra = ["--max-in-flight", "4", "--shutdown-timeout-ms", "2000"];
    let mut members = Vec::new();
    for m in 0..3 {
        members.push(member(
            &brokers,
            &group,
            &topic,
            &downstream.url(m).await,
            &extra,
        ));
    }
    for m in &members {
        m.ready().await;
    }
    produce(&brokers, &topic, values(&all)).await;

    // 30 s of chaos: a member SIGKILLed and replaced every 2–4 s, the broker killed and
    // restarted once.
    let mut kafka = Some(kafka);
    let started = tokio::time::Instant::now();
    let (mut kills, mut broker_killed) = (0, false);
    while started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(rng.u64(2_000..4_000))).await;
        let victim = rng.usize(..members.len());
        let mut dead = members.swap_remove(victim);
        dead.child.start_kill().unwrap();
        dead.child.wait().await.unwrap();
        kills += 1;
        members.push(member(
            &brokers,
            &group,
            &topic,
            &downstream.url(victim).await,
            &extra,
        ));
        if !broker_killed && started.elapsed() > Duration::from_secs(12) {
            eprintln!("killing the broker");
            let restarted = tokio::task::spawn_blocking({
                let k = kafka.take().unwrap();
                move || k.restart()
            })
            .await
            .unwrap();
            kafka = Some(restarted);
            broker_killed = true;
        }
    }
    assert!(broker_killed);
    let dlt = format!("{topic}-dlt");
    let readable =
        |topic: &str| std::panic::catch_unwind(|| read_all(&brokers, topic)).unwrap_or_default();
    let done = |downstream: &Downstream| {
        let calls = downstream.calls();
        let ours = dead_letters_in(&readable(&dlt));
        let broker = readable(&broker_dlq);
        all.iter().all(|v| {
            (!v.starts_with("perm") && handled(&calls, v))
                || ours.contains(v)
                || broker.iter().any(|m| m.payload() == Some(v.as_bytes()))
        })
    };
    assert!(
        eventually(Duration::from_secs(180), || done(&downstream)).await,
        "every record handled or in a dead-letter queue"
    );
    let mut accepted = 0.0;
    for m in members {
        accepted += m
            .metric("kafka_dlq_share_acknowledgements_total", "ack=\"accept\"")
            .await;
        m.stop().await;
    }
    let calls = downstream.calls();
    let duplicates = all
        .iter()
        .filter(|v| calls.iter().filter(|c| &c.value == *v).count() > 1 && !v.starts_with("flaky"))
        .count();
    let ours = dead_letters_in(&readable(&dlt));
    let broker = readable(&broker_dlq);
    eprintln!(
        "{kills} member kills, one broker kill: {} records, {} calls, {duplicates} records called more than once, {} in our DLT, {} in the broker's",
        all.len(),
        calls.len(),
        ours.len(),
        broker.len()
    );
    for v in all.iter().filter(|v| v.starts_with("perm")) {
        let in_broker = broker.iter().any(|m| m.payload() == Some(v.as_bytes()));
        assert!(ours.contains(v) || in_broker, "{v} is dead-lettered");
    }
    assert!(accepted > 0.0);
    assert_eq!(
        acknowledged_up_to(&brokers, &group, &topic, all.len() as i64).await,
        Some(0),
        "nothing left available or acquired"
    );
}

/// The acceptances `members` have counted, read until they reach `expected` or `WAIT` passes.
async fn accepted_eventually(members: &[Member], expected: f64) -> f64 {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let mut accepted = 0.0;
        for m in members {
            accepted += m
                .metric("kafka_dlq_share_acknowledgements_total", "ack=\"accept\"")
                .await;
        }
        if accepted >= expected || std::time::Instant::now() >= deadline {
            return accepted;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the downstream answered `value` with success at least once (its last call of it,
/// for `flaky`: the third).
fn handled(calls: &[Call], value: &str) -> bool {
    let n = calls.iter().filter(|c| c.value == value).count();
    match value.split('-').next() {
        Some("flaky") => n >= 3,
        Some("perm") => false,
        _ => n >= 1,
    }
}

/// The payloads of kafka-dlq envelopes.
fn dead_letters_in(messages: &[rdkafka::message::OwnedMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| serde_json::from_slice::<serde_json::Value>(m.payload()?).ok())
        .filter_map(|e| e["payload"].as_str().map(str::to_string))
        .collect()
}

/// An administrator lowers the group's delivery limit while the member runs: the member reads
/// it afresh before it would release a record, so the real last delivery is dead-lettered, not
/// released into the broker's silent archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_limit_lowered_while_running_never_turns_a_last_delivery_into_an_archive() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    let m = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(0).await,
        &["--max-retries", "0"],
    );
    m.ready().await;
    // Read as 5 at start; 2 from now on.
    set_group_config(&brokers, &group, "share.delivery.count.limit", "2").await;
    produce(&brokers, &topic, values(&["doomed-0".to_string()])).await;
    let dlt = format!("{topic}-dlt");
    assert!(
        eventually(WAIT, || read_all(&brokers, &dlt).len() == 1).await,
        "doomed-0 is dead-lettered on its second delivery: calls {:?}",
        downstream.calls_of("doomed-0")
    );
    m.stop().await;
    let deliveries: Vec<u16> = downstream
        .calls_of("doomed-0")
        .iter()
        .map(|c| c.delivery)
        .collect();
    assert_eq!(deliveries, [1, 2]);
    let (_, _, _, delivery) = &dead_letters(&brokers, &dlt)["doomed-0"];
    assert_eq!(*delivery, 2);
}

/// `share_dlq = "broker"` for a group without a broker dead-letter queue would have the broker
/// archive every record meant for it: the member refuses to start, naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_dlq_broker_without_a_broker_dead_letter_queue_refuses_to_start() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    let downstream = Downstream::default();
    let mut m = member(
        &brokers,
        &group,
        &topic,
        &downstream.url(0).await,
        &["--share-dlq", "broker"],
    );
    let status = tokio::time::timeout(WAIT, m.child.wait())
        .await
        .expect("exits")
        .unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(&m.log).unwrap();
    assert!(
        log.contains("errors.deadletterqueue.topic.name") && log.contains("share_dlq"),
        "{log}"
    );
}

/// A group whose broker refuses RENEW (`share.renew.acknowledge.enable=false`) would have a
/// slow record delivered to another member mid-call, each expiry a delivery: the member
/// refuses to start, naming the setting, instead of losing locks one slow record at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_refuses_renew_is_a_clear_error_at_start() {
    let brokers = share_brokers();
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 1).await;
    set_group_config(&brokers, &group, "share.renew.acknowledge.enable", "false").await;
    let downstream = Downstream::default();
    let mut m = member(&brokers, &group, &topic, &downstream.url(0).await, &[]);
    let status = tokio::time::timeout(WAIT, m.child.wait())
        .await
        .expect("exits")
        .unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(&m.log).unwrap();
    assert!(log.contains("share.renew.acknowledge.enable"), "{log}");
}

/// krafka releases a share fetch's records from a batch it cannot decode and says so only in
/// a debug line: the broker would deliver them again and archive them after their last
/// delivery without a word. The member counts it, logs it and `/readyz` names the partition;
/// the other partition's records are handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_batch_that_cannot_be_decoded_is_named_on_readyz_not_archived_in_silence() {
    let brokers = share_brokers();
    let Some(kafka) = local_kafka(&brokers) else {
        eprintln!("skipped: the broker's log cannot be reached");
        return;
    };
    let topic = unique("parcels");
    let group = unique("couriers");
    create_topic(&brokers, &topic, 2).await;
    let broken: Vec<String> = (0..10).map(|i| format!("lost-{i}")).collect();
    produce_compressed(&brokers, &topic, 1, "gzip", &broken).await;
    break_first_batch(kafka, &topic, 1);
    produce(&brokers, &topic, values(&["ok-0".to_string()])).await;
    let downstream = Downstream::default();
    let m = member(&brokers, &group, &topic, &downstream.url(0).await, &[]);
    let readyz = format!("http://127.0.0.1:{}/readyz", m.port);
    let place = format!("{topic}-1");
    let named = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(r) = reqwest::get(&readyz).await {
                if r.status() == 503 && r.text().await.unwrap_or_default().contains(&place) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(named.is_ok(), "/readyz names {place}");
    assert!(
        m.metric("kafka_dlq_undecodable_batches_total", "partition=\"1\"")
            .await
            >= 1.0
    );
    assert!(
        eventually(WAIT, || !downstream.calls_of("ok-0").is_empty()).await,
        "the other partition's record is handled"
    );
    assert!(downstream
        .calls()
        .iter()
        .all(|c| !c.value.starts_with("lost")));
    let log = m.log.clone();
    m.stop().await;
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("share_batch_undecodable") && l.contains(&topic)),
        "{log}"
    );
}
