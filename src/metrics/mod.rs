//! Prometheus metrics and health of one consumer.
//!
//! Every metric has fixed labels (topic, partition, kind), so cardinality is bounded by the
//! topics and partitions consumed, and a consumer's series all carry `group`, its consumer
//! group ([`Metrics::for_group`]); every per-topic series exists, at 0, from the topic's first
//! assignment. [`Metrics::render`] gives the Prometheus text format; a
//! library user can also register [`Metrics::registry`] in their own exporter. Alerts
//! (`alerting/` in the repository) read these, never the hot path.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `kafka_dlq_records_consumed_total` | counter | topic | records fetched and queued |
//! | `kafka_dlq_records_succeeded_total` | counter | topic | records the handler accepted |
//! | `kafka_dlq_records_retried_total` | counter | topic | retries scheduled |
//! | `kafka_dlq_records_dead_lettered_total` | counter | topic, kind | dead letters acknowledged (exactly once: committed) |
//! | `kafka_dlq_dlq_write_failures_total` | counter | topic | failed writes to the dead-letter or a retry topic |
//! | `kafka_dlq_retry_topic_records_total` | counter | topic, tier | records acknowledged by a retry topic (see [`crate::retry_tier`]) |
//! | `kafka_dlq_retry_partitions_waiting` | gauge | | retry-topic partitions waiting for their next record to be due |
//! | `kafka_dlq_partitions_in_backoff` | gauge | | partitions (share groups: records) waiting to retry a record |
//! | `kafka_dlq_dead_letter_bytes_in_flight` | gauge | | bytes held by dead-letter writes not yet acknowledged (bounded; see the consumer docs) |
//! | `kafka_dlq_buffered_records` | gauge | | fetched records waiting in the partitions' librdkafka queues for their workers (librdkafka statistics, every 2 s) |
//! | `kafka_dlq_buffered_bytes` | gauge | | the bytes of those records (within `max_buffered_bytes`, see the consumer docs; librdkafka statistics, every 2 s) |
//! | `kafka_dlq_queue_trims_total` | counter | topic | times a worker paused its partition to drop what a record batch larger than its queue's share brought (fetched again when it wants more) |
//! | `kafka_dlq_transactions_total` | counter | outcome | exactly once: transactions committed and aborted |
//! | `kafka_dlq_transaction_records` | histogram | | exactly once: records settled in each committed transaction |
//! | `kafka_dlq_transaction_commit_seconds` | histogram | | exactly once: one commit (offsets, flush, commit) |
//! | `kafka_dlq_handler_duration_seconds` | histogram | topic | one handler call |
//! | `kafka_dlq_record_settle_seconds` | histogram | | from fetch to settled (handled or dead-lettered) |
//! | `kafka_dlq_consumer_lag` | gauge | topic, partition | records behind the high watermark |
//! | `kafka_dlq_parked_keys` | gauge | topic, partition | `key_order_after_failure = "park"`: keys waiting behind a record that left (see `docs/key-order-after-failure.md`) |
//! | `kafka_dlq_parked_records` | gauge | topic, partition | records parked behind them, waiting in the park log |
//! | `kafka_dlq_parked_oldest_seconds` | gauge | topic, partition | how long the oldest of them has waited (since its head left) |
//! | `kafka_dlq_partitions_assigned` | gauge | | partitions this member owns |
//! | `kafka_dlq_broker_up` | gauge | | 1 when a broker connection is up |
//! | `kafka_dlq_breaker_open` | gauge | | 1 while the outage breaker is open |
//! | `kafka_dlq_breaker_opened_total` | counter | | times the outage breaker opened |
//! | `kafka_dlq_batch_splits_total` | counter | topic | failed batches split in halves |
//! | `kafka_dlq_undecodable_batches_total` | counter | topic, partition | fetches that failed because a record batch could not be decoded (corrupt): a consumer group's partition stays where it is; a share group's records are released unread, and archived by the broker after their last delivery (both named on `/readyz`) |
//! | `kafka_dlq_share_records_acquired_total` | counter | topic | share groups: records acquired (each delivery counts) |
//! | `kafka_dlq_share_acknowledgements_total` | counter | topic, ack | share groups: acknowledgements made, `ack` = `accept`, `release`, `reject` or `renew` (a lock renewal) |
//! | `kafka_dlq_share_locks_lost_total` | counter | topic | share groups: records whose acknowledgement was refused, by the client (it no longer held the record) or the broker (its lock had expired, the session ended): the broker delivers them again |

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use rdkafka::statistics::Statistics;

