//! Retry topics (`retry_topic_delays_ms`) on Apache Kafka: a record whose retries are used up
//! moves to `<topic>-retry-<n>` while its partition goes on, is handled as the original once
//! due, ends in the dead-letter topic with its whole history after the last tier, and is not
//! lost when the process dies between the retry-topic write and the commit.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::{extract::State, http::HeaderMap, http::StatusCode, routing::post, Router};
use common::*;
use kafka_dlq::config::GroupProtocol;
use kafka_dlq::dlq::Envelope;
use kafka_dlq::{ConsumerConfig, Handler, HandlerError, Record};
use rdkafka::message::Headers;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(90);

/// Every call: the record as the handler saw it, and when.
#[derive(Clone, Default)]
struct Seen {
    calls: Arc<Mutex<Vec<(Record, Instant)>>>,
}

impl Seen {
    fn calls_of(&self, value: &str) -> Vec<(Record, Instant)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, _)| r.payload.as_deref() == Some(value.as_bytes()))
            .cloned()
            .collect()
    }
}

/// `late` fails transiently until 3 s after its first call, `soon` until 2 s after it;
/// `always` always fails transiently; anything else succeeds.
impl Handler for Seen {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let value = record.payload.as_deref().unwrap_or_default();
        let first = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((record.clone(), Instant::now()));
            calls
                .iter()
                .find(|(r, _)| r.payload == record.payload)
                .map(|(_, at)| *at)
                .unwrap()
        };
        match value {
            b"late" if first.elapsed() < Duration::from_secs(3) => {
                Err(HandlerError::transient("inventory service unavailable"))
            }
            b"soon" if first.elapsed() < Duration::from_secs(2) => {
                Err(HandlerError::transient("inventory service unavailable"))
            }
            b"always" => Err(HandlerError::transient("inventory service unavailable")),
            _ => Ok(()),
        }
    }
}

/// Runs a consumer with `config` until `done`, then stops it; returns its `/metrics` text.
async fn run_until(config: ConsumerConfig, handler: Seen, done: impl FnMut() -> bool) -> String {
    init_logs();
    let consumer = kafka_dlq::Consumer::new(config, handler).expect("consumer");
    let metrics = consumer.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let finished = eventually(WAIT, done).await;
    let text = metrics.render();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops within 30 s")
        .expect("task")
        .expect("run");
    assert!(finished, "the scenario did not finish");
    text
}

