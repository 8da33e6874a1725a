//! The benchmark's topics: created, filled, measured.

use std::time::Duration;

use anyhow::bail;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

/// Creates `topics` (`name`, partitions), replication factor 1; an existing topic is fine.
pub async fn create(brokers: &str, topics: &[(&str, i32)]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics(&new, &options).await? {
        match result {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    Ok(())
}

/// Deletes `topics` (a missing one is fine), so that a long benchmark does not leave the
/// broker thousands of partitions.
pub async fn delete(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.delete_topics(&names, &options).await? {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((name, code)) => bail!("deleting topic {name}: {code}"),
        }
    }
    Ok(())
}

/// Deletes every topic whose name starts with `prefix`: what one benchmark run made (its
/// source topics and the dead-letter, retry, redrive and output topics its scenarios made).
/// A run leaves a few hundred MB of records; on a broker whose log is in memory
/// (`scripts/kafka.sh`), runs would otherwise fill it.
pub async fn delete_prefixed(brokers: &str, prefix: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))?;
    let made: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|name| name.starts_with(prefix))
        .collect();
    delete(brokers, &made).await
}

/// How record `i` of a topic is made.
pub trait Shape {
    /// Its partition, key and value.
    fn record(&self, i: u64) -> (i32, String, Vec<u8>);
}

/// The main topic: `value_bytes` of JSON, key `i`, round-robin over `partitions`.
pub struct Uniform {
    pub partitions: i32,
    pub value_bytes: usize,
}

impl Shape for Uniform {
    fn record(&self, i: u64) -> (i32, String, Vec<u8>) {
        let mut value = format!("{{\"n\":{i},\"pad\":\"");
        let pad = self.value_bytes.saturating_sub(value.len() + 2);
        value.extend(std::iter::repeat_n('x', pad));
        value.push_str("\"}");
        (
            (i % self.partitions as u64) as i32,
            i.to_string(),
            value.into_bytes(),
        )
    }
}

/// Parallel Consumer's README workload: one partition, 1,000 keys, each value starting with
/// the milliseconds of work it takes, 0 to 5, pseudo-random but the same in every run.
pub struct Readme;

impl Shape for Readme {
    fn record(&self, i: u64) -> (i32, String, Vec<u8>) {
        // splitmix64: a fixed, evenly spread sequence.
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let ms = z % 6;
        (
            0,
            format!("key-{}", i % 1000),
            format!("{ms} record {i}").into_bytes(),
        )
    }
}

/// Produces `n` records shaped by `shape` and waits for every acknowledgement.
pub async fn produce(brokers: &str, topic: &str, n: u64, shape: &dyn Shape) -> anyhow::Result<()> {
    produce_in_batches(brokers, topic, n, shape, 10_000).await
}

/// [`produce`] with at most `batch` records per producer batch.
pub async fn produce_in_batches(
    brokers: &str,
    topic: &str,
    n: u64,
    shape: &dyn Shape,
    batch: u32,
) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", batch.to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()?;
    let mut pending = Vec::with_capacity(20_000);
    for i in 0..n {
        let (partition, key, value) = shape.record(i);
        let record = FutureRecord::to(topic)
            .partition(partition)
            .key(&key)
            .payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => pending.push(delivery),
            Err((e, _)) => bail!("producing record {i}: {e}"),
        }
        if pending.len() >= 20_000 {
            for d in pending.drain(..) {
                d.await?.map_err(|(e, _)| e)?;
            }
        }
    }
    for d in pending {
        d.await?.map_err(|(e, _)| e)?;
    }
    Ok(())
}

/// Records in `partition` of `topic` (high watermark less low), asked with `options`.
pub async fn partition_records(
    brokers: &str,
    options: &kafka_dlq::kafka::ClientOptions,
    topic: &str,
    partition: i32,
) -> anyhow::Result<u64> {
    let (b, t) = (brokers.to_string(), topic.to_string());
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &b);
    options.apply(&mut config);
    tokio::task::spawn_blocking(move || -> anyhow::Result<u64> {
        let c: rdkafka::consumer::BaseConsumer = config.create()?;
        let (low, high) = rdkafka::consumer::Consumer::fetch_watermarks(
            &c,
            &t,
            partition,
            Duration::from_secs(10),
        )?;
        Ok((high - low) as u64)
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_values_have_the_asked_size() {
        let (p, k, v) = Uniform {
            partitions: 12,
            value_bytes: 200,
        }
        .record(13);
        assert_eq!((p, k.as_str(), v.len()), (1, "13", 200));
    }

    #[test]
    fn readme_work_spreads_over_0_to_5_ms_and_1000_keys() {
        let work: Vec<u64> = (0..10_000)
            .map(|i| crate::handler::work_ms(Some(&Readme.record(i).2)))
            .collect();
        for ms in 0..=5 {
            let n = work.iter().filter(|w| **w == ms).count();
            assert!((1_400..1_950).contains(&n), "{ms} ms: {n} records");
        }
        let keys: std::collections::HashSet<String> =
            (0..10_000).map(|i| Readme.record(i).1).collect();
        assert_eq!(keys.len(), 1000);
    }
}
