//! Raw librdkafka properties for kafka-dlq's Kafka clients: [`ClientOptions`].

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::ClientConfig;

/// Raw librdkafka properties (`security.protocol`, `sasl.password`, timeouts, …) for every
/// Kafka client of a consumer, monitor or replay, applied last over kafka-dlq's own settings.
///
/// Its `Debug` shows the keys only, each value as `<redacted>`: values may be passwords, and
/// configs are logged. The consumer refuses the options that would break its guarantees
/// ([`refuse_raw_option`](crate::config::refuse_raw_option)) when it validates its config.
/// In the config file it is the `[librdkafka]` table.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct ClientOptions(BTreeMap<String, String>);

impl ClientOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`; returns the value it had.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        self.0.insert(key.into(), value.into())
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every option, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Sets every option on `config`, last, and which librdkafka log lines reach `tracing`:
    /// warnings and worse, or everything when the `debug` option is set.
    pub fn apply(&self, config: &mut ClientConfig) {
        for (key, value) in &self.0 {
            config.set(key, value);
        }
        let level = if self.contains_key("debug") {
            RDKafkaLogLevel::Debug
        } else {
            RDKafkaLogLevel::Warning
        };
        config.set_log_level(level);
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ClientOptions {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(options: I) -> Self {
        Self(
            options
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl std::ops::Index<&str> for ClientOptions {
    type Output = str;

    /// The value of `key`; panics when it is not set.
    fn index(&self, key: &str) -> &str {
        &self.0[key]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_keys_and_never_a_value() {
        let options: ClientOptions = [("sasl.username", "svc"), ("sasl.password", "hunter2")]
            .into_iter()
            .collect();
        let shown = format!("{options:?}");
        assert_eq!(
            shown,
            r#"{"sasl.password": "<redacted>", "sasl.username": "<redacted>"}"#
        );
        assert!(!shown.contains("hunter2") && !shown.contains("svc"));
        assert_eq!(&options["sasl.password"], "hunter2");
    }

    #[test]
    fn applies_its_options_and_the_log_level() {
        let mut options = ClientOptions::new();
        options.insert("socket.timeout.ms", "30000");
        let mut config = ClientConfig::new();
        options.apply(&mut config);
        assert_eq!(config.get("socket.timeout.ms"), Some("30000"));
        assert!(matches!(config.log_level, RDKafkaLogLevel::Warning));
        options.insert("debug", "consumer");
        options.apply(&mut config);
        assert!(matches!(config.log_level, RDKafkaLogLevel::Debug));
    }
}
