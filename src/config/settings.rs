//! Every setting of the consumer, declared once: its field in [`ConsumerConfig`] with its
//! doc, type and default, and, for the tuning settings, the flag and environment variable of
//! `kafka-dlq run` ([`ConsumerFlags`], whose help shows the same default). The TOML key is
//! the field's name (with `_ms` for a `Duration`, given in milliseconds there and in its flag
//! and variable), in the file that [`ConsumerConfig::from_file`] and `kafka-dlq --config`
//! read.

use std::time::Duration;

use super::{Consumption, GroupProtocol, KeyOrderAfterFailure, Ordering, ShareDlq};
use crate::dlq::DlqFormat;
use crate::kafka::ClientOptions;
use crate::retry_tier::RetryTiers;

/// Declares [`ConsumerConfig`], its `Default` and `Debug`, and [`ConsumerFlags`].
///
/// `fields` are settings without a flag of their own here (`kafka-dlq run` reads them its own
/// way); `flags` are settings with a flag (`--<name>`, `_` as `-`) and an environment
/// variable. A `Duration` flag says `ms "<key>" "<flag>"`: its key in the file and its flag,
/// both ending in `_ms`, in milliseconds. A flag ending in `switch "<value>"` means that value
/// when given without one (`--exactly-once` alone is `true`).
macro_rules! settings {
    (
        fields {
            $(
                $(#[doc = $fdoc:literal])*
                $fname:ident : $fty:ty = $fdefault:expr ;
            )*
        }
        flags {
            $(
                $(#[doc = $doc:literal])*
                $name:ident : $ty:ty = $default:expr $(, ms $key:literal $flag:literal)?,
                    env $env:literal $(, alias $alias:literal)? $(, switch $switch:literal)? ;
            )*
        }
    ) => {
        /// Everything the [`Consumer`](crate::consumer::Consumer) needs.
        ///
        /// Build it with [`ConsumerConfig::new`] and struct-update syntax for the rest, or
        /// load it with [`ConsumerConfig::from_file`]:
        /// ```
        /// # use kafka_dlq::ConsumerConfig;
        /// let config = ConsumerConfig {
        ///     max_retries: 3,
        ///     ..ConsumerConfig::new("localhost:9092", "deliveries", ["parcel-events"])
        /// };
        /// assert!(config.validate().is_ok());
        /// ```
        #[derive(Clone, serde::Deserialize, PartialEq)]
        #[serde(deny_unknown_fields, default)]
        pub struct ConsumerConfig {
            $(
                $(#[doc = $fdoc])*
                pub $fname: $fty,
            )*
            $(
                $(#[doc = $doc])*
                #[doc = ""]
                #[doc = concat!("Default `", stringify!($default), "`; flag `--",
                    key!($name $(, $flag)?), "`, environment `", $env, "`",
                    $(", key `", $key, "` in the file (milliseconds)",)? ".")]
                $( #[serde(rename = $key, with = "super::millis")] )?
                pub $name: $ty,
            )*
        }

        impl Default for ConsumerConfig {
            fn default() -> Self {
                Self {
                    $( $fname: $fdefault, )*
                    $( $name: $default, )*
                }
            }
        }

        impl std::fmt::Debug for ConsumerConfig {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("ConsumerConfig")
                    $( .field(stringify!($fname), &self.$fname) )*
                    $( .field(stringify!($name), &self.$name) )*
                    .finish()
            }
        }

        impl ConsumerConfig {
            /// The names of every setting, as in the config file (`backoff_initial_ms` for the
            /// field `backoff_initial`).
            pub const KEYS: &'static [&'static str] =
                &[$( stringify!($fname), )* $( key!($name $(, $key)?), )*];

            /// Sets the setting called `key` (as in the file) to `other`'s value of it.
            pub(super) fn set_from(&mut self, key: &str, other: ConsumerConfig) {
                $( if key == stringify!($fname) { self.$fname = other.$fname; return; } )*
                $( if key == key!($name $(, $key)?) { self.$name = other.$name; return; } )*
            }
        }

        /// The tuning settings as flags of `kafka-dlq run`, each with its environment
        /// variable and the library's default; see [`ConsumerConfig`] for what each does.
        /// With the `cli` feature.
        #[cfg(feature = "cli")]
        #[derive(Debug, Clone, clap::Args)]
        pub struct ConsumerFlags {
            $(
                $(#[doc = $doc])*
                #[arg(long $(= $flag, id = $key, value_name = "MS")?, env = $env, default_value_t = flag_value!($default $(, $key)?),
                    action = clap::ArgAction::Set $(, visible_alias = $alias)?
                    $(, num_args = 0..=1, default_missing_value = $switch)?)]
                pub $name: flag_type!($ty $(, $key)?),
            )*
        }

        #[cfg(feature = "cli")]
        impl ConsumerFlags {
            /// Sets each of these settings of `config`.
            pub fn apply(self, config: &mut ConsumerConfig) {
                $( config.$name = setting_value!(self.$name $(, $key)?); )*
            }
        }
    };
}

