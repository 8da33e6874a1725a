//! `kafka-dlq run`: the HTTP sidecar.

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kafka_dlq::handler::BatchHandler;
use kafka_dlq::sidecar::{HttpBatchTarget, HttpTarget};
use kafka_dlq::{ConfigError, Consumer, ConsumerConfig};

use super::CliError;

/// Flags of `kafka-dlq run`. A flag left out keeps the library default.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    /// Consumer group id.
    #[arg(long, env = "KAFKA_GROUP_ID")]
    group_id: Option<String>,
    /// Topics to consume, comma-separated.
    #[arg(long, env = "KAFKA_TOPICS", value_delimiter = ',')]
    topics: Vec<String>,
    /// Where each record is POSTed (http://).
    #[arg(long, env = "TARGET_URL")]
    target_url: Option<String>,
    /// Retries of a transient failure before dead-lettering [default: 10].
    #[arg(long, env = "KAFKA_DLQ_MAX_RETRIES")]
    max_retries: Option<u32>,
    /// First retry delay in ms [default: 1000].
    #[arg(long, env = "KAFKA_DLQ_BACKOFF_INITIAL_MS")]
    backoff_initial_ms: Option<u64>,
    /// Cap on one retry delay in ms [default: 30000].
    #[arg(long, env = "KAFKA_DLQ_BACKOFF_MAX_MS")]
    backoff_max_ms: Option<u64>,
    /// Factor between retry delays [default: 2.0].
    #[arg(long, env = "KAFKA_DLQ_BACKOFF_MULTIPLIER")]
    backoff_multiplier: Option<f64>,
    /// Random spread of each delay, 0.0 to 1.0 [default: 0.2].
    #[arg(long, env = "KAFKA_DLQ_BACKOFF_JITTER")]
    backoff_jitter: Option<f64>,
    /// Dead-letter topic template; {topic} is the source topic [default: {topic}-dlt].
    #[arg(long, env = "KAFKA_DLQ_TOPIC")]
    dlq_topic: Option<String>,
    /// Dead-letter layout: `envelope` (JSON envelope as the value) or `spring` (the original
    /// value as the value, the metadata in Spring's kafka_dlt-* headers) [default: envelope].
    #[arg(long, env = "KAFKA_DLQ_FORMAT")]
    dlq_format: Option<kafka_dlq::dlq::DlqFormat>,
    /// Header holding the record id [default: none; <topic>-<partition>-<offset>].
    #[arg(long, env = "KAFKA_DLQ_ID_HEADER")]
    id_header: Option<String>,
    /// Fetched records that may wait per partition before fetching it stops [default: 10000].
    #[arg(long, env = "KAFKA_DLQ_MAX_BUFFERED_RECORDS")]
    max_buffered_records: Option<usize>,
    /// How long shutdown waits for in-flight requests, in ms [default: 30000].
    #[arg(long, env = "KAFKA_DLQ_SHUTDOWN_TIMEOUT_MS")]
    shutdown_timeout_ms: Option<u64>,
    /// Where a new group starts: earliest or latest [default: earliest].
    #[arg(long, env = "KAFKA_DLQ_AUTO_OFFSET_RESET")]
    auto_offset_reset: Option<String>,
    /// A raw librdkafka property KEY=VALUE, applied last (repeatable; the variable takes a
    /// comma-separated list).
    #[arg(
        long = "kafka-option",
        value_name = "KEY=VALUE",
        env = "KAFKA_OPTIONS",
        value_delimiter = ','
    )]
    kafka_options: Vec<String>,
    /// Timeout of one HTTP request in ms; a timeout is a transient failure.
    #[arg(long, env = "KAFKA_DLQ_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// Content-Type of the POSTed record value.
    #[arg(
        long,
        env = "KAFKA_DLQ_CONTENT_TYPE",
        default_value = "application/json"
    )]
    content_type: String,
    /// `partition`: one record at a time per partition; `key`: same key in order, different
    /// keys of a partition concurrently [default: partition].
    #[arg(long, env = "KAFKA_DLQ_ORDERING")]
    ordering: Option<kafka_dlq::config::Ordering>,
    /// The consumer group protocol: `classic` (cooperative-sticky assignor) or `consumer`
    /// (KIP-848, Kafka 4.0+) [default: classic].
    #[arg(long, env = "KAFKA_DLQ_GROUP_PROTOCOL")]
    group_protocol: Option<kafka_dlq::config::GroupProtocol>,
    /// With --ordering key: records of one partition in flight at once [default: 64].
    #[arg(long, env = "KAFKA_DLQ_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Records per POST: 1 posts each record's value; more posts a JSON array of records
    /// [default: 1].
    #[arg(long, env = "KAFKA_DLQ_BATCH_SIZE")]
    batch_size: Option<usize>,
    /// How long a batch waits for more records after its first, in ms [default: 100].
    #[arg(long, env = "KAFKA_DLQ_BATCH_LINGER_MS")]
    batch_linger_ms: Option<u64>,
    /// Share of transient failures in the window that opens the outage breaker; 0 turns it
    /// off [default: 0.5].
    #[arg(long, env = "KAFKA_DLQ_BREAKER_FAILURE_RATIO")]
    breaker_failure_ratio: Option<f64>,
    /// Fewer calls than this in the window never open the breaker [default: 20].
    #[arg(long, env = "KAFKA_DLQ_BREAKER_MIN_CALLS")]
    breaker_min_calls: Option<u32>,
    /// The breaker's sliding window in ms [default: 30000].
    #[arg(long, env = "KAFKA_DLQ_BREAKER_WINDOW_MS")]
    breaker_window_ms: Option<u64>,
    /// First wait before probing an open breaker, in ms, doubling [default: 1000].
    #[arg(long, env = "KAFKA_DLQ_BREAKER_PROBE_INITIAL_MS")]
    breaker_probe_initial_ms: Option<u64>,
    /// Cap on the wait between probes, in ms [default: 60000].
    #[arg(long, env = "KAFKA_DLQ_BREAKER_PROBE_MAX_MS")]
    breaker_probe_max_ms: Option<u64>,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, env = "KAFKA_DLQ_METRICS_ADDR", default_value = "0.0.0.0:9102")]
    metrics_addr: String,
    /// Also run the DLQ monitor on this consumer's dead-letter topics.
    #[arg(long, env = "KAFKA_DLQ_MONITOR")]
    monitor: bool,
    #[command(flatten)]
    alerts: super::monitor::AlertArgs,
}

