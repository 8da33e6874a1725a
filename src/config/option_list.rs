//! Raw librdkafka options written as text, `KEY=VALUE[,KEY=VALUE…]`: the binary's
//! `--kafka-option` / `KAFKA_OPTIONS`, and `kafka_options` in a config file (beside the
//! `[librdkafka]` table, which says the same as a TOML table).

use crate::kafka::ClientOptions;
use crate::ConfigError;

/// Parses `KEY=VALUE` librdkafka options. Each value may hold several, comma-separated: a
/// comma starts the next option only where a librdkafka property and `=` follow it (a key
/// of lower-case letters, digits, `_` and `-` with a `.` in it, or `acks`, `debug`,
/// `retries`, `partitioner`), so a password with a comma stays whole. An error never shows
/// a value.
pub fn parse_kafka_options(options: &[String]) -> Result<ClientOptions, ConfigError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for option in options {
        for piece in split_options(option) {
            let (key, value) = piece.split_once('=').ok_or_else(|| {
                ConfigError::new(
                    "kafka_option",
                    "<redacted>",
                    "expected KEY=VALUE (a librdkafka property and its value)",
                )
            })?;
            pairs.push((key.trim().to_string(), value.to_string()));
        }
    }
    Ok(pairs.into_iter().collect())
}

/// The options in one `KEY=VALUE[,KEY=VALUE…]` text.
fn split_options(text: &str) -> Vec<&str> {
    let starts_option = |rest: &str| {
        rest.split_once('=').is_some_and(|(key, _)| {
            let word = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-_".contains(c));
            word && (key.contains('.')
                || ["acks", "debug", "retries", "partitioner"].contains(&key))
        })
    };
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == ',' && starts_option(&text[i + 1..]) {
            out.push(&text[start..i]);
            start = i + 1;
        }
    }
    out.push(&text[start..]);
    out.retain(|piece| !piece.trim().is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_in_a_value_does_not_split_it() {
        let options = parse_kafka_options(&[
            "security.protocol=SASL_SSL,sasl.password=ab,cd=,ef,sasl.username=svc".to_string(),
            "socket.timeout.ms=30000".to_string(),
        ])
        .unwrap();
        assert_eq!(options.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(options.get("sasl.password"), Some("ab,cd=,ef"));
        assert_eq!(options.get("sasl.username"), Some("svc"));
        assert_eq!(options.get("socket.timeout.ms"), Some("30000"));
    }

    #[test]
    fn a_bad_option_is_named_without_its_value() {
        let error = parse_kafka_options(&["hunter2".to_string()]).unwrap_err();
        assert_eq!(error.key, "kafka_option");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }
}
