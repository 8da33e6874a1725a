//! The configuration file, and `kafka-dlq config check`.
//!
//! One TOML file (`--config FILE` or `KAFKA_DLQ_CONFIG`) gives values for any flag, under the
//! flag's name with `_` for `-`. Precedence: flags, then environment variables, then the file,
//! then built-in defaults. Top-level keys apply to every subcommand that has the flag (such as
//! `brokers`); a `[run]`, `[monitor]` or `[dlq]` table applies to that subcommand only;
//! `[librdkafka]` holds raw librdkafka properties for every Kafka client:
//!
//! ```toml
//! brokers = "kafka-1:9092,kafka-2:9092"
//!
//! [librdkafka]
//! "security.protocol" = "SASL_SSL"
//! "sasl.mechanism" = "PLAIN"
//! "sasl.username" = "svc-deliveries"
//! "sasl.password" = "…"
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
//! A key that no flag has, or a value of the wrong type, is an error naming the file and the
//! key.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use kafka_dlq::ConfigError;

/// Sections that name subcommands.
const SECTIONS: [&str; 3] = ["run", "monitor", "dlq"];

/// Arguments that are not settings.
const NOT_SETTINGS: [&str; 3] = ["help", "version", "config"];

/// The config file named on the command line (`--config FILE` / `--config=FILE`) or by
/// `KAFKA_DLQ_CONFIG`.
pub fn config_path(argv: &[OsString]) -> Option<PathBuf> {
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

/// The settings a file gave, by subcommand path (`run`, `monitor`, `dlq list`, …) and arg id.
pub type FileValues = BTreeMap<String, BTreeMap<String, String>>;

/// Reads `path` and sets its values as the defaults of `command`'s arguments.
pub fn apply_file(command: Command, path: &Path) -> Result<(Command, FileValues), ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("config", &shown, format!("cannot read it: {e}")))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| ConfigError::new("config", &shown, format!("not valid TOML: {e}")))?;

    // Which subcommand (path) gets which values.
    let leaves = leaf_commands(&command);
    let mut wanted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut global: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in &table {
        match (key.as_str(), value) {
            ("librdkafka", toml::Value::Table(options)) => {
                let mut pairs = Vec::new();
                for (k, v) in options {
                    pairs.push(format!(
                        "{k}={}",
                        scalar(&shown, &format!("librdkafka.{k}"), v)?
                    ));
                }
                global.insert("kafka_options".into(), pairs.join(","));
            }
            (section, toml::Value::Table(values)) if SECTIONS.contains(&section) => {
                for (k, v) in values {
                    let text = scalar(&shown, &format!("{section}.{k}"), v)?;
                    for leaf in leaves
                        .iter()
                        .filter(|l| l.split(' ').next() == Some(section))
                    {
                        wanted
                            .entry(leaf.clone())
                            .or_default()
                            .insert(k.clone(), text.clone());
                    }
                    if !leaves
                        .iter()
                        .filter(|l| l.split(' ').next() == Some(section))
                        .any(|l| has_arg(&command, l, k))
                    {
                        return Err(ConfigError::new(
                            &format!("{section}.{k}"),
                            &shown,
                            format!("`kafka-dlq {section}` has no setting `{k}`"),
                        ));
                    }
                }
            }
            (_, toml::Value::Table(_)) => {
                return Err(ConfigError::new(
                    key,
                    &shown,
                    "unknown section; expected [run], [monitor], [dlq] or [librdkafka]",
                ))
            }
            (_, v) => {
                let text = scalar(&shown, key, v)?;
                if !leaves.iter().any(|l| has_arg(&command, l, key)) && !root_has(&command, key) {
                    return Err(ConfigError::new(
                        key,
                        &shown,
                        "no subcommand has this setting",
                    ));
                }
                global.insert(key.clone(), text);
            }
        }
    }
    let mut applied: FileValues = BTreeMap::new();
    let mut command = command;
    for (key, value) in &global {
        if root_has(&command, key) {
            command = command.mut_arg(key.as_str(), |a| a.default_value(value.clone()));
        }
    }
    for leaf in &leaves {
        let mut values: BTreeMap<String, String> = global
            .iter()
            .filter(|(k, _)| has_arg(&command, leaf, k))
            .map(|(k, v)| (k.clone(), v.clone()))
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
        applied.insert(leaf.clone(), values);
    }
    Ok((command, applied))
}

fn scalar(file: &str, key: &str, value: &toml::Value) -> Result<String, ConfigError> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| scalar(file, key, i))
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        other => {
            return Err(ConfigError::new(
                key,
                other.type_str(),
                format!("in {file}: expected a string, number, boolean or list"),
            ))
        }
    })
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
                sub = sub.mut_arg(k.as_str(), |a| a.default_value(v.clone()));
            }
            sub
        }
    })
}

/// Whether an argument holds a secret.
fn is_secret(id: &str) -> bool {
    ["token", "webhook", "password", "secret"]
        .iter()
        .any(|s| id.contains(s))
}

/// Redacts the values of secret librdkafka properties in `KEY=VALUE` lists.
fn redact_options(values: &[String]) -> String {
    values
        .iter()
        .map(|o| match o.split_once('=') {
            Some((k, _))
                if ["password", "secret", "jaas", "key", "token"]
                    .iter()
                    .any(|s| k.contains(s)) =>
            {
                format!("{k}=<redacted>")
            }
            _ => o.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Prints every setting of `matches` (a leaf subcommand's) with its effective value and where
/// it came from; secrets redacted.
pub fn print_effective(
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
                if from_file.get(path).is_some_and(|v| v.contains_key(id)) =>
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
            redact_options(&raw)
        } else {
            raw.join(",")
        };
        println!("{id} = {shown}    # {source}");
    }
}
