//! The breaker's permit and one handler call: its panic caught as a permanent failure, its
//! duration and success counted, and its outcome told to the outage breaker.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::metrics::TopicMetrics;
use super::Caller;
use crate::breaker::{Breaker, BreakerState, CallOutcome, Permit};
use crate::failure::{self, FailureKind, HandlerError};
use crate::handler::BatchHandler;
use crate::metrics::Metrics;
use crate::record::Record;
use crate::stopped::Stopped;

impl<H: BatchHandler> Caller<H> {
    /// Calls the handler with `records`, catching a panic as a permanent failure, and tells the
    /// breaker how it went. The call starts now, or at `started` when the caller came straight
    /// from another call that ended then. Also returns when the call ended.
    pub(crate) async fn call(
        &self,
        metrics: &mut TopicMetrics<'_>,
        records: &[Record],
        permit: Permit,
        started: Option<Instant>,
    ) -> (Result<(), HandlerError>, Instant) {
        // A probe whose call is dropped before it ends (revocation, shutdown deadline) is given
        // back, or the breaker would wait for it forever.
        let probe = (permit == Permit::Probe).then(|| ProbeGuard(&self.breaker));
        // tokio's clock, which the breaker reads too (and tests pause).
        let started = started.unwrap_or_else(Instant::now);
        let span = match &self.spans {
            Some(spans) => handler_span(spans, records),
            None => tracing::Span::none(),
        };
        let result = AssertUnwindSafe(self.handler.handle_batch(records).instrument(span.clone()))
            .catch_unwind()
            .await;
        let ended = Instant::now();
        let took = (ended - started).as_secs_f64();
        metrics.handler_duration.observe(took);
        let result = match result {
            Ok(result) => result,
            Err(panic) => {
                let error = failure::from_panic(panic);
                tracing::error!(event = "handler_panicked", id = %records[0].id,
                    first_offset = records[0].offset, records = records.len(),
                    error = %error.message());
                Err(error)
            }
        };
        match &result {
            Ok(()) => {
                metrics.succeeded.inc_by(records.len() as u64);
                metrics.process_duration.observe(took);
            }
            Err(e) => {
                let kind = match e.kind() {
                    FailureKind::Transient => "transient",
                    FailureKind::Permanent => "permanent",
                };
                self.metrics
                    .process_duration
                    .with_label_values(&[records[0].topic.as_str(), kind])
                    .observe(took);
                if self.spans.is_some() {
                    super::spans::failed(&span, kind);
                }
            }
        }
        let outcome = match &result {
            Err(e) if e.kind() == FailureKind::Transient => CallOutcome::Transient,
            _ => CallOutcome::Answered,
        };
        // Calls are told apart by their first record: partition and offset.
        let who = (records[0].partition as u64) << 48 ^ records[0].offset as u64;
        if let Some(state) = metrics.record_call(permit, outcome, who, ended) {
            on_breaker_change(&self.metrics, state, result.as_ref().err(), self.while_open);
        }
        std::mem::forget(probe); // recorded
        (result, ended)
    }
}

/// The span of one handler call: inside its record's `process` span, an INTERNAL `handle`
/// span; a call of a batch, or of a record being isolated from one, is a `process` span of its
/// own.
fn handler_span(spans: &super::Spans, records: &[Record]) -> tracing::Span {
    let in_process = tracing::Span::current()
        .metadata()
        .is_some_and(|m| m.name() == "process");
    if records.len() == 1 && in_process {
        spans.handle(records)
    } else {
        spans.process(records)
    }
}

/// Gives a granted probe back to the breaker when dropped; forgotten once the probe's outcome
/// is recorded.
struct ProbeGuard<'a>(&'a Breaker);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        self.0.abandon_probe();
    }
}

/// Waits for the breaker's permission to call the handler, or for `cancel`. No call starts
/// once `cancel` fired (a revoked partition's batch is not bisected further, its record not
/// retried; a stopping share member's record is released): another consumer handles them.
pub(crate) async fn permit(
    breaker: &Breaker,
    cancel: &CancellationToken,
) -> Result<Permit, Stopped> {
    if cancel.is_cancelled() {
        return Err(Stopped);
    }
    // A closed breaker answers at once: no cancellation future to set up for every record.
    if let Some(permit) = breaker.permit_now() {
        return Ok(permit);
    }
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Stopped),
        permit = breaker.permit() => Ok(permit),
    }
}

/// Counts and logs the breaker's opening and closing; `while_open` says what the consumer
/// does meanwhile.
fn on_breaker_change(
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
