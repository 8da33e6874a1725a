//! The configuration file: one TOML file, read by one reader, [`ConfigFile::read`], for the
//! library ([`ConsumerConfig::from_file`]) and for every command of `kafka-dlq --config`
//! (which passes its commands' settings, [`Commands`]).
//!
//! Top-level keys are settings of every command that has them (`brokers`); a section such as
//! `[run]`, `[monitor]` or `[dlq]` holds settings of that command only; `[librdkafka]` holds
//! raw librdkafka properties for every Kafka client. A key that no command there has, a table
//! that is no section, or a value that is not a string, number, boolean or list of them is an
//! error naming the file and the key: a misspelt `max_retires = 5` is never lost.

use std::path::Path;

use super::{ConfigError, ConsumerConfig, Security};
use crate::kafka::ClientOptions;

/// The settings of the commands that read the file beside the consumer, which
/// [`ConfigFile::read`] accepts as well: by section (`run`, `monitor`, `dlq`, …: the settings
/// of that command that are not the consumer's [`ConsumerConfig::KEYS`] nor connection
/// settings), and the top-level settings of commands without a section. The library knows
/// only the consumer's ([`Commands::CONSUMER`]); the `kafka-dlq` binary passes its own.
#[derive(Debug, Clone, Copy)]
pub struct Commands<'a> {
    /// Each section's name and the settings it may hold beyond the consumer's, in groups (a
    /// group several commands share, such as the registry's settings, is written once); the
    /// top level may hold them too. `run` may hold the consumer's settings as well.
    pub sections: &'a [(&'a str, &'a [&'a [&'a str]])],
    /// Settings only the top level holds.
    pub other: &'a [&'a str],
}

impl Commands<'static> {
    /// The consumer alone: its settings at the top level or in `[run]`, the connection
    /// settings, `[librdkafka]`.
    pub const CONSUMER: Commands<'static> = Commands {
        sections: &[("run", &[])],
        other: &[],
    };
}

/// Whether `key` is a connection setting of every command that talks to Kafka (`run`,
/// `monitor`, `dlq`, `demo`): a named one of [`Security`], or `kafka_options` (raw `KEY=VALUE`
/// properties; the `[librdkafka]` table is the file's way to give them).
pub fn is_connection_setting(key: &str) -> bool {
    Security::KEYS.contains(&key) || key == "kafka_options"
}

/// One setting of a config file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSetting {
    /// `None` at the top level, else the section: `run`, `monitor` or `dlq`.
    pub section: Option<String>,
    /// The key, as written.
    pub key: String,
    /// The value as a flag would take it: a list joined with commas.
    pub text: String,
    value: toml::Value,
}

/// A config file, read and checked: see the module docs.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: String,
    settings: Vec<FileSetting>,
    librdkafka: ClientOptions,
}

