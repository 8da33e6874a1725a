//! The configuration file, and `kafka-dlq config check`.
//!
//! One TOML file (`--config FILE` or `KAFKA_DLQ_CONFIG`) gives values for any flag, under the
//! flag's name with `_` for `-`. Precedence: flags, then environment variables, then the file,
//! then built-in defaults. Top-level keys apply to every subcommand that has the flag (such as
//! `brokers` and the connection settings); a `[run]`, `[monitor]` or `[dlq]` table applies to
//! that subcommand only; `[librdkafka]` holds raw librdkafka properties for every Kafka client:
//!
//! ```toml
//! brokers = "kafka-1:9092,kafka-2:9092"
//! security_protocol = "SASL_SSL"
//! sasl_mechanism = "SCRAM-SHA-512"
//! sasl_username = "svc-deliveries"
//! sasl_password = "…"
//!
//! [librdkafka]
//! "socket.keepalive.enable" = true
//!
//! [run]
//! group_id = "deliveries"
//! topics = ["parcel-events"]
//! target_url = "http://localhost:8080/events"
//! max_retries = 5
//!
//! [monitor]
//! slack_webhook_url = "https://hooks.slack.com/services/…"
//! ```
//!
//! The file is read by the library's one reader ([`ConfigFile`]): a key that no flag has, or
//! a value of the wrong type, is an error naming the file and the key, in the library and here.
//!
//! A value from the file becomes its flag's default, hidden from `--help` (as every value from
//! the environment is): help never shows a setting's value, which may be a secret. The
//! `[librdkafka]` table does not go through the flags at all (a comma in a value would split
//! it): it is handed to each command's connection settings after parsing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use kafka_dlq::config::{Commands, ConfigFile};
use kafka_dlq::ConfigError;

/// Arguments that are not settings: a config file cannot give them. `demo --brokers` is the
/// flag alone, so a file written for a real cluster never moves the demo onto it.
const NOT_SETTINGS: [&str; 4] = ["help", "version", "config", "demo_brokers"];

/// The config file named on the command line (`--config FILE` / `--config=FILE`) or by
/// `KAFKA_DLQ_CONFIG`.
pub(super) fn config_path(argv: &[OsString]) -> Option<PathBuf> {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
        if text == "--" {
            break;
        }
    }
    std::env::var_os("KAFKA_DLQ_CONFIG").map(PathBuf::from)
}

/// What a config file gave.
#[derive(Debug, Default)]
pub(super) struct FileValues {
    /// The settings, by subcommand path (`run`, `monitor`, `dlq list`, …) and arg id.
    pub values: BTreeMap<String, BTreeMap<String, String>>,
    /// The `[librdkafka]` table.
    pub librdkafka: kafka_dlq::kafka::ClientOptions,
}