/// A downstream that accepts everything, counting the calls per value.
#[derive(Clone, Default)]
struct Accepts {
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Handler for Accepts {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let value = String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default());
        *self
            .calls
            .lock()
            .unwrap()
            .entry(value.into_owned())
            .or_default() += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_with_tiers_on_one_topic_each_retry_only_their_own_failures() {
    for protocol in [GroupProtocol::Classic, GroupProtocol::Consumer] {
        let brokers = brokers();
        let topic = unique("shared-orders");
        let (billing, shipping) = (unique("billing"), unique("shipping"));
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        let mut records = vec![Out::new(0, "soon")];
        records.extend((0..10).map(|i| Out::new(0, &format!("ok-{i}"))));
        produce(&brokers, &topic, records).await;
        // Billing's downstream fails `soon` for 2 s. Its calls come at once, 1 s later from
        // tier 0 and 2 s after that from tier 1, a second's margin from either side of the 2 s:
        // it goes through the shared retry topics (`<topic>-retry-0`, `-retry-1`). Shipping's
        // downstream accepts everything at once.
        let config = |group: &str| ConsumerConfig {
            retry_topic_delays_ms: "1000,2000".parse().unwrap(),
            max_retries: 0,
            breaker_failure_ratio: 0.0,
            group_protocol: protocol,
            ..test_config(&brokers, group, &topic)
        };
        let (billing_calls, shipping_calls) = (Seen::default(), Accepts::default());
        let b = Running::start(config(&billing), billing_calls.clone());
        let s = Running::start(config(&shipping), shipping_calls.clone());
        let (retry0, retry1) = (format!("{topic}-retry-0"), format!("{topic}-retry-1"));
        let done = eventually(WAIT, || {
            billing_calls.calls_of("soon").len() == 3
                && committed(&brokers, &billing, &retry1, 1).get(&0) == Some(&1)
                && committed(&brokers, &shipping, &topic, 1).get(&0) == Some(&11)
                // Shipping has read past billing's retry records too.
                && committed(&brokers, &shipping, &retry0, 1).get(&0) == Some(&1)
                && committed(&brokers, &shipping, &retry1, 1).get(&0) == Some(&1)
        })
        .await;
        b.stop().await;
        s.stop().await;
        assert!(done, "{protocol}: the scenario did not finish");

        let soon = billing_calls.calls_of("soon");
        let tiers: Vec<Option<u32>> = soon
            .iter()
            .map(|(r, _)| r.retry.as_ref().and_then(|r| r.tier))
            .collect();
        assert_eq!(
            tiers,
            [None, Some(0), Some(1)],
            "{protocol}: billing retries its own failure"
        );
        let shipping_calls = shipping_calls.calls.lock().unwrap().clone();
        assert_eq!(
            shipping_calls.get("soon"),
            Some(&1),
            "{protocol}: shipping handles it once, never billing's retries"
        );
        assert_eq!(shipping_calls.len(), 11, "{protocol}: {shipping_calls:?}");
        assert!(
            shipping_calls.values().all(|n| *n == 1),
            "{protocol}: {shipping_calls:?}"
        );
        assert!(
            read_all(&brokers, &format!("{topic}-dlt")).is_empty(),
            "{protocol}: nothing dead-lettered"
        );
    }
}

fn header<'a>(message: &'a rdkafka::message::OwnedMessage, name: &str) -> Option<&'a [u8]> {
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_failing_for_three_seconds_is_handled_from_its_two_second_tier_while_its_partition_goes_on(
) {
    for protocol in [GroupProtocol::Classic, GroupProtocol::Consumer] {
        let brokers = brokers();
        let topic = unique("tier-late");
        let group = unique("g");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        let mut records = vec![Out::new(0, "late")];
        records.extend((0..20).map(|i| Out::new(0, &format!("ok-{i}"))));
        produce(&brokers, &topic, records).await;
        let handler = Seen::default();
        // 4 calls at the source (0, 0.3, 0.9, 1.9 s), then tier 0 two seconds later.
        let config = ConsumerConfig {
            retry_topic_delays_ms: "2000".parse().unwrap(),
            max_retries: 3,
            backoff_initial: Duration::from_millis(300),
            backoff_max: Duration::from_millis(1_000),
            breaker_failure_ratio: 0.0,
            group_protocol: protocol,
            ..test_config(&brokers, &group, &topic)
        };
        let retry_topic = format!("{topic}-retry-0");
        let metrics = run_until(config, handler.clone(), || {
            committed(&brokers, &group, &topic, 1).get(&0) == Some(&21)
                && committed(&brokers, &group, &retry_topic, 1).get(&0) == Some(&1)
        })
        .await;

        let late = handler.calls_of("late");
        assert_eq!(
            late.len(),
            5,
            "{protocol}: 4 calls at the source, 1 from tier 0"
        );
        let (from_tier, handled_at) = &late[4];
        let (_, left_at) = &late[3];
        assert!(
            handled_at.duration_since(*left_at) >= Duration::from_secs(2),
            "{protocol}: not before the tier's delay"
        );
        // The handler sees the original record, and where it was delivered from.
        assert_eq!(
            (
                from_tier.topic.as_str(),
                from_tier.partition,
                from_tier.offset
            ),
            (topic.as_str(), 0, 0)
        );
        assert_eq!(from_tier.id, format!("{topic}-0-0"));
        let retry = from_tier
            .retry
            .as_ref()
            .expect("delivered from a retry topic");
        assert_eq!(
            (retry.tier, retry.topic.as_str()),
            (Some(0), retry_topic.as_str())
        );
        assert_eq!(retry.attempts, 4);
        assert_eq!(retry.history.len(), 1);
        assert_eq!(retry.history[0].topic, topic);
        assert_eq!(retry.history[0].error, "inventory service unavailable");
        assert!(late[..4].iter().all(|(r, _)| r.retry.is_none()));
        // The partition went on: every later record was handled while `late` waited.
        for i in 0..20 {
            let ok = handler.calls_of(&format!("ok-{i}"));
            assert_eq!(ok.len(), 1, "{protocol}: ok-{i} once");
            assert!(
                ok[0].1 > *left_at && ok[0].1 < *handled_at,
                "{protocol}: ok-{i} handled while late waited in its retry topic"
            );
        }
        assert!(read_all(&brokers, &format!("{topic}-dlt")).is_empty());
        assert!(
            metrics.contains(&format!(
                "kafka_dlq_retry_topic_records_total{{tier=\"0\",topic=\"{topic}\",group=\"{group}\"}} 1"
            )),
            "{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_always_fails_is_dead_lettered_after_every_tier_with_its_history() {
    let brokers = brokers();
    let topic = unique("tier-always");
    let group = unique("g");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &dlq, 1).await;
    let mut always = Out::new(1, "always");
    always.key = Some(vec![0xff, 0x00, b'k']);
    always.headers = vec![(b"app".to_vec(), Some(b"v1".to_vec()))];
    produce(&brokers, &topic, vec![Out::new(1, "ok"), always]).await;
    let handler = Seen::default();
    let config = ConsumerConfig {
        retry_topic_delays_ms: "300,600".parse().unwrap(),
        max_retries: 1,
        breaker_failure_ratio: 0.0,
        ..test_config(&brokers, &group, &topic)
    };
    run_until(config, handler.clone(), || {
        !read_all(&brokers, &dlq).is_empty()
    })
    .await;

    let calls = handler.calls_of("always");
    assert_eq!(calls.len(), 6, "2 calls in each of 3 stages");
    assert!(calls
        .iter()
        .all(|(r, _)| r.offset == 1 && r.topic == topic && r.partition == 1));
    let tiers: Vec<Option<u32>> = calls
        .iter()
        .map(|(r, _)| r.retry.as_ref().and_then(|r| r.tier))
        .collect();
    assert_eq!(tiers, [None, None, Some(0), Some(0), Some(1), Some(1)]);
    assert!(calls
        .iter()
        .all(|(r, _)| r.key.as_deref() == Some(&[0xff, 0x00, b'k'][..])));
    assert!(
        calls.iter().all(|(r, _)| r.headers.len() == 1),
        "only the original header"
    );

    // Each tier holds the record once, with Spring's retry headers.
    for (tier, attempts) in [(0, 2i32), (1, 3)] {
        let held = read_all(&brokers, &format!("{topic}-retry-{tier}"));
        assert_eq!(held.len(), 1, "tier {tier}");
        assert_eq!(held[0].payload(), Some(&b"always"[..]));
        assert_eq!(
            header(&held[0], "retry_topic-attempts"),
            Some(&attempts.to_be_bytes()[..]),
            "Spring's delivery count"
        );
        assert_eq!(
            header(&held[0], "kafka_dlt-original-topic"),
            Some(topic.as_bytes())
        );
        assert!(header(&held[0], "retry_topic-backoff-timestamp").is_some());
    }

    let dead = read_all(&brokers, &dlq);
    assert_eq!(dead.len(), 1);
    let envelope = Envelope::from_slice(dead[0].payload().unwrap()).unwrap();
    assert_eq!(envelope.id, format!("{topic}-1-1"));
    assert_eq!(
        envelope.error.kind,
        kafka_dlq::DeadLetterKind::RetriesExhausted
    );
    assert_eq!(envelope.error.attempts, 6, "every call in every stage");
    assert_eq!(
        (envelope.source.topic.as_str(), envelope.source.offset),
        (topic.as_str(), 1)
    );
    let stages: Vec<(&str, u32)> = envelope
        .history
        .iter()
        .map(|s| (s.topic.as_str(), s.attempts))
        .collect();
    let (tier0, tier1) = (format!("{topic}-retry-0"), format!("{topic}-retry-1"));
    assert_eq!(
        stages,
        [
            (topic.as_str(), 2),
            (tier0.as_str(), 2),
            (tier1.as_str(), 2)
        ]
    );
    assert!(envelope.history.windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(
        header(&dead[0], "kafka_dlt-original-topic"),
        Some(topic.as_bytes())
    );
    assert_eq!(dead[0].key(), Some(&[0xff, 0x00, b'k'][..]));

    // The dlq tools show the history, and what waits in a retry topic.
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &envelope.id,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(shown.contains(&tier1), "{shown}");
    let (code, listed, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &tier1,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let waiting: serde_json::Value = serde_json::from_str(listed.trim()).unwrap();
    assert_eq!(waiting["written_by"], "kafka-dlq retry topic");
    let message = waiting["envelope"]["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("waiting in retry tier 1, due "),
        "{message}"
    );
    assert_eq!(waiting["envelope"]["source"]["topic"], topic.as_str());
    assert_eq!(waiting["envelope"]["source"]["offset"], 1);
    assert_eq!(waiting["envelope"]["history"].as_array().unwrap().len(), 2);
    // Replayed from the retry topic: back on its source topic as it was first written.
    let (code, out, err) = replay_cli(&brokers, &tier1, &["--to-source"]);
    assert_eq!(code, 0, "{out}{err}");
    let source = read_all(&brokers, &topic);
    let replayed = source
        .iter()
        .filter(|m| m.payload() == Some(&b"always"[..]))
        .nth(1)
        .expect("the replayed copy");
    assert_eq!(replayed.key(), Some(&[0xff, 0x00, b'k'][..]));
    assert_eq!(header(replayed, "app"), Some(&b"v1"[..]));
    assert!(
        header(replayed, "kafka_dlq-retry").is_none()
            && header(replayed, "retry_topic-attempts").is_none(),
        "no retry headers on the replayed record"
    );
}

/// The downstream of the crash test: `down` fails with 503 while `broken` is set.
#[derive(Clone, Default)]
struct Downstream {
    broken: Arc<Mutex<bool>>,
    requests: Arc<Mutex<Vec<(HeaderMap, String)>>>,
}

async fn answer(State(d): State<Downstream>, headers: HeaderMap, body: String) -> StatusCode {
    d.requests.lock().unwrap().push((headers, body));
    if *d.broken.lock().unwrap() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

fn sidecar(
    brokers: &str,
    group: &str,
    topic: &str,
    url: &str,
    protocol: &str,
) -> tokio::process::Child {
    let log = std::env::temp_dir().join(format!("{}.log", unique("tier-sidecar")));
    eprintln!("sidecar log: {}", log.display());
    let mut command = sidecar_command(brokers, group, topic, url);
    command
        .args(["--group-protocol", protocol])
        .args(["--retry-topic-delays", "5000", "--max-retries", "0"])
        .args(["--breaker-failure-ratio", "0"])
        // No periodic commit: the only commits are at rebalance and shutdown, so a kill
        // always falls between the retry-topic write and the commit.
        .args(["--kafka-option", "auto.commit.interval.ms=3600000"]);
    if protocol == "classic" {
        // A killed member leaves the group after 6 s (under the consumer protocol the
        // session timeout is the broker's, as short in the test broker).
        command
            .args(["--kafka-option", "session.timeout.ms=6000"])
            .args(["--kafka-option", "heartbeat.interval.ms=1000"]);
    }
    command
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_retry_topic_write_and_the_commit_loses_nothing() {
    for protocol in ["classic", "consumer"] {
        let brokers = brokers();
        let topic = unique("tier-crash");
        let group = unique("g");
        let retry_topic = format!("{topic}-retry-0");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        produce(&brokers, &topic, vec![Out::new(0, "down")]).await;
        let downstream = Downstream::default();
        *downstream.broken.lock().unwrap() = true;
        let app = Router::new()
            .route("/", post(answer))
            .with_state(downstream.clone());
        let url = format!("http://{}/", serve_on_loopback(app).await);

        let mut first = sidecar(&brokers, &group, &topic, &url, protocol);
        assert!(
            eventually(WAIT, || read_all(&brokers, &retry_topic).len() == 1).await,
            "{protocol}: the record reached its retry topic"
        );
        // Killed with the retry record written and the source offset not committed.
        unsafe {
            libc::kill(first.id().unwrap() as i32, libc::SIGKILL);
        }
        first.wait().await.unwrap();
        assert_eq!(
            committed(&brokers, &group, &topic, 1).get(&0),
            None,
            "{protocol}: nothing committed before the kill"
        );

        *downstream.broken.lock().unwrap() = false;
        let mut second = sidecar(&brokers, &group, &topic, &url, protocol);
        // The source record comes again (its offset was not committed) and succeeds; the
        // copy in the retry topic is delivered too once due: at least once. The two come
        // from different partitions, so either may be first; wait for both.
        let delivered_from_source_and_tier = || {
            let requests = downstream.requests.lock().unwrap();
            let after_fix = &requests[1..];
            after_fix
                .iter()
                .any(|(h, _)| h.get("x-kafka-retry-tier").is_some_and(|t| t == "0"))
                && after_fix
                    .iter()
                    .any(|(h, _)| h.get("x-kafka-retry-tier").is_none())
        };
        assert!(
            eventually(WAIT, delivered_from_source_and_tier).await,
            "{protocol}: the source record and the tier's copy delivered: {:?}",
            downstream.requests.lock().unwrap()
        );
        let status = terminate(&mut second).await;
        assert_eq!(status.code(), Some(0));

        let requests = downstream.requests.lock().unwrap().clone();
        let after_fix: Vec<&(HeaderMap, String)> = requests.iter().skip(1).collect();
        assert!(after_fix.len() >= 2, "{protocol}: {requests:?}");
        let (headers, body) = after_fix
            .iter()
            .find(|(h, _)| h.get("x-kafka-retry-tier").is_some())
            .unwrap();
        assert_eq!(body, "down");
        assert_eq!(
            headers["x-kafka-topic"],
            topic.as_str(),
            "the original's topic"
        );
        assert_eq!(headers["x-kafka-offset"], "0");
        assert_eq!(headers["x-record-id"], format!("{topic}-0-0").as_str());
        assert_eq!(headers["x-kafka-retry-attempts"], "1");
        assert_eq!(
            committed(&brokers, &group, &topic, 1),
            HashMap::from([(0, 1)])
        );
        assert_eq!(
            committed(&brokers, &group, &retry_topic, 1)
                .get(&0)
                .copied()
                .unwrap_or(0),
            read_all(&brokers, &retry_topic).len() as i64
        );
        assert!(
            read_all(&brokers, &format!("{topic}-dlt")).is_empty(),
            "{protocol}: nothing dead-lettered"
        );
    }
}

/// Commits `offset` for `group` on `topic` partition 0, as a consumer of that group would.
fn commit(brokers: &str, group: &str, topic: &str, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset))
        .unwrap();
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_auto_offset_reset_latest_before_a_retry_record_is_due_still_handles_it() {
    for protocol in [GroupProtocol::Classic, GroupProtocol::Consumer] {
        let brokers = brokers();
        let topic = unique("tier-latest");
        let group = unique("g");
        create_topic(&brokers, &topic, 1).await;
        create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
        let config = ConsumerConfig {
            auto_offset_reset: "latest".into(),
            retry_topic_delays_ms: "4000".parse().unwrap(),
            max_retries: 0,
            breaker_failure_ratio: 0.0,
            group_protocol: protocol,
            ..test_config(&brokers, &group, &topic)
        };
        let retry_topic = format!("{topic}-retry-0");
        // The first run: the group starts at the end, so the record comes after it joined.
        let first = Seen::default();
        let calls = first.clone();
        let produced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (b, t, p) = (brokers.clone(), topic.clone(), produced.clone());
        run_until(config.clone(), first, move || {
            if !calls.calls_of("always").is_empty() {
                return !read_all(&b, &format!("{t}-retry-0")).is_empty();
            }
            if !p.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let (b, t) = (b.clone(), t.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    produce(&b, &t, vec![Out::new(0, "always")]).await;
                });
            }
            false
        })
        .await;
        assert!(
            committed(&brokers, &group, &retry_topic, 1).is_empty(),
            "{protocol}: nothing committed on the retry topic before the record is due"
        );
        // The second run starts before the record is due: it must still get it.
        #[derive(Clone, Default)]
        struct Accept(Arc<Mutex<Vec<Record>>>);
        impl Handler for Accept {
            async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
                self.0.lock().unwrap().push(record.clone());
                Ok(())
            }
        }
        let second = Accept::default();
        init_logs();
        let consumer = kafka_dlq::Consumer::new(config, second.clone()).expect("consumer");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run(async move {
            let _ = stopped.await;
        }));
        let handled = eventually(WAIT, || {
            second.0.lock().unwrap().iter().any(|r| r.retry.is_some())
        })
        .await;
        let _ = stop.send(());
        task.await.unwrap().unwrap();
        assert!(
            handled,
            "{protocol}: the retry record was skipped by auto_offset_reset = latest"
        );
        assert_eq!(
            committed(&brokers, &group, &retry_topic, 1).get(&0),
            Some(&1),
            "{protocol}: and committed"
        );
    }
}

