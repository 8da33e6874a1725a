//! The limit: a plain rdkafka `StreamConsumer` loop that receives, stores each offset and
//! counts, with the same fetch settings as kafka-dlq's consumer.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::{ClientConfig, Message};

use crate::figures::{cpu_time, peak_rss_mb, since, Figures};

/// The bare loop's client: kafka-dlq's fetch settings and buffer bounds, offsets stored by
/// the loop and committed every 5 s.
pub fn client_config(brokers: &str, group: &str) -> ClientConfig {
    client_config_with(brokers, &kafka_dlq::kafka::ClientOptions::new(), group)
}

/// [`client_config`] with `options` (how to reach the brokers) applied last.
pub fn client_config_with(
    brokers: &str,
    options: &kafka_dlq::kafka::ClientOptions,
    group: &str,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    // The same fetch settings as kafka-dlq's consumer, so only the loop differs.
    for (key, value) in kafka_dlq::config::FETCH_SETTINGS {
        config.set(key, value);
    }
    // kafka-dlq's default: half its buffer in librdkafka's queue (the other half is its
    // partitions' inboxes), the same record bound.
    let defaults = kafka_dlq::ConsumerConfig::default();
    config
        .set(
            "queued.max.messages.kbytes",
            (defaults.max_buffered_bytes / 2 / 1024).to_string(),
        )
        .set(
            "queued.min.messages",
            defaults.max_buffered_records.to_string(),
        );
    options.apply(&mut config);
    config
}

/// Consumes `n` records of `topic` in `group`.
pub async fn run(
    brokers: &str,
    options: &kafka_dlq::kafka::ClientOptions,
    group: &str,
    topic: &str,
    n: u64,
) -> anyhow::Result<Figures> {
    let config = client_config_with(brokers, options, group);
    let consumer: StreamConsumer = config.create()?;
    consumer.subscribe(&[topic])?;
    let mut count = 0u64;
    let mut first: Option<(Instant, Duration)> = None;
    while count < n {
        let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .with_context(|| format!("no record for 60 s after {count} of {n}"))??;
        first.get_or_insert_with(|| (Instant::now(), cpu_time()));
        consumer.store_offset_from_message(&message)?;
        std::hint::black_box(message.payload());
        count += 1;
    }
    let (elapsed, cpu) = since(first);
    let rss_mb = peak_rss_mb();
    tokio::task::spawn_blocking(move || drop(consumer)).await?;
    Ok(Figures {
        records: count,
        elapsed,
        p50: None,
        p99: None,
        rss_mb,
        cpu,
    })
}
