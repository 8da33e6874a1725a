//! `kafka-dlq monitor`: watch DLQ topics and alert in Slack; its flags are shared with
//! `kafka-dlq run --monitor`.

use std::path::PathBuf;

use clap::Args;
use kafka_dlq::monitor::{Monitor, MonitorConfig, Secret, SlackTarget};
use kafka_dlq::ConfigError;

use super::CliError;

/// Flags of `kafka-dlq monitor`.
#[derive(Debug, Args)]
pub(super) struct MonitorArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    /// Dead-letter topics to watch, comma-separated.
    #[arg(long, env = "KAFKA_DLQ_TOPICS", value_delimiter = ',')]
    dlq_topics: Vec<String>,
    #[command(flatten)]
    alerts: AlertArgs,
    #[command(flatten)]
    connection: super::connection::ConnectionArgs,
}

impl MonitorArgs {
    /// Its connection settings.
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        &mut self.connection
    }
}

/// Where Slack messages go: an incoming webhook, or a bot token and a channel.
#[derive(Debug, Args)]
pub(super) struct SlackArgs {
    /// Slack incoming webhook URL (secret: never logged).
    #[arg(long, env = "SLACK_WEBHOOK_URL", hide_env_values = true)]
    slack_webhook_url: Option<String>,
    /// A file holding the Slack webhook URL.
    #[arg(long, env = "SLACK_WEBHOOK_URL_FILE")]
    slack_webhook_url_file: Option<PathBuf>,
    /// Slack bot token for chat.postMessage (secret: never logged).
    #[arg(long, env = "SLACK_BOT_TOKEN", hide_env_values = true)]
    slack_token: Option<String>,
    /// A file holding the Slack bot token.
    #[arg(long, env = "SLACK_BOT_TOKEN_FILE")]
    slack_token_file: Option<PathBuf>,
    /// Slack channel for the bot token.
    #[arg(long, env = "SLACK_CHANNEL")]
    slack_channel: Option<String>,
    /// Slack Web API base URL.
    #[arg(long, env = "SLACK_API_URL", default_value = "https://slack.com/api")]
    slack_api_url: String,
}

impl SlackArgs {
    /// The target they name (the log when none).
    pub(super) fn target(&self) -> Result<SlackTarget, ConfigError> {
        let webhook = secret(
            &self.slack_webhook_url,
            &self.slack_webhook_url_file,
            "slack_webhook_url",
        )?;
        let token = secret(&self.slack_token, &self.slack_token_file, "slack_token")?;
        Ok(match (webhook, token) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "slack_token",
                    "<redacted>",
                    "set either a webhook URL or a bot token, not both",
                ))
            }
            (Some(url), None) => SlackTarget::Webhook { url },
            (None, Some(token)) => SlackTarget::WebApi {
                token,
                channel: self.slack_channel.clone().unwrap_or_default(),
                api_url: self.slack_api_url.clone(),
            },
            (None, None) => SlackTarget::Log,
        })
    }
}

/// Where and how alerts are sent.
#[derive(Debug, Args)]
pub(super) struct AlertArgs {
    #[command(flatten)]
    slack: SlackArgs,
    /// How long new dead letters are gathered into one alert, in ms.
    #[arg(long, env = "KAFKA_DLQ_WINDOW_MS", default_value_t = 30_000)]
    window_ms: u64,
    /// Least time between two increase alerts, in ms.
    #[arg(long, env = "KAFKA_DLQ_MIN_INTERVAL_MS", default_value_t = 60_000)]
    min_interval_ms: u64,
    /// How often the outstanding volume is counted, in ms.
    #[arg(long, env = "KAFKA_DLQ_CHECK_INTERVAL_MS", default_value_t = 10_000)]
    check_interval_ms: u64,
    /// The monitor's consumer group.
    #[arg(
        long,
        env = "KAFKA_DLQ_MONITOR_GROUP_ID",
        default_value = "kafka-dlq-monitor"
    )]
    monitor_group_id: String,
    /// Put a few payloads in alerts (they may hold personal data).
    #[arg(long, env = "KAFKA_DLQ_INCLUDE_PAYLOADS")]
    include_payloads: bool,
    /// The runbook an alert's button links to (each alert to its section).
    #[arg(long, env = "KAFKA_DLQ_RUNBOOK_URL", default_value = kafka_dlq::monitor::blocks::DEFAULT_RUNBOOK)]
    runbook_url: String,
    /// A page of your own for a DLQ topic, `{topic}` standing for it (a Redpanda Console or
    /// Grafana link): an increase alert gets an "Open <topic>" button per DLQ topic.
    #[arg(long, env = "KAFKA_DLQ_TOPIC_LINK")]
    topic_link: Option<String>,
    /// The kafka-dlq console's address (`kafka-dlq console`, with its path prefix): alerts
    /// link to it, each top error to the console filtered to its cause.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_URL")]
    console_url: Option<String>,
    /// The alert scope: alert on and count only the dead letters this filter expression
    /// keeps (CEL, as `dlq list --where`; docs/tools.md "Filter expressions"), e.g.
    /// `group == 'billing' && kind != 'deserialization'`. Several monitors with different
    /// scopes (and groups) can watch one DLT.
    #[arg(long, env = "KAFKA_DLQ_ALERT_WHERE", value_name = "EXPRESSION")]
    alert_where: Option<String>,
    /// Where the replay positions and the console's and `dlq replay`'s actions are kept:
    /// dead letters replayed, discarded or sent by a filtered replay are not counted as
    /// outstanding.
    #[command(flatten)]
    state: super::state::StateArgs,
}

