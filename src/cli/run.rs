//! `kafka-dlq run`: the HTTP sidecar.

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kafka_dlq::config::ConsumerFlags;
use kafka_dlq::handler::BatchHandler;
use kafka_dlq::sidecar::{HttpBatchTarget, HttpTarget};
use kafka_dlq::{ConfigError, Consumer, ConsumerConfig};

use super::CliError;

/// Flags of `kafka-dlq run`: the consumer's (the required ones here, the tuning ones in
/// [`ConsumerFlags`], declared with the library's settings) and the sidecar's.
#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    /// Consumer group id.
    #[arg(long, env = "KAFKA_GROUP_ID")]
    group_id: Option<String>,
    /// Join this share group (KIP-932, Apache Kafka 4.2+) instead of a consumer group: the
    /// same as --consumption share with this group id (a build with the `share` feature).
    #[arg(long, env = "KAFKA_SHARE_GROUP", conflicts_with = "group_id")]
    share_group: Option<String>,
    /// Topics to consume, comma-separated.
    #[arg(long, env = "KAFKA_TOPICS", value_delimiter = ',')]
    topics: Vec<String>,
    /// Where each record is POSTed (http:// or https://).
    #[arg(long, env = "TARGET_URL")]
    target_url: Option<String>,
    /// An https:// target: a PEM file of the CAs that sign its certificate, trusted instead
    /// of the system's.
    #[arg(long, env = "KAFKA_DLQ_TARGET_CA_LOCATION", value_name = "FILE")]
    target_ca_location: Option<std::path::PathBuf>,
    /// An https:// target that asks for a client certificate: the certificate (PEM).
    #[arg(
        long,
        env = "KAFKA_DLQ_TARGET_CERTIFICATE_LOCATION",
        value_name = "FILE"
    )]
    target_certificate_location: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM, not encrypted).
    #[arg(long, env = "KAFKA_DLQ_TARGET_KEY_LOCATION", value_name = "FILE")]
    target_key_location: Option<std::path::PathBuf>,
    /// Send the record's own Kafka headers to the target (`X-Kafka-Headers`; in batch mode each
    /// item's `headers`); `false` sends only the id, coordinates, key and trace context.
    #[arg(long, env = "KAFKA_DLQ_FORWARD_HEADERS", default_value_t = true, action = clap::ArgAction::Set)]
    forward_headers: bool,
    /// Reach the target through this HTTP proxy (http://host:port). Without it the sidecar
    /// talks to the target directly, whatever HTTP_PROXY or HTTPS_PROXY say.
    #[arg(long, env = "KAFKA_DLQ_TARGET_PROXY")]
    target_proxy: Option<String>,
    /// Header holding the record id [default: none; <topic>-<partition>-<offset>].
    #[arg(long, env = "KAFKA_DLQ_ID_HEADER")]
    id_header: Option<String>,
    #[command(flatten)]
    consumer: ConsumerFlags,
    #[command(flatten)]
    connection: super::connection::ConnectionArgs,
    #[command(flatten)]
    schemas: super::schema_registry::SchemaRegistryArgs,
    /// With --exactly-once: the topics a target's answer may produce records to,
    /// comma-separated (`{"produce": [...]}`; see docs/sidecar.md). An answer naming another
    /// topic is a permanent failure of its record.
    #[arg(long, env = "KAFKA_DLQ_OUTPUT_TOPICS", value_delimiter = ',')]
    output_topics: Vec<String>,
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
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, env = "KAFKA_DLQ_METRICS_ADDR", default_value = "0.0.0.0:9102")]
    metrics_addr: String,
    /// Export a span per handler call over OTLP/HTTP to this URL (e.g.
    /// http://collector:4318/v1/traces), each a child of its record's W3C traceparent (needs
    /// a build with the `otel` feature).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Also run the DLQ monitor on this consumer's dead-letter topics.
    #[arg(long, env = "KAFKA_DLQ_MONITOR")]
    monitor: bool,
    #[command(flatten)]
    alerts: super::monitor::AlertArgs,
}

impl RunArgs {
    /// Its connection settings.
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        &mut self.connection
    }

    /// Where spans are exported, when they are.
    pub(super) fn otlp_endpoint(&self) -> Option<&str> {
        self.otlp_endpoint.as_deref()
    }

    /// The library configuration: the flags (each defaulting to the library's default).
    fn consumer_config(&self) -> Result<ConsumerConfig, ConfigError> {
        let mut c = ConsumerConfig {
            brokers: self.brokers.clone().unwrap_or_default(),
            group_id: self.group_id.clone().unwrap_or_default(),
            topics: self.topics.iter().map(|t| t.trim().to_string()).collect(),
            id_header: self.id_header.clone(),
            librdkafka: self.connection.client_options()?,
            trace_records: self.otlp_endpoint.is_some(),
            ..ConsumerConfig::default()
        };
        self.consumer.clone().apply(&mut c);
        if let Some(group) = &self.share_group {
            c.group_id = group.clone();
            c.consumption = kafka_dlq::config::Consumption::Share;
        }
        c.validate()?;
        Ok(c)
    }
}

