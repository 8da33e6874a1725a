//! A partition's dead-letter writes (and writes to retry topics and the park log) in flight:
//! written while the partition goes on, at most 1,000 per partition and 16 MiB for the whole consumer, no
//! offset stored past one that is not acknowledged yet.

use std::collections::VecDeque;
use std::time::Instant;

use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::instrument::Instrumented;
use tracing::Instrument;

use std::future::Future;
use std::pin::Pin;

use super::writer::ExitWrite;
use super::writer::{exited, PendingExit};
use super::{Leaving, Out};
use crate::metrics::Metrics;
use crate::record::Record;
use crate::stopped::Stopped;

/// At most this many dead-letter writes of one partition are in flight at once. What bounds
/// them is the [`DEAD_LETTER_WINDOW`] (a partition's records) and the
/// [`DEAD_LETTER_BUDGET_KIB`] (the consumer's memory); this only keeps a partition of nothing
/// but poison records from queueing a window's worth. At 32, a partition whose records fail
/// one in a hundred (the benchmark's `poison1`) waited for the oldest acknowledgement every
/// 3,200 records, 116-184 times a run (0.3-2.5 s of its workers' time): the producer keeps one
/// request in flight, and an acknowledgement under full load takes 6-14 ms on average.
const DEAD_LETTER_WRITES_IN_FLIGHT: usize = 1_000;

/// Dead-letter writes in flight hold at most this many KiB in all (16 MiB), whatever the
/// number of partitions and the size of the records: a write waits for earlier ones to be
/// acknowledged while the budget is spent. A single larger write takes the whole budget.
pub(crate) const DEAD_LETTER_BUDGET_KIB: usize = 16 * 1024;

/// What a dead-letter write holds of the budget, given back (and taken off the gauge) when
/// the write ends or is dropped.
struct BudgetHold {
    _permit: tokio::sync::OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus::IntGauge,
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        self.gauge.sub(self.bytes);
    }
}

/// The bytes a dead-letter write of `record` holds: its envelope (a binary value grows by a
/// third in base64) and its headers.
fn dead_letter_bytes(record: &Record) -> usize {
    let value = record.payload.as_ref().map_or(0, Vec::len);
    let key = record.key.as_ref().map_or(0, Vec::len);
    let headers: usize = record
        .headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
        .sum();
    value * 4 / 3 + 2 * (key + headers) + 512
}

/// A partition handles at most this many records past a dead letter that is not acknowledged
/// yet; then it waits for the acknowledgement. These records are consumed again if the
/// service stops before then. 1,000 made a fast partition wait for every acknowledgement
/// (5,000 records are a few milliseconds of a no-op handler).
const DEAD_LETTER_WINDOW: i64 = 5_000;

/// A write in flight that settles its record once acknowledged, logging and counting how it
/// ended ([`exited`] for a dead letter or retry record): `Ok` when it was acknowledged.
pub(super) type Settling = Pin<Box<dyn Future<Output = Result<(), Stopped>> + Send>>;

/// A dead-letter (or retry-topic, or park-log) write in flight, and what is counted and given
/// back when it ends. The write itself is in [`DeadLetterWrites::pending`], polled in the
/// record's span.
struct InFlight {
    /// The offset it settles once acknowledged (where the record was delivered).
    offset: i64,
    /// How the write ended, once it did (a later write may end before an earlier one).
    written: Option<Result<(), Stopped>>,
    fetched: Instant,
    metrics: Metrics,
    _hold: Option<BudgetHold>,
}

/// A write's end, tagged with its place in the order of writes.
type Tag = Box<dyn FnOnce(Result<(), Stopped>) -> (u64, Result<(), Stopped>) + Send>;

/// A write in flight, tagged with its place in the order of writes.
type Tagged = futures_util::future::Map<Instrumented<Settling>, Tag>;

impl InFlight {
    /// Counts how long the record took once its write was acknowledged, and gives its budget
    /// back; `Ok` when it was acknowledged.
    fn ended(self, written: Result<(), Stopped>) -> Result<(), Stopped> {
        written?;
        self.metrics
            .settle_seconds
            .observe(self.fetched.elapsed().as_secs_f64());
        Ok(())
    }
}

/// A partition's dead-letter writes in flight, in offset order. They are driven by the
/// partition's own worker — polled when it stores offsets and awaited when it has to wait —
/// not by tasks of their own: an acknowledgement then costs no task wake-up, and each write is
/// still retried (a retry's backoff runs from the write that failed). While the worker waits
/// for something else (a transient failure's backoff, the outage breaker), a write that
/// failed is retried, and one acknowledged is logged and counted, only once the worker goes
/// on; no offset passes either meanwhile. Every write woken is polled, not only the oldest:
/// a write of two steps (a key's head in the park log, then its dead letter) takes its
/// second step as soon as the first is acknowledged. Polled oldest-first only, each waited
/// for its turn at the front, one step after another: `poison10-park` ran at a tenth of
/// `poison10`.
#[derive(Default)]
pub(in crate::consumer) struct DeadLetterWrites {
    in_flight: VecDeque<InFlight>,
    /// The writes of [`DeadLetterWrites::in_flight`] not ended yet, tagged with their place:
    /// only those woken are polled.
    pending: futures_util::stream::FuturesUnordered<Tagged>,
    /// The tag of the oldest write in flight.
    first: u64,
    /// Offsets of the writes acknowledged since [`DeadLetterWrites::take_acknowledged`]. A
    /// write given up (revoked or stopping) is never among them, so no position passes it.
    acknowledged: Vec<i64>,
}

