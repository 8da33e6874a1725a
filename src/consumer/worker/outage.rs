//! The outage breaker's effect on the consumer: counted and logged when it opens and closes.
//!
//! Nothing is paused. While the breaker is open each partition's worker waits for its permit
//! with the record it took, and librdkafka stops fetching a partition by itself once its
//! queue holds `max_buffered_records` records or 1.5 MB, so memory stays bounded without a
//! pause. A pause would do harm: librdkafka keeps it across revocation and re-assignment (a
//! partition revoked while the breaker is open and assigned back later would never be
//! fetched again), and it drops what was fetched, so once the records in hand leave with a
//! revocation the breaker would have no record to probe the downstream with.

use super::Shared;
use crate::breaker::BreakerState;
use crate::failure::HandlerError;
use crate::handler::BatchHandler;

/// Counts and logs the breaker's opening and closing.
pub(super) fn on_breaker_change<H: BatchHandler>(
    shared: &Shared<H>,
    state: BreakerState,
    error: Option<&HandlerError>,
) {
    match state {
        BreakerState::Open => {
            shared.metrics.breaker_open.set(1);
            shared.metrics.breaker_opened.inc();
            tracing::error!(event = "breaker_opened",
                last_error = %error.map(|e| e.message()).unwrap_or_default(),
                "the downstream looks down: each partition waits with its next record, probing with one; nothing is dead-lettered for the outage");
        }
        BreakerState::Closed => {
            shared.metrics.breaker_open.set(0);
            tracing::warn!(
                event = "breaker_closed",
                "the downstream answers again: consumption goes on"
            );
        }
    }
}
