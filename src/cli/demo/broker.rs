//! The demo's topics: created, filled, read back, and waited on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kafka_dlq::kafka::{ClientOptions, LogContext};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A client of `brokers` with `options`.
fn client(brokers: &str, options: &ClientOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    options.apply(&mut config);
    config
}

pub(super) async fn create_topics(
    brokers: &str,
    options: &ClientOptions,
    topics: &[(&str, i32)],
) -> anyhow::Result<()> {
    let admin: AdminClient<LogContext> =
        kafka_dlq::kafka::create_logged(&client(brokers, options))?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(t, p)| NewTopic::new(t, *p, TopicReplication::Fixed(1)))
        .collect();
    for r in admin
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?
    {
        match r {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => bail!("cannot create topic `{t}`: {e}"),
        }
    }
    Ok(())
}

pub(super) async fn produce(
    brokers: &str,
    options: &ClientOptions,
    topic: &str,
    events: &[(String, String, Vec<u8>)],
) -> anyhow::Result<()> {
    let producer: FutureProducer<LogContext> = kafka_dlq::kafka::create_logged(
        client(brokers, options).set("enable.idempotence", "true"),
    )?;
    let sends = events.iter().map(|(id, parcel, value)| {
        let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "event-id",
            value: Some(id.as_bytes()),
        });
        producer.send(
            FutureRecord::to(topic)
                .key(parcel.as_bytes())
                .payload(value)
                .headers(headers),
            Duration::from_secs(10),
        )
    });
    for sent in futures_util::future::join_all(sends).await {
        sent.map_err(|(e, _)| e)
            .context("producing the demo events")?;
    }
    Ok(())
}

pub(super) fn reader(
    brokers: &str,
    options: &ClientOptions,
    group: &str,
) -> anyhow::Result<BaseConsumer<LogContext>> {
    Ok(kafka_dlq::kafka::create_logged(
        client(brokers, options).set("group.id", group),
    )?)
}

pub(super) async fn total_records(
    brokers: &str,
    options: &ClientOptions,
    topic: &str,
) -> anyhow::Result<HashMap<i32, i64>> {
    let (b, t, o) = (brokers.to_string(), topic.to_string(), options.clone());
    tokio::task::spawn_blocking(move || {
        let c = reader(&b, &o, "kafka-dlq-demo-reader")?;
        let md = c.fetch_metadata(Some(&t), Duration::from_secs(10))?;
        let mut ends = HashMap::new();
        for p in md.topics()[0].partitions() {
            ends.insert(
                p.id(),
                c.fetch_watermarks(&t, p.id(), Duration::from_secs(10))?.1,
            );
        }
        Ok(ends)
    })
    .await?
}

/// Waits until `group` has committed every record of `topic` (as far as it is now).
pub(super) async fn wait_committed(
    brokers: &str,
    options: &ClientOptions,
    group: &str,
    topic: &str,
) -> anyhow::Result<()> {
    let end = total_records(brokers, options, topic).await?;
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let (b, o, g, t, parts) = (
            brokers.to_string(),
            options.clone(),
            group.to_string(),
            topic.to_string(),
            end.keys().copied().collect::<Vec<_>>(),
        );
        let committed =
            tokio::task::spawn_blocking(move || -> anyhow::Result<HashMap<i32, i64>> {
                let c = reader(&b, &o, &g)?;
                let mut tpl = TopicPartitionList::new();
                for p in parts {
                    tpl.add_partition(&t, p);
                }
                Ok(c.committed_offsets(tpl, Duration::from_secs(10))?
                    .elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) => Some((e.partition(), o)),
                        _ => None,
                    })
                    .collect())
            })
            .await??;
        if end
            .iter()
            .all(|(p, o)| *o == 0 || committed.get(p) == Some(o))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the consumer did not settle every record within 45 s (committed {committed:?}, end {end:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn wait_for(alerts: &AtomicU32, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alerts.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
