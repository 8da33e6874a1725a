//! One record's handler calls: the breaker's permit, the call with its panic guard, and the
//! retries with backoff that follow a transient failure, until the record is handled or is
//! to be dead-lettered.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::exit::{write_exit, Exit};
use super::local_metrics::TopicMetrics;
use super::outage::on_breaker_change;
use super::progress::Progress;
use super::Shared;
use crate::backoff::{retry, Next};
use crate::breaker::{Breaker, CallOutcome, Permit};
use crate::failure::{self, decide, narrow, DeadLetterKind, Decision, FailureKind, HandlerError};
use crate::handler::BatchHandler;
use crate::metrics::GaugeGuard;
use crate::record::Record;
use crate::stopped::Stopped;

/// Calls the handler with `records`, catching a panic as a permanent failure, and tells the
/// breaker how it went. The call starts now, or at `started` when the worker came straight
/// from another call that ended then. Also returns when the call ended.
pub(super) async fn call<H: BatchHandler>(
    shared: &Shared<H>,
    metrics: &mut TopicMetrics<'_>,
    records: &[Record],
    permit: Permit,
    started: Option<tokio::time::Instant>,
) -> (Result<(), HandlerError>, tokio::time::Instant) {
    // A probe whose call is dropped before it ends (revocation, shutdown deadline) is given
    // back, or the breaker would wait for it forever.
    let probe = (permit == Permit::Probe).then(|| ProbeGuard(&shared.breaker));
    // tokio's clock, which the breaker reads too (and tests pause).
    let started = started.unwrap_or_else(tokio::time::Instant::now);
    let span = if shared.trace_records {
        handler_span(records)
    } else {
        tracing::Span::none()
    };
    let result = AssertUnwindSafe(shared.handler.handle_batch(records).instrument(span))
        .catch_unwind()
        .await;
    let ended = tokio::time::Instant::now();
    metrics
        .handler_duration
        .observe((ended - started).as_secs_f64());
    let result = match result {
        Ok(result) => result,
        Err(panic) => {
            let error = failure::from_panic(panic);
            tracing::error!(event = "handler_panicked", first_offset = records[0].offset,
                records = records.len(), error = %error.message());
            Err(error)
        }
    };
    if result.is_ok() {
        metrics.succeeded.inc_by(records.len() as u64);
    }
    let outcome = match &result {
        Err(e) if e.kind() == FailureKind::Transient => CallOutcome::Transient,
        _ => CallOutcome::Answered,
    };
    // Calls are told apart by their first record: partition and offset.
    let who = (records[0].partition as u64) << 48 ^ records[0].offset as u64;
    if let Some(state) = metrics.record_call(permit, outcome, who, ended) {
        on_breaker_change(
            &shared.metrics,
            state,
            result.as_ref().err(),
            "each partition waits with its next record, probing with one",
        );
    }
    std::mem::forget(probe); // recorded
    (result, ended)
}

/// The span of one handler call; with the `otel` feature, a child of the first record's W3C
/// trace context.
fn handler_span(records: &[Record]) -> tracing::Span {
    let first = &records[0];
    let span = tracing::info_span!(
        "handle",
        topic = %first.topic,
        partition = first.partition,
        offset = first.offset,
        id = %first.id,
        records = records.len(),
    );
    #[cfg(feature = "otel")]
    if let Some(trace) = first.trace_context() {
        crate::telemetry::set_parent(&span, &trace);
    }
    span
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
/// retried): the partition's next owner handles them.
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

/// Settles one record: one handler call and, when it fails, [`settle_one`]'s retries or
/// dead letter. Stores the progress made so far before any wait.
pub(super) async fn settle_record<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    fetched: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let at = record.delivered_offset();
    if settled
        .writes
        .as_ref()
        .is_some_and(|w| w.too_far_behind(at))
    {
        // A dead letter is not acknowledged yet (the dead-letter topic may be down): stop here
        // rather than handle ever more records that a restart would deliver again. A
        // cancelled worker does not wait: it ends.
        if cancel.is_cancelled() {
            return Err(Stopped);
        }
        settled.store(shared);
        metrics.flush();
        if let Some(writes) = settled.writes.as_mut() {
            writes.catch_up(at).await;
        }
    }
    // Straight on from the last record's call, unless the breaker makes this one wait.
    let follows = metrics.follows.take();
    let (granted, follows) = match shared.breaker.permit_now() {
        Some(granted) if !cancel.is_cancelled() => (granted, follows),
        _ => (permit(&shared.breaker, cancel).await?, None),
    };
    let (result, ended) = call(
        shared,
        metrics,
        std::slice::from_ref(record),
        granted,
        follows,
    )
    .await;
    match narrow(result, record.offset) {
        Ok(()) => {
            metrics.follows = Some(ended);
            tracing::debug!(event = "record_handled", topic = %record.topic,
                partition = record.partition, offset = record.offset, id = %record.id);
            settled.settle(record);
            // The call's end, not another clock read: this runs for every record.
            let settled_in = ended.into_std().saturating_duration_since(fetched);
            metrics.settle_seconds.observe(settled_in.as_secs_f64());
            Ok(())
        }
        Err(first) => {
            settle_failure(shared, metrics, record, first, fetched, settled, cancel).await
        }
    }
}

