//! A worker's record: its first call (straight on from the last record's when the breaker
//! allows), then — when that fails — the shared retries ([`crate::consumer::settle`]), and
//! its exit handed to the partition's progress.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Shared;
use crate::consumer::progress::Leaving;
use crate::consumer::progress::Progress;
use crate::consumer::settle::{permit, record_span, Exit, Settled, TopicMetrics, Tried};
use crate::failure::{narrow, FailureKind, HandlerError};
use crate::handler::BatchHandler;
use crate::record::Record;
use crate::stopped::Stopped;

/// Settles one record: one handler call and, when it fails, [`settle_failure`]. Stores the
/// progress made so far before any wait.
pub(super) async fn settle_record<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    fetched: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let at = record.delivered_offset();
    if settled.too_far_behind(at) {
        // A dead letter is not acknowledged yet (the dead-letter topic may be down): stop here
        // rather than handle ever more records that a restart would deliver again. A
        // cancelled worker does not wait: it ends.
        if cancel.is_cancelled() {
            return Err(Stopped);
        }
        settled.store();
        metrics.flush();
        settled.catch_up(at).await;
    }
    let caller = &shared.caller;
    // Traced, the whole of the record's settling runs in its `process` span.
    let process = caller
        .spans
        .as_ref()
        .map(|spans| record_span(record, Some(spans)));
    // Straight on from the last record's call, unless the breaker makes this one wait.
    let follows = metrics.follows.take();
    let (granted, follows) = match caller.breaker.permit_now() {
        Some(granted) if !cancel.is_cancelled() => (granted, follows),
        _ => (permit(&caller.breaker, cancel).await?, None),
    };
    let records = std::slice::from_ref(record);
    let (result, ended) = match &process {
        Some(span) => {
            let call = caller.call(metrics, records, granted, follows);
            call.instrument(span.clone()).await
        }
        None => caller.call(metrics, records, granted, follows).await,
    };
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
        // Boxed: its retries and its exit are most of this future's size, and a record's
        // future is moved at every call (2,968 bytes unboxed, copied for each record).
        Err(first) => {
            Box::pin(settle_failure(
                shared, metrics, record, first, fetched, settled, cancel, process,
            ))
            .await
        }
    }
}

/// Settles a record whose first call failed with `first`: the shared retries, then its exit
/// ([`Exit::after`]: its next retry topic or the dead-letter topic), written by `settled`,
/// all in `span` (the record's `process` span when traced; else a `record` span made here).
/// Stores the progress made so far before any wait.
#[allow(clippy::too_many_arguments)]
pub(super) async fn settle_failure<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    record: &Record,
    first: HandlerError,
    fetched: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
    span: Option<tracing::Span>,
) -> Result<(), Stopped> {
    // Waits may follow: store and count the progress made so far first. A permanent failure
    // goes straight to a pipelined dead-letter write, which waits only when the most writes
    // are in flight.
    if first.kind() != FailureKind::Permanent || !settled.writes_without_waiting() {
        settled.store();
        metrics.flush();
    }
    let span = span.unwrap_or_else(|| record_span(record, shared.caller.spans.as_ref()));
    // Dead letters acknowledged while this record waits (its backoff, the breaker) settle and
    // give their budget back meanwhile.
    let mut tried = Tried::default();
    let calls = shared
        .caller
        .retries(metrics, record, Some(first), &mut tried, cancel)
        .instrument(span.clone());
    let Settled::Exit {
        kind,
        message,
        attempts,
    } = settled.meanwhile(calls).await.inspect_err(|Stopped| {
        tracing::info!(event = "record_abandoned", id = %record.id,
            "stopped during backoff; the record will be consumed again");
    })?
    else {
        settled.settle(record);
        metrics
            .settle_seconds
            .observe(fetched.elapsed().as_secs_f64());
        return Ok(());
    };
    if shared.caller.spans.is_some() {
        crate::consumer::settle::failed(&span, kind.as_str());
    }
    let leaving = Leaving {
        exit: Exit::after(&shared.out.tiers, record, kind, attempts),
        message,
        fetched,
        span,
    };
    if settled.exit(record, leaving, cancel).await? {
        metrics
            .settle_seconds
            .observe(fetched.elapsed().as_secs_f64());
    }
    Ok(())
}
