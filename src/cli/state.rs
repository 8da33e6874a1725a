//! Where kafka-dlq keeps its state, the same flags for every command that reads or writes it
//! (`run --monitor`, `monitor`, `console`, `dlq …`): the audit topic (its positions topic is
//! named after it) and the key that seals both.

use std::path::PathBuf;

use clap::Args;
use kafka_dlq::state::{StateKey, StateTopics};
use kafka_dlq::ConfigError;

/// Flags of kafka-dlq's state.
#[derive(Debug, Clone, Args)]
pub(super) struct StateArgs {
    /// The audit topic: every replay, redrive, discard and restore is recorded there, kept for
    /// ever; replay positions are kept in `<audit topic>-positions` (compacted).
    #[arg(long, env = "KAFKA_DLQ_AUDIT_TOPIC", default_value = kafka_dlq::state::DEFAULT_AUDIT_TOPIC)]
    pub audit_topic: String,
    /// A key (16 bytes or more) shared by every kafka-dlq tool of the cluster: records of the
    /// audit and positions topics are sealed with it, and those not sealed with it are
    /// ignored (secret: never logged).
    #[arg(long, env = "KAFKA_DLQ_AUDIT_KEY", hide_env_values = true)]
    audit_key: Option<String>,
    /// A file holding the audit key.
    #[arg(long, env = "KAFKA_DLQ_AUDIT_KEY_FILE")]
    audit_key_file: Option<PathBuf>,
}

impl StateArgs {
    /// The state topics, sealed with the key when one is given.
    pub(super) fn topics(&self) -> Result<StateTopics, ConfigError> {
        kafka_dlq::dlq::check_topic_name(&self.audit_topic)
            .map_err(|why| ConfigError::new("audit_topic", &self.audit_topic, why))?;
        let text = kafka_dlq::config::secret_setting(
            "audit_key",
            self.audit_key.as_deref(),
            self.audit_key_file.as_deref(),
        )?;
        let key = text
            .map(|t| StateKey::new(&t))
            .transpose()
            .map_err(|e| ConfigError::new("audit_key", "<redacted>", e))?;
        Ok(StateTopics::new(&self.audit_topic).sealed_with(key))
    }
}
