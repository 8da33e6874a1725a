//! Connecting to a cluster, and what a refusal means.
//!
//! librdkafka retries a connection that fails, whatever the reason, for as long as the
//! client lives, and says why in an error event (`SASL authentication error: …`, `SSL
//! handshake failed: … certificate verify failed …`). A wrong password or an untrusted CA does
//! not get better by retrying, so kafka-dlq names it: [`Refusal::of`] reads librdkafka's
//! words, the tools fail at once with one line ([`check`]: broker, protocol and mechanism,
//! what was refused), and the long-running commands log that line and show it on `/readyz`.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use super::refusal::Refusal;

/// A cluster that could not be reached or would not let the client in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailure {
    /// The bootstrap servers, and how the client connects ([`cluster_of`]).
    pub cluster: String,
    /// Why, when librdkafka said.
    pub refusal: Option<Refusal>,
    /// librdkafka's own words (secrets cut out).
    pub detail: String,
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot connect to Kafka at {}: ", self.cluster)?;
        match self.refusal {
            Some(r) => write!(f, "{}", r.advice())?,
            None => write!(f, "no answer")?,
        }
        if !self.detail.is_empty() {
            write!(f, " [librdkafka: {}]", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConnectFailure {}

/// How a client configuration connects, as a failure names it: `SASL_SSL, SCRAM-SHA-512`.
pub fn security_of(config: &ClientConfig) -> String {
    let protocol = config
        .get("security.protocol")
        .unwrap_or("PLAINTEXT")
        .to_ascii_uppercase();
    match config
        .get("sasl.mechanism")
        .or(config.get("sasl.mechanisms"))
    {
        Some(m) if protocol.starts_with("SASL") => {
            format!("{protocol}, {}", m.to_ascii_uppercase())
        }
        _ => protocol,
    }
}

/// Where and how a client of `config` connects, as a failure names it:
/// `b-1.example.com:9096 (SASL_SSL, SCRAM-SHA-512)`.
pub fn cluster_of(config: &ClientConfig) -> String {
    format!(
        "{} ({})",
        config.get("bootstrap.servers").unwrap_or_default(),
        security_of(config)
    )
}

/// Collects the client errors librdkafka reports while connecting.
#[derive(Clone, Default)]
struct Watch(Arc<Mutex<Vec<String>>>);

impl ClientContext for Watch {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        super::oauth_token(config)
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // A refusal also shows in the log (a token it could not get, a listener of another
        // protocol closing the connection): kept.
        if !matches!(level, RDKafkaLogLevel::Debug) {
            self.0
                .lock()
                .expect("watch lock")
                .push(format!("{fac}: {message}"));
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.0
            .lock()
            .expect("watch lock")
            .push(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for Watch {}

/// Connects with `config` (bootstrap servers and options set) and asks for the cluster's
/// topics; returns their names. Fails as soon as librdkafka reports a lasting refusal (wrong
/// password, untrusted CA, expired certificate, …), or after `timeout` with the last thing it
/// said. Blocks: call it off the async threads.
pub fn check(config: &ClientConfig, timeout: Duration) -> Result<Vec<String>, ConnectFailure> {
    let watch = Watch::default();
    let failure = |refusal: Option<Refusal>, detail: String| ConnectFailure {
        cluster: cluster_of(config),
        refusal,
        detail: super::secrets::redact_text(config, &detail),
    };
    let mut probe = config.clone();
    // Not a member of anything: it only asks for metadata.
    probe.remove("group.id");
    // librdkafka tells a listener of another protocol only in an informational line.
    if !matches!(probe.log_level, RDKafkaLogLevel::Debug) {
        probe.set_log_level(RDKafkaLogLevel::Info);
    }
    let consumer: BaseConsumer<Watch> =
        super::create(&probe, watch.clone()).map_err(|e| failure(None, e.to_string()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match consumer.fetch_metadata(None, Duration::from_millis(500)) {
            Ok(metadata) if !metadata.brokers().is_empty() => {
                return Ok(metadata
                    .topics()
                    .iter()
                    .filter(|t| t.error().is_none())
                    .map(|t| t.name().to_string())
                    .collect())
            }
            _ => {}
        }
        // Serves the error events queued meanwhile into the watch.
        let _ = consumer.poll(Duration::ZERO);
        let said = watch.0.lock().expect("watch lock").clone();
        if let Some((refusal, text)) = said
            .iter()
            .find_map(|t| Refusal::of(t).filter(|r| r.is_lasting()).map(|r| (r, t)))
        {
            // librdkafka does not say why a certificate failed: OpenSSL is asked.
            let refusal = match refusal {
                Refusal::Unverified => super::certificate::diagnose(config).unwrap_or(refusal),
                other => other,
            };
            return Err(failure(Some(refusal), text.clone()));
        }
        if Instant::now() >= deadline {
            // librdkafka's most telling words: a refusal, else the last thing it said.
            let (refusal, text) = said
                .iter()
                .find_map(|t| Refusal::of(t).map(|r| (Some(r), t.clone())))
                .unwrap_or_else(|| (None, said.last().cloned().unwrap_or_default()));
            return Err(failure(refusal, text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_one_line_naming_broker_mechanism_and_cause() {
        let failure = ConnectFailure {
            cluster: "b-1.example.com:9096 (SASL_SSL, SCRAM-SHA-512)".into(),
            refusal: Some(Refusal::Credentials),
            detail: "SASL authentication error: invalid credentials".into(),
        };
        let line = failure.to_string();
        assert!(!line.contains('\n'));
        assert!(line.starts_with("cannot connect to Kafka at b-1.example.com:9096 (SASL_SSL, SCRAM-SHA-512): the broker refused the user name or password"), "{line}");
    }

    #[test]
    fn nothing_at_the_address_fails_after_the_timeout_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", format!("127.0.0.1:{port}"));
        let started = Instant::now();
        let failure = check(&config, Duration::from_secs(2)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(failure.refusal, Some(Refusal::Unreachable), "{failure}");
        assert_eq!(failure.cluster, format!("127.0.0.1:{port} (PLAINTEXT)"));
    }
}
