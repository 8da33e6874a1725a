//! The outage breaker's effect on the consumer: counted and logged when it opens and closes.
//!
//! Nothing is paused. While the breaker is open each partition's worker waits for its permit
//! with the record it took, and librdkafka stops fetching a partition by itself once its
//! queue holds `max_buffered_records` records or 1.5 MB, so memory stays bounded without a
//! pause. A pause would do harm: librdkafka keeps it across revocation and re-assignment (a
//! partition revoked while the breaker is open and assigned back later would never be
//! fetched again), and it drops what was fetched, so once the records in hand leave with a
//! revocation the breaker would have no record to probe the downstream with.

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