/// Why the consumer is not live: the workers that died, one line each (`the worker of
/// <topic>-<partition> died: <panic>`). Displayed as `unhealthy: <lines>; restart the process`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unhealthy: {}; restart the process", dead_workers.join("; "))]
pub struct Unhealthy {
    /// One line per dead worker.
    pub dead_workers: Vec<String>,
}

/// The metrics of one consumer, registered in their own [`Registry`]. A clone shares them:
/// cloning costs one reference count, not one per metric (the workers of every partition
/// clone it, e.g. for each dead letter).
#[derive(Clone)]
pub struct Metrics(std::sync::Arc<MetricSet>);

/// The metrics themselves, behind [`Metrics`].
pub struct MetricSet {
    registry: Registry,
    pub(crate) consumed: IntCounterVec,
    pub(crate) succeeded: IntCounterVec,
    pub(crate) retried: IntCounterVec,
    pub(crate) dead_lettered: IntCounterVec,
    pub(crate) dlq_write_failures: IntCounterVec,
    pub(crate) retry_tier_sent: IntCounterVec,
    pub(crate) retry_partitions_waiting: IntGauge,
    pub(crate) partitions_in_backoff: IntGauge,
    pub(crate) dead_letter_bytes_in_flight: IntGauge,
    pub(crate) buffered_records: IntGauge,
    pub(crate) buffered_bytes: IntGauge,
    pub(crate) queue_trims: prometheus::IntCounterVec,
    pub(crate) handler_duration: HistogramVec,
    /// OpenTelemetry's `messaging.process.duration`: one handler call, by destination and
    /// `error.type` (empty when it succeeded).
    pub(crate) process_duration: HistogramVec,
    /// OpenTelemetry's `messaging.client.consumed.messages`.
    pub(crate) consumed_messages: IntCounterVec,
    pub(crate) settle_seconds: prometheus::Histogram,
    pub(crate) consumer_lag: IntGaugeVec,
    pub(crate) parked_keys: IntGaugeVec,
    pub(crate) parked_records: IntGaugeVec,
    pub(crate) parked_oldest_seconds: IntGaugeVec,
    pub(crate) partitions_assigned: IntGauge,
    pub(crate) broker_up: IntGauge,
    pub(crate) breaker_open: IntGauge,
    pub(crate) breaker_opened: prometheus::IntCounter,
    pub(crate) batch_splits: IntCounterVec,
    pub(crate) transactions: IntCounterVec,
    pub(crate) transaction_records: prometheus::Histogram,
    pub(crate) transaction_commit_seconds: prometheus::Histogram,
    pub(crate) share_acquired: IntCounterVec,
    pub(crate) share_acknowledged: IntCounterVec,
    pub(crate) share_lock_lost: IntCounterVec,
    pub(crate) undecodable_batches: IntCounterVec,
    /// Why the consumer is not ready beyond the partitions and the broker connection, by
    /// subject (`connection`, `<topic>-<partition>`): one line each.
    not_ready: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
    /// Partitions whose worker died (a bug: a panic outside the handler), with the panic.
    dead_workers: std::sync::Mutex<Vec<String>>,
}

impl std::ops::Deref for Metrics {
    type Target = MetricSet;

