//! Typed, strict configuration of the consumer, checked once at start-up.
//!
//! Every field has a unit in its name where it has one. [`ConsumerConfig::validate`] checks
//! each value and the fields against each other, and a [`ConfigError`] names the setting and
//! the bad value. Raw librdkafka options (`librdkafka`) are applied last, over everything we
//! set, to the consumer and the dead-letter producer alike (SASL, SSL, tuning); their values
//! never appear in `Debug` output, since they may hold passwords.

use std::fmt;

use rdkafka::ClientConfig;
use serde::Deserialize;
use thiserror::Error;

use crate::backoff::ExponentialBackoff;

mod after_failure;
mod clients;
mod consumption;
mod file;
mod millis;
mod option_list;
mod raw_options;
mod secret_file;
mod security;
mod settings;
pub mod shown_url;
mod validate;
use crate::dlq::DlqTopic;
pub use after_failure::KeyOrderAfterFailure;
pub use clients::{check_client, refused, ClientKind};
pub use consumption::{Consumption, ShareDlq};
pub use file::{is_connection_setting, Commands, ConfigFile, FileSetting};
pub use option_list::parse_kafka_options;
pub use raw_options::refuse_raw_option;
pub use secret_file::{read_secret_file, secret_setting};
pub use security::{check_options, merge_options, SaslMechanism, Security, SecurityProtocol};
pub use settings::ConsumerConfig;
#[cfg(feature = "cli")]
pub use settings::ConsumerFlags;

/// How records of one partition are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
#[non_exhaustive]
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

impl fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Ordering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ordering::Partition => "partition",
            Ordering::Key => "key",
        })
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

/// The fetch settings kafka-dlq gives librdkafka's consumer (raw `librdkafka` options can
/// override them). Each partition's records go through a queue of its own, whose bound is its
/// share of half of `max_buffered_bytes` (`queued.max.messages.kbytes`), set when the
/// consumer starts, and `max_buffered_records` (`queued.min.messages`; see both):
///
/// - one fetch brings at most 64 kB per partition (`max.partition.fetch.bytes`; a whole
///   record batch if the first is larger; the consumer raises it to each partition queue's
///   share, up to 1 MB, so that a fetch brings several partitions' batches) and 2 MB in all
///   (`fetch.max.bytes`; librdkafka raises it to `message.max.bytes` if that is larger; a
///   key-ordered consumer raises it to every partition's fetch, up to a quarter of
///   `max_buffered_bytes`, so that its partitions start together): a broker that ignores
///   the per-partition bound, as tansu 0.6 does, would otherwise send up to 5 MB for one
///   partition;
/// - a 10 ms pause before fetching again once the queue is full (`fetch.queue.backoff.ms`;
///   librdkafka's 1 s default leaves a consumer that is a little slower than its broker idle
///   for most of each second);
/// - a broker holds a fetch for at most 100 ms when it has nothing new (`fetch.wait.max.ms`;
///   while it holds one, no partition of that broker is fetched, so a partition whose queue
///   has just drained would wait up to librdkafka's 500 ms default); the consumer shortens
///   it to between 25 and 100 ms, growing with its partitions, since partitions with nothing
///   new (retry tiers, the redrive topic) make up its fetch whenever its source partitions'
///   queues are full.
pub const FETCH_SETTINGS: [(&str, &str); 4] = [
    ("fetch.max.bytes", "2097152"),
    ("max.partition.fetch.bytes", "65536"),
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

    /// The retry policy for transient failures.
    pub fn backoff(&self) -> Result<ExponentialBackoff, ConfigError> {
        ExponentialBackoff::new(
            self.backoff_initial,
            self.backoff_multiplier,
            self.backoff_max,
            self.backoff_jitter,
            Some(self.max_retries),
        )
        .map_err(|e| {
            use crate::backoff::BackoffError::*;
            match e {
                ZeroInitial(_) => {
                    ConfigError::new("backoff_initial_ms", self.backoff_initial.as_millis(), e)
                }
                MaxBelowInitial { .. } => {
                    ConfigError::new("backoff_max_ms", self.backoff_max.as_millis(), e)
                }
                BadMultiplier(_) => {
                    ConfigError::new("backoff_multiplier", self.backoff_multiplier, e)
                }
                BadJitter(_) => ConfigError::new("backoff_jitter", self.backoff_jitter, e),
            }
        })
    }

    /// Records one fetch of a share-group member acquires: `share_acquire_records`, or
    /// `max_in_flight` when that is more (a member never has fewer records than it may handle
    /// at once).
    pub fn share_fetch_records(&self) -> usize {
        self.share_acquire_records.max(self.max_in_flight)
    }

    /// The outage breaker's policy; `None` when `breaker_failure_ratio` is 0.
    pub fn breaker(&self) -> Option<crate::breaker::BreakerPolicy> {
        (self.breaker_failure_ratio > 0.0).then_some(crate::breaker::BreakerPolicy {
            window: self.breaker_window,
            min_calls: self.breaker_min_calls,
            failure_ratio: self.breaker_failure_ratio,
            probe_initial: self.breaker_probe_initial,
            probe_max: self.breaker_probe_max,
        })
    }

    /// The dead-letter topic template.
    pub fn dlq_topic(&self) -> Result<DlqTopic, ConfigError> {
        DlqTopic::new(&self.dlq_topic)
            .map_err(|r| ConfigError::new("dlq_topic", &self.dlq_topic, r))
    }

    /// librdkafka settings for the consumer: manual offset store, periodic commit of stored
    /// offsets, the group protocol (`cooperative-sticky` with the classic one),
    /// [`FETCH_SETTINGS`], then the raw `librdkafka` options.
    pub fn consumer_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id)
            // Exactly once: offsets commit in the producer's transactions only.
            .set(
                "enable.auto.commit",
                if self.exactly_once { "false" } else { "true" },
            )
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
        config.set(
            "queued.max.messages.kbytes",
            (self.max_buffered_bytes / 2 / 1024).to_string(),
        );
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
        if self.exactly_once {
            let transaction_timeout =
                (self.transaction_interval.as_millis() * 10).clamp(10_000, 900_000);
            // One transactional producer per consumer process: fenced by the group's
            // generation (KIP-447), so its id only has to be unique.
            config
                .set("enable.idempotence", "true")
                .set("max.in.flight.requests.per.connection", "5")
                // The transaction of a member that died holds back read_committed readers
                // of its topics until the broker aborts it: not the default minute.
                .set("transaction.timeout.ms", transaction_timeout.to_string())
                // A write not delivered within its transaction's time is the transaction's
                // failure (librdkafka requires it no longer).
                .set("message.timeout.ms", transaction_timeout.to_string())
                .set(
                    "transactional.id",
                    format!("kafka-dlq-{}-{:016x}", self.group_id, fastrand::u64(..)),
                );
        }
        config
    }

    fn apply_raw(&self, config: &mut ClientConfig) {
        self.librdkafka.apply(config);
    }
}

#[cfg(test)]
mod tests;
