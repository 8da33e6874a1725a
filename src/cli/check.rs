//! `kafka-dlq config check [--connect] run|monitor|console|dlq …`: the effective settings, checked as
//! the command would use them.
//!
//! Without `--connect` nothing connects: the settings are validated, and each Kafka client of
//! the command is created (librdkafka checks its properties, loads the CA and the key, sets up
//! SASL) and dropped, as is a share group's krafka configuration. With `--connect` it also
//! connects and authenticates, and says which of the topics the command needs it cannot see.

use std::process::ExitCode;
use std::time::Duration;

use clap::FromArgMatches;
use kafka_dlq::config::{check_client, ClientKind};
use kafka_dlq::kafka::ClientOptions;
use rdkafka::ClientConfig;

use super::{config, console, dlq, exit_code, monitor, run, CliError};

/// How long `--connect` waits for the cluster.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// What a command needs of the cluster: where it is, how it connects, its topics.
struct Needs {
    brokers: String,
    options: ClientOptions,
    /// Topics that must exist.
    topics: Vec<String>,
    /// Topics the command creates when they do not exist.
    created: Vec<String>,
    /// kafka-dlq's state topics the command reads or writes: they must not delete records.
    state: Option<kafka_dlq::state::StateTopics>,
}

/// Checks `subcommand` with `args` as `kafka-dlq <subcommand> <args>` would take them; prints
/// the effective settings, then `# configuration OK` or the error (exit code 2), and with
/// `connect` what the cluster said (exit code 1 when it cannot be reached or a topic the
/// command reads is not there).
pub(super) fn check(
    command: &clap::Command,
    subcommand: &str,
    args: &[String],
    connect: bool,
    from_file: &config::FileValues,
) -> ExitCode {
    if !matches!(subcommand, "run" | "monitor" | "console" | "dlq") {
        eprintln!(
            "error: `config check` checks `run`, `monitor`, `console` or `dlq`, not `{subcommand}`"
        );
        return ExitCode::from(2);
    }
    let argv = ["kafka-dlq", subcommand]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    let matches = match command.clone().try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) => e.exit(),
    };
    let mut sub = matches
        .subcommand_matches(subcommand)
        .expect("the subcommand was given");
    let mut path = subcommand.to_string();
    if subcommand == "dlq" {
        let Some((leaf, leaf_matches)) = sub.subcommand() else {
            eprintln!(
                "error: `config check dlq` needs the tool: list, show, replay, history or seal"
            );
            return ExitCode::from(2);
        };
        path = format!("dlq {leaf}");
        sub = leaf_matches;
    }
    config::print_effective(command, &path, sub, from_file);
    let needs = match subcommand {
        "run" => run_needs(sub, from_file),
        "monitor" => monitor_needs(sub, from_file),
        "console" => console_needs(sub, from_file),
        _ => dlq_needs(&matches, from_file),
    };
    let needs = match needs {
        Ok(needs) => needs,
        Err(e) => return exit_code(Err(e)),
    };
    println!("# configuration OK");
    if !connect {
        return ExitCode::SUCCESS;
    }
    exit_code(connect_to(&needs))
}

/// `run`: the consumer's settings and clients (the sidecar's target, the monitor's), a share
/// group's krafka configuration.
fn run_needs(sub: &clap::ArgMatches, from_file: &config::FileValues) -> Result<Needs, CliError> {
    let mut args = run::RunArgs::from_arg_matches(sub).unwrap_or_else(|e| e.exit());
    args.connection_mut()
        .set_file_options(from_file.librdkafka.clone());
    let checked = run::check(&args)?;
    let c = checked.config();
    c.check_clients()?;
    #[cfg(feature = "share")]
    if c.consumption == kafka_dlq::config::Consumption::Share {
        kafka_dlq::consumer::share::auth_config(&c.librdkafka)?;
    }
    let template = c.dlq_topic()?;
    let dlq: Vec<String> = c.topics.iter().map(|t| template.for_topic(t)).collect();
    let (mut topics, mut created) = (c.topics.clone(), Vec::new());
    if c.create_dlq_topics {
        created.extend(dlq);
    } else {
        topics.extend(dlq);
    }
    if let Some(monitor) = checked.monitor() {
        check_client(
            &client(&c.brokers, &monitor.config().librdkafka),
            ClientKind::Consumer,
            &monitor.config().librdkafka,
        )?;
    }
    Ok(Needs {
        brokers: c.brokers.clone(),
        options: c.librdkafka.clone(),
        topics,
        created,
        state: checked.monitor().map(|m| m.config().state.clone()),
    })
}

