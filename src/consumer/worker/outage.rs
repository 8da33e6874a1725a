//! The outage breaker's effect on the consumer: every assigned partition paused when it
//! opens, resumed when it closes.

use rdkafka::consumer::Consumer as _;

use super::Shared;
use crate::breaker::BreakerState;
use crate::failure::HandlerError;
use crate::handler::BatchHandler;

/// Pauses every assigned partition when the breaker opens; resumes them when it closes.
pub(super) fn on_breaker_change<H: BatchHandler>(
    shared: &Shared<H>,
    state: BreakerState,
    error: Option<&HandlerError>,
) {
    let assignment = match shared.consumer.assignment() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(event = "breaker_assignment_failed", error = %e);
            return;
        }
    };
    match state {
        BreakerState::Open => {
            shared.metrics.breaker_open.set(1);
            shared.metrics.breaker_opened.inc();
            if let Err(e) = shared.consumer.pause(&assignment) {
                tracing::warn!(event = "breaker_pause_failed", error = %e);
            }
            tracing::error!(event = "breaker_opened", partitions = assignment.count(),
                last_error = %error.map(|e| e.message()).unwrap_or_default(),
                "the downstream looks down: consumption paused, probing with one record; nothing is dead-lettered for the outage");
        }
        BreakerState::Closed => {
            shared.metrics.breaker_open.set(0);
            if let Err(e) = shared.consumer.resume(&assignment) {
                tracing::warn!(event = "breaker_resume_failed", error = %e);
            }
            tracing::warn!(
                event = "breaker_closed",
                partitions = assignment.count(),
                "the downstream answers again: consumption resumed"
            );
        }
    }
}
