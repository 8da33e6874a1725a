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

/// The bare loop split by partition: each of the topic's `partitions` read by a task of its
/// own from its own librdkafka queue (`split_partition_queue`), storing each offset, the
/// records never copied. What a consumer whose workers read their own partitions costs at
/// the least: the floor under kafka-dlq's in-order mode if it handed the handler the message
/// as librdkafka holds it. Partitions are assigned, not subscribed to: no rebalance to wait
/// for, and none to split the queues in (a record reaching the consumer's own queue before its
/// partition's is split fails the run).
pub async fn run_split(
    brokers: &str,
    options: &kafka_dlq::kafka::ClientOptions,
    group: &str,
    topic: &str,
    partitions: i32,
    n: u64,
) -> anyhow::Result<Figures> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    let config = client_config_with(brokers, options, group);
    let consumer: Arc<StreamConsumer> = Arc::new(config.create()?);
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let count = Arc::new(AtomicU64::new(0));
    let first: Arc<Mutex<Option<(Instant, Duration)>>> = Arc::default();
    let done = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for partition in 0..partitions {
        let queue = consumer
            .split_partition_queue(topic, partition)
            .with_context(|| format!("splitting partition {partition}'s queue"))?;
        let (consumer, count, first, done) =
            (consumer.clone(), count.clone(), first.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let message = queue.recv().await?;
                if count.load(Ordering::Relaxed) == 0 {
                    let mut first = first.lock().expect("first lock");
                    first.get_or_insert_with(|| (Instant::now(), cpu_time()));
                }
                consumer.store_offset_from_message(&message)?;
                std::hint::black_box(message.payload());
                if count.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    done.notify_one();
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }));
    }
    // The consumer's own queue serves its events; no record comes to it once split.
    let main = consumer.clone();
    let events = tokio::spawn(async move {
        loop {
            if let Ok(message) = main.recv().await {
                anyhow::bail!(
                    "record {} came to the consumer's own queue",
                    message.offset()
                );
            }
        }
        #[allow(unreachable_code)]
        Ok::<(), anyhow::Error>(())
    });
    tokio::time::timeout(Duration::from_secs(120), done.notified())
        .await
        .with_context(|| {
            format!(
                "{} of {n} records after 120 s",
                count.load(Ordering::Relaxed)
            )
        })?;
    let first = *first.lock().expect("first lock");
    let (elapsed, cpu) = since(first);
    let rss_mb = peak_rss_mb();
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    events.abort();
    drop(tasks);
    tokio::task::spawn_blocking(move || drop(consumer)).await?;
    Ok(Figures {
        records: n,
        elapsed,
        p50: None,
        p99: None,
        rss_mb,
        cpu,
    })
}