/// `monitor`: its settings and its readers.
fn monitor_needs(
    sub: &clap::ArgMatches,
    from_file: &config::FileValues,
) -> Result<Needs, CliError> {
    let mut args = monitor::MonitorArgs::from_arg_matches(sub).unwrap_or_else(|e| e.exit());
    args.connection_mut()
        .set_file_options(from_file.librdkafka.clone());
    let monitor = monitor::check(&args)?;
    let c = monitor.config();
    check_client(
        &client(&c.brokers, &c.librdkafka),
        ClientKind::Consumer,
        &c.librdkafka,
    )?;
    Ok(Needs {
        brokers: c.brokers.clone(),
        options: c.librdkafka.clone(),
        topics: c.dlq_topics.clone(),
        created: Vec::new(),
        state: Some(c.state.clone()),
    })
}

/// `console`: its settings, its readers and the redrives' producer.
fn console_needs(
    sub: &clap::ArgMatches,
    from_file: &config::FileValues,
) -> Result<Needs, CliError> {
    let mut args = console::ConsoleArgs::from_arg_matches(sub).unwrap_or_else(|e| e.exit());
    args.connection_mut()
        .set_file_options(from_file.librdkafka.clone());
    let c = console::check(&args)?.config;
    let config = client(&c.brokers, &c.librdkafka);
    check_client(&config, ClientKind::Consumer, &c.librdkafka)?;
    check_client(&config, ClientKind::Producer, &c.librdkafka)?;
    Ok(Needs {
        brokers: c.brokers.clone(),
        options: c.librdkafka.clone(),
        topics: c.dlq_topics.clone(),
        created: vec![c.state.audit.clone(), c.state.positions.clone()],
        state: Some(c.state.clone()),
    })
}

/// `dlq …`: the tools' reader and producer.
fn dlq_needs(
    matches: &clap::ArgMatches,
    from_file: &config::FileValues,
) -> Result<Needs, CliError> {
    let dlq_matches = matches.subcommand_matches("dlq").expect("dlq was given");
    let mut command = dlq::DlqCommand::from_arg_matches(dlq_matches).unwrap_or_else(|e| e.exit());
    command
        .connection_mut()
        .set_file_options(from_file.librdkafka.clone());
    let (brokers, options, topic) = command.cluster()?;
    let config = client(&brokers, &options);
    check_client(&config, ClientKind::Consumer, &options)?;
    check_client(&config, ClientKind::Producer, &options)?;
    let state = command.state()?;
    Ok(Needs {
        brokers,
        options,
        topics: topic.into_iter().collect(),
        created: state
            .iter()
            .flat_map(|s| [s.audit.clone(), s.positions.clone()])
            .collect(),
        state,
    })
}

/// A client of `brokers` with `options`.
fn client(brokers: &str, options: &ClientOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    options.apply(&mut config);
    config
}

/// Connects, authenticates and looks for the topics: prints what it found.
fn connect_to(needs: &Needs) -> Result<(), CliError> {
    let config = client(&needs.brokers, &needs.options);
    let visible = kafka_dlq::kafka::connect::check(&config, CONNECT_TIMEOUT)
        .map_err(|e| CliError::Runtime(e.into()))?;
    println!(
        "# connected to {} ({}): {} topics visible",
        needs.brokers,
        kafka_dlq::kafka::security_of(&config),
        visible.len()
    );
    let mut missing = Vec::new();
    for topic in &needs.topics {
        if visible.contains(topic) {
            println!("# topic `{topic}`: visible");
        } else {
            println!(
                "# topic `{topic}`: NOT visible (missing, or this principal may not describe it)"
            );
            missing.push(topic.clone());
        }
    }
    for topic in &needs.created {
        if visible.contains(topic) {
            println!("# topic `{topic}`: visible");
        } else {
            println!("# topic `{topic}`: not there yet; the command creates it (this principal needs CreateTopics)");
        }
    }
    let findings = match &needs.state {
        None => Vec::new(),
        Some(state) => state_findings(&config, &needs.brokers, state)?,
    };
    for finding in &findings {
        println!("# {finding}");
    }
    if !missing.is_empty() {
        return Err(CliError::Runtime(anyhow::anyhow!(
            "the cluster shows no topic {}",
            missing
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    match findings.as_slice() {
        [] => Ok(()),
        _ => Err(CliError::Runtime(anyhow::anyhow!(
            "{} of kafka-dlq's state topics would delete what they hold: run the fix above",
            findings.len()
        ))),
    }
}

/// The state topics of `state` that would delete what they hold ([`kafka_dlq::state::topics::check`]).
fn state_findings(
    config: &ClientConfig,
    brokers: &str,
    state: &kafka_dlq::state::StateTopics,
) -> Result<Vec<kafka_dlq::state::RetentionFinding>, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.into()))?;
    let checked = runtime.block_on(kafka_dlq::state::topics::check(config, brokers, state));
    match checked {
        Ok(findings) => {
            if findings.is_empty() {
                println!("# state topics `{}` and `{}`: kept for ever (or not created yet)", state.audit, state.positions);
            }
            Ok(findings)
        }
        Err(e) => Err(CliError::Runtime(anyhow::anyhow!(
            "cannot read the configuration of the state topics `{}` and `{}` (DescribeConfigs): {e}",
            state.audit,
            state.positions
        ))),
    }
}
