//! `/metrics`, `/healthz` and `/readyz` of a running consumer, and the memory bound, against a
//! real broker.

mod common;

use std::time::Duration;

use common::*;

const WAIT: Duration = Duration::from_secs(30);

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_outcomes_and_readyz_follows_the_assignment() {
    let brokers = brokers();
    let topic = unique("metrics");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(0, "ok-1"),
            Out::new(0, "perm-2"),
            Out::new(1, "trans1-3"),
            Out::new(1, "ok-4"),
            Out::new(1, "always-5"),
        ],
    )
    .await;

    let mut config = kafka_dlq::ConsumerConfig {
        max_retries: 2,
        ..test_config(&brokers, &group, &topic)
    };
    config.librdkafka.insert("statistics.interval.ms", "200");
    let handler = Scripted::default();
    let consumer = kafka_dlq::Consumer::new(config, handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server_stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kafka_dlq::server::serve(
        listener,
        metrics.clone(),
        server_stop.clone().cancelled_owned(),
        Duration::from_secs(5),
    ));

    assert_eq!(get(&format!("{base}/healthz")).await, (200, "ok".into()));
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "not ready before the assignment: {body}");
    assert!(body.contains("no partitions assigned"), "{body}");

    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));
    assert!(eventually(WAIT, || handler.attempts("always-5") == 3).await);
    assert!(eventually(WAIT, || metrics.is_ready()).await);
    assert_eq!(get(&format!("{base}/readyz")).await.0, 200);

    let dead_lettered = format!(
        "kafka_dlq_records_dead_lettered_total{{kind=\"retries_exhausted\",topic=\"{topic}\",group=\"{group}\"}}"
    );
    assert!(
        eventually(WAIT, || sample(&metrics.render(), &dead_lettered)
            == Some(1.0))
        .await,
        "{}",
        metrics.render()
    );
    let t = |name: &str| format!("{name}{{topic=\"{topic}\",group=\"{group}\"}}");
    // The two partitions are independent: the other one may still be finishing.
    let permanent =
        format!("kafka_dlq_records_dead_lettered_total{{kind=\"permanent\",topic=\"{topic}\",group=\"{group}\"}}");
    assert!(
        eventually(WAIT, || {
            let text = metrics.render();
            sample(&text, &t("kafka_dlq_records_succeeded_total")) == Some(3.0)
                && sample(&text, &permanent) == Some(1.0)
        })
        .await,
        "{}",
        metrics.render()
    );
    let (_, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(
        sample(&text, &t("kafka_dlq_records_consumed_total")),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &t("kafka_dlq_records_succeeded_total")),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, &t("kafka_dlq_records_retried_total")),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "kafka_dlq_records_dead_lettered_total{{kind=\"permanent\",topic=\"{topic}\",group=\"{group}\"}}"
            )
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, &t("kafka_dlq_handler_duration_seconds_count")),
        Some(8.0)
    );
    // The topic's 2 partitions and the 2 of the group's redrive topic.
    assert_eq!(sample(&text, "kafka_dlq_partitions_assigned"), Some(4.0));
    assert_eq!(sample(&text, "kafka_dlq_partitions_in_backoff"), Some(0.0));
    assert_eq!(sample(&text, "kafka_dlq_broker_up"), Some(1.0));
    assert!(
        eventually(WAIT, || {
            let text = metrics.render();
            sample(
                &text,
                &format!(
                    "kafka_dlq_consumer_lag{{partition=\"1\",topic=\"{topic}\",group=\"{group}\"}}"
                ),
            ) == Some(0.0)
        })
        .await,
        "lag per partition is reported: {}",
        metrics.render()
    );

    let _ = tx.send(());
    run.await.unwrap().unwrap();
    assert_eq!(metrics.partitions_assigned(), 0);
    assert_eq!(get(&format!("{base}/readyz")).await.0, 503);
    server_stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_stops_fetching_instead_of_buffering_without_bound() {
    let brokers = brokers();
    let topic = unique("backpressure");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    // 300 records of 40 kB (a 20 kB value and the same as its key: 12 MB), 25 ms each: 7.5 s,
    // across several of librdkafka's statistics (every 2 s), which the gauge reads.
    let padding = "p".repeat(20_000);
    let records: Vec<Out> = (0..300)
        .map(|i| Out::new(0, &format!("slow25-{i}-{padding}")))
        .collect();
    produce(&brokers, &topic, records).await;

    // A buffer of 1 MiB: half of it, 512 kB, for the partitions' queues; the one partition's
    // share is half of that (beside its redrive topic's one partition). While each call runs,
    // the worker copies its next chunk out of the queue (the share: 6 records) and pauses the
    // partition until it takes it.
    let config = kafka_dlq::ConsumerConfig {
        max_buffered_bytes: 1 << 20,
        ..test_config(&brokers, &group, &topic)
    };
    let handler = Scripted::default();
    let consumer = kafka_dlq::Consumer::new(config, handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));
    // What waits in librdkafka's queue (its statistics, every 2 s), and how far the worker
    // took records ahead of the handler.
    let (mut peak, mut ahead) = (0, 0.0f64);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while handler.count() < 300 && std::time::Instant::now() < deadline {
        peak = peak.max(metrics.buffered_bytes());
        let taken = metrics.total("kafka_dlq_records_consumed_total");
        ahead = ahead.max(taken - handler.count() as f64);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = tx.send(());
    run.await.unwrap().unwrap();
    assert_eq!(handler.count(), 300, "every record handled");
    assert_eq!(metrics.buffered_bytes(), 0, "the queue emptied");
    assert!(
        (1.0..=8.0).contains(&ahead),
        "the worker took {ahead} records ahead of the handler: a chunk is the share (6)"
    );
    assert!(
        peak < 700_000,
        "fetching stopped at the queue's 256 kB share plus one fetch (peak {peak} bytes of 12 MB)"
    );
}