impl RunArgs {
    /// The library configuration: defaults, overridden by every flag given.
    fn consumer_config(&self) -> Result<ConsumerConfig, ConfigError> {
        let mut c = ConsumerConfig::default();
        if let Some(v) = &self.brokers {
            c.brokers = v.clone();
        }
        if let Some(v) = &self.group_id {
            c.group_id = v.clone();
        }
        if !self.topics.is_empty() {
            c.topics = self.topics.iter().map(|t| t.trim().to_string()).collect();
        }
        if let Some(v) = self.max_retries {
            c.max_retries = v;
        }
        if let Some(v) = self.backoff_initial_ms {
            c.backoff_initial_ms = v;
        }
        if let Some(v) = self.backoff_max_ms {
            c.backoff_max_ms = v;
        }
        if let Some(v) = self.backoff_multiplier {
            c.backoff_multiplier = v;
        }
        if let Some(v) = self.backoff_jitter {
            c.backoff_jitter = v;
        }
        if let Some(v) = &self.dlq_topic {
            c.dlq_topic = v.clone();
        }
        if let Some(v) = self.dlq_format {
            c.dlq_format = v;
        }
        if let Some(v) = &self.id_header {
            c.id_header = Some(v.clone());
        }
        if let Some(v) = self.max_buffered_records {
            c.max_buffered_records = v;
        }
        if let Some(v) = self.shutdown_timeout_ms {
            c.shutdown_timeout_ms = v;
        }
        if let Some(v) = &self.auto_offset_reset {
            c.auto_offset_reset = v.clone();
        }
        if let Some(v) = self.ordering {
            c.ordering = v;
        }
        if let Some(v) = self.max_in_flight {
            c.max_in_flight = v;
        }
        if let Some(v) = self.group_protocol {
            c.group_protocol = v;
        }
        if let Some(v) = self.batch_size {
            c.batch_size = v;
        }
        if let Some(v) = self.batch_linger_ms {
            c.batch_linger_ms = v;
        }
        if let Some(v) = self.breaker_failure_ratio {
            c.breaker_failure_ratio = v;
        }
        if let Some(v) = self.breaker_min_calls {
            c.breaker_min_calls = v;
        }
        if let Some(v) = self.breaker_window_ms {
            c.breaker_window_ms = v;
        }
        if let Some(v) = self.breaker_probe_initial_ms {
            c.breaker_probe_initial_ms = v;
        }
        if let Some(v) = self.breaker_probe_max_ms {
            c.breaker_probe_max_ms = v;
        }
        c.librdkafka = super::parse_kafka_options(&self.kafka_options)?;
        c.validate()?;
        Ok(c)
    }
}

