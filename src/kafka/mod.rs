//! Glue between librdkafka and `tracing`: librdkafka's own log lines and client errors become
//! `tracing` events (target `librdkafka`), so one subscriber sees everything.

use std::sync::Arc;

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::ClientConfig;

/// A client context that sends librdkafka's logs and errors to `tracing`; a refused
/// connection is reported naming the cluster ([`LogContext::of`]).
#[derive(Debug, Clone, Default)]
pub struct LogContext {
    /// Where and how the client connects: `<brokers> (<protocol>[, <mechanism>])`.
    cluster: Arc<str>,
}

impl LogContext {
    /// The context of a client of `config`.
    pub fn of(config: &ClientConfig) -> Self {
        Self {
            cluster: connect::cluster_of(config).into(),
        }
    }
}

impl ClientContext for LogContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_rdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason, &self.cluster);
    }

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        oauth_token(config)
    }
}

/// The OAUTHBEARER token librdkafka asks a client for, `config` being its
/// `sasl.oauthbearer.config`: Amazon MSK IAM's ([`msk_iam`], feature `msk-iam`). Tokens from
/// an OpenID Connect endpoint are librdkafka's own business and never asked for here. Every
/// context of kafka-dlq answers with this.
pub fn oauth_token(config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
    #[cfg(feature = "msk-iam")]
    {
        let token = msk_iam::token_for(config)?;
        Ok(OAuthToken {
            token: token.value,
            principal_name: token.principal,
            lifetime_ms: token.expires_ms,
        })
    }
    #[cfg(not(feature = "msk-iam"))]
    {
        let _ = config;
        Err(
            "no OAUTHBEARER token source: set oauth_token_endpoint, oauth_client_id and \
             oauth_client_secret (OpenID Connect)"
                .into(),
        )
    }
}

/// A client type of rust-rdkafka, seen as the librdkafka client under it.
pub trait Handle {
    /// The context of the client under it.
    type Context: ClientContext;
    /// The client.
    fn handle(&self) -> &rdkafka::client::Client<Self::Context>;
}

impl<C: rdkafka::consumer::ConsumerContext> Handle for rdkafka::consumer::BaseConsumer<C> {
    type Context = C;
    fn handle(&self) -> &rdkafka::client::Client<C> {
        rdkafka::consumer::Consumer::client(self)
    }
}

impl<C: rdkafka::consumer::ConsumerContext + 'static> Handle
    for rdkafka::consumer::StreamConsumer<C>
{
    type Context = C;
    fn handle(&self) -> &rdkafka::client::Client<C> {
        rdkafka::consumer::Consumer::client(self)
    }
}

impl<C: ClientContext + 'static> Handle for rdkafka::producer::FutureProducer<C> {
    type Context = rdkafka::producer::future_producer::FutureProducerContext<C>;
    fn handle(&self) -> &rdkafka::client::Client<Self::Context> {
        rdkafka::producer::Producer::client(self)
    }
}

impl<C: ClientContext> Handle for rdkafka::admin::AdminClient<C> {
    type Context = C;
    fn handle(&self) -> &rdkafka::client::Client<C> {
        self.inner()
    }
}

/// Creates a client of `config` with a [`LogContext`] naming its cluster; an error never
/// shows a secret of `config` ([`create`]).
pub fn create_logged<T: FromClientConfigAndContext<LogContext> + Handle>(
    config: &ClientConfig,
) -> KafkaResult<T> {
    create(config, LogContext::of(config))
}

