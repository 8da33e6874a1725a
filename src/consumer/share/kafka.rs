//! The share consumer of the `krafka` crate as a [`ShareClient`], and the group's settings it
//! reads at start. rust-rdkafka 0.39's librdkafka (2.12) has no share consumer; krafka's is a
//! complete KIP-932 client in Rust, with RENEW (KIP-1222), tested here on Apache Kafka 4.4
//! (docs/share-groups.md says why it was chosen).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use krafka::admin::{
    ConfigOp, ConfigResource, DescribeConfigsOptions, IncrementalAlterConfigsOptions,
};
use krafka::consumer::ConsumerRecord;
use krafka::share_consumer::ShareConsumer;

use super::acknowledgement::Ack;
use super::client::{Acquired, Pending, ShareClient};
use crate::record::{record_id, Record, RecordHeader, TimestampType};

/// The group setting that limits a record's deliveries (KIP-932).
pub(crate) const DELIVERY_LIMIT: &str = "share.delivery.count.limit";
/// The group setting where a new share group starts (KIP-932; `latest` by default).
pub(crate) const AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
/// The group setting naming the broker's dead-letter queue of the group (KIP-1191).
pub(crate) const BROKER_DLQ: &str = "errors.deadletterqueue.topic.name";
/// The group setting that allows RENEW acknowledgements (KIP-1222; `true` by default in Kafka
/// 4.4).
pub(crate) const RENEW_ENABLED: &str = "share.renew.acknowledge.enable";
/// The broker setting that lets the broker create a group's dead-letter queue topic.
const BROKER_DLQ_AUTO_CREATE: &str = "errors.deadletterqueue.auto.create.topics.enable";

/// How long one poll waits for a fetch's answer (a fetch asking for no minimum answers at
/// once, so this is a round trip's worth).
const POLL_WINDOW: Duration = Duration::from_millis(5);

/// The longest pause between two fetches of an idle member: the latency of the first record
/// after a quiet spell.
const IDLE_PAUSE_MAX: Duration = Duration::from_millis(100);

/// krafka's share consumer, holding the records it acquired until they are acknowledged.
pub(crate) struct KrafkaClient {
    consumer: ShareConsumer,
    /// The pause before the next fetch while fetches bring nothing.
    idle_pause: Mutex<Duration>,
    held: Mutex<HashMap<u64, ConsumerRecord>>,
    next_token: AtomicU64,
    id_header: Option<String>,
}

impl KrafkaClient {
    pub(crate) fn new(consumer: ShareConsumer, id_header: Option<String>) -> Self {
        Self {
            consumer,
            idle_pause: Mutex::new(Duration::from_millis(1)),
            held: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(0),
            id_header,
        }
    }

    /// Leaves the group, sending the last acknowledgements; the broker releases what this
    /// member still held.
    pub(crate) async fn close(&self) {
        if let Err(error) = self.consumer.close().await {
            tracing::warn!(event = "share_consumer_close_failed", %error);
        }
    }
}

impl ShareClient for KrafkaClient {
    fn acquire(&self, wait: Duration) -> Pending<'_, Result<Vec<Acquired>, String>> {
        Box::pin(async move {
            // Fetches ask for no minimum (see `consumer.rs`): one answers at once, records or
            // none. A short poll takes what comes; while none do, the next waits 1 ms, doubling
            // to IDLE_PAUSE_MAX, so an idle member sends a few fetches a second, and a busy one
            // fetches again as soon as it has acknowledged.
            let deadline = tokio::time::Instant::now() + wait;
            let records = loop {
                let records = self
                    .consumer
                    .poll(POLL_WINDOW)
                    .await
                    .map_err(|e| e.to_string())?;
                let now = tokio::time::Instant::now();
                let this = {
                    let mut pause = self.idle_pause.lock().expect("idle pause lock");
                    if !records.is_empty() {
                        *pause = Duration::from_millis(1);
                        None
                    } else {
                        let this = (*pause).min(deadline.saturating_duration_since(now));
                        *pause = (*pause * 2).min(IDLE_PAUSE_MAX);
                        Some(this)
                    }
                };
                match this {
                    None => break records,
                    Some(_) if now >= deadline => return Ok(Vec::new()),
                    Some(this) => tokio::time::sleep(this).await,
                }
            };
            let mut held = self.held.lock().expect("held records lock");
            Ok(records
                .into_iter()
                .map(|consumed| {
                    let token = self.next_token.fetch_add(1, Ordering::Relaxed);
                    let record = to_record(&consumed, self.id_header.as_deref());
                    held.insert(token, consumed);
                    Acquired { record, token }
                })
                .collect())
        })
    }

    fn acknowledge(&self, token: u64, ack: Ack) -> Result<(), String> {
        let mut held = self.held.lock().expect("held records lock");
        let record = held
            .get(&token)
            .ok_or_else(|| "the record is not held".to_string())?;
        let done = match ack {
            Ack::Accept => self.consumer.ack(record),
            Ack::Release => self.consumer.release(record),
            Ack::Reject => self.consumer.reject(record),
            Ack::Renew => return self.consumer.renew(record).map_err(|e| e.to_string()),
        };
        held.remove(&token);
        done.map_err(|e| e.to_string())
    }

    fn flush(&self) -> Pending<'_, ()> {
        Box::pin(async move {
            match self.consumer.commit().await {
                // Refusals reach the acknowledgement callback (`consumer.rs`), which counts them.
                Ok(_) => {}
                Err(error) => tracing::warn!(event = "share_commit_failed", %error),
            }
        })
    }

    fn lock_duration(&self) -> Option<Duration> {
        self.consumer.acquisition_lock_timeout()
    }

    fn assigned_partitions(&self) -> usize {
        self.consumer.assignment().values().map(Vec::len).sum()
    }
}