/// A retry record waiting on partition 0 that consumer group `group` wrote.
fn written_by(group: &str) -> Out {
    let mut out = Out::new(0, "waiting");
    out.headers.push((
        kafka_dlq::dlq::spring::ORIGINAL_CONSUMER_GROUP
            .as_bytes()
            .to_vec(),
        Some(group.as_bytes().to_vec()),
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_refuses_to_start_while_a_dropped_tier_still_holds_its_records() {
    let brokers = brokers();
    let topic = unique("tier-dropped");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    let dropped = format!("{topic}-retry-1");
    create_topic(&brokers, &dropped, 1).await;
    // Another service (group) on the same topic keeps writing its retry records there.
    produce(
        &brokers,
        &dropped,
        vec![written_by("shipping"), written_by("shipping")],
    )
    .await;
    init_logs();
    let config = ConsumerConfig {
        retry_topic_delays_ms: "1000".parse().unwrap(),
        ..test_config(&brokers, &group, &topic)
    };
    let refusal = |config: ConsumerConfig| async move {
        let consumer = kafka_dlq::Consumer::new(config, Seen::default()).expect("consumer");
        tokio::time::timeout(
            Duration::from_secs(60),
            consumer.run(std::future::pending()),
        )
        .await
        .expect("returns at once")
        .expect_err("refuses to start")
    };
    let consumer = kafka_dlq::Consumer::new(config.clone(), Seen::default()).expect("consumer");
    let run = consumer.run(tokio::time::sleep(Duration::from_secs(3)));
    run.await
        .expect("starts: the records are another group's, however many");

    // One of this group's own, in a partition it never committed on (a long tier's first
    // records wait there uncommitted): stranded as well.
    produce(&brokers, &dropped, vec![written_by(&group)]).await;
    let error = refusal(config.clone()).await;
    assert!(
        matches!(&error, kafka_dlq::ConsumerError::StrandedRetryRecords { topic, records: 1 } if *topic == dropped),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&dropped) && message.contains("1 record(s)"),
        "{message}"
    );
    // With retry topics off altogether, the same.
    let error = refusal(test_config(&brokers, &group, &topic)).await;
    assert!(
        matches!(
            error,
            kafka_dlq::ConsumerError::StrandedRetryRecords { records: 1, .. }
        ),
        "{error}"
    );
    // Once this group has committed past it, only other groups' records are left: it starts.
    commit(&brokers, &group, &dropped, 3);
    produce(&brokers, &dropped, vec![written_by("shipping")]).await;
    let consumer = kafka_dlq::Consumer::new(config, Seen::default()).expect("consumer");
    consumer
        .run(tokio::time::sleep(Duration::from_secs(3)))
        .await
        .expect("starts");
}

/// The `retention.ms` of `topic`, as the broker describes it.
async fn retention_ms(brokers: &str, topic: &str) -> i64 {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap();
    let resource = results.into_iter().next().unwrap().unwrap();
    resource
        .get("retention.ms")
        .and_then(|e| e.value.clone())
        .unwrap()
        .parse()
        .unwrap()
}

/// The topics the consumer creates keep their records long enough: dead-letter and redrive
/// topics for ever, a retry topic at least twice its delay and a week. A retry topic that
/// keeps records for less than they wait there stops the start, naming topic, retention and
/// delay — before any record could be deleted before it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_topics_outlive_their_records_and_a_retry_topic_that_would_not_refuses_the_start() {
    let brokers = brokers();
    let topic = unique("kept");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    init_logs();
    // A 30-day tier, as the review's case: 60 days.
    let config = ConsumerConfig {
        retry_topic_delays_ms: "2000,2592000000".parse().unwrap(),
        ..test_config(&brokers, &group, &topic)
    };
    let consumer = kafka_dlq::Consumer::new(config, Seen::default()).expect("consumer");
    consumer
        .run(tokio::time::sleep(Duration::from_secs(2)))
        .await
        .expect("starts");
    const DAY: i64 = 24 * 3600 * 1000;
    assert_eq!(retention_ms(&brokers, &format!("{topic}-dlt")).await, -1);
    assert_eq!(
        retention_ms(
            &brokers,
            &kafka_dlq::record::retry::redrive_topic(&topic, &group)
        )
        .await,
        -1
    );
    assert_eq!(
        retention_ms(&brokers, &format!("{topic}-retry-0")).await,
        7 * DAY
    );
    assert_eq!(
        retention_ms(&brokers, &format!("{topic}-retry-1")).await,
        60 * DAY
    );

    // A retry topic someone made with 30 s, under a tier of 120 s.
    let short = unique("short");
    create_topic(&brokers, &short, 1).await;
    create_topic_with(
        &brokers,
        &format!("{short}-retry-0"),
        1,
        &[("retention.ms", "30000")],
    )
    .await;
    let config = ConsumerConfig {
        retry_topic_delays_ms: "120000".parse().unwrap(),
        ..test_config(&brokers, &unique("g"), &short)
    };
    let consumer = kafka_dlq::Consumer::new(config, Seen::default()).expect("consumer");
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        consumer.run(std::future::pending()),
    )
    .await
    .expect("returns at once")
    .expect_err("refuses to start");
    assert!(
        matches!(
            &error,
            kafka_dlq::ConsumerError::RetentionTooShort {
                retention_ms: 30_000,
                delay_ms: 120_000,
                needed_ms: 240_000,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("{short}-retry-0")) && message.contains("retention.ms"),
        "{message}"
    );
}

/// With `auto_offset_reset = latest`, a retry partition whose committed offset the log no
/// longer holds (the group was away longer than the retention) starts at its first retained
/// record, not at the end past every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_partition_committed_before_its_log_start_starts_at_its_first_record() {
    let brokers = brokers();
    let topic = unique("tier-expired-position");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    let retry_topic = format!("{topic}-retry-0");
    create_topic(&brokers, &retry_topic, 1).await;
    produce(
        &brokers,
        &retry_topic,
        vec![Out::new(0, "r0"), Out::new(0, "r1"), Out::new(0, "r2")],
    )
    .await;
    commit(&brokers, &group, &retry_topic, 1);
    // Retention took offsets 0 and 1: the committed offset 1 is before the log start 2.
    delete_before(&brokers, &retry_topic, 2).await;
    let config = ConsumerConfig {
        auto_offset_reset: "latest".into(),
        retry_topic_delays_ms: "1000".parse().unwrap(),
        ..test_config(&brokers, &group, &topic)
    };
    let seen = Seen::default();
    let calls = seen.clone();
    run_until(config, seen, move || !calls.calls_of("r2").is_empty()).await;
    assert_eq!(
        committed(&brokers, &group, &retry_topic, 1).get(&0),
        Some(&3)
    );
}