/// Sends one librdkafka log line to `tracing` at the matching level; warnings and worse go
/// through the [`log_gate`] (repeats held back, a summary every 30 s).
pub(crate) fn log_rdkafka(level: RDKafkaLogLevel, fac: &str, message: &str) {
    use RDKafkaLogLevel::*;
    // A refused connection comes as an error event too, reported once with what to check
    // ([`log_client_error`]): its log line would say it again. (A token librdkafka could not
    // get is only logged: kept.)
    if Refusal::of(message).is_some_and(|r| r.is_lasting() && r != Refusal::Token) {
        tracing::debug!(target: "librdkafka", facility = fac, "{message}");
        return;
    }
    if matches!(level, Emerg | Alert | Critical | Error | Warning) {
        match log_gate::judge(fac, message) {
            log_gate::Verdict::First => {}
            log_gate::Verdict::Repeat => return,
            log_gate::Verdict::Summary { held_back } => {
                tracing::warn!(target: "librdkafka", facility = fac, held_back,
                    "{message} (still happening: {held_back} more like it in the last 30 s)");
                return;
            }
        }
    }
    match level {
        Emerg | Alert | Critical | Error => {
            tracing::error!(target: "librdkafka", facility = fac, "{message}")
        }
        Warning => tracing::warn!(target: "librdkafka", facility = fac, "{message}"),
        Notice | Info => tracing::info!(target: "librdkafka", facility = fac, "{message}"),
        Debug => tracing::debug!(target: "librdkafka", facility = fac, "{message}"),
    }
}

/// Logs a client-level error (broker down, authentication failure, …) of a client of
/// `cluster` (`<brokers> (<protocol>…)`) through the [`log_gate`]. librdkafka retries these
/// by itself; they are logged, never fatal. A refusal that retrying cannot mend (a wrong
/// password, an untrusted CA: [`Refusal`]) is an error line naming the cluster and what to
/// check, once for all the process's clients (then a count every 30 s).
pub(crate) fn log_client_error(error: &KafkaError, reason: &str, cluster: &str) {
    if let Some(refusal) = Refusal::of(reason).filter(|r| r.is_lasting()) {
        let line = ConnectFailure {
            cluster: cluster.to_string(),
            refusal: Some(refusal),
            detail: reason.to_string(),
        }
        .to_string();
        match log_gate::judge("kafka_connection_refused", refusal.advice()) {
            log_gate::Verdict::First => {
                tracing::error!(target: "librdkafka", event = "kafka_connection_refused", "{line}")
            }
            log_gate::Verdict::Repeat => {}
            log_gate::Verdict::Summary { held_back } => tracing::error!(target: "librdkafka",
                event = "kafka_connection_refused", held_back,
                "{line} (still refused: {held_back} more like it in the last 30 s)"),
        }
        return;
    }
    let text = format!("{error}: {reason}");
    match log_gate::judge("kafka_client_error", &text) {
        log_gate::Verdict::First => {
            tracing::warn!(target: "librdkafka", event = "kafka_client_error", error = %error, "{reason}")
        }
        log_gate::Verdict::Repeat => {}
        log_gate::Verdict::Summary { held_back } => {
            tracing::warn!(target: "librdkafka", event = "kafka_client_error", error = %error,
                held_back, "{reason} (still happening: {held_back} more like it in the last 30 s)")
        }
    }
}

/// Logs `event` at warn level through the [`log_gate`]: the first of its kind, then a
/// summary every 30 s with the count held back.
pub(crate) fn warn_gated(event: &'static str, error: &dyn std::fmt::Display, context: &str) {
    let text = format!("{context} {error}");
    match log_gate::judge(event, &text) {
        log_gate::Verdict::First => tracing::warn!(event, error = %error, "{context}"),
        log_gate::Verdict::Repeat => {}
        log_gate::Verdict::Summary { held_back } => tracing::warn!(event, error = %error,
            held_back, "{context} (still happening: {held_back} more like it in the last 30 s)"),
    }
}

impl rdkafka::consumer::ConsumerContext for LogContext {}

mod certificate;
mod client_options;
pub mod connect;
pub mod headers;
pub mod log_gate;
#[cfg(feature = "msk-iam")]
pub mod msk_iam;
pub(crate) mod native_queue;
mod refusal;
mod secrets;
pub(crate) mod send;
pub mod topics;

pub use client_options::ClientOptions;
pub use connect::{cluster_of, security_of, ConnectFailure};
pub use refusal::Refusal;
pub use secrets::{create, is_secret_property, redact_error, REDACTED};
