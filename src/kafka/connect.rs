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

/// Why a connection was refused, as librdkafka reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The broker refused the SASL user name or password.
    Credentials,
    /// The broker refused the OAuth token, or no token could be had from the token endpoint.
    Token,
    /// The broker's certificate could not be verified (librdkafka does not say why: an
    /// untrusted CA, an expired certificate or another host name; see
    /// [`certificate::diagnose`](super::certificate::diagnose)).
    Unverified,
    /// The broker's certificate is signed by a CA this client does not trust.
    UnknownCa,
    /// The broker's certificate has expired (or is not valid yet).
    ExpiredCertificate,
    /// The broker's certificate is for another host name.
    HostnameMismatch,
    /// The broker wants a client certificate (mutual TLS), or refused the one given.
    ClientCertificate,
    /// The client's protocol is not the listener's (TLS against a plaintext listener, or the
    /// other way round).
    WrongProtocol,
    /// Another TLS failure.
    Tls,
    /// No broker answers at that address.
    Unreachable,
}

impl Refusal {
    /// The refusal librdkafka's error text `text` describes, if it is one.
    pub fn of(text: &str) -> Option<Refusal> {
        let t = text.to_ascii_lowercase();
        let has = |s: &str| t.contains(s);
        Some(
            if has("oauthbearer") || has("invalid_token") || has("oidc") || has("token endpoint") {
                Refusal::Token
            } else if has("sasl authentication error")
                || has("invalid credentials")
                || has("invalid username or password")
            {
                Refusal::Credentials
            } else if has("certificate has expired") || has("certificate is not yet valid") {
                Refusal::ExpiredCertificate
            } else if has("hostname mismatch") || has("ip address mismatch") {
                Refusal::HostnameMismatch
            } else if has("unable to get local issuer certificate")
                || has("self-signed certificate")
                || has("self signed certificate")
                || has("unable to get issuer certificate")
            {
                Refusal::UnknownCa
            } else if has("certificate verify failed") || has("could not be verified") {
                Refusal::Unverified
            } else if has("certificate required")
                || has("bad certificate")
                || has("unknown ca")
                || has("ssl.certificate.location")
                || has("ssl.key")
            {
                Refusal::ClientCertificate
            } else if has("incorrect security.protocol")
                || (has("disconnected") && has("apiversion_query"))
                || has("wrong version number")
                || has("packet length too long")
                || has("record layer failure")
            {
                Refusal::WrongProtocol
            } else if has("ssl handshake failed") || has("ssl:") {
                Refusal::Tls
            } else if has("connection refused")
                || has("brokers are down")
                || has("broker connections are down")
                || has("failed to resolve")
                || has("connect to")
            {
                Refusal::Unreachable
            } else {
                return None;
            },
        )
    }

    /// Whether retrying can help: a broker that is down may come up, a wrong password never
    /// turns right.
    pub fn is_lasting(self) -> bool {
        !matches!(self, Refusal::Unreachable)
    }

    /// What to check, in a few words.
    pub fn advice(self) -> &'static str {
        match self {
            Refusal::Credentials => "the broker refused the user name or password (check sasl_username, sasl_password and sasl_mechanism)",
            Refusal::Token => "no valid OAuth token (check oauth_token_endpoint, oauth_client_id, oauth_client_secret and oauth_scope, and the token's lifetime)",
            Refusal::Unverified => "the broker's certificate could not be verified: its CA is not trusted (set ssl_ca_location), it has expired, or it is for another host name",
            Refusal::UnknownCa => "the broker's certificate is signed by a CA this client does not trust (set ssl_ca_location to the CA's PEM file)",
            Refusal::ExpiredCertificate => "the broker's certificate has expired (or is not valid yet)",
            Refusal::HostnameMismatch => "the broker's certificate is for another host name than the one connected to (use the name the certificate is for in brokers)",
            Refusal::ClientCertificate => "the broker wants a client certificate it trusts (set ssl_certificate_location and ssl_key_location)",
            Refusal::WrongProtocol => "the listener speaks another protocol (check security_protocol: SSL or SASL_SSL for a TLS listener)",
            Refusal::Tls => "the TLS handshake failed",
            Refusal::Unreachable => "no broker answers at that address",
        }
    }
}

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
    fn librdkafkas_words_for_each_refusal() {
        for (text, refusal) in [
            ("sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state AUTH_REQ)", Refusal::Credentials),
            ("sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed: Invalid username or password (after 2ms in state AUTH_REQ)", Refusal::Credentials),
            ("ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 4ms in state SSL_HANDSHAKE)", Refusal::Unverified),
            ("ssl://127.0.0.1:9094/bootstrap: Failed to verify broker certificate: unable to get local issuer certificate", Refusal::UnknownCa),
            ("ssl://127.0.0.1:9095/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: certificate has expired (after 3ms in state SSL_HANDSHAKE)", Refusal::ExpiredCertificate),
            ("ssl://127.0.0.1:9096/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: Hostname mismatch (after 3ms in state SSL_HANDSHAKE)", Refusal::HostnameMismatch),
            ("sasl_ssl://127.0.0.1:9097/bootstrap: SASL authentication error: {\"status\":\"invalid_token\"} (after 5ms in state AUTH_REQ)", Refusal::Token),
            ("Failed to acquire SASL OAUTHBEARER token: Must supply an unexpired token", Refusal::Token),
            ("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)", Refusal::Unreachable),
            ("127.0.0.1:33169/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 59ms in state APIVERSION_QUERY)", Refusal::WrongProtocol),
            ("127.0.0.1:9093/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10 (see api.version.request) (after 2ms in state APIVERSION_QUERY)", Refusal::WrongProtocol),
            ("ssl://127.0.0.1:9098/bootstrap: SSL handshake failed: ssl/record/rec_layer_s3.c:1605: error:0A00045C:SSL routines::tlsv13 alert certificate required: SSL alert number 116 (after 3ms in state SSL_HANDSHAKE)", Refusal::ClientCertificate),
        ] {
            assert_eq!(Refusal::of(text), Some(refusal), "{text}");
        }
        assert_eq!(Refusal::of("Local: Broker transport failure"), None);
        assert!(!Refusal::Unreachable.is_lasting());
        assert!(Refusal::Credentials.is_lasting());
    }

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
