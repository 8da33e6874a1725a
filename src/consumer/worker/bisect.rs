//! Batches: one handler call for a batch; on failure, its halves, recursively, until the
//! failing records stand alone and go through the single-record policy — unless the handler
//! names the failed records itself (a partial batch response): then only those do.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::attempt::{settle_failure, settle_record};
use super::Shared;
use crate::consumer::progress::Progress;
use crate::consumer::settle::{permit, TopicMetrics};
use crate::failure::{waits_for_downstream, HandlerError};
use crate::handler::BatchHandler;
use crate::record::Record;
use crate::stopped::Stopped;

/// Settles a batch: one call for all of it; on failure, halves in order, recursively, until
/// the failing records stand alone and go through [`settle_record`].
pub(super) async fn settle_batch<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    batch: &[Record],
    taken: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let mut todo: VecDeque<Range<usize>> = VecDeque::new();
    todo.push_back(0..batch.len());
    while let Some(range) = todo.pop_front() {
        let records = &batch[range.clone()];
        if records.len() == 1 {
            settle_record(shared, metrics, &records[0], taken, settled, cancel).await?;
            continue;
        }
        let caller = &shared.caller;
        let granted = permit(&caller.breaker, cancel).await?;
        let answer = caller.call(metrics, records, granted, None).await.0;
        match answer.map_err(|error| names_only_batch_records(error, records)) {
            Ok(()) => {
                tracing::debug!(event = "batch_handled", topic = %records[0].topic,
                    partition = records[0].partition, first_offset = records[0].offset,
                    records = records.len());
                for record in records {
                    settled.settle(record);
                }
                let elapsed = taken.elapsed().as_secs_f64();
                for _ in records {
                    metrics.settle_seconds.observe(elapsed);
                }
            }
            Err(error) if error.failed_records().is_some() => {
                settle_partial(shared, metrics, records, &error, taken, settled, cancel).await?;
            }
            Err(error) => {
                // Waits or more calls follow: store and count the progress made so far first.
                settled.store();
                metrics.flush();
                // The batch's own retries are its halves': no backoff of its own to use up.
                if waits_for_downstream(&error, caller.breaker.is_open()) {
                    // The downstream is down, not these records: try the same part again once
                    // the breaker lets us.
                    todo.push_front(range);
                    continue;
                }
                let mid = range.start + records.len() / 2;
                tracing::warn!(event = "batch_split", topic = %records[0].topic,
                    partition = records[0].partition, first_offset = records[0].offset,
                    records = records.len(), error = %error,
                    "batch failed; retrying its halves to isolate the failing records");
                shared
                    .out
                    .metrics
                    .batch_splits
                    .with_label_values(&[records[0].topic.as_str()])
                    .inc();
                todo.push_front(mid..range.end);
                todo.push_front(range.start..mid);
            }
        }
    }
    Ok(())
}

/// A partial batch response ([`HandlerError::partial`]): the records it does not name settle at
/// once, then each named one goes through the single-record policy with its own failure as its
/// first attempt. Every offset it names is in `records` ([`names_only_batch_records`]).
async fn settle_partial<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    records: &[Record],
    error: &HandlerError,
    taken: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let failures = error.failed_records().unwrap_or_default();
    let failure_of = |record: &Record| failures.iter().find(|(o, _)| *o == record.offset);
    let elapsed = taken.elapsed().as_secs_f64();
    let mut succeeded = 0;
    for record in records.iter().filter(|r| failure_of(r).is_none()) {
        settled.settle(record);
        metrics.settle_seconds.observe(elapsed);
        succeeded += 1;
    }
    metrics.succeeded.inc_by(succeeded);
    tracing::info!(event = "batch_partially_handled", topic = %records[0].topic,
        partition = records[0].partition, first_offset = records[0].offset,
        records = records.len(), failed = records.len() - succeeded as usize,
        "the handler named the failed records; the others are settled");
    for record in records {
        if let Some((_, first)) = failure_of(record) {
            settle_failure(
                shared,
                metrics,
                record,
                first.clone(),
                taken,
                settled,
                cancel,
                None,
            )
            .await?;
        }
    }
    Ok(())
}

/// `error` as it stands, unless it is a partial batch response naming an offset that is not in
/// `records`: then a transient failure of the whole batch, so that no record is settled as
/// handled on an answer that may mean another record.
fn names_only_batch_records(error: HandlerError, records: &[Record]) -> HandlerError {
    let unknown = error
        .failed_records()
        .unwrap_or_default()
        .iter()
        .find(|(offset, _)| !records.iter().any(|r| r.offset == *offset));
    match unknown {
        Some((offset, _)) => HandlerError::transient(format!(
            "the handler's partial batch response names offset {offset}, which is not in this \
             batch of offsets {}..={}; the whole batch failed",
            records[0].offset,
            records[records.len() - 1].offset
        )),
        None => error,
    }
}
