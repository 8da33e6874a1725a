//! Key-ordered mode: records with the same key one after another, in offset order; records
//! of different keys concurrently, at most `max_in_flight` at once.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::attempt::settle_record;
use super::intake::Intake;
use super::Shared;
use crate::consumer::progress::{Progress, Way};
use crate::consumer::settle::{TopicHandles, TopicMetrics};
use crate::handler::BatchHandler;
use crate::record::Record;

/// Settled records are given back to the poll loop in bunches of this many (one lock of the
/// spares each).
const GIVEN_BACK_AT_ONCE: usize = 32;

/// The counts of the calls that ended are added to the shared metrics at most this long after
/// (a flush per call cost more than the call's own bookkeeping).
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// What one record's own call uses, kept for the next record's call once it ends: its local
/// metrics (made once, flushed every [`FLUSH_EVERY`]) and its detached progress.
struct Slot<'a> {
    metrics: TopicMetrics<'a>,
    progress: Progress,
}

/// A record's call running: the record, whether it settled, and its slot back.
type Running<'a> = Pin<Box<dyn Future<Output = (Record, bool, Slot<'a>)> + Send + 'a>>;

/// Key-ordered mode: records with the same key one after another, in offset order; records of
/// different keys concurrently, at most `max_in_flight` at once. Each record goes through the
/// usual retry and dead-letter policy. The stored offset advances only over the longest prefix
/// of settled records, so it never passes a record that is still running or waiting.
pub(super) async fn run<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    mut input: Intake,
    cancel: CancellationToken,
    max_in_flight: usize,
) {
    type Key = Option<Vec<u8>>;
    // Every record taken from the queue and not yet passed by the stored position; it stores
    // that position itself (the records' own calls have detached progress).
    // Exactly once refuses key order (see `ConsumerConfig::exactly_once`): no transaction.
    let mut progress = Progress::new(
        &input.topic,
        input.partition,
        Way::Inline,
        input.revoked.clone(),
        shared.out.clone(),
    );
    // The keys with a call running, each with the records waiting behind that call.
    let mut busy: HashMap<Key, VecDeque<(Instant, Record)>> = HashMap::new();
    let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
    // The slots of calls that ended, for the next calls; their counts not yet flushed since
    // `flush` was last reset.
    let mut slots: Vec<Slot<'_>> = Vec::new();
    let mut unflushed = false;
    let flush = tokio::time::sleep(FLUSH_EVERY);
    tokio::pin!(flush);
    // Settled records, given back to the poll loop a few at a time.
    let mut spent = Vec::new();

    let (shared, cancel) = (&shared, &cancel);
    let handles = input.metrics.clone();
    let (topic, partition) = (input.topic.clone(), input.partition);
    // Once `cancel` fires (or a record is abandoned), nothing more is taken or started, and
    // the handler calls in flight run to their end: a dropped call would leave its work half
    // done and, as a probe, the breaker waiting for it forever.
    let mut stopping = false;
    loop {
        if stopping && running.is_empty() {
            break;
        }
        // Taken but not yet stored: bounded, so a stuck key cannot pile records up in memory
        // (librdkafka's queue for the partition fills instead, and fetching stops).
        let room =
            !stopping && running.len() < max_in_flight && progress.open() < max_in_flight * 4;
        let free = max_in_flight.saturating_sub(running.len()).max(1);
        tokio::select! {
            // In this order, so that a schedule replays exactly (a seeded simulation runs
            // this loop). `take` is cancel-safe: a take dropped here loses nothing.
            biased;
            done = running.next(), if !running.is_empty() => {
                // Every call that has ended by now, then one store for them all: calls end
                // in bunches (their timers fire together), and a store is a call into
                // librdkafka.
                let mut done = done;
                while let Some((record, settled, mut ended)) = done {
                    // The breaker learns of the answered call at once, as it did of a
                    // failed one; the counts wait for `flush`. The next call is its own.
                    ended.metrics.flush_answered();
                    ended.metrics.follows = None;
                    slots.push(ended);
                    unflushed = true;
                    if settled {
                        progress.settle(&record);
                    } else {
                        // Stopped (revoked or stopping): it stays unsettled in `progress`,
                        // so no stored offset passes it.
                        stopping = true;
                    }
                    // The next record of its key starts, unless stopping: then the records
                    // waiting behind it are never started.
                    let next = busy
                        .get_mut(&record.key)
                        .filter(|_| !stopping)
                        .and_then(VecDeque::pop_front);
                    match next {
                        Some((at, next)) => {
                            let slot = slot(&mut slots, shared, &handles, (&topic, partition));
                            start(shared, cancel, next, at, slot, &mut running);
                        }
                        None => {
                            busy.remove(&record.key);
                        }
                    }
                    if settled {
                        spent.push(record);
                        if spent.len() >= GIVEN_BACK_AT_ONCE {
                            input.give_back(std::mem::take(&mut spent));
                        }
                    }
                    done = running.next().now_or_never().flatten();
                }
                progress.store();
            }
            _ = cancel.cancelled(), if !stopping => stopping = true,
            _ = &mut flush, if unflushed => {
                slots.iter_mut().for_each(|s| s.metrics.flush());
                unflushed = false;
                flush.as_mut().reset(tokio::time::Instant::now() + FLUSH_EVERY);
            }
            taken = input.take(free, Duration::ZERO, cancel), if room => {
                let Some((records, at)) = taken else {
                    stopping = true;
                    continue;
                };
                for record in records {
                    progress.take(&record);
                    if let Some(waiting) = busy.get_mut(&record.key) {
                        waiting.push_back((at, record));
                    } else {
                        busy.insert(record.key.clone(), VecDeque::new());
                        let slot = slot(&mut slots, shared, &handles, (&topic, partition));
                        start(shared, cancel, record, at, slot, &mut running);
                    }
                }
            }
        }
    }
    // Records still waiting for their key were never started: their offsets are not stored,
    // so they are consumed again.
}

/// Starts `record`'s call (taken from its queue at `at`) in `slot`, among those `running`.
fn start<'a, H: BatchHandler>(
    shared: &'a Arc<Shared<H>>,
    cancel: &'a CancellationToken,
    record: Record,
    at: Instant,
    mut slot: Slot<'a>,
    running: &mut FuturesUnordered<Running<'a>>,
) {
    running.push(Box::pin(async move {
        let result = settle_record(
            shared,
            &mut slot.metrics,
            &record,
            at,
            &mut slot.progress,
            cancel,
        )
        .await;
        (record, result.is_ok(), slot)
    }));
}

/// A slot for the next call on `topic`/`partition`: one a call left, or a new one counting
/// into `handles`.
fn slot<'a, H>(
    slots: &mut Vec<Slot<'a>>,
    shared: &'a Arc<Shared<H>>,
    handles: &TopicHandles,
    (topic, partition): (&str, i32),
) -> Slot<'a> {
    slots.pop().unwrap_or_else(|| Slot {
        metrics: handles.local(&shared.caller.breaker),
        progress: Progress::detached(topic, partition, shared.out.clone()),
    })
}
