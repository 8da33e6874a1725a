//! Typed, strict configuration of the consumer, checked once at start-up.
//!
//! Every field has a unit in its name where it has one. [`ConsumerConfig::validate`] checks
//! each value and the fields against each other, and a [`ConfigError`] names the setting and
//! the bad value. Raw librdkafka options (`librdkafka`) are applied last, over everything we
//! set, to the consumer and the dead-letter producer alike (SASL, SSL, tuning); their values
//! never appear in `Debug` output, since they may hold passwords.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use serde::Deserialize;
use thiserror::Error;

use crate::backoff::ExponentialBackoff;

mod raw_options;
use crate::dlq::{DlqFormat, DlqTopic};
pub use raw_options::refuse_raw_option;

/// How records of one partition are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// One record at a time per partition, in offset order.
    Partition,
    /// Per key: same key in order, different keys concurrently.
    Key,
}

impl std::str::FromStr for Ordering {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "partition" => Ok(Ordering::Partition),
            "key" => Ok(Ordering::Key),
            other => Err(format!("expected `partition` or `key`, got `{other}`")),
        }
    }
}

/// How the consumer group assigns partitions to its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// The classic protocol (`group.protocol=classic`) with the `cooperative-sticky` assignor:
    /// a membership change moves only the partitions that change owner, and the others go on
    /// (an eager assignor would revoke every partition of every member at every change).
    Classic,
    /// KIP-848's consumer protocol (`group.protocol=consumer`, generally available since
    /// Kafka 4.0): the broker assigns partitions; session and heartbeat times are the
    /// broker's (`group.consumer.*`), so the client's `session.timeout.ms`,
    /// `heartbeat.interval.ms` and `partition.assignment.strategy` are not allowed with it.
    Consumer,
}

impl std::str::FromStr for GroupProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "classic" => Ok(GroupProtocol::Classic),
            "consumer" => Ok(GroupProtocol::Consumer),
            other => Err(format!("expected `classic` or `consumer`, got `{other}`")),
        }
    }
}

