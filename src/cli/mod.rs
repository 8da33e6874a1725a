//! The `kafka-dlq` command line: flags, environment variables, logging, signals.

mod check;
mod config;
mod connection;
mod console;
mod demo;
mod dlq;
mod monitor;
mod run;
mod schema_registry;
mod state;

use std::process::ExitCode;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use kafka_dlq::ConfigError;

/// kafka-dlq: consume Kafka/Redpanda safely — retries with backoff, a dead-letter topic,
/// at-least-once commits.
#[derive(Debug, Parser)]
#[command(name = "kafka-dlq", version, about, long_about = None)]
pub(crate) struct Cli {
    /// A TOML configuration file; flags and environment variables override it.
    #[arg(long, env = "KAFKA_DLQ_CONFIG", global = true)]
    config: Option<std::path::PathBuf>,

    /// Log format: `human` or `json`. The level comes from RUST_LOG (default `info`).
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        default_value = "human",
        global = true
    )]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
enum Command {
    /// Consume topics and POST each record to an HTTP service (the sidecar).
    Run(run::RunArgs),
    /// Watch dead-letter topics and alert in Slack when their volume changes.
    Monitor(monitor::MonitorArgs),
    /// Serve the DLQ console: a web page and a JSON API to see, redrive and discard dead letters.
    Console(console::ConsoleArgs),
    /// Inspect and replay a dead-letter topic.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Check the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The whole product in one command, on an embedded broker (no external services).
    Demo(demo::DemoArgs),
}

impl Command {
    /// The connection settings of a command that talks to Kafka.
    fn connection_mut(&mut self) -> Option<&mut connection::ConnectionArgs> {
        match self {
            Command::Run(args) => Some(args.connection_mut()),
            Command::Monitor(args) => Some(args.connection_mut()),
            Command::Console(args) => Some(args.connection_mut()),
            Command::Dlq(command) => Some(command.connection_mut()),
            Command::Demo(args) => Some(args.connection_mut()),
            Command::Config(_) => None,
        }
    }
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration of a subcommand (file, environment, flags; secrets
    /// redacted) and check it: each Kafka client is created as the subcommand would, without
    /// connecting (exit code 2 when invalid); with --connect, also connect, authenticate and
    /// look for its topics (exit code 1 when that fails).
    Check {
        /// Also connect and authenticate, and look for the topics the subcommand needs.
        #[arg(long)]
        connect: bool,
        /// The subcommand to check: run, monitor, console or dlq (with its tool: `dlq list …`).
        #[arg(default_value = "run")]
        subcommand: String,
        /// Flags for that subcommand, as you would pass them to it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Parses the command line, runs the subcommand and maps the outcome to an exit code:
/// 0 success, 1 runtime failure, 2 invalid configuration.
pub(crate) fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    // `--help` never shows a value from the environment: it may be a secret.
    let mut command = config::hide_env_values(Cli::command());
    let mut from_file = config::FileValues::default();
    if let Some(path) = config::config_path(&argv) {
        match config::apply_file(command, &path) {
            Ok((with_file, values)) => {
                command = with_file;
                from_file = values;
            }
            Err(e) => {
                eprintln!("error: {}", describe_config_error(&e));
                return ExitCode::from(2);
            }
        }
    }
    let matches = command.clone().get_matches_from(&argv);
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Config(ConfigCommand::Check {
        connect,
        subcommand,
        args,
    }) = &cli.command
    {
        return check::check(&command, subcommand, args, *connect, &from_file);
    }
    if let Some(connection) = cli.command.connection_mut() {
        connection.set_file_options(from_file.librdkafka.clone());
    }
    // The demo narrates on stdout; only errors go to the log unless RUST_LOG says otherwise.
    let default_level = if matches!(cli.command, Command::Demo(_)) {
        "error"
    } else {
        "info"
    };
    let otlp = match &cli.command {
        Command::Run(args) => args.otlp_endpoint().map(str::to_string),
        _ => None,
    };
    let _telemetry = match init_logging(cli.log_format, default_level, otlp.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Monitor(args) => monitor::run(args).await,
            Command::Console(args) => console::run(args).await,
            Command::Dlq(command) => dlq::run(command).await,
            Command::Config(_) => unreachable!("handled before the runtime starts"),
            Command::Demo(args) => demo::run(args).await,
        }
    });
    exit_code(result)
}