/// A setting's name in the file and in errors: its field's name, or the `ms` key given.
macro_rules! key {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:ident, $key:literal) => {
        $key
    };
}

/// The type of a setting's flag: the setting's own, or milliseconds for a `Duration`.
#[cfg(feature = "cli")]
macro_rules! flag_type {
    ($ty:ty) => {
        $ty
    };
    ($ty:ty, $key:literal) => {
        u64
    };
}

/// A setting's value as its flag takes it.
#[cfg(feature = "cli")]
macro_rules! flag_value {
    ($value:expr) => {
        $value
    };
    ($value:expr, $key:literal) => {
        u64::try_from($value.as_millis()).unwrap_or(u64::MAX)
    };
}

/// A flag's value as the setting takes it.
#[cfg(feature = "cli")]
macro_rules! setting_value {
    ($value:expr) => {
        $value
    };
    ($value:expr, $key:literal) => {
        std::time::Duration::from_millis($value)
    };
}

settings! {
    fields {
        /// Bootstrap servers, comma-separated `host:port`. Required.
        brokers: String = String::new();
        /// Consumer group id. Required.
        group_id: String = String::new();
        /// Topics to consume. At least one.
        topics: Vec<String> = Vec::new();
        /// A header holding the record id. Default none: the id is
        /// `<topic>-<partition>-<offset>`.
        id_header: Option<String> = None;
        /// Raw librdkafka properties, applied last to the consumer and the dead-letter
        /// producer. Those that would break the guarantees are refused
        /// ([`refuse_raw_option`](super::refuse_raw_option)). `Debug` shows their keys only.
        librdkafka: ClientOptions = ClientOptions::new();
        /// Run every record in spans of OpenTelemetry's messaging conventions: a CONSUMER
        /// `process {topic}` span (a child of the record's W3C `traceparent` with the `otel`
        /// feature), a `handle` span per handler call in it and a PRODUCER `send {topic}` span
        /// per dead-letter or retry write (docs/operating.md, Tracing). Default off: spans per
        /// record cost the hot path. `kafka-dlq run --otlp-endpoint` turns it on.
        trace_records: bool = false;
    }
    flags {
        /// Dead-letter topic name; `{topic}` is replaced by the source topic (Spring Kafka
        /// 3.3+'s `-dlt` suffix by default).
        dlq_topic: String = String::from("{topic}-dlt"), env "KAFKA_DLQ_TOPIC";
        /// How dead letters are laid out: `envelope` (the JSON envelope as the value) or
        /// `spring` (the original value as the value, the metadata in headers, as Spring
        /// Kafka's `DeadLetterPublishingRecoverer` writes them).
        dlq_format: DlqFormat = DlqFormat::Envelope, env "KAFKA_DLQ_FORMAT";
        /// Whether the consumer creates a dead-letter topic that does not exist when it
        /// starts: with as many partitions as its source topic (the broker's default when the
        /// source does not exist either) and the broker's default replication, as it creates
        /// retry topics. `false`: it refuses to start, naming the topic
        /// ([`ConsumerError::DlqTopicMissing`](crate::ConsumerError::DlqTopicMissing)). Either
        /// way a topic it cannot create stops the start with that error.
        create_dlq_topics: bool = true, env "KAFKA_DLQ_CREATE_DLQ_TOPICS";
        /// The `retention.ms` of the dead-letter and redrive topics the consumer creates: `-1`
        /// keeps dead letters until they are replayed or deleted on purpose (a broker's default,
        /// commonly 7 days, would delete them unseen). At start the consumer warns
        /// (`dlq_retention_finite`) for each dead-letter topic that keeps records for a
        /// limited time, whoever created it.
        dlq_retention_ms: i64 = -1, env "KAFKA_DLQ_DLQ_RETENTION_MS";
        /// Retries of a transient failure before the record is dead-lettered (or, with
        /// `retry_topic_delays_ms`, sent to its next retry topic), in each stage.
        max_retries: u32 = 10, env "KAFKA_DLQ_MAX_RETRIES";
        /// Retry topics, off when empty: the delay of each tier in ms, e.g. `[60000, 600000]`
        /// (flag `--retry-topic-delays 60000,600000`). A record whose in-process retries are
        /// used up goes to `<topic>-retry-0`, is handled again from there once its delay has
        /// passed, then `-retry-1`, …, and after the last to the dead-letter topic; its
        /// partition goes on meanwhile (see `kafka_dlq::retry_tier`).
        retry_topic_delays_ms: RetryTiers = RetryTiers::default(), env "KAFKA_DLQ_RETRY_TOPIC_DELAYS_MS", alias "retry-topic-delays";
        /// First retry delay.
        backoff_initial: Duration = Duration::from_secs(1), ms "backoff_initial_ms" "backoff-initial-ms",
            env "KAFKA_DLQ_BACKOFF_INITIAL_MS";
        /// Each retry delay is the previous one times this.
        backoff_multiplier: f64 = 2.0, env "KAFKA_DLQ_BACKOFF_MULTIPLIER";
        /// Cap on one retry delay.
        backoff_max: Duration = Duration::from_secs(30), ms "backoff_max_ms" "backoff-max-ms",
            env "KAFKA_DLQ_BACKOFF_MAX_MS";
        /// Each delay is multiplied by a random factor in `[1 − jitter, 1 + jitter]` (then
        /// capped), 0.0 to 1.0.
        backoff_jitter: f64 = 0.2, env "KAFKA_DLQ_BACKOFF_JITTER";
        /// Fetched records that may wait in each partition's librdkafka queue
        /// (`queued.min.messages`): librdkafka stops fetching a partition while this many
        /// wait. With `max_buffered_bytes` (which bounds the bytes for the whole consumer),
        /// the bound on memory when the handler is slower than the broker.
        max_buffered_records: usize = 10_000, env "KAFKA_DLQ_MAX_BUFFERED_RECORDS";
        /// Bytes of fetched records the consumer holds before its handler takes them, for all
        /// its partitions together, whatever their number: half in librdkafka's queues, each
        /// partition's an equal share of it by the partitions its topics have when the
        /// consumer starts (`queued.max.messages.kbytes`; at least 1 KiB), and at most a share
        /// more in each worker's hands, beyond the record it is settling (a record batch
        /// larger than two shares is dropped and fetched again later, see the consumer's
        /// docs). 1 MiB to 4 GiB.
        max_buffered_bytes: usize = 32 << 20, env "KAFKA_DLQ_MAX_BUFFERED_BYTES";
        /// How long shutdown waits for in-flight handlers before committing.
        shutdown_timeout: Duration = Duration::from_secs(30), ms "shutdown_timeout_ms" "shutdown-timeout-ms",
            env "KAFKA_DLQ_SHUTDOWN_TIMEOUT_MS";
        /// Where a group with no committed offset starts: `earliest` or `latest`.
        auto_offset_reset: String = String::from("earliest"), env "KAFKA_DLQ_AUTO_OFFSET_RESET";
        /// `partition`: records of a partition are handled one after another, in offset
        /// order. `key`: records with the same key keep their order, but records of different
        /// keys in one partition are handled concurrently, up to `max_in_flight` at a time;
        /// offsets are still committed only up to the lowest unsettled record. Needs
        /// `batch_size` 1.
        ordering: Ordering = Ordering::Partition, env "KAFKA_DLQ_ORDERING";
        /// `continue`: when a record leaves for the dead-letter topic or a retry tier, the
        /// later records of its key go on to the handler. `park`: they wait, kept in the
        /// group's park log (`<topic>-park-<group>`), until it is resolved (its dead letter
        /// redriven and handled, its retry handled, or discarded), then go to the handler in
        /// their order. See `docs/key-order-after-failure.md`.
        key_order_after_failure: KeyOrderAfterFailure = KeyOrderAfterFailure::Continue,
            env "KAFKA_DLQ_KEY_ORDER_AFTER_FAILURE";
        /// With `key_order_after_failure = "park"`: how long a key may wait behind a record
        /// that left; then its parked records follow that record to the dead-letter topic,
        /// in order, each with kind `parked` and a message naming it, and the key's newer
        /// records go on. 0: no limit.
        park_max_age: Duration = Duration::ZERO, ms "park_max_age_ms" "park-max-age-ms",
            env "KAFKA_DLQ_PARK_MAX_AGE_MS";
        /// With `ordering = "key"`: records of one partition in the handler at once. With
        /// `consumption = "share"`: records of one member in the handler at once, out of
        /// those its fetch acquired (`share_acquire_records`).
        max_in_flight: usize = 64, env "KAFKA_DLQ_MAX_IN_FLIGHT";
        /// With `consumption = "share"`: records one fetch acquires (its `max_poll_records`,
        /// a hard limit), at least `max_in_flight`. They are handed to the handler
        /// `max_in_flight` at a time, the locks of those still waiting renewed; the next
        /// fetch waits until every one is acknowledged, and carries their ACCEPTs. 1 to
        /// 10000.
        share_acquire_records: usize = 16, env "KAFKA_DLQ_SHARE_ACQUIRE_RECORDS";
        /// Most records given to a `BatchHandler` call; the sidecar posts a JSON array of
        /// records when it is over 1 (a `Handler` always gets one record at a time).
        batch_size: usize = 1, env "KAFKA_DLQ_BATCH_SIZE";
        /// How long a batch waits for more records after its first.
        batch_linger: Duration = Duration::from_millis(100), ms "batch_linger_ms" "batch-linger-ms",
            env "KAFKA_DLQ_BATCH_LINGER_MS";
        /// The outage breaker opens when at least this share of the calls in its window
        /// failed transiently; 0 turns the breaker off.
        breaker_failure_ratio: f64 = 0.5, env "KAFKA_DLQ_BREAKER_FAILURE_RATIO";
        /// Fewer calls than this in the window never open the breaker.
        breaker_min_calls: u32 = 20, env "KAFKA_DLQ_BREAKER_MIN_CALLS";
        /// The breaker's sliding window.
        breaker_window: Duration = Duration::from_secs(30), ms "breaker_window_ms" "breaker-window-ms",
            env "KAFKA_DLQ_BREAKER_WINDOW_MS";
        /// First wait before probing an open breaker, doubling per failed probe.
        breaker_probe_initial: Duration = Duration::from_secs(1), ms "breaker_probe_initial_ms" "breaker-probe-initial-ms",
            env "KAFKA_DLQ_BREAKER_PROBE_INITIAL_MS";
        /// Cap on the wait between probes.
        breaker_probe_max: Duration = Duration::from_secs(60), ms "breaker_probe_max_ms" "breaker-probe-max-ms",
            env "KAFKA_DLQ_BREAKER_PROBE_MAX_MS";
        /// The consumer group protocol: `classic` (with the `cooperative-sticky` assignor)
        /// or `consumer` (KIP-848, Kafka 4.0+).
        group_protocol: GroupProtocol = GroupProtocol::Classic, env "KAFKA_DLQ_GROUP_PROTOCOL";
        /// `group`: join the consumer group `group_id` ([`crate::Consumer`]). `share`: join
        /// the share group `group_id` (KIP-932, Apache Kafka 4.2+; a build with the `share`
        /// feature, `kafka_dlq::consumer::share`): its members share every partition, each
        /// record is acknowledged on its own (ACCEPT once handled or dead-lettered, RELEASE
        /// for a redelivery when its in-process retries are used up), in no order; up to
        /// `max_in_flight` records of one fetch are handled at once. `kafka-dlq run
        /// --share-group NAME` sets both.
        consumption: Consumption = Consumption::Group, env "KAFKA_DLQ_CONSUMPTION";
        /// With `consumption = "share"`: `ours` writes each dead letter to `dlq_topic` (with
        /// its error, kind, calls and delivery count) and ACCEPTs the record once the
        /// dead-letter topic acknowledged it; `broker` REJECTs it for the broker's own
        /// dead-letter queue (KIP-1191, Kafka 4.4, the group's
        /// `errors.deadletterqueue.topic.name`), which keeps no error.
        share_dlq: ShareDlq = ShareDlq::Ours, env "KAFKA_DLQ_SHARE_DLQ";
        /// Exactly-once read-process-write: a record's outputs (a
        /// [`TransactionalHandler`](crate::TransactionalHandler)'s), its dead letter or retry
        /// record, and its offset are committed in one Kafka transaction, on one
        /// transactional producer per consumer fenced by the group's generation (KIP-447);
        /// readers with `isolation.level = read_committed` see each record's effect once.
        /// Records of a partition one at a time (`ordering = "partition"`, `batch_size` 1);
        /// not with `consumption = "share"`. See `docs/exactly-once.md`.
        exactly_once: bool = false, env "KAFKA_DLQ_EXACTLY_ONCE", switch "true";
        /// With `exactly_once`: the most records one transaction holds. Transactions are
        /// sized by time (`transaction_interval_ms`, as Kafka Streams' `commit.interval.ms`);
        /// this only bounds one at a rate beyond a million records a second.
        transaction_records: usize = 100_000, env "KAFKA_DLQ_TRANSACTION_RECORDS";
        /// With `exactly_once`: a transaction commits this long after its first record
        /// settled; the latency a `read_committed` reader sees on top of the handler's. Each
        /// commit costs a few round trips to the coordinator, so shorter means slower. 1 ms
        /// to 60 s.
        transaction_interval: Duration = Duration::from_millis(100), ms "transaction_interval_ms" "transaction-interval-ms",
            env "KAFKA_DLQ_TRANSACTION_INTERVAL_MS";
    }
}