impl GroupProtocol {
    /// The librdkafka value of `group.protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

/// A setting with a bad value.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid setting `{key}` = {value:?}: {reason}")]
pub struct ConfigError {
    /// The setting's name, as in the config file (`max_retries`, `dlq_topic`, …).
    pub key: String,
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// A bad `value` for `key`.
    pub fn new(key: &str, value: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Self {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Everything the [`Consumer`](crate::consumer::Consumer) needs.
///
/// Build it with [`ConsumerConfig::new`] and struct-update syntax for the rest:
/// ```
/// # use kafka_dlq::ConsumerConfig;
/// let config = ConsumerConfig {
///     max_retries: 3,
///     ..ConsumerConfig::new("localhost:9092", "deliveries", ["parcel-events"])
/// };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConsumerConfig {
    /// Bootstrap servers, comma-separated `host:port`. Required.
    pub brokers: String,
    /// Consumer group id. Required.
    pub group_id: String,
    /// Topics to consume. At least one.
    pub topics: Vec<String>,
    /// Dead-letter topic name; `{topic}` is replaced by the source topic.
    /// Default `{topic}-dlt` (Spring Kafka 3.3+).
    pub dlq_topic: String,
    /// How dead letters are laid out: `envelope` (the JSON envelope as the value, the
    /// default) or `spring` (the original value as the value, the metadata in headers, as
    /// Spring Kafka's `DeadLetterPublishingRecoverer` writes them).
    pub dlq_format: DlqFormat,
    /// A header holding the record id. Default none: the id is `<topic>-<partition>-<offset>`.
    pub id_header: Option<String>,
    /// Retries of a transient failure before the record is dead-lettered. Default 10.
    pub max_retries: u32,
    /// First retry delay. Default 1000 ms.
    pub backoff_initial_ms: u64,
    /// Each retry delay is the previous one times this. Default 2.0.
    pub backoff_multiplier: f64,
    /// Cap on one retry delay. Default 30000 ms.
    pub backoff_max_ms: u64,
    /// Each delay is multiplied by a random factor in `[1 − jitter, 1 + jitter]` (then capped).
    /// Default 0.2.
    pub backoff_jitter: f64,
    /// Fetched records that may wait per partition: librdkafka stops fetching a partition
    /// while this many of its records (or 1.5 MB, see [`FETCH_SETTINGS`]) wait, and fetches
    /// again when fewer do; one fetch (at most 256 kB, or 2 MB from a broker that ignores the
    /// per-partition bound) can go past it. The bound on memory when the handler is slower than
    /// the broker. Default 10000.
    pub max_buffered_records: usize,
    /// How long shutdown waits for in-flight handlers before committing. Default 30000 ms.
    pub shutdown_timeout_ms: u64,
    /// Where a group with no committed offset starts: `earliest` or `latest`. Default
    /// `earliest`.
    pub auto_offset_reset: String,
    /// `partition` (default): records of a partition are handled one after another, in offset
    /// order. `key`: records with the same key keep their order, but records of different keys
    /// in one partition are handled concurrently, up to `max_in_flight` at a time; offsets are
    /// still committed only up to the lowest unsettled record. Needs `batch_size` 1.
    pub ordering: Ordering,
    /// With `ordering = "key"`: records of one partition in the handler at once. Default 64.
    pub max_in_flight: usize,
    /// Most records given to a [`BatchHandler`](crate::handler::BatchHandler) call. Default 1
    /// (a [`Handler`](crate::Handler) always gets one record at a time).
    pub batch_size: usize,
    /// How long a batch waits for more records after its first. Default 100 ms.
    pub batch_linger_ms: u64,
    /// The outage breaker opens when at least this share of the calls in its window failed
    /// transiently; 0 turns the breaker off. Default 0.5.
    pub breaker_failure_ratio: f64,
    /// Fewer calls than this in the window never open the breaker. Default 20.
    pub breaker_min_calls: u32,
    /// The breaker's sliding window. Default 30000 ms.
    pub breaker_window_ms: u64,
    /// First wait before probing an open breaker, doubling per failed probe. Default 1000 ms.
    pub breaker_probe_initial_ms: u64,
    /// Cap on the wait between probes. Default 60000 ms.
    pub breaker_probe_max_ms: u64,
    /// The consumer group protocol: `classic` (default, with the `cooperative-sticky`
    /// assignor) or `consumer` (KIP-848).
    pub group_protocol: GroupProtocol,
    /// Raw librdkafka properties, applied last to the consumer and the dead-letter producer.
    /// Those that would break the guarantees are refused ([`refuse_raw_option`]).
    pub librdkafka: BTreeMap<String, String>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            brokers: String::new(),
            group_id: String::new(),
            topics: Vec::new(),
            dlq_topic: "{topic}-dlt".to_string(),
            dlq_format: DlqFormat::Envelope,
            id_header: None,
            max_retries: 10,
            backoff_initial_ms: 1000,
            backoff_multiplier: 2.0,
            backoff_max_ms: 30_000,
            backoff_jitter: 0.2,
            max_buffered_records: 10_000,
            shutdown_timeout_ms: 30_000,
            auto_offset_reset: "earliest".to_string(),
            ordering: Ordering::Partition,
            max_in_flight: 64,
            batch_size: 1,
            batch_linger_ms: 100,
            breaker_failure_ratio: 0.5,
            breaker_min_calls: 20,
            breaker_window_ms: 30_000,
            breaker_probe_initial_ms: 1_000,
            breaker_probe_max_ms: 60_000,
            group_protocol: GroupProtocol::Classic,
            librdkafka: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for ConsumerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted: BTreeMap<&str, &str> = self
            .librdkafka
            .keys()
            .map(|k| (k.as_str(), "<redacted>"))
            .collect();
        f.debug_struct("ConsumerConfig")
            .field("brokers", &self.brokers)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("dlq_topic", &self.dlq_topic)
            .field("dlq_format", &self.dlq_format)
            .field("id_header", &self.id_header)
            .field("max_retries", &self.max_retries)
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_multiplier", &self.backoff_multiplier)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("backoff_jitter", &self.backoff_jitter)
            .field("max_buffered_records", &self.max_buffered_records)
            .field("shutdown_timeout_ms", &self.shutdown_timeout_ms)
            .field("auto_offset_reset", &self.auto_offset_reset)
            .field("ordering", &self.ordering)
            .field("max_in_flight", &self.max_in_flight)
            .field("batch_size", &self.batch_size)
            .field("batch_linger_ms", &self.batch_linger_ms)
            .field("breaker_failure_ratio", &self.breaker_failure_ratio)
            .field("breaker_min_calls", &self.breaker_min_calls)
            .field("breaker_window_ms", &self.breaker_window_ms)
            .field("breaker_probe_initial_ms", &self.breaker_probe_initial_ms)
            .field("breaker_probe_max_ms", &self.breaker_probe_max_ms)
            .field("group_protocol", &self.group_protocol)
            .field("librdkafka", &redacted)
            .finish()
    }
}

/// The fetch settings kafka-dlq gives librdkafka's consumer (raw `librdkafka` options can
/// override them). Each partition has its own fetch queue (kafka-dlq splits it from the
/// consumer's queue):
///
/// - at most 1.5 MB of a partition's fetched records wait (`queued.max.messages.kbytes`; the
///   record-count bound is `max_buffered_records`);
/// - one fetch brings at most 256 kB per partition (`max.partition.fetch.bytes`) and 2 MB in
///   all (`fetch.max.bytes`; librdkafka raises it to `message.max.bytes` if that is larger): a
///   broker that ignores the per-partition bound, as tansu 0.6 does, would otherwise send up to
///   5 MB for one partition (114 MB peak RSS in the `slow` benchmark on tansu, 86 MB with it);
/// - a 10 ms pause before fetching again once a queue is full (`fetch.queue.backoff.ms`;
///   librdkafka's 1 s default leaves a consumer that is a little slower than its broker idle
///   for most of each second);
/// - a broker holds a fetch for at most 100 ms when it has nothing new (`fetch.wait.max.ms`;
///   while it holds one, no partition of that broker is fetched, so a partition whose queue has
///   just drained would wait up to librdkafka's 500 ms default).
pub const FETCH_SETTINGS: [(&str, &str); 5] = [
    ("queued.max.messages.kbytes", "1536"),
    ("fetch.max.bytes", "2097152"),
    ("max.partition.fetch.bytes", "262144"),
    ("fetch.queue.backoff.ms", "10"),
    ("fetch.wait.max.ms", "100"),
];

impl ConsumerConfig {
    /// The defaults, with the three required settings.
    pub fn new<T: Into<String>>(
        brokers: &str,
        group_id: &str,
        topics: impl IntoIterator<Item = T>,
    ) -> Self {
        Self {
            brokers: brokers.to_string(),
            group_id: group_id.to_string(),
            topics: topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Checks every setting; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::new(
                "brokers",
                &self.brokers,
                "at least one host:port is required",
            ));
        }
        for broker in self.brokers.split(',') {
            let broker = broker.trim();
            let port_ok = broker
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                return Err(ConfigError::new(
                    "brokers",
                    broker,
                    "expected host:port, e.g. localhost:9092",
                ));
            }
        }
        if self.group_id.trim().is_empty() {
            return Err(ConfigError::new("group_id", &self.group_id, "is required"));
        }
        if self.topics.is_empty() {
            return Err(ConfigError::new(
                "topics",
                "",
                "at least one topic is required",
            ));
        }
        for topic in &self.topics {
            crate::dlq::check_topic_name(topic)
                .map_err(|r| ConfigError::new("topics", topic, r))?;
        }
        let template = self.dlq_topic()?;
        for topic in &self.topics {
            let dlq = template.for_topic(topic);
            crate::dlq::check_topic_name(&dlq).map_err(|r| {
                ConfigError::new(
                    "dlq_topic",
                    &self.dlq_topic,
                    format!("gives `{dlq}` for `{topic}`: {r}"),
                )
            })?;
            if self.topics.contains(&dlq) {
                return Err(ConfigError::new(
                    "dlq_topic",
                    &self.dlq_topic,
                    format!("gives `{dlq}`, a topic this consumer reads: dead letters would loop"),
                ));
            }
        }
        if let Some(header) = &self.id_header {
            if header.is_empty() {
                return Err(ConfigError::new("id_header", header, "must not be empty"));
            }
        }
        self.backoff()?;
        if !(1..=10_000_000).contains(&self.max_buffered_records) {
            return Err(ConfigError::new(
                "max_buffered_records",
                self.max_buffered_records,
                "must be 1 to 10000000 (librdkafka's queued.min.messages)",
            ));
        }
        if self.batch_size == 0 {
            return Err(ConfigError::new("batch_size", 0, "must be at least 1"));
        }
        if self.ordering == Ordering::Key {
            if self.max_in_flight == 0 {
                return Err(ConfigError::new("max_in_flight", 0, "must be at least 1"));
            }
            if self.batch_size > 1 {
                return Err(ConfigError::new(
                    "ordering",
                    "key",
                    format!(
                        "works with single records; batch_size is {}",
                        self.batch_size
                    ),
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.breaker_failure_ratio) {
            return Err(ConfigError::new(
                "breaker_failure_ratio",
                self.breaker_failure_ratio,
                "must be between 0 (off) and 1",
            ));
        }
        if self.breaker_failure_ratio > 0.0 {
            for (key, value) in [
                ("breaker_window_ms", self.breaker_window_ms),
                ("breaker_probe_initial_ms", self.breaker_probe_initial_ms),
                ("breaker_min_calls", u64::from(self.breaker_min_calls)),
            ] {
                if value == 0 {
                    return Err(ConfigError::new(key, value, "must be greater than 0"));
                }
            }
            if self.breaker_probe_max_ms < self.breaker_probe_initial_ms {
                return Err(ConfigError::new(
                    "breaker_probe_max_ms",
                    self.breaker_probe_max_ms,
                    format!(
                        "must be at least breaker_probe_initial_ms ({})",
                        self.breaker_probe_initial_ms
                    ),
                ));
            }
        }
        if !matches!(self.auto_offset_reset.as_str(), "earliest" | "latest") {
            return Err(ConfigError::new(
                "auto_offset_reset",
                &self.auto_offset_reset,
                "expected `earliest` or `latest`",
            ));
        }
        for (key, value) in &self.librdkafka {
            if let Some(reason) = refuse_raw_option(key, value, self.group_protocol) {
                return Err(ConfigError::new(
                    &format!("librdkafka.{key}"),
                    "<redacted>",
                    reason,
                ));
            }
        }
        Ok(())
    }

    /// The retry policy for transient failures.
    pub fn backoff(&self) -> Result<ExponentialBackoff, ConfigError> {
        ExponentialBackoff::new(
            Duration::from_millis(self.backoff_initial_ms),
            self.backoff_multiplier,
            Duration::from_millis(self.backoff_max_ms),
            self.backoff_jitter,
            Some(self.max_retries),
        )
        .map_err(|e| {
            use crate::backoff::BackoffError::*;
            match e {
                ZeroInitial(_) => {
                    ConfigError::new("backoff_initial_ms", self.backoff_initial_ms, e)
                }
                MaxBelowInitial { .. } => {
                    ConfigError::new("backoff_max_ms", self.backoff_max_ms, e)
                }
                BadMultiplier(_) => {
                    ConfigError::new("backoff_multiplier", self.backoff_multiplier, e)
                }
                BadJitter(_) => ConfigError::new("backoff_jitter", self.backoff_jitter, e),
            }
        })
    }

    /// The outage breaker's policy; `None` when `breaker_failure_ratio` is 0.
    pub fn breaker(&self) -> Option<crate::breaker::BreakerPolicy> {
        (self.breaker_failure_ratio > 0.0).then(|| crate::breaker::BreakerPolicy {
            window: Duration::from_millis(self.breaker_window_ms),
            min_calls: self.breaker_min_calls,
            failure_ratio: self.breaker_failure_ratio,
            probe_initial: Duration::from_millis(self.breaker_probe_initial_ms),
            probe_max: Duration::from_millis(self.breaker_probe_max_ms),
        })
    }

    /// The dead-letter topic template.
    pub fn dlq_topic(&self) -> Result<DlqTopic, ConfigError> {
        DlqTopic::new(&self.dlq_topic)
            .map_err(|r| ConfigError::new("dlq_topic", &self.dlq_topic, r))
    }

    /// The shutdown deadline.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown_timeout_ms)
    }

    /// librdkafka settings for the consumer: manual offset store, periodic commit of stored
    /// offsets, the group protocol (`cooperative-sticky` with the classic one),
    /// [`FETCH_SETTINGS`], then the raw `librdkafka` options.
    pub fn consumer_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id)
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", &self.auto_offset_reset)
            .set("statistics.interval.ms", "2000")
            .set("enable.partition.eof", "false")
            .set("group.protocol", self.group_protocol.as_str());
        if self.group_protocol == GroupProtocol::Classic {
            config.set("partition.assignment.strategy", "cooperative-sticky");
        }
        for (key, value) in FETCH_SETTINGS {
            config.set(key, value);
        }
        config.set("queued.min.messages", self.max_buffered_records.to_string());
        self.apply_raw(&mut config);
        config
    }

