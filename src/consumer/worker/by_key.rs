//! Key-ordered mode: records with the same key one after another, in offset order; records
//! of different keys concurrently, at most `max_in_flight` at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::attempt::settle_record;
use super::intake::Intake;
use super::Shared;
use crate::consumer::progress::{Progress, Way};
use crate::handler::BatchHandler;
use crate::record::Record;

/// Settled records are given back to the poll loop in bunches of this many (one lock of the
/// spares each).
const GIVEN_BACK_AT_ONCE: usize = 32;

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
    // Records waiting for an earlier record of their key.
    let mut waiting: HashMap<Key, VecDeque<(Instant, Record)>> = HashMap::new();
    let mut busy: HashSet<Key> = HashSet::new();
    type Running = std::pin::Pin<Box<dyn std::future::Future<Output = (Record, bool)> + Send>>;
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    let metrics = input.metrics.clone();
    // Settled records, given back to the poll loop a few at a time.
    let mut spent = Vec::new();

    let start = |record: Record, at: Instant, running: &mut FuturesUnordered<Running>| {
        let (shared, metrics, cancel) = (shared.clone(), metrics.clone(), cancel.clone());
        running.push(Box::pin(async move {
            let result = settle_record(
                &shared,
                &mut metrics.local(&shared.caller.breaker),
                &record,
                at,
                &mut Progress::detached(shared.out.clone()),
                &cancel,
            )
            .await;
            (record, result.is_ok())
        }));
    };

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
                let Some((record, settled)) = done else { continue };
                let key = record.key.clone();
                busy.remove(&key);
                if !settled {
                    // Stopped (revoked or stopping): it stays unsettled in `progress`, so
                    // no stored offset passes it.
                    stopping = true;
                    continue;
                }
                progress.settle(&record);
                if let Some(queue) = waiting.get_mut(&key).filter(|_| !stopping) {
                    if let Some((at, next)) = queue.pop_front() {
                        busy.insert(key.clone());
                        start(next, at, &mut running);
                    }
                    if queue.is_empty() {
                        waiting.remove(&key);
                    }
                }
                progress.store();
                spent.push(record);
                if spent.len() >= GIVEN_BACK_AT_ONCE {
                    input.give_back(std::mem::take(&mut spent));
                }
            }
            _ = cancel.cancelled(), if !stopping => stopping = true,
            taken = input.take(free, Duration::ZERO, &cancel), if room => {
                let Some((records, at)) = taken else {
                    stopping = true;
                    continue;
                };
                for record in records {
                    progress.take(&record);
                    if busy.contains(&record.key) {
                        waiting.entry(record.key.clone()).or_default().push_back((at, record));
                    } else {
                        busy.insert(record.key.clone());
                        start(record, at, &mut running);
                    }
                }
            }
        }
    }
    // Records still waiting for their key were never started: their offsets are not stored,
    // so they are consumed again.
}
