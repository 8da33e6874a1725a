//! What becomes of a key's later records when one of its records leaves for the dead-letter
//! topic or a retry tier (`key_order_after_failure`).

use std::fmt;

use serde::Deserialize;

/// `key_order_after_failure`: whether a key's later records wait behind its failed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyOrderAfterFailure {
    /// The later records of the key go to the handler as if nothing happened (what every
    /// dead-lettering consumer does): the failed record, redriven later, is applied after
    /// them.
    Continue,
    /// The later records of the key on its partition are parked (kept whole in the group's
    /// park log, not given to the handler) until the failed record is resolved: its dead
    /// letter redriven and handled, or its retry handled, or discarded by an operator, or
    /// `park_max_age` passed. Then they go to the handler in their order, before any newer
    /// record of the key. Records of other keys go on. See `docs/key-order-after-failure.md`.
    Park,
}

impl KeyOrderAfterFailure {
    /// The name in the config file: `continue` or `park`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrderAfterFailure::Continue => "continue",
            KeyOrderAfterFailure::Park => "park",
        }
    }
}

impl std::str::FromStr for KeyOrderAfterFailure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "continue" => Ok(KeyOrderAfterFailure::Continue),
            "park" => Ok(KeyOrderAfterFailure::Park),
            other => Err(format!("expected `continue` or `park`, got `{other}`")),
        }
    }
}

impl fmt::Display for KeyOrderAfterFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