    /// librdkafka settings for the dead-letter producer: `acks=all`, one request in flight
    /// (dead letters stay in order through retries), `linger.ms=1`, then the raw `librdkafka`
    /// options.
    ///
    /// Not idempotent: librdkafka 2.12's idempotent producer polls its socket without
    /// sleeping while a request is unanswered (a whole core while a slow broker acknowledges)
    /// and doubled the cost of each dead letter in the benchmark. What idempotence would add
    /// here is no duplicate after a lost acknowledgement; a dead letter re-sent after a failed
    /// write can be a duplicate either way, and its envelope `id` tells them apart.
    ///
    /// `linger.ms=1`: the dead letters of one millisecond share a produce request (in the
    /// benchmark, half the CPU per dead letter of one request each).
    pub fn producer_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "false")
            .set("max.in.flight.requests.per.connection", "1")
            .set("acks", "all")
            .set("linger.ms", "1")
            .set("message.timeout.ms", "30000");
        self.apply_raw(&mut config);
        config
    }

    fn apply_raw(&self, config: &mut ClientConfig) {
        apply_librdkafka(config, &self.librdkafka);
    }
}

/// Applies raw librdkafka `options` last, and sets which librdkafka log lines reach `tracing`:
/// warnings and worse, or everything when the `debug` option is set.
pub fn apply_librdkafka(config: &mut ClientConfig, options: &BTreeMap<String, String>) {
    for (key, value) in options {
        config.set(key, value);
    }
    let level = if options.contains_key("debug") {
        rdkafka::config::RDKafkaLogLevel::Debug
    } else {
        rdkafka::config::RDKafkaLogLevel::Warning
    };
    config.set_log_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> ConsumerConfig {
        ConsumerConfig::new("localhost:9092", "g", ["orders"])
    }

    #[test]
    fn defaults_are_valid_and_spring_like() {
        let c = valid();
        c.validate().unwrap();
        assert_eq!(c.max_retries, 10);
        assert_eq!(c.dlq_topic().unwrap().for_topic("orders"), "orders-dlt");
    }

    #[test]
    fn errors_name_the_setting_and_value() {
        let cases: Vec<(ConsumerConfig, &str, &str)> = vec![
            (
                ConsumerConfig {
                    brokers: "".into(),
                    ..valid()
                },
                "brokers",
                "",
            ),
            (
                ConsumerConfig {
                    brokers: "localhost".into(),
                    ..valid()
                },
                "brokers",
                "localhost",
            ),
            (
                ConsumerConfig {
                    group_id: " ".into(),
                    ..valid()
                },
                "group_id",
                " ",
            ),
            (
                ConsumerConfig {
                    topics: vec![],
                    ..valid()
                },
                "topics",
                "",
            ),
            (
                ConsumerConfig {
                    topics: vec!["bad topic".into()],
                    ..valid()
                },
                "topics",
                "bad topic",
            ),
            (
                ConsumerConfig {
                    dlq_topic: "{topic}".into(),
                    ..valid()
                },
                "dlq_topic",
                "{topic}",
            ),
            (
                ConsumerConfig {
                    backoff_initial_ms: 0,
                    ..valid()
                },
                "backoff_initial_ms",
                "0",
            ),
            (
                ConsumerConfig {
                    backoff_max_ms: 10,
                    ..valid()
                },
                "backoff_max_ms",
                "10",
            ),
            (
                ConsumerConfig {
                    backoff_jitter: 2.0,
                    ..valid()
                },
                "backoff_jitter",
                "2",
            ),
            (
                ConsumerConfig {
                    backoff_multiplier: 0.5,
                    ..valid()
                },
                "backoff_multiplier",
                "0.5",
            ),
            (
                ConsumerConfig {
                    auto_offset_reset: "start".into(),
                    ..valid()
                },
                "auto_offset_reset",
                "start",
            ),
            (
                ConsumerConfig {
                    max_buffered_records: 0,
                    ..valid()
                },
                "max_buffered_records",
                "0",
            ),
            (
                ConsumerConfig {
                    batch_size: 0,
                    ..valid()
                },
                "batch_size",
                "0",
            ),
            (
                ConsumerConfig {
                    breaker_failure_ratio: 1.5,
                    ..valid()
                },
                "breaker_failure_ratio",
                "1.5",
            ),
            (
                ConsumerConfig {
                    breaker_probe_max_ms: 10,
                    ..valid()
                },
                "breaker_probe_max_ms",
                "10",
            ),
        ];
        for (config, key, value) in cases {
            let err = config.validate().unwrap_err();
            assert_eq!(
                (err.key.as_str(), err.value.as_str()),
                (key, value),
                "{err}"
            );
            assert!(err.to_string().contains(key));
        }
    }

    #[test]
    fn classic_protocol_is_cooperative_and_consumer_protocol_sets_no_assignor() {
        let classic = valid().consumer_client_config();
        assert_eq!(classic.get("group.protocol"), Some("classic"));
        assert_eq!(
            classic.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        let consumer = ConsumerConfig {
            group_protocol: GroupProtocol::Consumer,
            ..valid()
        }
        .consumer_client_config();
        assert_eq!(consumer.get("group.protocol"), Some("consumer"));
        assert_eq!(consumer.get("partition.assignment.strategy"), None);
    }

    #[test]
    fn debug_redacts_raw_options() {
        let mut c = valid();
        c.librdkafka
            .insert("sasl.password".into(), "hunter2".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sasl.password"));
    }

    #[test]
    fn raw_options_apply_last() {
        let mut c = valid();
        c.librdkafka
            .insert("message.timeout.ms".into(), "2000".into());
        assert_eq!(
            c.producer_client_config().get("message.timeout.ms"),
            Some("2000")
        );
    }
}