/// Hides every argument's value from the environment in `--help` (a variable may hold a
/// secret), in `command` and its subcommands.
pub(super) fn hide_env_values(command: Command) -> Command {
    command
        .mut_args(|a| a.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

/// The registry's settings: the sidecar's (`run`), the console's and the tools'.
const SCHEMA_REGISTRY: &[&str] = &[
    "schema_registry_url",
    "schema_registry_username",
    "schema_registry_password",
    "schema_registry_password_file",
    "schema_registry_token",
    "schema_registry_token_file",
    "schema_registry_ca_location",
    "schema_registry_timeout_ms",
];

/// Where Slack messages go: the monitor's alerts, the console's requests for approval.
const SLACK: &[&str] = &[
    "slack_webhook_url",
    "slack_webhook_url_file",
    "slack_token",
    "slack_token_file",
    "slack_channel",
    "slack_api_url",
];

/// The monitor's alerting beside Slack: `monitor`'s, and `run --monitor`'s.
const ALERTS: &[&str] = &[
    "window_ms",
    "min_interval_ms",
    "check_interval_ms",
    "monitor_group_id",
    "include_payloads",
    "runbook_url",
    "topic_link",
    "console_url",
    "alert_where",
];

/// The state topics and their key: every command that reads or writes the audit.
const STATE: &[&str] = &["audit_topic", "audit_key", "audit_key_file"];

/// The settings of `kafka-dlq`'s commands that are not the consumer's
/// (`ConsumerConfig::KEYS`), by the section of the config file that may hold them; top-level
/// keys may be any of them. (The test below checks this table against the flags.)
pub(super) const COMMAND_SETTINGS: &[(&str, &[&[&str]])] = &[
    (
        "run",
        &[
            &[
                "share_group",
                "target_url",
                "target_proxy",
                "target_ca_location",
                "target_certificate_location",
                "target_key_location",
                "forward_headers",
                "decode_values",
                "decode_keys",
                "output_topics",
                "request_timeout_ms",
                "content_type",
                "metrics_addr",
                "otlp_endpoint",
                "monitor",
            ],
            SCHEMA_REGISTRY,
            SLACK,
            ALERTS,
            STATE,
        ],
    ),
    (
        "monitor",
        &[&["brokers", "dlq_topics"], SLACK, ALERTS, STATE],
    ),
    (
        "dlq",
        &[
            &[
                "brokers",
                "dlq_topic",
                "dlq_topic_template",
                "source_topic",
                "kind",
                "since",
                "until",
                "id",
                "json",
                "limit",
                "to",
                "to_source",
                "dry_run",
                "rate",
                "max_replays",
                "group",
                "source_partition",
                "source_offsets",
                "key",
                "error_contains",
                "error_matches",
                "operator",
                "reason",
                "fingerprint",
                "all",
                "where",
            ],
            SCHEMA_REGISTRY,
            STATE,
        ],
    ),
    (
        "console",
        &[
            &[
                "brokers",
                "dlq_topic",
                "dlq_topic_template",
                "listen",
                "viewer_token",
                "viewer_token_file",
                "operator_token",
                "operator_token_file",
                "anonymous",
                "show_payloads",
                "path_prefix",
                "redrive_topics",
                "max_replays",
                "grants",
                "oidc_issuer",
                "oidc_client_id",
                "oidc_client_secret",
                "oidc_client_secret_file",
                "oidc_scopes",
                "oidc_groups_claim",
                "oidc_name_claim",
                "oidc_ca_location",
                "public_url",
                "four_eyes_above",
                "session_key",
                "session_key_file",
            ],
            SCHEMA_REGISTRY,
            SLACK,
            STATE,
        ],
    ),
];

/// Top-level settings of the commands without a section: `log_format` of every command,
/// `events`, `console` and `console_listen` of `kafka-dlq demo` (its `brokers` and `json` are
/// other commands' too).
pub(super) const OTHER_SETTINGS: &[&str] = &["log_format", "events", "console", "console_listen"];

/// What the config file may hold beside the consumer's settings: every command's.
const COMMANDS: Commands<'static> = Commands {
    sections: COMMAND_SETTINGS,
    other: OTHER_SETTINGS,
};

/// Reads `path` with the library's reader ([`ConfigFile::read`], which checks every key) and
/// sets its values as the defaults of `command`'s arguments, hidden from `--help`.
pub(super) fn apply_file(
    command: Command,
    path: &Path,
) -> Result<(Command, FileValues), ConfigError> {
    let file = ConfigFile::read(path, &COMMANDS)?;
    let leaves = leaf_commands(&command);
    // Which subcommand (path) gets which values: the top level's for every command that has
    // the setting, a section's for its commands, which win.
    let mut global: BTreeMap<String, String> = BTreeMap::new();
    let mut wanted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for setting in file.settings() {
        match &setting.section {
            None => {
                global.insert(setting.key.clone(), setting.text.clone());
            }
            Some(section) => {
                for leaf in leaves
                    .iter()
                    .filter(|l| l.split(' ').next() == Some(section.as_str()))
                {
                    wanted
                        .entry(leaf.clone())
                        .or_default()
                        .insert(setting.key.clone(), setting.text.clone());
                }
            }
        }
    }
    // A key the library's reader knows but no command here takes would be read and then
    // dropped without a word: the library's `trace_records` (the binary traces records when
    // it exports spans, `otlp_endpoint`).
    for setting in file.settings() {
        let scope = leaves.iter().filter(|l| match &setting.section {
            None => true,
            Some(section) => l.split(' ').next() == Some(section.as_str()),
        });
        let taken = root_has(&command, &setting.key)
            || scope.into_iter().any(|l| match setting.section {
                None => has_arg(&command, l, top_level_id(&command, l, &setting.key)),
                Some(_) => has_arg(&command, l, &setting.key),
            });
        if !taken {
            let shown = match &setting.section {
                Some(section) => format!("{section}.{}", setting.key),
                None => setting.key.clone(),
            };
            let why = if setting.key == "trace_records" {
                "is a setting of the library; kafka-dlq run traces every record when it exports \
                 spans (otlp_endpoint)"
                    .to_string()
            } else {
                "no command of kafka-dlq takes it".to_string()
            };
            return Err(ConfigError::new(
                &shown,
                &setting.text,
                format!("in {}: {why}", file.path()),
            ));
        }
    }
    let mut applied = FileValues {
        values: BTreeMap::new(),
        librdkafka: file.librdkafka().clone(),
    };
    let mut command = command;
    for (key, value) in &global {
        if root_has(&command, key) {
            command = command.mut_arg(key.as_str(), |a| hidden_default(a, value));
        }
    }
    for leaf in &leaves {
        let mut values: BTreeMap<String, String> = global
            .iter()
            .map(|(k, v)| (top_level_id(&command, leaf, k).to_string(), v.clone()))
            .filter(|(k, _)| has_arg(&command, leaf, k))
            .collect();
        if let Some(own) = wanted.get(leaf) {
            for (k, v) in own {
                if has_arg(&command, leaf, k) {
                    values.insert(k.clone(), v.clone());
                }
            }
        }
        if values.is_empty() {
            continue;
        }
        command = set_defaults(command, leaf, &values);
        applied.values.insert(leaf.clone(), values);
    }
    Ok((command, applied))
}

/// The argument a top-level `key` sets in the command at `path`. A top-level `dlq_topic` is
/// the consumers' template (`{topic}-dlt`) in every command: `run`'s `dlq_topic`, and the
/// `dlq_topic_template` of `dlq …` and `console`, whose own `dlq_topic` (the DLT they read)
/// is given in their section or by flag — one key never names two different things.
fn top_level_id<'k>(command: &Command, path: &str, key: &'k str) -> &'k str {
    if key == "dlq_topic" && has_arg(command, path, "dlq_topic_template") {
        "dlq_topic_template"
    } else {
        key
    }
}

