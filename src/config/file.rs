//! The configuration file for the library: [`ConsumerConfig::from_file`] reads the TOML file
//! that `kafka-dlq --config` reads.

use super::{ConfigError, ConsumerConfig};

impl ConsumerConfig {
    /// Loads and validates the settings in the TOML file that `kafka-dlq --config` reads (see
    /// `docs/operating.md`): the top-level keys that are consumer settings ([`ConsumerConfig::KEYS`]),
    /// then those of `[run]`, which win, and `[librdkafka]` as raw options. The file's other
    /// keys and tables (the sidecar's, `[monitor]`, `[dlq]`) belong to the command line and are
    /// left alone. An unreadable file, a value of the wrong type or a bad value is a
    /// [`ConfigError`] naming the setting (`config` for the file itself).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<ConsumerConfig, ConfigError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::new("config", &shown, e))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::new("config", &shown, e.message()))?;
        let mut settings = toml::Table::new();
        let mut take = |from: &toml::Table| {
            for (key, value) in from {
                if Self::KEYS.contains(&key.as_str()) && key != "librdkafka" && !value.is_table() {
                    settings.insert(key.clone(), value.clone());
                }
            }
        };
        take(&table);
        if let Some(toml::Value::Table(run)) = table.get("run") {
            take(run);
        }
        if let Some(toml::Value::Table(options)) = table.get("librdkafka") {
            let mut raw = toml::Table::new();
            for (key, value) in options {
                let text = match value {
                    toml::Value::String(s) => s.clone(),
                    other => scalar(other),
                };
                raw.insert(key.clone(), toml::Value::String(text));
            }
            settings.insert("librdkafka".into(), toml::Value::Table(raw));
        }
        let mut config = ConsumerConfig::default();
        for (key, value) in settings {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            let parsed: ConsumerConfig =
                toml::Value::Table(one)
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        ConfigError::new(
                            &key,
                            scalar(&value),
                            format!("in {shown}: {}", e.message()),
                        )
                    })?;
            config.set_from(&key, parsed);
        }
        config.validate()?;
        Ok(config)
    }
}

/// A TOML value as text, for raw options and error messages.
fn scalar(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => format!("<{}>", other.type_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Ordering;

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
        let config = ConsumerConfig::from_file(file.path()).unwrap();
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
    fn a_bad_value_names_its_setting_and_the_file() {
        let file = write(
            "brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nmax_retries = \"many\"\n",
        );
        let error = ConsumerConfig::from_file(file.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("max_retries"), "{error}");
        assert!(
            error.contains(&file.path().display().to_string()),
            "{error}"
        );

        let file =
            write("brokers = \"b:1\"\ngroup_id = \"g\"\ntopics = [\"t\"]\nordering = \"random\"\n");
        let error = ConsumerConfig::from_file(file.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("ordering"), "{error}");

        let file = write("group_id = \"g\"\ntopics = [\"t\"]\n");
        let error = ConsumerConfig::from_file(file.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("brokers"), "validated: {error}");

        let error = ConsumerConfig::from_file("/nonexistent/kafka-dlq.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains("config"), "{error}");
    }
}