impl ConfigFile {
    /// Reads and checks the file at `path`, whose keys are the consumer's and `commands`'.
    /// Errors name the file as the value and the setting as the key (`run.max_retires`, or
    /// `config` for the file itself).
    pub fn read(
        path: impl AsRef<Path>,
        commands: &Commands<'_>,
    ) -> Result<ConfigFile, ConfigError> {
        let path = path.as_ref().display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::new("config", &path, format!("cannot read it: {e}")))?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigError::new("config", &path, format!("not valid TOML: {}", e.message()))
        })?;
        let mut file = ConfigFile {
            path,
            settings: Vec::new(),
            librdkafka: ClientOptions::new(),
        };
        for (key, value) in table {
            match (key.as_str(), value) {
                ("librdkafka", toml::Value::Table(options)) => {
                    for (k, v) in options {
                        let text = file.text(&format!("librdkafka.{k}"), &v)?;
                        file.librdkafka.insert(k, text);
                    }
                }
                (section, toml::Value::Table(values))
                    if section_keys(commands, section).is_some() =>
                {
                    for (k, v) in values {
                        if !is_setting_of(commands, section, &k) {
                            return Err(ConfigError::new(
                                &format!("{section}.{k}"),
                                &file.path,
                                format!("`kafka-dlq {section}` has no setting `{k}`"),
                            ));
                        }
                        file.push(Some(section), k, v)?;
                    }
                }
                (_, toml::Value::Table(_)) => {
                    let sections: Vec<String> = commands
                        .sections
                        .iter()
                        .map(|(name, _)| format!("[{name}]"))
                        .chain(["[librdkafka]".to_string()])
                        .collect();
                    return Err(ConfigError::new(
                        &key,
                        &file.path,
                        format!("unknown section; expected one of {}", sections.join(", ")),
                    ));
                }
                (_, value) => {
                    let known = ConsumerConfig::KEYS.contains(&key.as_str())
                        || commands.other.contains(&key.as_str())
                        || is_connection_setting(&key)
                        || commands
                            .sections
                            .iter()
                            .any(|(_, groups)| holds(groups, &key));
                    if !known || key == "librdkafka" {
                        return Err(ConfigError::new(
                            &key,
                            &file.path,
                            "no command has this setting",
                        ));
                    }
                    file.push(None, key, value)?;
                }
            }
        }
        Ok(file)
    }

    /// The file's path, as errors show it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Every setting, top-level and in sections, in the file's order of keys.
    pub fn settings(&self) -> &[FileSetting] {
        &self.settings
    }

    /// The `[librdkafka]` table.
    pub fn librdkafka(&self) -> &ClientOptions {
        &self.librdkafka
    }

    /// The client options of the command `section` (`run`, `monitor`, `dlq`): the named
    /// connection settings of the top level and of the section (which wins), and the
    /// `[librdkafka]` table beside them ([`merge_options`](super::merge_options)). A bad value
    /// names the setting and the file.
    pub fn client_options(&self, section: &str) -> Result<ClientOptions, ConfigError> {
        let mut security = Security::default();
        let in_file = |e: ConfigError| ConfigError {
            reason: format!("in {}: {}", self.path, e.reason),
            ..e
        };
        let top = self.settings.iter().filter(|s| s.section.is_none());
        let own = self
            .settings
            .iter()
            .filter(|s| s.section.as_deref() == Some(section));
        let mut raw = ClientOptions::new();
        for setting in top.chain(own) {
            if Security::KEYS.contains(&setting.key.as_str()) {
                security.set(&setting.key, &setting.text).map_err(in_file)?;
            } else if setting.key == "kafka_options" {
                let listed = [setting.text.clone()];
                for (key, value) in super::parse_kafka_options(&listed).map_err(in_file)?.iter() {
                    raw.insert(key, value);
                }
            }
        }
        // The `[librdkafka]` table last: it is the file's own way to give raw options.
        for (key, value) in self.librdkafka.iter() {
            raw.insert(key, value);
        }
        let named = security.options().map_err(in_file)?;
        super::merge_options(named, &raw).map_err(in_file)
    }

    fn push(
        &mut self,
        section: Option<&str>,
        key: String,
        value: toml::Value,
    ) -> Result<(), ConfigError> {
        let shown = match section {
            Some(s) => format!("{s}.{key}"),
            None => key.clone(),
        };
        let text = self.text(&shown, &value)?;
        self.settings.push(FileSetting {
            section: section.map(str::to_string),
            key,
            text,
            value,
        });
        Ok(())
    }

    /// A value as a flag would take it.
    fn text(&self, key: &str, value: &toml::Value) -> Result<String, ConfigError> {
        Ok(match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|item| match item {
                    toml::Value::Table(_) | toml::Value::Array(_) => Err(()),
                    other => self.text(key, other).map_err(|_| ()),
                })
                .collect::<Result<Vec<_>, ()>>()
                .map_err(|()| self.not_a_value(key, value))?
                .join(","),
            other => return Err(self.not_a_value(key, other)),
        })
    }

    fn not_a_value(&self, key: &str, value: &toml::Value) -> ConfigError {
        ConfigError::new(
            key,
            &self.path,
            format!(
                "expected a string, number, boolean or list of them, got {}",
                value.type_str()
            ),
        )
    }
}

/// The settings a section may hold, beyond the consumer's for `run`.
fn section_keys<'a>(commands: &Commands<'a>, section: &str) -> Option<&'a [&'a [&'a str]]> {
    commands
        .sections
        .iter()
        .find(|(name, _)| *name == section)
        .map(|(_, keys)| *keys)
}

/// Whether one of a section's `groups` of settings holds `key`.
fn holds(groups: &[&[&str]], key: &str) -> bool {
    groups.iter().any(|keys| keys.contains(&key))
}

fn is_setting_of(commands: &Commands<'_>, section: &str, key: &str) -> bool {
    let consumer = section == "run" && ConsumerConfig::KEYS.contains(&key) && key != "librdkafka";
    consumer
        || section_keys(commands, section).is_some_and(|groups| holds(groups, key))
        || is_connection_setting(key)
}

