//! Batches: one handler call for a batch; on failure, its halves, recursively, until the
//! failing records stand alone and go through the single-record policy — unless the handler
//! names the failed records itself (a partial batch response): then only those do.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::attempt::{call, permit, settle_failure, settle_record};
use super::local_metrics::TopicMetrics;
use super::progress::Progress;
use super::{Abandoned, Shared};
use crate::failure::{FailureKind, HandlerError};
use crate::handler::BatchHandler;
use crate::record::Record;

/// Settles a batch: one call for all of it; on failure, halves in order, recursively, until
/// the failing records stand alone and go through [`settle_record`].
pub(super) async fn settle_batch<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    batch: &[Record],
    taken: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let mut todo: VecDeque<Range<usize>> = VecDeque::new();
    todo.push_back(0..batch.len());
    while let Some(range) = todo.pop_front() {
        let records = &batch[range.clone()];
        if records.len() == 1 {
            settle_record(shared, metrics, &records[0], taken, settled, cancel).await?;
            continue;
        }
        let granted = permit(&shared.breaker, cancel).await?;
        match call(shared, metrics, records, granted).await.0 {
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
                settled.store(shared);
                metrics.flush();
                if error.kind() == FailureKind::Transient && shared.breaker.is_open() {
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
/// first attempt. An offset that is not in the batch is logged and ignored.
async fn settle_partial<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    records: &[Record],
    error: &HandlerError,
    taken: Instant,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let failures = error.failed_records().unwrap_or_default();
    for (offset, failure) in failures {
        if !records.iter().any(|r| r.offset == *offset) {
            tracing::warn!(event = "batch_partial_unknown_record", topic = %records[0].topic,
                partition = records[0].partition, offset, error = %failure,
                "the handler named a record that is not in the batch; ignored");
        }
    }
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
            )
            .await?;
        }
    }
    Ok(())
}