    fn deref(&self) -> &MetricSet {
        &self.0
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric at zero, without a `group` label (for tests and
    /// for a library user who labels the process in their own exporter).
    pub fn new() -> Self {
        Self::in_registry(Registry::new())
    }

    /// Creates and registers every metric at zero, each series labelled `group="<group>"`: the
    /// consumer group (the service) whose records they count, so that the dead letters of
    /// several services on one topic and one dashboard are told apart. [`crate::Consumer`]
    /// uses it.
    pub fn for_group(group: &str) -> Self {
        let labels = std::collections::HashMap::from([("group".to_string(), group.to_string())]);
        let registry =
            Registry::new_custom(None, Some(labels)).expect("`group` is a valid label name");
        Self::in_registry(registry)
    }

    fn in_registry(registry: Registry) -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let consumed = counter(
            "kafka_dlq_records_consumed_total",
            "Records fetched and queued for their partition's worker.",
            &["topic"],
        );
        let succeeded = counter(
            "kafka_dlq_records_succeeded_total",
            "Records the handler accepted.",
            &["topic"],
        );
        let retried = counter(
            "kafka_dlq_records_retried_total",
            "Retries scheduled after a transient failure.",
            &["topic"],
        );
        let dead_lettered = counter(
            "kafka_dlq_records_dead_lettered_total",
            "Records acknowledged by the dead-letter topic, by error kind.",
            &["topic", "kind"],
        );
        let dlq_write_failures = counter(
            "kafka_dlq_dlq_write_failures_total",
            "Writes to the dead-letter or a retry topic that failed (each is retried until it succeeds).",
            &["topic"],
        );
        let retry_tier_sent = counter(
            "kafka_dlq_retry_topic_records_total",
            "Records acknowledged by a retry topic, by source topic and tier.",
            &["topic", "tier"],
        );
        let retry_partitions_waiting = gauge(
            "kafka_dlq_retry_partitions_waiting",
            "Retry-topic partitions waiting (paused) until their next record is due.",
        );
        let partitions_in_backoff = gauge(
            "kafka_dlq_partitions_in_backoff",
            "Partitions whose current record waits for a retry (share groups: records waiting for a retry).",
        );
        let dead_letter_bytes_in_flight = gauge(
            "kafka_dlq_dead_letter_bytes_in_flight",
            "Bytes held by dead-letter writes not yet acknowledged by the broker.",
        );
        let buffered_records = gauge(
            "kafka_dlq_buffered_records",
            "Fetched records waiting in librdkafka's fetch queues, not yet taken by kafka-dlq (librdkafka's statistics, every 2 s).",
        );
        let buffered_bytes = gauge(
            "kafka_dlq_buffered_bytes",
            "Bytes of fetched records waiting in the partitions' librdkafka queues for their workers (librdkafka's statistics, every 2 s).",
        );
        let queue_trims = counter(
            "kafka_dlq_queue_trims_total",
            "Times a worker paused its partition to drop what a record batch larger than the queue's share brought; fetched again when the worker wants more.",
            &["topic"],
        );
        let handler_duration = HistogramVec::new(
            HistogramOpts::new(
                "kafka_dlq_handler_duration_seconds",
                "Duration of one handler call.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            &["topic"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(handler_duration.clone()))
            .expect("unique metric");
        // OpenTelemetry's messaging metrics (semantic conventions v1.44), under the names its
        // Prometheus exporter gives them, beside ours.
        let process_duration = HistogramVec::new(
            HistogramOpts::new(
                "messaging_process_duration_seconds",
                "OpenTelemetry messaging.process.duration: duration of processing operation (one handler call).",
            )
            .const_label("messaging_system", "kafka")
            .const_label("messaging_operation_name", "process")
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            ]),
            &["messaging_destination_name", "error_type"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(process_duration.clone()))
            .expect("unique metric");
        let consumed_messages = IntCounterVec::new(
            Opts::new(
                "messaging_client_consumed_messages_total",
                "OpenTelemetry messaging.client.consumed.messages: messages delivered to the consumer.",
            )
            .const_label("messaging_system", "kafka")
            .const_label("messaging_operation_name", "poll"),
            &["messaging_destination_name"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(consumed_messages.clone()))
            .expect("unique metric");
        let settle_seconds = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "kafka_dlq_record_settle_seconds",
                "Time from fetch to settled (handled or acknowledged by the dead-letter topic).",
            )
            .buckets(prometheus::exponential_buckets(0.0001, 2.0, 21).expect("valid buckets")),
        )
        .expect("valid metric");
        registry
            .register(Box::new(settle_seconds.clone()))
            .expect("unique metric");
        let consumer_lag = IntGaugeVec::new(
            Opts::new(
                "kafka_dlq_consumer_lag",
                "Records between the consumer position and the high watermark.",
            ),
            &["topic", "partition"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(consumer_lag.clone()))
            .expect("unique metric");
        let partition_gauge = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["topic", "partition"])
                .expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let parked_keys = partition_gauge(
            "kafka_dlq_parked_keys",
            "Keys of the partition waiting behind a record that left for the dead-letter topic or a retry tier (key_order_after_failure = park).",
        );
        let parked_records = partition_gauge(
            "kafka_dlq_parked_records",
            "Records of the partition parked behind them, waiting in the park log.",
        );
        let parked_oldest_seconds = partition_gauge(
            "kafka_dlq_parked_oldest_seconds",
            "Seconds since the oldest unresolved head of the partition left.",
        );
        let partitions_assigned = gauge(
            "kafka_dlq_partitions_assigned",
            "Partitions assigned to this consumer.",
        );
        let broker_up = gauge(
            "kafka_dlq_broker_up",
            "1 when at least one broker connection is up, per the last client statistics.",
        );
        let breaker_open = gauge(
            "kafka_dlq_breaker_open",
            "1 while the outage breaker is open (consumption paused, probing).",
        );
        let breaker_opened = prometheus::IntCounter::new(
            "kafka_dlq_breaker_opened_total",
            "Times the outage breaker opened.",
        )
        .expect("valid metric");
        registry
            .register(Box::new(breaker_opened.clone()))
            .expect("unique metric");
        let batch_splits = counter(
            "kafka_dlq_batch_splits_total",
            "Failed batches split in halves to isolate poison records.",
            &["topic"],
        );
        let transactions = counter(
            "kafka_dlq_transactions_total",
            "Exactly once: transactions ended, by outcome (committed, aborted).",
            &["outcome"],
        );
        // Both series from the start (at 0): a panel and an alert have them to read.
        for outcome in ["committed", "aborted"] {
            transactions.with_label_values(&[outcome]);
        }
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            let h =
                prometheus::Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                    .expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let transaction_records = histogram(
            "kafka_dlq_transaction_records",
            "Exactly once: records settled in each committed transaction.",
            vec![1.0, 10.0, 100.0, 1_000.0, 10_000.0, 50_000.0, 100_000.0],
        );
        let transaction_commit_seconds = histogram(
            "kafka_dlq_transaction_commit_seconds",
            "Exactly once: how long each commit took (offsets sent, outputs flushed, committed).",
            prometheus::exponential_buckets(0.001, 2.0, 14).expect("valid buckets"),
        );
        let share_acquired = counter(
            "kafka_dlq_share_records_acquired_total",
            "Share groups: records acquired under a lock (each delivery counts).",
            &["topic"],
        );
        let share_acknowledged = counter(
            "kafka_dlq_share_acknowledgements_total",
            "Share groups: acknowledgements made, by kind (accept, release, reject, renew).",
            &["topic", "ack"],
        );
        let share_lock_lost = counter(
            "kafka_dlq_share_locks_lost_total",
            "Share groups: acknowledgements refused because the record was no longer held (lock expired, session ended); the broker delivers it again.",
            &["topic"],
        );
        let undecodable_batches = counter(
            "kafka_dlq_undecodable_batches_total",
            "Fetches of a partition that failed because a record batch could not be decoded: a consumer group's partition stays at it; a share group's records are released unread (see /readyz).",
            &["topic", "partition"],
        );
        Self(std::sync::Arc::new(MetricSet {
            registry,
            consumed,
            succeeded,
            retried,
            dead_lettered,
            dlq_write_failures,
            retry_tier_sent,
            retry_partitions_waiting,
            partitions_in_backoff,
            buffered_records,
            buffered_bytes,
            queue_trims,
            handler_duration,
            process_duration,
            consumed_messages,
            settle_seconds,
            consumer_lag,
            parked_keys,
            parked_records,
            parked_oldest_seconds,
            partitions_assigned,
            broker_up,
            breaker_open,
            breaker_opened,
            batch_splits,
            transactions,
            transaction_records,
            transaction_commit_seconds,
            share_acquired,
            share_acknowledged,
            share_lock_lost,
            undecodable_batches,
            dead_letter_bytes_in_flight,
            not_ready: std::sync::Mutex::default(),
            dead_workers: std::sync::Mutex::default(),
        }))
    }

    /// The registry holding these metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// All metrics in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding never fails");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// The sum over all label values of a counter or gauge family, such as
    /// `kafka_dlq_records_dead_lettered_total`; 0 when it has no samples yet.
    pub fn total(&self, family: &str) -> f64 {
        self.registry
            .gather()
            .iter()
            .filter(|f| f.name() == family)
            .flat_map(|f| {
                let gauge = f.get_field_type() == prometheus::proto::MetricType::GAUGE;
                f.get_metric().iter().map(move |m| {
                    if gauge {
                        m.get_gauge().get_value()
                    } else {
                        m.get_counter().get_value()
                    }
                })
            })
            .sum()
    }

    /// Fetched records waiting in the partitions' queues, as of librdkafka's last statistics
    /// (every 2 s unless the `librdkafka` option `statistics.interval.ms` says otherwise).
    pub fn buffered_records(&self) -> i64 {
        self.buffered_records.get()
    }

    /// Bytes of fetched records waiting in the partitions' librdkafka queues for their
    /// workers, as librdkafka's last statistics (every 2 s) gave them; 0 once the consumer
    /// stopped.
    pub fn buffered_bytes(&self) -> i64 {
        self.buffered_bytes.get()
    }

    /// Times the workers dropped what a record batch larger than their queue's share brought,
    /// over all topics (`kafka_dlq_queue_trims_total`).
    pub fn queue_trims(&self) -> u64 {
        self.total("kafka_dlq_queue_trims_total") as u64
    }

    /// Partitions assigned to this consumer now.
    pub fn partitions_assigned(&self) -> i64 {
        self.partitions_assigned.get()
    }

    /// Bytes held by dead-letter writes in flight now.
    pub fn dead_letter_bytes_in_flight(&self) -> i64 {
        self.dead_letter_bytes_in_flight.get()
    }

    /// Partitions waiting to retry a record now (share groups: records).
    pub fn partitions_in_backoff(&self) -> i64 {
        self.partitions_in_backoff.get()
    }

    /// Records that the worker of `partition` (`<topic>-<partition>`) died with `panic`: the
    /// partition stays assigned with nothing reading it and no offset stored past its last
    /// settled record, so [`health`](Self::health) fails from now on and the process should
    /// be restarted (its records are then consumed again from the committed offset).
    pub(crate) fn worker_died(&self, partition: &str, panic: &str) {
        self.dead_workers
            .lock()
            .expect("dead workers lock")
            .push(format!("the worker of {partition} died: {panic}"));
    }

    /// Live: `Ok` unless a partition's worker died; then [`Unhealthy`], naming each
    /// partition.
    pub fn health(&self) -> Result<(), Unhealthy> {
        let dead = self.dead_workers.lock().expect("dead workers lock");
        if dead.is_empty() {
            Ok(())
        } else {
            Err(Unhealthy {
                dead_workers: dead.clone(),
            })
        }
    }

    /// Ready: at least one partition assigned, a broker connection up, and nothing of
    /// [`not_ready`](Self::not_ready).
    pub fn is_ready(&self) -> bool {
        self.not_ready().is_empty()
    }

    /// Why the consumer is not ready, one line each; empty when it is: no partition
    /// assigned, no broker connection up, a connection the brokers refuse (wrong password,
    /// untrusted CA, …), a partition stopped at a batch that cannot be decoded.
    pub fn not_ready(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.partitions_assigned.get() == 0 {
            reasons.push("no partitions assigned".to_string());
        }
        if self.broker_up.get() != 1 {
            reasons.push("no broker reachable".to_string());
        }
        reasons.extend(
            self.not_ready
                .lock()
                .expect("not ready lock")
                .values()
                .cloned(),
        );
        reasons
    }

    /// Records that `subject` (`connection`, `<topic>-<partition>`) keeps the consumer from
    /// being ready, for `why`; replaces what it said before.
    pub(crate) fn set_not_ready(&self, subject: &str, why: String) {
        self.not_ready
            .lock()
            .expect("not ready lock")
            .insert(subject.to_string(), why);
    }

    /// `subject` no longer keeps the consumer from being ready; says whether it did.
    pub(crate) fn clear_not_ready(&self, subject: &str) -> bool {
        self.not_ready
            .lock()
            .expect("not ready lock")
            .remove(subject)
            .is_some()
    }

    /// Takes librdkafka's periodic statistics: broker reachability and per-partition lag.
    pub(crate) fn observe_statistics(&self, stats: &Statistics) {
        let up = stats
            .brokers
            .values()
            .any(|b| b.nodeid >= 0 && b.state == "UP");
        self.broker_up.set(i64::from(up));
        if up {
            self.clear_not_ready("connection");
        }
        self.consumer_lag.reset();
        let (mut buffered, mut bytes) = (0, 0_i64);
        for (topic, t) in &stats.topics {
            for (partition, p) in &t.partitions {
                if *partition >= 0 {
                    buffered += p.fetchq_cnt.max(0);
                    bytes = bytes.saturating_add(i64::try_from(p.fetchq_size).unwrap_or(i64::MAX));
                }
                if *partition >= 0 && p.consumer_lag >= 0 {
                    self.consumer_lag
                        .with_label_values(&[topic.as_str(), &partition.to_string()])
                        .set(p.consumer_lag);
                }
            }
        }
        self.buffered_records.set(buffered);
        self.buffered_bytes.set(bytes);
    }
}

/// Decrements a gauge when dropped: keeps "in backoff" right on every exit path.
pub(crate) struct GaugeGuard(IntGauge);

impl GaugeGuard {
    pub(crate) fn inc(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