/// Reports a failure on stderr and maps it to the exit code: 0 success, 1 runtime failure,
/// 2 invalid configuration.
fn exit_code(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Config(e)) => {
            eprintln!("error: {}", describe_config_error(&e));
            ExitCode::from(2)
        }
        Err(CliError::Runtime(e)) => {
            // It may quote a producer's record id: no control character reaches the terminal.
            eprintln!("error: {}", dlq::view::escaped(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Why a subcommand failed.
#[derive(Debug)]
pub(crate) enum CliError {
    /// Bad settings: exit code 2.
    Config(ConfigError),
    /// Anything else: exit code 1.
    Runtime(anyhow::Error),
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::Config(e)
    }
}

/// Maps a monitor error to the exit code it deserves.
fn monitor_error(e: kafka_dlq::monitor::MonitorError) -> CliError {
    match e {
        kafka_dlq::monitor::MonitorError::Config(c) => CliError::Config(c),
        other => CliError::Runtime(other.into()),
    }
}

/// Names the flag as well as the setting, e.g. "invalid setting `max_retries` (--max-retries)".
fn describe_config_error(e: &ConfigError) -> String {
    let flag = if let Some(raw) = e.key.strip_prefix("librdkafka.") {
        format!("--kafka-option {raw}=…")
    } else {
        format!("--{}", e.key.replace('_', "-"))
    };
    format!(
        "invalid setting `{}` ({flag}) = {:?}: {}",
        e.key, e.value, e.reason
    )
}

/// Flushes and stops the span exporter when dropped (at exit).
struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Logs to stderr, filtered by RUST_LOG (default `default_level`); with `otlp`, spans are
/// exported over OTLP/HTTP too (feature `otel`; an error without it, or for a bad URL).
fn init_logging(
    format: LogFormat,
    default_level: &str,
    otlp: Option<&str>,
) -> Result<Telemetry, String> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let directives = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default_level.to_string());
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!(
            "warning: RUST_LOG={directives:?} is not a valid filter ({e}); using {default_level}"
        );
        EnvFilter::new(default_level)
    });
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Human => fmt.boxed(),
        LogFormat::Json => fmt
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    // A share member's undecodable batches are seen in a krafka debug line, whatever RUST_LOG
    // says (`consumer::share::undecodable`).
    #[cfg(feature = "share")]
    let watcher = Some(kafka_dlq::consumer::share::undecodable::layer());
    #[cfg(not(feature = "share"))]
    let watcher: Option<tracing_subscriber::layer::Identity> = None;
    let registry = tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(watcher);
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TracerProvider as _;
        let provider = match otlp {
            Some(endpoint) => Some(
                kafka_dlq::telemetry::otlp_provider(endpoint, "kafka-dlq")
                    .map_err(|e| format!("invalid setting `otlp_endpoint` = {endpoint:?}: {e}"))?,
            ),
            None => None,
        };
        let layer = provider.as_ref().map(|p| {
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer("kafka-dlq"))
                // The spans of the messaging conventions (consumer/settle/spans.rs), not the
                // log context's.
                .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                    m.is_span() && matches!(m.name(), "process" | "handle" | "send")
                }))
        });
        registry.with(layer).init();
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otel"))]
    {
        if let Some(endpoint) = otlp {
            return Err(format!(
                "invalid setting `otlp_endpoint` = {endpoint:?}: this kafka-dlq was built without OpenTelemetry; build it with `cargo build --release --features otel`"
            ));
        }
        registry.init();
        Ok(Telemetry {})
    }
}

/// A future that completes on SIGINT or SIGTERM. Both are caught from this call on (not
/// from the future's first poll), so a signal during start-up stops the command cleanly
/// instead of killing it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                biased;
                _ = int.recv() => tracing::info!(event = "signal_received", signal = "SIGINT"),
                _ = term.recv() => tracing::info!(event = "signal_received", signal = "SIGTERM"),
            },
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the service");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