/// Settles a record whose first call failed with `first`: [`settle_one`]'s retries, then its
/// write to the next retry topic ([`Exit::RetryTier`], when its retries are used up and a tier
/// follows) or to the dead-letter topic (pipelined when `settled` has dead-letter writes).
/// Stores the progress made so far before any wait.
pub(super) async fn settle_failure<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    first: HandlerError,
    fetched: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    // Waits may follow: store and count the progress made so far first. A permanent failure
    // goes straight to a pipelined dead-letter write, which waits only when the most writes
    // are in flight.
    let no_wait = first.kind() == FailureKind::Permanent
        && settled.writes.as_ref().is_some_and(|w| !w.is_full());
    if !no_wait {
        settled.store(shared);
        metrics.flush();
    }
    let span = record_span(record);
    // Dead letters acknowledged while this record waits (its backoff, the breaker) settle and
    // give their budget back meanwhile.
    let attempt = settle_one(shared, metrics, record, first, cancel).instrument(span.clone());
    let outcome = settled.meanwhile(shared, attempt).await?;
    if let Outcome::DeadLetter {
        kind,
        message,
        attempts,
    } = outcome
    {
        let exit = Exit::after(&shared.retry_tiers, record, kind, attempts);
        match settled.writes.as_mut() {
            Some(writes) => {
                // The partition goes on while the write is acknowledged; offsets stop short of
                // it until then.
                return writes
                    .start(shared, record, exit, message, fetched, cancel, span)
                    .await;
            }
            None => {
                write_exit(shared, record, exit, &message, cancel)
                    .instrument(span)
                    .await?
            }
        }
    }
    settled.settle(record);
    metrics
        .settle_seconds
        .observe(fetched.elapsed().as_secs_f64());
    Ok(())
}

pub(super) fn record_span(record: &Record) -> tracing::Span {
    tracing::info_span!(
        "record",
        topic = %record.topic,
        partition = record.partition,
        offset = record.offset,
        id = %record.id,
        key = %record.key_for_logs(),
    )
}

/// How a record's calls ended.
enum Outcome {
    Handled,
    /// Permanent failure or retries exhausted: the record goes to the dead-letter topic.
    DeadLetter {
        kind: DeadLetterKind,
        message: String,
        attempts: u32,
    },
}

/// Settles one record's calls after its first attempt: retries transient failures with
/// backoff (not counting attempts made while the breaker is open against its retries); says
/// when the record is to be dead-lettered (permanent failure, retries exhausted).
async fn settle_one<H: BatchHandler>(
    shared: &Shared<H>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    first: HandlerError,
    cancel: &CancellationToken,
) -> Result<Outcome, Stopped> {
    let topic = record.topic.as_str();
    // The state of the retries: the last call's result (the first's to begin with), the
    // calls made, the backoff, the worker's metrics, and the in-backoff gauge held while the
    // record waits out a delay.
    let state = Retries {
        result: Some(Err(first)),
        attempts: 1,
        delays: shared.backoff.delays(),
        metrics,
        in_backoff: None,
    };
    let settled = retry(cancel, state, |mut state| async move {
        state.in_backoff = None;
        let result = match state.result.take() {
            Some(result) => result,
            None => {
                let granted = match permit(&shared.breaker, cancel).await {
                    Ok(granted) => granted,
                    Err(abandoned) => return (state, Next::Done(Err(abandoned))),
                };
                state.attempts += 1;
                narrow(
                    call(
                        shared,
                        state.metrics,
                        std::slice::from_ref(record),
                        granted,
                        None,
                    )
                    .await
                    .0,
                    record.offset,
                )
            }
        };
        let attempts = state.attempts;
        let error = match result {
            Ok(()) => {
                tracing::debug!(event = "record_handled", attempts);
                return (state, Next::Done(Ok(Outcome::Handled)));
            }
            Err(error) => error,
        };
        if error.kind() == FailureKind::Transient && shared.breaker.is_open() {
            tracing::info!(event = "record_waiting_for_breaker", attempts, error = %error,
                "the downstream is down; this record waits without using up its retries");
            // Failures during an outage say nothing about the record: its retries start over.
            // The next call waits for the breaker's permit instead.
            state.delays.reset();
            return (state, Next::RetryNow);
        }
        let next = match decide(&error, &mut state.delays) {
            Decision::Retry { delay } => {
                tracing::warn!(event = "record_retry_scheduled", attempts,
                    retry_in_ms = delay.as_millis() as u64, error = %error);
                shared.metrics.retried.with_label_values(&[topic]).inc();
                state.in_backoff = Some(GaugeGuard::inc(&shared.metrics.partitions_in_backoff));
                Next::RetryIn(delay)
            }
            Decision::DeadLetter(kind) => Next::Done(Ok(Outcome::DeadLetter {
                kind,
                message: error.message().to_string(),
                attempts,
            })),
        };
        (state, next)
    })
    .await;
    settled.unwrap_or_else(|Stopped| {
        tracing::info!(
            event = "record_abandoned",
            "stopped during backoff; the record will be consumed again"
        );
        Err(Stopped)
    })
}

/// What one record's retries carry from one call to the next ([`settle_one`]).
struct Retries<'m, 'b> {
    result: Option<Result<(), HandlerError>>,
    attempts: u32,
    delays: crate::backoff::Delays,
    metrics: &'m mut TopicMetrics<'b>,
    in_backoff: Option<GaugeGuard>,
}
