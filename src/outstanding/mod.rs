//! Which dead letters are outstanding, and the inbox of them by cause: what the monitor
//! counts and the console shows, one definition for both.
//!
//! A dead letter is outstanding when the replay position has not passed it (or passed it
//! unsent: [`crate::dlq_reader::position`]) and no later action resolved it — a discard not
//! restored, or a filtered replay (the console's redrives, `dlq replay` with filters) whose
//! position passed it and sent it. The actions are the audit topic's run summaries, the
//! positions the positions topic's records ([`crate::state`]).
//!
//! - [`ledger`]: the decision, from the runs and the replay groups' positions (pure; the
//!   replay decides with it too, so it lives in [`crate::state`]);
//! - [`inbox`]: the outstanding dead letters grouped by cause, in memory that grows with the
//!   causes (pure);
//! - [`parked`]: the park logs of the groups whose dead letters are outstanding, read on
//!   as their owners read them: which dead letters are parked keys' heads, and what waits
//!   behind them (`key_order_after_failure = "park"`);
//! - [`watch`]: all kept current by reading the DLTs (built once, then only what is written
//!   after, built again when an action or a replay moves something) and the park logs.

pub mod inbox;
pub mod parked;
pub use crate::state::ledger;
pub mod watch;

use crate::kafka::ClientOptions;

/// The DLTs to watch and where the actions on them are recorded.
#[derive(Debug, Clone)]
pub struct Source {
    /// Bootstrap servers.
    pub brokers: String,
    /// Client options of every client (security, timeouts).
    pub librdkafka: ClientOptions,
    /// The DLTs; empty for every topic `dlq_template` names
    /// ([`crate::dlq::DlqTopic::is_dlq_topic`]), looked up again as topics are created.
    pub dlq_topics: Vec<String>,
    /// The consumers' dead-letter topic template.
    pub dlq_template: crate::dlq::DlqTopic,
    /// Where the actions and positions are kept, and the key that seals them.
    pub state: crate::state::StateTopics,
    /// Only the dead letters this filter keeps count (a monitor's alert scope, `--where`);
    /// `None`: every one.
    pub scope: Option<crate::dlq_reader::Filter>,
}
