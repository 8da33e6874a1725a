//! The Kafka clients' configurations, checked by librdkafka itself without connecting:
//! [`check_client`] and [`ConsumerConfig::check_clients`].
//!
//! A setting can be well-formed and still refused by librdkafka: a CA file that is not PEM, a
//! property this build lacks, a mechanism without what it needs. librdkafka says so only when
//! a client is created. `kafka-dlq config check` creates each client the way its command
//! does, without bootstrap servers (so nothing connects), and reports the refusal as a
//! [`ConfigError`] naming the setting, never with a secret in it.

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use super::{ConfigError, ConsumerConfig};
use crate::kafka::{ClientOptions, LogContext};

/// Which kind of client a configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// A consumer (or an admin client, or a reader of watermarks).
    Consumer,
    /// A producer.
    Producer,
}

/// Creates a client of `kind` with `config`, minus its bootstrap servers, and drops it:
/// librdkafka checks every property, loads the CA and the client's key, and sets up SASL. What
/// it refuses is a [`ConfigError`] naming the setting (through `options`, which set it).
pub fn check_client(
    config: &ClientConfig,
    kind: ClientKind,
    options: &ClientOptions,
) -> Result<(), ConfigError> {
    let mut offline = config.clone();
    offline.remove("bootstrap.servers");
    offline.remove("metadata.broker.list");
    let created = match kind {
        ClientKind::Consumer => {
            crate::kafka::create_logged::<BaseConsumer<LogContext>>(&offline).map(drop)
        }
        ClientKind::Producer => {
            crate::kafka::create_logged::<FutureProducer<LogContext>>(&offline).map(drop)
        }
    };
    created.map_err(|e| refused(options, e))
}

/// librdkafka's refusal `error` as the setting it concerns: the property it names (or its
/// text mentions), as the named setting that set it or `librdkafka.<key>`.
pub fn refused(options: &ClientOptions, error: KafkaError) -> ConfigError {
    match &error {
        KafkaError::ClientConfig(_, text, key, value) => {
            let value = if crate::kafka::is_secret_property(key) {
                crate::kafka::REDACTED
            } else {
                value
            };
            ConfigError::new(
                &options.name_of(key),
                value,
                format!("librdkafka refuses it: {text}"),
            )
        }
        other => {
            let text = match other {
                KafkaError::ClientCreation(text) => text.clone(),
                other => other.to_string(),
            };
            // The longest key the text mentions: `ssl.key.location` before `ssl.key`.
            let mut keys: Vec<&str> = options.iter().map(|(k, _)| k).collect();
            keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
            let key = keys.into_iter().find(|k| text.contains(*k));
            ConfigError::new(
                &key.map_or_else(|| "librdkafka".to_string(), |k| options.name_of(k)),
                key.and_then(|k| options.get(k))
                    .filter(|_| !key.is_some_and(crate::kafka::is_secret_property))
                    .unwrap_or(crate::kafka::REDACTED),
                format!("librdkafka refuses it: {text}"),
            )
        }
    }
}

impl ConsumerConfig {
    /// Validates the settings, then creates the consumer's and the dead-letter producer's
    /// clients as [`Consumer::new`](crate::Consumer::new) does, without connecting (see the
    /// [module docs](self)).
    pub fn check_clients(&self) -> Result<(), ConfigError> {
        self.validate()?;
        check_client(
            &self.consumer_client_config(),
            ClientKind::Consumer,
            &self.librdkafka,
        )?;
        check_client(
            &self.producer_client_config(),
            ClientKind::Producer,
            &self.librdkafka,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_librdkafka_refuses_is_named_by_its_setting() {
        let mut named = ClientOptions::new();
        named.insert_named("ssl.ca.location", "/etc/hostname", "ssl_ca_location");
        named.insert_named("security.protocol", "SSL", "security_protocol");
        let config = ConsumerConfig {
            librdkafka: named,
            ..ConsumerConfig::new("localhost:9092", "g", ["t"])
        };
        let error = config.check_clients().unwrap_err();
        assert_eq!(error.key, "ssl_ca_location", "{error}");
        assert!(error.reason.contains("librdkafka refuses it"), "{error}");

        let raw: ClientOptions = [("socket.timeout.ms", "many")].into_iter().collect();
        let config = ConsumerConfig {
            librdkafka: raw,
            ..ConsumerConfig::new("localhost:9092", "g", ["t"])
        };
        let error = config.check_clients().unwrap_err();
        assert_eq!(error.key, "librdkafka.socket.timeout.ms", "{error}");
    }

    #[test]
    fn a_good_configuration_passes_without_a_broker() {
        let config = ConsumerConfig::new("localhost:1", "g", ["t"]);
        config.check_clients().unwrap();
    }
}
