//! Glue between librdkafka and `tracing`: librdkafka's own log lines and client errors become
//! `tracing` events (target `librdkafka`), so one subscriber sees everything.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

/// A client context that sends librdkafka's logs and errors to `tracing`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogContext;

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_rdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

/// Sends one librdkafka log line to `tracing` at the matching level; warnings and worse go
/// through the [`log_gate`] (repeats held back, a summary every 30 s).
pub(crate) fn log_rdkafka(level: RDKafkaLogLevel, fac: &str, message: &str) {
    use RDKafkaLogLevel::*;
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

/// Logs a client-level error (broker down, authentication failure, …) through the
/// [`log_gate`]. librdkafka retries these by itself; they are logged, never fatal.
pub(crate) fn log_client_error(error: &KafkaError, reason: &str) {
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

mod client_options;
pub mod headers;
pub mod log_gate;
pub mod topics;

pub use client_options::ClientOptions;