impl DeadLetterWrites {
    /// Starts writing `record` to where it exits (its dead letter, or its next retry topic):
    /// `write`, handed to the producer by `pending` (built by the caller once the budget is
    /// held), logged and counted as it ends ([`exited`]); waits first while the most are in
    /// flight or the consumer's budget is spent. [`Stopped`] when `cancel` fires while it
    /// waits for the budget (other partitions' writes may hold it for as long as the
    /// dead-letter topic is down).
    pub(super) async fn start(
        &mut self,
        out: &Out,
        record: &Record,
        leaving: Leaving,
        pending: impl FnOnce(&ExitWrite) -> PendingExit,
        cancel: &CancellationToken,
    ) -> Result<(), Stopped> {
        let hold = self.hold(out, dead_letter_bytes(record), cancel).await?;
        // Handed to the producer now, so that dead letters keep the partition's order.
        let write = leaving.write_of(out, record);
        // In the record's span: a traced write's `send` span is its child.
        let pending = leaving.span.in_scope(|| pending(&write));
        let (metrics, topic) = (out.metrics.clone(), record.topic.clone());
        let settling: Settling = Box::pin(async move {
            let written = pending.await;
            exited(&metrics, &topic, &write, written)
        });
        self.push(
            out,
            record,
            settling,
            leaving.span,
            leaving.fetched,
            Some(hold),
        );
        Ok(())
    }

    /// Starts `settling`, the park-log write of `record`, parked, which settles it once
    /// acknowledged; it holds the record's bytes of the budget, as a dead letter does.
    pub(super) async fn start_park(
        &mut self,
        out: &Out,
        record: &Record,
        settling: Settling,
        fetched: Instant,
        cancel: &CancellationToken,
    ) -> Result<(), Stopped> {
        let hold = self.hold(out, dead_letter_bytes(record), cancel).await?;
        self.push(
            out,
            record,
            settling,
            tracing::Span::current(),
            fetched,
            Some(hold),
        );
        Ok(())
    }