/// A krafka record as the handler sees it. Header names arrive as text: krafka decodes a name
/// that is not UTF-8 lossily (U+FFFD), as Java's client does.
fn to_record(consumed: &ConsumerRecord, id_header: Option<&str>) -> Record {
    let headers: Vec<RecordHeader> = consumed
        .headers
        .iter()
        .map(|(key, value)| RecordHeader {
            key: key.as_bytes().to_vec(),
            value: value.as_ref().map(|v| v.to_vec()),
        })
        .collect();
    let topic = consumed.topic.to_string();
    let (partition, offset) = (consumed.partition, consumed.offset);
    let mut record = Record::new(topic.clone(), partition, offset)
        .with_id(record_id(&headers, id_header, &topic, partition, offset));
    record.key = consumed.key.as_ref().map(|k| k.to_vec());
    record.payload = consumed.value.as_ref().map(|v| v.to_vec());
    record.headers = headers;
    record.timestamp = (consumed.timestamp >= 0)
        .then(|| Utc.timestamp_millis_opt(consumed.timestamp).single())
        .flatten();
    record.timestamp_type = record.timestamp.map(|_| match consumed.timestamp_type {
        krafka::consumer::TimestampType::LogAppendTime => TimestampType::LogAppendTime,
        _ => TimestampType::CreateTime,
    });
    record.delivery_count = Some(
        consumed
            .delivery_count
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c > 0)
            .unwrap_or(1),
    );
    record
}

/// What the group's settings say, read at start.
pub(crate) struct GroupSettings {
    /// `share.delivery.count.limit`; `None` when it could not be read.
    pub delivery_limit: Option<u16>,
    /// `errors.deadletterqueue.topic.name`; `Err` when the settings could not be read.
    pub broker_dlq: Result<Option<String>, String>,
    /// `share.renew.acknowledge.enable`; `None` when the broker does not say.
    pub renew_enabled: Option<bool>,
}

/// The group's `share.delivery.count.limit` as the broker says it now.
pub(crate) async fn delivery_limit(
    kafka: &krafka::Kafka,
    group: &str,
) -> Result<Option<u16>, String> {
    let resource = ConfigResource::group(group);
    let mut answers = kafka
        .admin()
        .describe_configs(
            [resource.clone()],
            DescribeConfigsOptions::default().config_names(vec![DELIVERY_LIMIT.into()]),
        )
        .await
        .map_err(|e| e.to_string())?;
    let entries = answers
        .remove(&resource)
        .unwrap_or_else(|| Ok(Vec::new()))
        .map_err(|e| e.to_string())?;
    Ok(entries
        .iter()
        .find(|e| e.name == DELIVERY_LIMIT)
        .and_then(|e| e.value.as_deref())
        .and_then(|v| v.parse::<u16>().ok()))
}

