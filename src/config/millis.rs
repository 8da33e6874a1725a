//! A `Duration` setting as the config file writes it: whole milliseconds (`backoff_initial_ms
//! = 1000`).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Reads a number of milliseconds.
pub(super) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}