/// Paths of the subcommands that take settings: `run`, `monitor`, `dlq list`, ….
fn leaf_commands(command: &Command) -> Vec<String> {
    let mut out = Vec::new();
    for sub in command.get_subcommands() {
        if sub.get_subcommands().next().is_some() {
            for leaf in sub.get_subcommands() {
                out.push(format!("{} {}", sub.get_name(), leaf.get_name()));
            }
        } else {
            out.push(sub.get_name().to_string());
        }
    }
    out
}

fn find<'a>(command: &'a Command, path: &str) -> Option<&'a Command> {
    let mut current = command;
    for name in path.split(' ') {
        current = current.find_subcommand(name)?;
    }
    Some(current)
}

fn has_arg(command: &Command, path: &str, id: &str) -> bool {
    find(command, path).is_some_and(|c| {
        c.get_arguments()
            .any(|a| a.get_id() == id && !NOT_SETTINGS.contains(&id))
    })
}

fn root_has(command: &Command, id: &str) -> bool {
    command
        .get_arguments()
        .any(|a| a.get_id() == id && !NOT_SETTINGS.contains(&id))
}

fn set_defaults(command: Command, path: &str, values: &BTreeMap<String, String>) -> Command {
    let mut names = path.splitn(2, ' ');
    let first = names.next().expect("a path has a name").to_string();
    let rest = names.next().map(str::to_string);
    command.mut_subcommand(first, |sub| match &rest {
        Some(rest) => set_defaults(sub, rest, values),
        None => {
            let mut sub = sub;
            for (k, v) in values {
                sub = sub.mut_arg(k.as_str(), |a| hidden_default(a, v));
            }
            sub
        }
    })
}

/// `arg` with `value` (from the config file) as its default, which `--help` does not show.
fn hidden_default(arg: clap::Arg, value: &str) -> clap::Arg {
    let arg = arg.default_value(value.to_string());
    // A switch (`--monitor`) shows no default anyway, and clap refuses to hide one.
    if arg.get_action().takes_values() {
        arg.hide_default_value(true)
    } else {
        arg
    }
}

/// Whether an argument holds a secret.
fn is_secret(id: &str) -> bool {
    ["token", "webhook", "password", "secret", "audit_key"]
        .iter()
        .any(|s| id.contains(s))
}

/// Whether an argument is a URL, which may carry credentials in its user info or query (a
/// proxy's `http://user:password@proxy:3128` too).
fn is_url(id: &str) -> bool {
    id.ends_with("_url") || id.ends_with("_endpoint") || id.ends_with("_proxy")
}