/// A source removed from `topics` while its retry topic (or this group's redrive topic of it)
/// still holds this group's records would leave them there for good: the consumer refuses to
/// start, naming the source and the topic. Another group's records there do not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_refuses_to_start_while_a_removed_sources_retry_topic_holds_its_records() {
    let brokers = brokers();
    let removed = unique("source-removed");
    let kept = unique("source-kept");
    let group = unique("g");
    create_topic(&brokers, &removed, 1).await;
    create_topic(&brokers, &kept, 1).await;
    init_logs();
    // The group read both, with a tier: its retry and redrive topics are created.
    let both = ConsumerConfig {
        retry_topic_delays_ms: "600000".parse().unwrap(),
        topics: vec![removed.clone(), kept.clone()],
        ..test_config(&brokers, &group, &removed)
    };
    kafka_dlq::Consumer::new(both, Seen::default())
        .expect("consumer")
        .run(tokio::time::sleep(Duration::from_secs(3)))
        .await
        .expect("starts");
    let retry = format!("{removed}-retry-0");
    produce(&brokers, &retry, vec![written_by("shipping")]).await;
    let only_kept = ConsumerConfig {
        retry_topic_delays_ms: "600000".parse().unwrap(),
        ..test_config(&brokers, &group, &kept)
    };
    kafka_dlq::Consumer::new(only_kept.clone(), Seen::default())
        .expect("consumer")
        .run(tokio::time::sleep(Duration::from_secs(3)))
        .await
        .expect("starts: the record is another group's");

    produce(&brokers, &retry, vec![written_by(&group)]).await;
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        kafka_dlq::Consumer::new(only_kept, Seen::default())
            .expect("consumer")
            .run(std::future::pending()),
    )
    .await
    .expect("returns at once")
    .expect_err("refuses to start");
    assert!(
        matches!(&error, kafka_dlq::ConsumerError::StrandedSourceRecords { source_topic, topic, records: 1 }
            if *source_topic == removed && *topic == retry),
        "{error}"
    );
    assert!(error.to_string().contains("put"), "{error}");
}

