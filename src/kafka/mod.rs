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

/// Sends one librdkafka log line to `tracing` at the matching level.
pub(crate) fn log_rdkafka(level: RDKafkaLogLevel, fac: &str, message: &str) {
    use RDKafkaLogLevel::*;
    match level {
        Emerg | Alert | Critical | Error => {
            tracing::error!(target: "librdkafka", facility = fac, "{message}")
        }
        Warning => tracing::warn!(target: "librdkafka", facility = fac, "{message}"),
        Notice | Info => tracing::info!(target: "librdkafka", facility = fac, "{message}"),
        Debug => tracing::debug!(target: "librdkafka", facility = fac, "{message}"),
    }
}

/// Logs a client-level error (broker down, authentication failure, …). librdkafka retries
/// these by itself; they are logged, never fatal to the service.
pub(crate) fn log_client_error(error: &KafkaError, reason: &str) {
    tracing::warn!(target: "librdkafka", event = "kafka_client_error", error = %error, "{reason}");
}

impl rdkafka::consumer::ConsumerContext for LogContext {}

pub mod headers;