    /// Waits while the most writes are in flight, then takes `bytes` of the budget.
    async fn hold(
        &mut self,
        out: &Out,
        bytes: usize,
        cancel: &CancellationToken,
    ) -> Result<BudgetHold, Stopped> {
        while self.is_full() {
            self.wait_first().await;
        }
        let kib = (bytes / 1024 + 1).min(DEAD_LETTER_BUDGET_KIB) as u32;
        let budget = &out.budget;
        let permit = loop {
            if let Ok(permit) = budget.clone().try_acquire_many_owned(kib) {
                break permit;
            }
            // Our own writes may hold the budget: drive them while waiting for it.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    tracing::info!(event = "record_abandoned",
                        "stopped while waiting for the dead-letter budget; the record will be consumed again");
                    return Err(Stopped);
                }
                _ = self.wait_first(), if !self.in_flight.is_empty() => {}
                permit = budget.clone().acquire_many_owned(kib) => {
                    break permit.expect("the budget is never closed");
                }
            }
        };
        out.metrics.dead_letter_bytes_in_flight.add(bytes as i64);
        Ok(BudgetHold {
            _permit: permit,
            bytes: bytes as i64,
            gauge: out.metrics.dead_letter_bytes_in_flight.clone(),
        })
    }

    /// Starts `settling`, a park-log write of a handled retry or redrive record's resolution,
    /// now: a few bytes, taken whatever is in flight.
    pub(super) fn push_resolution(&mut self, out: &Out, record: &Record, settling: Settling) {
        let span = tracing::Span::current();
        self.push(out, record, settling, span, Instant::now(), None);
    }

    fn push(
        &mut self,
        out: &Out,
        record: &Record,
        settling: Settling,
        span: tracing::Span,
        fetched: Instant,
        hold: Option<BudgetHold>,
    ) {
        let tag = self.first + self.in_flight.len() as u64;
        let tagged: Tag = Box::new(move |written| (tag, written));
        self.pending.push(settling.instrument(span).map(tagged));
        self.in_flight.push_back(InFlight {
            offset: record.delivered_offset(),
            written: None,
            fetched,
            metrics: out.metrics.clone(),
            _hold: hold,
        });
    }

    /// Notes how the write tagged `tag` ended.
    fn note(&mut self, (tag, written): (u64, Result<(), Stopped>)) {
        let at = (tag - self.first) as usize;
        self.in_flight[at].written = Some(written);
    }

    /// Takes the ended writes off the front.
    fn take_ended(&mut self) {
        while let Some(written) = self.in_flight.front_mut().and_then(|f| f.written.take()) {
            self.ended(written);
        }
    }

    /// Whether starting another write has to wait for the oldest one.
    pub(super) fn is_full(&self) -> bool {
        self.in_flight.len() >= DEAD_LETTER_WRITES_IN_FLIGHT
    }

    /// Drives the writes woken since the last poll, and takes the finished ones off the
    /// front, without waiting.
    pub(super) fn collect_finished(&mut self) {
        while let Some(Some(ended)) = self.pending.next().now_or_never() {
            self.note(ended);
        }
        self.take_ended();
    }

    /// The offsets of the writes acknowledged since the last call.
    pub(super) fn take_acknowledged(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.acknowledged)
    }

    /// Whether `offset` is more than [`DEAD_LETTER_WINDOW`] past the oldest write in flight.
    pub(super) fn too_far_behind(&self, offset: i64) -> bool {
        self.in_flight
            .front()
            .is_some_and(|first| offset - first.offset > DEAD_LETTER_WINDOW)
    }

    /// Waits until `offset` is within [`DEAD_LETTER_WINDOW`] of the oldest write in flight.
    pub(super) async fn catch_up(&mut self, offset: i64) {
        while self.too_far_behind(offset) {
            self.wait_first().await;
        }
    }

    /// Waits for the oldest write in flight (driving the others meanwhile) and takes it and
    /// every write ended after it off. Cancel-safe: a write is taken off only once it is
    /// done.
    pub(super) async fn wait_first(&mut self) {
        while self.in_flight.front().is_some_and(|f| f.written.is_none()) {
            match self.pending.next().await {
                Some(ended) => self.note(ended),
                None => unreachable!("a write in flight that did not end is pending"),
            }
        }
        self.take_ended();
    }

    /// The oldest write in flight ended with `written`: takes it off, and keeps its offset
    /// when it was acknowledged.
    fn ended(&mut self, written: Result<(), Stopped>) {
        self.first += 1;
        let first = self.in_flight.pop_front().expect("the oldest write ended");
        let offset = first.offset;
        if first.ended(written).is_ok() {
            self.acknowledged.push(offset);
        }
    }

    pub(super) async fn wait_all(&mut self) {
        while !self.in_flight.is_empty() {
            self.wait_first().await;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::consumer::client::RecordingClient;
    use crate::retry_tier::RetryTiers;

    /// Never asked to write here: the writes under test are handed in whole.
    struct NoWrites;

    impl super::super::writer::ExitWriter for NoWrites {
        fn write(&self, _: &Record, _: &ExitWrite, _: CancellationToken) -> PendingExit {
            unreachable!("the test pushes its writes itself")
        }
    }

    fn out() -> Out {
        Out::new(
            Arc::new(NoWrites),
            Arc::new(RecordingClient::default()),
            Metrics::default(),
            RetryTiers::default(),
        )
    }

    /// A write of two steps (a key's head in the park log, then its dead letter) takes its
    /// second step once the first is acknowledged, while an older write is still in flight;
    /// its offset is taken off only after the older one's.
    #[test]
    fn a_later_writes_next_step_starts_while_an_older_write_is_in_flight() {
        let out = out();
        let mut writes = DeadLetterWrites::default();
        let (older_done, older) = tokio::sync::oneshot::channel::<()>();
        let (head_done, head) = tokio::sync::oneshot::channel::<()>();
        let (letter_done, letter) = tokio::sync::oneshot::channel::<()>();
        let second_step = Arc::new(AtomicBool::new(false));
        let started = second_step.clone();
        writes.push_resolution(
            &out,
            &Record::new("orders", 0, 1),
            Box::pin(async move { older.await.map_err(|_| Stopped) }),
        );
        writes.push_resolution(
            &out,
            &Record::new("orders", 0, 2),
            Box::pin(async move {
                head.await.map_err(|_| Stopped)?;
                started.store(true, Ordering::SeqCst);
                letter.await.map_err(|_| Stopped)
            }),
        );
        writes.collect_finished();
        assert!(!second_step.load(Ordering::SeqCst));
        head_done.send(()).unwrap();
        writes.collect_finished();
        assert!(
            second_step.load(Ordering::SeqCst),
            "the dead letter is written as soon as its head is acknowledged"
        );
        letter_done.send(()).unwrap();
        writes.collect_finished();
        assert!(
            writes.take_acknowledged().is_empty(),
            "no offset passes the older write in flight"
        );
        older_done.send(()).unwrap();
        writes.collect_finished();
        assert_eq!(writes.take_acknowledged(), [1, 2]);
        assert!(writes.is_empty());
    }
}