/// A record too large for its retry topic cannot wait there: it is dead-lettered at once,
/// retries exhausted with the reason of its last call, and its partition goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_for_its_retry_topic_is_dead_lettered_instead() {
    let brokers = brokers();
    let topic = unique("tier-huge");
    let group = unique("g");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    // The retry record carries the source headers: 8 KiB of them do not fit 4 KiB.
    create_topic_with(
        &brokers,
        &format!("{topic}-retry-0"),
        1,
        &[("max.message.bytes", "4096")],
    )
    .await;
    let mut huge = Out::new(0, "always");
    huge.headers = vec![(b"trace".to_vec(), Some(vec![b'x'; 8 * 1024]))];
    produce(&brokers, &topic, vec![huge, Out::new(0, "ok")]).await;
    let handler = Seen::default();
    let config = ConsumerConfig {
        retry_topic_delays_ms: "300".parse().unwrap(),
        max_retries: 0,
        breaker_failure_ratio: 0.0,
        ..test_config(&brokers, &group, &topic)
    };
    run_until(config, handler.clone(), || {
        committed(&brokers, &group, &topic, 1).get(&0) == Some(&2)
    })
    .await;
    assert_eq!(
        handler.calls_of("always").len(),
        1,
        "never called from the tier"
    );
    assert_eq!(handler.calls_of("ok").len(), 1);
    assert!(read_all(&brokers, &format!("{topic}-retry-0")).is_empty());
    let dead = read_all(&brokers, &dlq);
    assert_eq!(dead.len(), 1, "dead-lettered once");
    let envelope = Envelope::from_slice(dead[0].payload().unwrap()).unwrap();
    assert_eq!(
        envelope.error.kind,
        kafka_dlq::DeadLetterKind::RetriesExhausted
    );
    assert_eq!(envelope.error.message, "inventory service unavailable");
    assert_eq!(envelope.source.offset, 0);
}
