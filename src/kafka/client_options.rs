//! Raw librdkafka properties for kafka-dlq's Kafka clients: [`ClientOptions`].

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::ClientConfig;

/// librdkafka properties (`security.protocol`, `sasl.password`, timeouts, …) for every Kafka
/// client of a consumer, monitor or replay, applied last over kafka-dlq's own settings: those
/// the named connection settings stand for ([`Security`](crate::config::Security), each
/// remembering its setting, so that an error can name it) and the raw ones of the
/// `[librdkafka]` table and `--kafka-option`.
///
/// Its `Debug` shows the keys only, each value as `<redacted>`: values may be passwords, and
/// configs are logged. The consumer refuses the options that would break its guarantees
/// ([`refuse_raw_option`](crate::config::refuse_raw_option)) when it validates its config.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "BTreeMap<String, String>")]
pub struct ClientOptions {
    options: BTreeMap<String, String>,
    /// The named setting each property came from, when one did.
    named: BTreeMap<String, &'static str>,
}

impl From<BTreeMap<String, String>> for ClientOptions {
    fn from(options: BTreeMap<String, String>) -> Self {
        Self {
            options,
            named: BTreeMap::new(),
        }
    }
}

impl ClientOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`; returns the value it had.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let key = key.into();
        self.named.remove(&key);
        self.options.insert(key, value.into())
    }

    /// Sets `key` to `value` for the named setting `setting` (`ssl_ca_location`, …).
    pub fn insert_named(&mut self, key: &str, value: &str, setting: &'static str) {
        self.options.insert(key.to_string(), value.to_string());
        self.named.insert(key.to_string(), setting);
    }

    /// The named setting that set `key`, if one did.
    pub fn setting_of(&self, key: &str) -> Option<&'static str> {
        self.named.get(key).copied()
    }

    /// How an error names the property `key`: its named setting (`ssl_ca_location`), or
    /// `librdkafka.<key>`.
    pub fn name_of(&self, key: &str) -> String {
        self.setting_of(key)
            .map_or_else(|| format!("librdkafka.{key}"), str::to_string)
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.options.contains_key(key)
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// Every option, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Sets every option on `config`, last, and which librdkafka log lines reach `tracing`:
    /// warnings and worse, or everything when the `debug` option is set.
    pub fn apply(&self, config: &mut ClientConfig) {
        for (key, value) in &self.options {
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
            .entries(self.options.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ClientOptions {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(options: I) -> Self {
        BTreeMap::from_iter(options.into_iter().map(|(k, v)| (k.into(), v.into()))).into()
    }
}

impl std::ops::Index<&str> for ClientOptions {
    type Output = str;

    /// The value of `key`; panics when it is not set.
    fn index(&self, key: &str) -> &str {
        &self.options[key]
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