/// Everything `run` needs, checked, before anything connects.
pub struct Checked {
    config: ConsumerConfig,
    target: Target,
    addr: std::net::SocketAddr,
    monitor: Option<kafka_dlq::monitor::Monitor>,
}

/// One record per POST, or batches.
enum Target {
    Single(HttpTarget),
    Batch(HttpBatchTarget),
}

/// Checks every setting of `run`.
pub fn check(args: &RunArgs) -> Result<Checked, CliError> {
    let config = args.consumer_config()?;
    let url = args
        .target_url
        .as_deref()
        .ok_or_else(|| ConfigError::new("target_url", "", "is required"))?;
    let timeout = Duration::from_millis(args.request_timeout_ms);
    let target = if config.batch_size > 1 {
        Target::Batch(HttpBatchTarget::new(url, timeout)?)
    } else {
        Target::Single(HttpTarget::new(url, timeout, &args.content_type)?)
    };
    let addr: std::net::SocketAddr = args.metrics_addr.parse().map_err(|e| {
        ConfigError::new(
            "metrics_addr",
            &args.metrics_addr,
            format!("expected host:port ({e})"),
        )
    })?;
    let monitor = if args.monitor {
        let template = config.dlq_topic()?;
        let mut dlq_topics: Vec<String> = config
            .topics
            .iter()
            .map(|t| template.for_topic(t))
            .collect();
        dlq_topics.dedup();
        let monitor_config = args.alerts.monitor_config(&config.brokers, dlq_topics)?;
        Some(kafka_dlq::monitor::Monitor::new(monitor_config).map_err(super::monitor_error)?)
    } else {
        None
    };
    Ok(Checked {
        config,
        target,
        addr,
        monitor,
    })
}

/// Runs the sidecar until SIGINT or SIGTERM.
pub async fn run(args: RunArgs) -> Result<(), CliError> {
    let checked = check(&args)?;
    let url = args.target_url.as_deref().unwrap_or_default();
    tracing::info!(event = "sidecar_starting", target_url = %url, metrics_addr = %checked.addr,
        monitor = args.monitor, batch_size = checked.config.batch_size, config = ?checked.config);
    match checked.target {
        Target::Single(t) => serve(checked.config, t, checked.addr, checked.monitor).await,
        Target::Batch(t) => serve(checked.config, t, checked.addr, checked.monitor).await,
    }
}

async fn serve<H: BatchHandler>(
    config: ConsumerConfig,
    target: H,
    addr: std::net::SocketAddr,
    monitor: Option<kafka_dlq::monitor::Monitor>,
) -> Result<(), CliError> {
    let consumer = Consumer::new(config, target).map_err(|e| match e {
        kafka_dlq::ConsumerError::Config(c) => CliError::Config(c),
        other => CliError::Runtime(other.into()),
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-addr {addr}"))
        .map_err(CliError::Runtime)?;

    let stop = tokio_util::sync::CancellationToken::new();
    let server_stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kafka_dlq::server::serve(
        listener,
        consumer.metrics(),
        server_stop.clone().cancelled_owned(),
    ));
    let monitor = monitor.map(|m| {
        let m = m.with_breaker(consumer.breaker_state());
        tokio::spawn(m.run(stop.clone().cancelled_owned()))
    });
    let signal = {
        let stop = stop.clone();
        tokio::spawn(async move {
            super::shutdown_signal().await;
            stop.cancel();
        })
    };
    let result = consumer.run(stop.clone().cancelled_owned()).await;
    stop.cancel();
    signal.abort();
    if let Some(monitor) = monitor {
        let _ = monitor.await;
    }
    server_stop.cancel();
    let _ = server.await;
    result.context("consumer failed").map_err(CliError::Runtime)
}