impl ConsumerConfig {
    /// Loads and validates the consumer's settings from a file of them
    /// ([`ConfigFile::read`] with [`Commands::CONSUMER`], which rejects any other key): its
    /// top-level keys that are consumer settings ([`ConsumerConfig::KEYS`]), then those of
    /// `[run]`, which win; the connection settings ([`Security`]) and `[librdkafka]` as the
    /// client options ([`ConfigFile::client_options`]). A value of the wrong type or a bad
    /// value is a [`ConfigError`] naming the setting.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ConsumerConfig, ConfigError> {
        Self::from_file_with(path, &Commands::CONSUMER)
    }

    /// [`ConsumerConfig::from_file`] of a file that other commands read too, whose settings
    /// `commands` are: accepted where they belong, and left to those commands.
    pub fn from_file_with(
        path: impl AsRef<Path>,
        commands: &Commands<'_>,
    ) -> Result<ConsumerConfig, ConfigError> {
        let file = ConfigFile::read(path, commands)?;
        let mut config = ConsumerConfig {
            librdkafka: file.client_options("run")?,
            ..ConsumerConfig::default()
        };
        let consumer = |s: &&FileSetting| ConsumerConfig::KEYS.contains(&s.key.as_str());
        let top = file.settings().iter().filter(|s| s.section.is_none());
        let run = file
            .settings()
            .iter()
            .filter(|s| s.section.as_deref() == Some("run"));
        for setting in top.chain(run).filter(consumer) {
            let one = toml::Table::from_iter([(setting.key.clone(), setting.value.clone())]);
            let parsed: ConsumerConfig =
                toml::Value::Table(one)
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        ConfigError::new(
                            &setting.key,
                            &setting.text,
                            format!("in {}: {}", file.path(), e.message()),
                        )
                    })?;
            config.set_from(&setting.key, parsed);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Ordering;

    /// Commands beside the consumer, as the binary passes its own.
    const COMMANDS: Commands<'static> = Commands {
        sections: &[
            ("run", &[&["target_url"]]),
            ("monitor", &[&["slack_webhook_url", "dlq_topics"]]),
            ("dlq", &[&["rate"]]),
        ],
        other: &["log_format"],
    };

    #[test]
    fn the_consumer_alone_refuses_another_commands_setting_naming_it() {
        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\n[run]\ntarget_url = \"http://x\"\n",
        );
        let error = ConsumerConfig::from_file(file.path()).unwrap_err();
        assert_eq!(error.key, "run.target_url", "{error}");
        assert!(ConsumerConfig::from_file_with(file.path(), &COMMANDS).is_ok());
        let file = write("[monitor]\ndlq_topics = [\"a\"]\n");
        let error = ConsumerConfig::from_file(file.path()).unwrap_err();
        assert_eq!(error.key, "monitor", "{error}");
        assert!(error.reason.contains("[run], [librdkafka]"), "{error}");
    }

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn loads_the_documented_file_with_run_winning_over_the_top_level() {
        let file = write(
            r#"
brokers = "kafka-1:9092,kafka-2:9092"
max_retries = 3

[librdkafka]
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"socket.timeout.ms" = 30000

[run]
group_id = "deliveries"
topics = ["parcel-events"]
target_url = "http://localhost:8080/events"
max_retries = 5
ordering = "key"
dlq_format = "spring"
retry_topic_delays_ms = [60000, 600000]

[monitor]
slack_webhook_url = "https://hooks.slack.com/services/x"
"#,
        );
        let config = ConsumerConfig::from_file_with(file.path(), &COMMANDS).unwrap();
        assert_eq!(config.brokers, "kafka-1:9092,kafka-2:9092");
        assert_eq!(config.group_id, "deliveries");
        assert_eq!(config.topics, vec!["parcel-events".to_string()]);
        assert_eq!(config.max_retries, 5, "[run] wins over the top level");
        assert_eq!(config.ordering, Ordering::Key);
        assert_eq!(config.dlq_format, crate::dlq::DlqFormat::Spring);
        assert_eq!(config.retry_topic_delays_ms.delays_ms(), [60_000, 600_000]);
        assert_eq!(config.librdkafka.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.librdkafka.get("socket.timeout.ms"), Some("30000"));
        assert_eq!(
            config.backoff_initial,
            std::time::Duration::from_secs(1),
            "the rest keeps its default"
        );
    }

    #[test]
    fn connection_settings_come_from_the_top_level_and_the_section_beside_librdkafka() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let file = write(&format!(
            r#"
brokers = "b-1.example.com:9096"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "svc"
sasl_password = "top,secret"
ssl_ca_location = "{}"

[librdkafka]
"socket.keepalive.enable" = true

[run]
group_id = "g"
topics = ["t"]
sasl_password = "run-secret"

[monitor]
sasl_username = "monitor-user"
"#,
            ca.path().display()
        ));
        let config = ConsumerConfig::from_file_with(file.path(), &COMMANDS).unwrap();
        let options = &config.librdkafka;
        assert_eq!(options.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(
            options.get("sasl.password"),
            Some("run-secret"),
            "[run] wins"
        );
        assert_eq!(
            options.get("sasl.username"),
            Some("svc"),
            "[monitor]'s is not run's"
        );
        assert_eq!(options.get("socket.keepalive.enable"), Some("true"));
        assert_eq!(options.setting_of("sasl.password"), Some("sasl_password"));
        let read = ConfigFile::read(file.path(), &COMMANDS).unwrap();
        let monitor = read.client_options("monitor").unwrap();
        assert_eq!(monitor.get("sasl.username"), Some("monitor-user"));
        assert_eq!(monitor.get("sasl.password"), Some("top,secret"));

        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nsasl_mechanism = \"PLAIN\"\n",
        );
        let error = ConsumerConfig::from_file_with(file.path(), &COMMANDS).unwrap_err();
        assert_eq!(error.key, "sasl_mechanism");
        assert!(
            error.reason.contains(&file.path().display().to_string()),
            "{error}"
        );
    }

    #[test]
    fn kafka_options_in_the_file_reach_the_library_as_they_reach_the_binary() {
        let file = write(
            r#"
brokers = "b:1"
group_id = "g"
topics = ["t"]
kafka_options = ["socket.timeout.ms=30000", "client.rack=eu-1a,socket.keepalive.enable=true"]

[librdkafka]
"client.rack" = "eu-1b"
"#,
        );
        let config = ConsumerConfig::from_file(file.path()).unwrap();
        let options = &config.librdkafka;
        assert_eq!(options.get("socket.timeout.ms"), Some("30000"));
        assert_eq!(options.get("socket.keepalive.enable"), Some("true"));
        assert_eq!(
            options.get("client.rack"),
            Some("eu-1b"),
            "the [librdkafka] table wins"
        );
        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nkafka_options = \"hunter2\"\n",
        );
        let error = ConsumerConfig::from_file(file.path()).unwrap_err();
        assert_eq!(error.key, "kafka_option");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn a_bad_value_names_its_setting_and_the_file() {
        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nmax_retries = \"many\"\n",
        );
        let error = ConsumerConfig::from_file_with(file.path(), &COMMANDS)
            .unwrap_err()
            .to_string();
        assert!(error.contains("max_retries"), "{error}");
        assert!(
            error.contains(&file.path().display().to_string()),
            "{error}"
        );

        let file =
            write("brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nordering = \"random\"\n");
        let error = ConsumerConfig::from_file_with(file.path(), &COMMANDS)
            .unwrap_err()
            .to_string();
        assert!(error.contains("ordering"), "{error}");

        let file = write("group_id = \"g\"\ntopics = [\"t\"]\n");
        let error = ConsumerConfig::from_file_with(file.path(), &COMMANDS)
            .unwrap_err()
            .to_string();
        assert!(error.contains("brokers"), "validated: {error}");

        let error = ConsumerConfig::from_file_with("/nonexistent/kafka-dlq.toml", &COMMANDS)
            .unwrap_err()
            .to_string();
        assert!(error.contains("config"), "{error}");
    }

    #[test]
    fn a_misspelt_key_is_an_error_naming_it_and_the_file() {
        for (text, key, reason) in [
            (
                "max_retires = 5\n",
                "max_retires",
                "no command has this setting",
            ),
            (
                "[run]\nmax_retires = 5\n",
                "run.max_retires",
                "`kafka-dlq run` has no setting `max_retires`",
            ),
            (
                "[monitor]\nmax_retries = 5\n",
                "monitor.max_retries",
                "`kafka-dlq monitor` has no setting `max_retries`",
            ),
            ("[replay]\nrate = 5\n", "replay", "unknown section"),
            (
                "librdkafka = \"x\"\n",
                "librdkafka",
                "no command has this setting",
            ),
            (
                "[run]\ntopics = [[\"a\"]]\n",
                "run.topics",
                "expected a string, number, boolean or list",
            ),
        ] {
            let file = write(&format!(
                "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\n{text}"
            ));
            let error = ConsumerConfig::from_file_with(file.path(), &COMMANDS).unwrap_err();
            assert_eq!(error.key, key, "{text}: {error}");
            assert_eq!(error.value, file.path().display().to_string(), "{text}");
            assert!(error.reason.contains(reason), "{text}: {error}");
        }
    }

    #[test]
    fn the_other_commands_settings_are_read_and_left_to_them() {
        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nlog_format = \"json\"\n\
             [run]\ntarget_url = \"http://localhost:8080\"\nbackoff_max_ms = 2000\n\
             [monitor]\ndlq_topics = [\"a-dlt\", \"b-dlt\"]\n[dlq]\nrate = 10\n",
        );
        let config = ConsumerConfig::from_file_with(file.path(), &COMMANDS).unwrap();
        assert_eq!(config.backoff_max, std::time::Duration::from_secs(2));
        let read = ConfigFile::read(file.path(), &COMMANDS).unwrap();
        let dlq_topics = read
            .settings()
            .iter()
            .find(|s| s.key == "dlq_topics")
            .unwrap();
        assert_eq!(dlq_topics.section.as_deref(), Some("monitor"));
        assert_eq!(dlq_topics.text, "a-dlt,b-dlt");
    }
}
