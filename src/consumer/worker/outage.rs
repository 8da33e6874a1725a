//! The outage breaker's effect on the consumer: counted and logged when it opens and closes.
//!
//! The breaker pauses nothing itself. While it is open each partition's worker waits for its
//! permit with the record it took; the partition's inbox fills to its share and its fetches
//! pause, as for any slow handler (see the consumer docs), so memory stays bounded. A
//! partition revoked meanwhile and assigned back later is resumed by its assignment, and its
//! new worker has the records to probe the downstream with.

use crate::breaker::BreakerState;
use crate::failure::HandlerError;
use crate::metrics::Metrics;

/// Counts and logs the breaker's opening and closing; `while_open` says what the consumer
/// does meanwhile.
pub(crate) fn on_breaker_change(
    metrics: &Metrics,
    state: BreakerState,
    error: Option<&HandlerError>,
    while_open: &str,
) {
    match state {
        BreakerState::Open => {
            metrics.breaker_open.set(1);
            metrics.breaker_opened.inc();
            tracing::error!(event = "breaker_opened",
                last_error = %error.map(|e| e.message()).unwrap_or_default(),
                "the downstream looks down: {while_open}; nothing is dead-lettered for the outage");
        }
        BreakerState::Closed => {
            metrics.breaker_open.set(0);
            tracing::warn!(
                event = "breaker_closed",
                "the downstream answers again: consumption goes on"
            );
        }
    }
}