fn secret(
    value: &Option<String>,
    file: &Option<PathBuf>,
    key: &str,
) -> Result<Option<Secret>, ConfigError> {
    let text = kafka_dlq::config::secret_setting(key, value.as_deref(), file.as_deref())?;
    Ok(text.map(|s| Secret::new(s.trim())))
}

impl AlertArgs {
    /// `--alert-where` as a filter; an expression that does not compile, or reads `decoded`
    /// (the monitor decodes nothing), is an error naming the setting and the column.
    fn scope(&self) -> Result<Option<kafka_dlq::dlq_reader::Filter>, ConfigError> {
        let Some(text) = self.alert_where.as_deref().filter(|t| !t.trim().is_empty()) else {
            return Ok(None);
        };
        let expression = kafka_dlq::dlq_reader::Expression::compile(text)
            .map_err(|e| ConfigError::new("alert_where", text, e))?;
        if expression.reads_decoded() {
            return Err(ConfigError::new(
                "alert_where",
                text,
                "the monitor decodes nothing, so `decoded` would be null",
            ));
        }
        Ok(Some(kafka_dlq::dlq_reader::Filter {
            where_: Some(expression),
            ..Default::default()
        }))
    }

    /// The monitor settings for `dlq_topics` on `brokers`, its clients with `librdkafka`.
    pub(super) fn monitor_config(
        &self,
        brokers: &str,
        dlq_topics: Vec<String>,
        librdkafka: kafka_dlq::kafka::ClientOptions,
    ) -> Result<MonitorConfig, ConfigError> {
        let slack = self.slack.target()?;
        let config = MonitorConfig {
            group_id: self.monitor_group_id.clone(),
            window_ms: self.window_ms,
            min_interval_ms: self.min_interval_ms,
            check_interval_ms: self.check_interval_ms,
            include_payloads: self.include_payloads,
            slack,
            links: kafka_dlq::monitor::Links {
                runbook: self.runbook_url.clone(),
                topic_page: self.topic_link.clone(),
                console: self.console_url.clone(),
            },
            librdkafka,
            state: self.state.topics()?,
            scope: self.scope()?,
            ..MonitorConfig::new(brokers, dlq_topics)
        };
        config.validate()?;
        Ok(config)
    }
}

/// Checks every setting of `monitor` and builds it, without connecting.
pub(super) fn check(args: &MonitorArgs) -> Result<Monitor, CliError> {
    let brokers = args
        .brokers
        .clone()
        .ok_or_else(|| ConfigError::new("brokers", "", "is required"))?;
    let topics = args
        .dlq_topics
        .iter()
        .map(|t| t.trim().to_string())
        .collect();
    let config = args
        .alerts
        .monitor_config(&brokers, topics, args.connection.client_options()?)?;
    Monitor::new(config).map_err(super::monitor_error)
}

/// Runs the monitor until SIGINT or SIGTERM.
pub(super) async fn run(args: MonitorArgs) -> Result<(), CliError> {
    check(&args)?
        .run(super::shutdown_signal())
        .await
        .map_err(super::monitor_error)
}