/// Whether the broker can write the group's dead-letter queue `topic`: it exists, or the broker
/// creates it (`errors.deadletterqueue.auto.create.topics.enable`). `Err` says why not.
pub(crate) async fn broker_dlq_writable(kafka: &krafka::Kafka, topic: &str) -> Result<(), String> {
    let admin = kafka.admin();
    let topics = admin
        .list_topics(Default::default())
        .await
        .map_err(|e| format!("cannot list the cluster's topics: {e}"))?;
    if topics.iter().any(|t| t == topic) {
        return Ok(());
    }
    let cluster = admin
        .describe_cluster(Default::default())
        .await
        .map_err(|e| format!("cannot describe the cluster: {e}"))?;
    let Some(broker) = cluster.brokers.first() else {
        return Err("the cluster lists no broker".into());
    };
    let resource = ConfigResource::broker(broker.id);
    let mut answers = admin
        .describe_configs(
            [resource.clone()],
            DescribeConfigsOptions::default().config_names(vec![BROKER_DLQ_AUTO_CREATE.into()]),
        )
        .await
        .map_err(|e| format!("cannot read the broker's {BROKER_DLQ_AUTO_CREATE}: {e}"))?;
    let entries = answers
        .remove(&resource)
        .unwrap_or_else(|| Ok(Vec::new()))
        .map_err(|e| format!("cannot read the broker's {BROKER_DLQ_AUTO_CREATE}: {e}"))?;
    let creates = entries
        .iter()
        .find(|e| e.name == BROKER_DLQ_AUTO_CREATE)
        .and_then(|e| e.value.as_deref())
        == Some("true");
    if creates {
        Ok(())
    } else {
        Err(format!(
            "its dead-letter queue topic `{topic}` does not exist and the broker does not create it ({BROKER_DLQ_AUTO_CREATE} is not true): create it"
        ))
    }
}

/// Reads the share group's delivery limit and, when `earliest` is asked and the group has no
/// `share.auto.offset.reset` of its own, sets it to `earliest` (a new share group starts at
/// the end of its topics otherwise, and would skip every record written before its first
/// member joined). Failures are logged, never fatal.
pub(crate) async fn group_settings(
    kafka: &krafka::Kafka,
    group: &str,
    auto_offset_reset: &str,
) -> GroupSettings {
    let admin = kafka.admin();
    let resource = ConfigResource::group(group);
    let described = admin
        .describe_configs(
            [resource.clone()],
            DescribeConfigsOptions::default().config_names(vec![
                DELIVERY_LIMIT.into(),
                AUTO_OFFSET_RESET.into(),
                BROKER_DLQ.into(),
                RENEW_ENABLED.into(),
            ]),
        )
        .await
        .map_err(|e| e.to_string())
        .and_then(|mut answers| {
            answers
                .remove(&resource)
                .unwrap_or_else(|| Ok(Vec::new()))
                .map_err(|e| e.to_string())
        });
    let entries = match described {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(event = "share_group_settings_unknown", group, %error,
                "{DELIVERY_LIMIT} unknown: a record whose retries are used up is dead-lettered after its first delivery, never released");
            return GroupSettings {
                delivery_limit: None,
                broker_dlq: Err(error),
                renew_enabled: None,
            };
        }
    };
    // Kafka's ConfigSource DYNAMIC_GROUP_CONFIG: set for this group (the broker reports its
    // own defaults for a group as not default).
    const SET_FOR_GROUP: i8 = 8;
    let value = |name: &str| {
        entries
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.value.clone(), e.config_source == SET_FOR_GROUP))
    };
    let delivery_limit = value(DELIVERY_LIMIT)
        .and_then(|(v, _)| v)
        .and_then(|v| v.parse::<u16>().ok());
    tracing::debug!(event = "share_group_configs", group, ?entries);
    match value(AUTO_OFFSET_RESET) {
        Some((_, true)) => {}
        _ if auto_offset_reset != "earliest" => {}
        _ => {
            let set = admin
                .incremental_alter_configs(
                    [(
                        resource.clone(),
                        vec![ConfigOp::set(AUTO_OFFSET_RESET, "earliest")],
                    )],
                    IncrementalAlterConfigsOptions::default(),
                )
                .await;
            let refused = match set {
                Ok(answers) => answers
                    .into_values()
                    .find_map(|r| r.err())
                    .map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            match refused {
                None => tracing::info!(
                    event = "share_group_starts_at_earliest",
                    group,
                    "set {AUTO_OFFSET_RESET}=earliest for the group (auto_offset_reset)"
                ),
                Some(error) => {
                    tracing::warn!(event = "share_group_offset_reset_not_set", group, %error,
                    "a new share group starts at the end of its topics; set {AUTO_OFFSET_RESET}=earliest with kafka-configs.sh")
                }
            }
        }
    }
    let broker_dlq = value(BROKER_DLQ)
        .and_then(|(v, _)| v)
        .filter(|v| !v.is_empty());
    tracing::info!(event = "share_group_settings", group, delivery_limit = ?delivery_limit,
        broker_dlq = ?broker_dlq);
    let renew_enabled = value(RENEW_ENABLED)
        .and_then(|(v, _)| v)
        .and_then(|v| v.parse::<bool>().ok());
    GroupSettings {
        delivery_limit,
        broker_dlq: Ok(broker_dlq),
        renew_enabled,
    }
}