/// librdkafka properties as `KEY=VALUE` with the secret ones' values redacted; a text that is
/// no `KEY=VALUE` is not shown at all.
fn redact_options(options: &kafka_dlq::kafka::ClientOptions) -> String {
    options
        .iter()
        .map(|(k, v)| {
            if kafka_dlq::kafka::is_secret_property(k) {
                format!("{k}=<redacted>")
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Prints every setting of `matches` (a leaf subcommand's) with its effective value and where
/// it came from; secrets redacted.
pub(super) fn print_effective(
    command: &Command,
    path: &str,
    matches: &ArgMatches,
    from_file: &FileValues,
) {
    let Some(sub) = find(command, path) else {
        return;
    };
    println!("# effective configuration of `kafka-dlq {path}`");
    let mut args: Vec<&clap::Arg> = sub.get_arguments().collect();
    args.sort_by_key(|a| a.get_id().as_str());
    for arg in args {
        let id = arg.get_id().as_str();
        if NOT_SETTINGS.contains(&id) || arg.is_positional() {
            continue;
        }
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "environment",
            Some(ValueSource::DefaultValue)
                if from_file
                    .values
                    .get(path)
                    .is_some_and(|v| v.contains_key(id)) =>
            {
                "file"
            }
            Some(ValueSource::DefaultValue) => "default",
            _ => "built-in default",
        };
        let shown = if raw.is_empty() {
            "(not set)".to_string()
        } else if is_secret(id) {
            "<redacted>".to_string()
        } else if id == "kafka_options" {
            match kafka_dlq::config::parse_kafka_options(&raw) {
                Ok(options) => redact_options(&options),
                Err(_) => "<not KEY=VALUE: not shown>".to_string(),
            }
        } else if is_url(id) {
            raw.iter()
                .map(|u| kafka_dlq::config::shown_url::redacted(u))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            raw.join(",")
        };
        println!("{id} = {shown}    # {source}");
    }
    if !from_file.librdkafka.is_empty()
        && sub.get_arguments().any(|a| a.get_id() == "kafka_options")
    {
        println!(
            "[librdkafka] = {}    # file",
            redact_options(&from_file.librdkafka)
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::CommandFactory;
    use kafka_dlq::config::{is_connection_setting, Security};
    use kafka_dlq::ConsumerConfig;

    use super::*;

    /// The settings (argument ids) of the commands at `paths`, as the command line has them.
    fn ids(command: &Command, paths: &[String]) -> BTreeSet<String> {
        paths
            .iter()
            .flat_map(|p| find(command, p).unwrap().get_arguments())
            .filter(|a| !a.is_positional() && !NOT_SETTINGS.contains(&a.get_id().as_str()))
            .map(|a| a.get_id().to_string())
            .collect()
    }

    #[test]
    fn the_table_of_settings_is_the_command_lines() {
        let command = super::super::Cli::command();
        let leaves = leaf_commands(&command);
        let keys: BTreeSet<String> = ConsumerConfig::KEYS.iter().map(|k| k.to_string()).collect();
        for (section, groups) in COMMAND_SETTINGS {
            let of_section: Vec<String> = leaves
                .iter()
                .filter(|l| l.split(' ').next() == Some(section))
                .cloned()
                .collect();
            let mut flags = ids(&command, &of_section);
            let listed: BTreeSet<String> = groups
                .iter()
                .flat_map(|g| g.iter())
                .chain(Security::KEYS.iter())
                .chain(["kafka_options"].iter())
                .map(|k| k.to_string())
                .collect();
            if *section == "run" {
                flags.retain(|id| !keys.contains(id));
                assert!(listed.is_disjoint(&keys), "[run] lists consumer settings");
            }
            assert_eq!(
                flags, listed,
                "[{section}]: the command line's flags, the table"
            );
        }
        let mut others = ids(&command, &["demo".to_string()]);
        others.extend(
            command
                .get_arguments()
                .filter(|a| !NOT_SETTINGS.contains(&a.get_id().as_str()))
                .map(|a| a.get_id().to_string()),
        );
        others.retain(|id| {
            !keys.contains(id)
                && !is_connection_setting(id)
                && !COMMAND_SETTINGS
                    .iter()
                    .flat_map(|(_, groups)| groups.iter())
                    .any(|l| l.contains(&id.as_str()))
        });
        let listed: BTreeSet<String> = OTHER_SETTINGS.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            others, listed,
            "top-level settings of the commands without a section"
        );
    }
}
