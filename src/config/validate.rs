//! [`ConsumerConfig::validate`]: every setting checked, alone and against the others.

use super::{
    refuse_raw_option, ConfigError, ConsumerConfig, Consumption, KeyOrderAfterFailure, Ordering,
};
use crate::retry_tier::MAX_TIERS;
use std::time::Duration;

impl ConsumerConfig {
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
        if self.dlq_retention_ms == 0 || self.dlq_retention_ms < -1 {
            return Err(ConfigError::new(
                "dlq_retention_ms",
                self.dlq_retention_ms,
                "must be -1 (keep dead letters for ever) or a positive number of milliseconds",
            ));
        }
        self.validate_retry_tiers()?;
        self.validate_redrive_topics()?;
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
        if !((1 << 20)..=(4 << 30)).contains(&self.max_buffered_bytes) {
            return Err(ConfigError::new(
                "max_buffered_bytes",
                self.max_buffered_bytes,
                "must be 1048576 (1 MiB) to 4294967296 (4 GiB)",
            ));
        }
        if self.batch_size == 0 {
            return Err(ConfigError::new("batch_size", 0, "must be at least 1"));
        }
        if self.consumption == Consumption::Share {
            self.validate_share()?;
        }
        if self.key_order_after_failure == KeyOrderAfterFailure::Park {
            self.validate_parking()?;
        } else if !self.park_max_age.is_zero() {
            return Err(ConfigError::new(
                "park_max_age_ms",
                self.park_max_age.as_millis(),
                "only means something with key_order_after_failure = \"park\"",
            ));
        }
        if self.exactly_once {
            self.validate_exactly_once()?;
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
            let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            for (key, value) in [
                ("breaker_window_ms", ms(self.breaker_window)),
                ("breaker_probe_initial_ms", ms(self.breaker_probe_initial)),
                ("breaker_min_calls", u64::from(self.breaker_min_calls)),
            ] {
                if value == 0 {
                    return Err(ConfigError::new(key, value, "must be greater than 0"));
                }
            }
            if self.breaker_probe_max < self.breaker_probe_initial {
                return Err(ConfigError::new(
                    "breaker_probe_max_ms",
                    ms(self.breaker_probe_max),
                    format!(
                        "must be at least breaker_probe_initial_ms ({})",
                        ms(self.breaker_probe_initial)
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
        for (key, value) in self.librdkafka.iter() {
            if let Some(reason) = refuse_raw_option(key, value, self.group_protocol) {
                return Err(ConfigError::new(
                    &self.librdkafka.name_of(key),
                    "<redacted>",
                    reason,
                ));
            }
        }
        super::check_options(&self.librdkafka)?;
        Ok(())
    }

    /// Checks `retry_topic_delays_ms`: at most [`MAX_TIERS`] delays of 1 ms to 30 days, retry
    /// topic names Kafka accepts, none of them a topic the consumer reads or writes
    /// dead letters to.
    fn validate_retry_tiers(&self) -> Result<(), ConfigError> {
        let tiers = &self.retry_topic_delays_ms;
        let key = "retry_topic_delays_ms";
        if tiers.len() > MAX_TIERS {
            return Err(ConfigError::new(
                key,
                tiers,
                format!("at most {MAX_TIERS} tiers"),
            ));
        }
        if let Some(bad) = tiers
            .delays_ms()
            .iter()
            .find(|ms| !(1..=30 * 24 * 3_600_000).contains(*ms))
        {
            return Err(ConfigError::new(
                key,
                tiers,
                format!("a delay of {bad} ms: each must be 1 ms to 30 days"),
            ));
        }
        let template = self.dlq_topic()?;
        for topic in &self.topics {
            for retry in tiers.topics(topic) {
                crate::dlq::check_topic_name(&retry).map_err(|r| {
                    ConfigError::new(key, tiers, format!("gives `{retry}` for `{topic}`: {r}"))
                })?;
                let dlqs: Vec<String> = self.topics.iter().map(|t| template.for_topic(t)).collect();
                if self.topics.contains(&retry) || dlqs.contains(&retry) {
                    return Err(ConfigError::new(
                        key,
                        tiers,
                        format!("gives `{retry}`, a topic this consumer already reads or dead-letters to"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks that no source topic's redrive topic (`<topic>-redrive-<group>`) is itself one
    /// of the topics this consumer reads or dead-letters to: its records would be handled
    /// twice, or replayed into a loop.
    fn validate_redrive_topics(&self) -> Result<(), ConfigError> {
        let template = self.dlq_topic()?;
        let dlqs: Vec<String> = self.topics.iter().map(|t| template.for_topic(t)).collect();
        for topic in &self.topics {
            let redrive = crate::record::retry::redrive_topic(topic, &self.group_id);
            if self.topics.contains(&redrive)
                || dlqs.contains(&redrive)
                || crate::record::retry::parse_topic(&redrive)
                    .is_some_and(|(source, _)| self.topics.iter().any(|t| t == source))
            {
                return Err(ConfigError::new(
                    "topics",
                    self.topics.join(","),
                    format!("`{topic}`'s redrive topic for group `{}` is `{redrive}`, a topic this consumer already reads, dead-letters to or retries in", self.group_id),
                ));
            }
        }
        Ok(())
    }
}

impl ConsumerConfig {
    /// What parking a key behind its failed record needs: a key order to keep.
    fn validate_parking(&self) -> Result<(), ConfigError> {
        let refuse =
            |reason: &str| Err(ConfigError::new("key_order_after_failure", "park", reason));
        if self.consumption == Consumption::Share {
            return refuse("is not possible with consumption = \"share\": a share group hands a key's records to any member in any order, so there is no key order to keep");
        }
        if self.ordering == Ordering::Key {
            return refuse("works with ordering = \"partition\" in this version (key order's parking is not built yet)");
        }
        if self.batch_size > 1 {
            return refuse(
                "works with batch_size 1 in this version (parking in batches is not built yet)",
            );
        }
        if self.exactly_once {
            return refuse("does not work with exactly_once in this version (parking inside the transaction is not built yet)");
        }
        Ok(())
    }

    /// What exactly-once mode needs: records of a partition settle one at a time, in order,
    /// so that each record's effect and its offset go into the same transaction.
    fn validate_exactly_once(&self) -> Result<(), ConfigError> {
        if self.consumption == Consumption::Share {
            return Err(ConfigError::new(
                "exactly_once",
                true,
                "is not possible with consumption = \"share\": KIP-932 has no transactional acknowledgement (a record's ACCEPT cannot commit with its outputs)",
            ));
        }
        if self.ordering == Ordering::Key {
            return Err(ConfigError::new(
                "ordering",
                "key",
                "must be \"partition\" with exactly_once: a transaction commits a partition's offset only past records whose effects are in it, and records of different keys settle out of order",
            ));
        }
        if self.batch_size > 1 {
            return Err(ConfigError::new(
                "batch_size",
                self.batch_size,
                "must be 1 with exactly_once: each record's outputs or dead letter go into the transaction with its own offset",
            ));
        }
        if self.transaction_records == 0 {
            return Err(ConfigError::new(
                "transaction_records",
                0,
                "must be at least 1",
            ));
        }
        if let Some(level) = self
            .librdkafka
            .get("isolation.level")
            .filter(|l| *l != "read_committed")
        {
            return Err(ConfigError::new(
                "kafka_options",
                format!("isolation.level={level}"),
                "must be read_committed with exactly_once: read_uncommitted reads aborted retry records and the aborted outputs of an upstream exactly-once service",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(60))
            .contains(&self.transaction_interval)
        {
            return Err(ConfigError::new(
                "transaction_interval_ms",
                self.transaction_interval.as_millis(),
                "must be 1 to 60000",
            ));
        }
        Ok(())
    }
}

impl ConsumerConfig {
    /// What a share group cannot do: it has no order to keep, no partition of its own to batch
    /// or to put retry topics behind (a release and its redelivery take their place).
    fn validate_share(&self) -> Result<(), ConfigError> {
        if self.ordering == Ordering::Key {
            return Err(ConfigError::new(
                "ordering",
                "key",
                "a share group keeps no order (records of one key may go to different members); use consumption = \"group\" for key order",
            ));
        }
        if self.batch_size > 1 {
            return Err(ConfigError::new(
                "batch_size",
                self.batch_size,
                "must be 1 with consumption = \"share\" (each record is acknowledged on its own)",
            ));
        }
        if !self.retry_topic_delays_ms.is_empty() {
            return Err(ConfigError::new(
                "retry_topic_delays_ms",
                format!("{:?}", self.retry_topic_delays_ms.delays_ms()),
                "must be empty with consumption = \"share\": a record whose retries are used up is released for redelivery instead, until the group's share.delivery.count.limit",
            ));
        }
        if !(1..=10_000).contains(&self.max_in_flight) {
            return Err(ConfigError::new(
                "max_in_flight",
                self.max_in_flight,
                "must be 1 to 10000 with consumption = \"share\" (records of a member in the handler at once)",
            ));
        }
        if !(1..=10_000).contains(&self.share_acquire_records) {
            return Err(ConfigError::new(
                "share_acquire_records",
                self.share_acquire_records,
                "must be 1 to 10000 (records one fetch of a share-group member acquires)",
            ));
        }
        Ok(())
    }
}
