//! Reading a dead-letter topic: what `dlq list`, `dlq show`, `dlq replay` and the monitor see.
//!
//! A [`DlqReader`] reads a DLT (or a retry topic) from the replay position to the end of each
//! partition as it is when reading starts, transaction markers and aborted records included,
//! and gives each record as a [`DlqEntry`]: its [`DlqContent`] — kafka-dlq's
//! [`Envelope`](crate::dlq::Envelope) (joined again when it was written detached, its source
//! record read back when it was written as a reference), a record some other tool wrote
//! ([`foreign`]: Spring's `DeadLetterPublishingRecoverer`, Kafka Connect, or none), or a record
//! waiting in a retry topic. A replay [`position`] (kept in the positions topic,
//! [`crate::state`], under [`REPLAY_GROUP`] for the unfiltered replay) holds the offsets passed
//! over because their source record is gone. A [`Filter`] selects entries.
//!
//! This module reads what [`crate::dlq`] and [`crate::retry_tier`] write, so it sits above
//! both.

mod content;
pub mod expression;
mod filter;
pub mod foreign;
pub mod position;
mod reader;
mod reference;
pub mod scope;

pub use content::DlqContent;
pub use expression::{Expression, ExpressionError};
pub use filter::{ErrorText, Filter};
pub use position::REPLAY_GROUP;
pub(crate) use reader::committed;
pub use reader::{check_exists, is_unknown_topic, DlqEntry, DlqReader, OpenTransaction};
pub use reference::Unresolved;
pub use scope::{Area, Pattern, Scope};
