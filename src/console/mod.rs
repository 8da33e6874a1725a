//! The DLQ console: a web page and a JSON API where operators see the outstanding dead
//! letters grouped by cause, look at one in full, and redrive, discard or edit them — each
//! action on the audit topic beside `dlq replay`'s runs. Manual: `docs/console.md`.
//!
//! - [`crate::outstanding`] (beside the monitor): which dead letters are outstanding, and the
//!   inbox of them by cause, kept current;
//! - [`payload`]: how a payload is shown; [`dead_letter`]: a dead letter in the API;
//! - [`access`]: tokens, roles, sessions and CSRF; [`limits`]: how much reading at once;
//! - [`redrives`]: the redrives running, with their progress, pause, resume and cancel,
//!   shared by every replica through Kafka ([`redrive_record`]: the records and the lease);
//! - [`approvals`]: requests that wait for a second operator;
//! - [`api`]: the HTTP routes, the page included.

pub mod access;
pub mod api;
pub mod approvals;
pub mod dead_letter;
pub mod grants;
pub mod limits;
pub mod payload;
pub mod redrive_record;
pub mod redrives;
pub mod sealed_session;
pub mod single_sign_on;

use crate::kafka::ClientOptions;

/// What the console reads and how it lets people in.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Client options of every client the console makes (security, timeouts).
    pub librdkafka: ClientOptions,
    /// The DLTs shown; empty for every topic the template names
    /// ([`crate::dlq::DlqTopic::is_dlq_topic`]), looked up again as topics are created.
    pub dlq_topics: Vec<String>,
    /// The consumers' dead-letter topic template.
    pub dlq_template: crate::dlq::DlqTopic,
    /// Where actions and positions are kept ([`crate::state`]), and the key that seals them.
    pub state: crate::state::StateTopics,
    /// The topics a redrive may name as its destination (`{"topic": …}`); empty: any topic
    /// that is not refused for what it is ([`crate::replay::destination::refusal`]).
    pub redrive_topics: Vec<String>,
    /// Viewers see payloads, keys and header values too.
    pub show_payloads: bool,
    /// The path the console is served under behind a reverse proxy (`/dlq`), empty for the
    /// root.
    pub path_prefix: String,
    /// The loop guard of redrives ([`crate::replay::ReplayOptions::max_replays`]).
    pub max_replays: u32,
    /// The schema registry payloads are decoded with: shown as JSON beside their bytes,
    /// edited as JSON and encoded again with the same schema. `None`: shown as bytes.
    pub schemas: Option<std::sync::Arc<crate::schema::Codec>>,
    /// The address people reach the console at, ending in `/` (links in Slack messages).
    pub public_url: Option<String>,
    /// Redrives and discards of more dead letters than this wait for another operator's
    /// approval ([`approvals`]); `None`: only those under `four-eyes` grants do.
    pub four_eyes_above: Option<u64>,
}

impl ConsoleConfig {
    /// What its inbox watches.
    pub fn source(&self) -> crate::outstanding::Source {
        crate::outstanding::Source {
            scope: None,
            brokers: self.brokers.clone(),
            librdkafka: self.librdkafka.clone(),
            dlq_topics: self.dlq_topics.clone(),
            dlq_template: self.dlq_template.clone(),
            state: self.state.clone(),
        }
    }

    /// The console of `dlq_topics` (empty: every DLT) on `brokers`, with the defaults.
    pub fn new(brokers: &str, dlq_topics: Vec<String>) -> ConsoleConfig {
        ConsoleConfig {
            brokers: brokers.to_string(),
            librdkafka: ClientOptions::new(),
            dlq_topics,
            dlq_template: crate::dlq::DlqTopic::default(),
            state: crate::state::StateTopics::default(),
            redrive_topics: Vec::new(),
            show_payloads: false,
            path_prefix: String::new(),
            max_replays: 3,
            schemas: None,
            public_url: None,
            four_eyes_above: None,
        }
    }
}
