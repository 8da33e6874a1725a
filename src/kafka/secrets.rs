//! Secrets in a client's configuration: which properties hold one, and librdkafka's errors
//! with them cut out. librdkafka quotes the value it refuses (`Invalid value "…" for
//! configuration property "ssl.key.password"`) and rust-rdkafka's error prints it again, so
//! every client is created through [`create`], whose errors never carry a secret.

use rdkafka::client::ClientContext;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::ClientConfig;

/// What an error shows instead of a secret.
pub const REDACTED: &str = "<redacted>";

/// Whether the librdkafka property `key` holds a secret (a password, a client secret, a
/// private key, a JAAS text, a token): its value is never shown.
pub fn is_secret_property(key: &str) -> bool {
    [
        "password",
        "secret",
        "jaas",
        "token",
        "key.pem",
        "oauthbearer.config",
        "credential",
        "private",
    ]
    .iter()
    .any(|s| key.contains(s))
}

/// Creates a client of `config` with `context`; an error never shows a secret of `config`.
/// A client whose OAUTHBEARER tokens are Amazon MSK IAM's gets its first token now
/// (`msk_iam::hand_over`: an admin client would never ask for one).
pub fn create<C, T>(config: &ClientConfig, context: C) -> KafkaResult<T>
where
    C: ClientContext,
    T: FromClientConfigAndContext<C> + super::Handle,
{
    let client: T = config
        .create_with_context(context)
        .map_err(|e| redact_error(config, e))?;
    #[cfg(feature = "msk-iam")]
    super::msk_iam::hand_over(config, client.handle()).map_err(KafkaError::ClientCreation)?;
    Ok(client)
}

/// `error` with the secrets of `config` cut out.
pub fn redact_error(config: &ClientConfig, error: KafkaError) -> KafkaError {
    match error {
        KafkaError::ClientConfig(code, text, key, value) => {
            let value = if is_secret_property(&key) {
                REDACTED.to_string()
            } else {
                value
            };
            KafkaError::ClientConfig(code, redact_text(config, &text), key, value)
        }
        KafkaError::ClientCreation(text) => KafkaError::ClientCreation(redact_text(config, &text)),
        other => other,
    }
}

/// `text` with every secret value of `config` replaced by [`REDACTED`].
pub(super) fn redact_text(config: &ClientConfig, text: &str) -> String {
    let mut out = text.to_string();
    let mut secrets: Vec<&str> = config
        .config_map()
        .keys()
        .filter(|k| is_secret_property(k))
        .filter_map(|k| config.get(k))
        .filter(|v| !v.is_empty())
        .collect();
    // The longest first, so that a secret holding another is cut whole.
    secrets.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for secret in secrets {
        out = out.replace(secret, REDACTED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::BaseConsumer;
    use rdkafka::consumer::DefaultConsumerContext;

    #[test]
    fn a_refused_secret_is_never_in_the_error() {
        let mut config = ClientConfig::new();
        config
            .set("sasl.password", "hunter2")
            .set("ssl.key.password", "hunter3");
        // librdkafka's own words for a refused value, as rust-rdkafka carries them.
        let refused = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"hunter3\" for configuration property \"ssl.key.password\"".into(),
            "ssl.key.password".into(),
            "hunter3".into(),
        );
        let error = redact_error(&config, refused);
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("hunter3"), "{shown}");
        assert!(shown.contains("ssl.key.password"), "{shown}");
        let created = KafkaError::ClientCreation("failed with hunter2 in it".into());
        let shown = redact_error(&config, created).to_string();
        assert_eq!(shown, "Client creation error: failed with <redacted> in it");
        // A client of the real library: whatever it refuses, no secret comes back.
        config
            .set("group.id", "g")
            .set("security.protocol", "NONSENSE");
        let error = create::<_, BaseConsumer>(&config, DefaultConsumerContext)
            .err()
            .expect("an unknown protocol is refused");
        let shown = format!("{error} {error:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
        assert!(shown.contains("security.protocol"), "{shown}");
    }

    #[test]
    fn which_properties_are_secret() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "ssl.key.pem",
            "sasl.jaas.config",
            "sasl.oauthbearer.config",
        ] {
            assert!(is_secret_property(key), "{key}");
        }
        for key in ["sasl.username", "ssl.ca.location", "security.protocol"] {
            assert!(!is_secret_property(key), "{key}");
        }
    }
}