/// Everything `run` needs, checked, before anything connects.
pub(super) struct Checked {
    config: ConsumerConfig,
    target: Target,
    addr: std::net::SocketAddr,
    monitor: Option<kafka_dlq::monitor::Monitor>,
}

impl Checked {
    /// The consumer's settings.
    pub(super) fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// The monitor it runs beside it, if it does.
    pub(super) fn monitor(&self) -> Option<&kafka_dlq::monitor::Monitor> {
        self.monitor.as_ref()
    }
}

/// One record per POST, or batches.
enum Target {
    Single(HttpTarget),
    Batch(HttpBatchTarget),
}

/// Checks every setting of `run`.
pub(super) fn check(args: &RunArgs) -> Result<Checked, CliError> {
    let config = args.consumer_config()?;
    let url = args
        .target_url
        .as_deref()
        .ok_or_else(|| ConfigError::new("target_url", "", "is required"))?;
    let timeout = Duration::from_millis(args.request_timeout_ms);
    let output_topics: Vec<String> = args
        .output_topics
        .iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if !output_topics.is_empty() && !config.exactly_once {
        return Err(ConfigError::new(
            "output_topics",
            output_topics.join(","),
            "is only for --exactly-once (exactly_once = true): without it an answer's records are not produced",
        )
        .into());
    }
    let template = config.dlq_topic()?;
    for topic in &output_topics {
        kafka_dlq::dlq::check_topic_name(topic)
            .map_err(|why| ConfigError::new("output_topics", topic, why))?;
        // An output into a topic the consumer reads loops; into a DLT, a retry topic or the
        // state topics it forges what the tools trust.
        let reason = if config.topics.contains(topic) {
            Some("is a topic this service consumes: its outputs would come back to it".to_string())
        } else {
            let state = kafka_dlq::state::StateTopics::default();
            kafka_dlq::replay::destination::refusal(topic, "", &template, &state)
        };
        if let Some(why) = reason {
            return Err(ConfigError::new("output_topics", topic, why).into());
        }
    }
    let proxy = args.target_proxy.as_deref();
    let tls = kafka_dlq::sidecar::TargetTls {
        ca_location: args.target_ca_location.clone(),
        certificate_location: args.target_certificate_location.clone(),
        key_location: args.target_key_location.clone(),
    };
    let decoding = args.schemas.decoding()?;
    let target = if config.batch_size > 1 {
        let mut target = HttpBatchTarget::new(url, timeout)?.with_tls(tls)?;
        if !args.forward_headers {
            target = target.without_record_headers();
        }
        if let Some(decoding) = decoding {
            target = target.decoding(decoding);
        }
        Target::Batch(match proxy {
            Some(proxy) => target.through_proxy(proxy)?,
            None => target,
        })
    } else {
        let mut target = HttpTarget::new(url, timeout, &args.content_type)?.with_tls(tls)?;
        if config.exactly_once {
            target = target.producing_to(output_topics);
        }
        if !args.forward_headers {
            target = target.without_record_headers();
        }
        if let Some(decoding) = decoding {
            target = target.decoding(decoding);
        }
        Target::Single(match proxy {
            Some(proxy) => target.through_proxy(proxy)?,
            None => target,
        })
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
        let monitor_config =
            args.alerts
                .monitor_config(&config.brokers, dlq_topics, config.librdkafka.clone())?;
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
pub(super) async fn run(args: RunArgs) -> Result<(), CliError> {
    // Caught from here on, so a signal during start-up is a clean stop too.
    let signal = super::shutdown_signal();
    let checked = check(&args)?;
    let url =
        kafka_dlq::config::shown_url::redacted(args.target_url.as_deref().unwrap_or_default());
    tracing::info!(event = "sidecar_starting", target_url = %url, metrics_addr = %checked.addr,
        monitor = args.monitor, batch_size = checked.config.batch_size, config = ?checked.config);
    let outputs: Vec<String> = args
        .output_topics
        .iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    check_outputs_exist(&checked.config, &outputs).await?;
    match checked.target {
        Target::Single(t) => serve(checked.config, t, checked.addr, checked.monitor, signal).await,
        Target::Batch(t) => serve(checked.config, t, checked.addr, checked.monitor, signal).await,
    }
}

/// Refuses to start when an output topic does not exist: a typo in `--output-topics` would
/// otherwise be found at the first answer that names it (its record dead-lettered, refused).
async fn check_outputs_exist(config: &ConsumerConfig, outputs: &[String]) -> Result<(), CliError> {
    for topic in outputs {
        let (brokers, options, t) = (
            config.brokers.clone(),
            config.librdkafka.clone(),
            topic.clone(),
        );
        let found = tokio::task::spawn_blocking(move || {
            kafka_dlq::dlq_reader::check_exists(&brokers, &options, &t)
        })
        .await
        .expect("metadata task");
        match found {
            Ok(()) => {}
            Err(e) if kafka_dlq::dlq_reader::is_unknown_topic(&e) => {
                return Err(ConfigError::new(
                    "output_topics",
                    topic,
                    "does not exist on the cluster (or this principal may not describe it): create it first",
                )
                .into())
            }
            Err(e) => {
                return Err(CliError::Runtime(anyhow::anyhow!(
                    "cannot look up the output topic `{topic}`: {e}"
                )))
            }
        }
    }
    Ok(())
}

async fn serve<H: BatchHandler>(
    config: ConsumerConfig,
    target: H,
    addr: std::net::SocketAddr,
    monitor: Option<kafka_dlq::monitor::Monitor>,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), CliError> {
    let shutdown_timeout = config.shutdown_timeout;
    let consumer = Member::new(config, target).map_err(|e| match e {
        kafka_dlq::ConsumerError::Config(c) => CliError::Config(c),
        other => CliError::Runtime(other.into()),
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-addr {addr}"))
        .map_err(CliError::Runtime)?;

    let stop = tokio_util::sync::CancellationToken::new();
    // The metrics endpoint serves until the consumer has stopped; the process ends within the
    // shutdown timeout of the signal whatever the endpoint's HTTP clients do.
    let stopping_since = tokio::spawn({
        let stop = stop.clone();
        async move {
            stop.cancelled().await;
            tokio::time::Instant::now()
        }
    });
    let server_stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kafka_dlq::server::serve(
        listener,
        consumer.metrics(),
        server_stop.clone().cancelled_owned(),
        shutdown_timeout,
    ));
    let monitor = monitor.map(|m| {
        let m = m.with_breaker(consumer.breaker_state());
        tokio::spawn(m.run(stop.clone().cancelled_owned()))
    });
    let signal = {
        let stop = stop.clone();
        tokio::spawn(async move {
            signal.await;
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
    let deadline = stopping_since
        .await
        .unwrap_or_else(|_| tokio::time::Instant::now())
        + shutdown_timeout;
    if tokio::time::timeout_at(deadline, server).await.is_err() {
        tracing::warn!(
            event = "metrics_server_drain_timeout",
            "the shutdown timeout passed with a metrics request in progress; exiting without it"
        );
    }
    result.context("consumer failed").map_err(CliError::Runtime)
}

/// A member of a consumer group or of a share group (`consumption`).
enum Member<H: BatchHandler> {
    Group(Consumer<H>),
    #[cfg(feature = "share")]
    Share(kafka_dlq::consumer::ShareConsumer<H>),
}

impl<H: BatchHandler> Member<H> {
    fn new(config: ConsumerConfig, handler: H) -> Result<Self, kafka_dlq::ConsumerError> {
        if config.consumption == kafka_dlq::config::Consumption::Share {
            #[cfg(feature = "share")]
            return Ok(Member::Share(kafka_dlq::consumer::ShareConsumer::new(
                config, handler,
            )?));
            #[cfg(not(feature = "share"))]
            return Err(ConfigError::new(
                "consumption",
                "share",
                "this kafka-dlq was built without share groups: build it with --features cli,share",
            )
            .into());
        }
        Ok(Member::Group(Consumer::new(config, handler)?))
    }

    fn metrics(&self) -> kafka_dlq::metrics::Metrics {
        match self {
            Member::Group(c) => c.metrics(),
            #[cfg(feature = "share")]
            Member::Share(c) => c.metrics(),
        }
    }

    fn breaker_state(&self) -> tokio::sync::watch::Receiver<kafka_dlq::breaker::BreakerState> {
        match self {
            Member::Group(c) => c.breaker_state(),
            #[cfg(feature = "share")]
            Member::Share(c) => c.breaker_state(),
        }
    }

    async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), kafka_dlq::ConsumerError> {
        match self {
            Member::Group(c) => c.run(shutdown).await,
            #[cfg(feature = "share")]
            Member::Share(c) => c.run(shutdown).await,
        }
    }
}
