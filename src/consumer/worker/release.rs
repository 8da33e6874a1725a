//! A parking partition's turn between its chunks of records ([`park_turn`]): the park log read
//! again for resolutions others wrote, and each key whose head is resolved released — its
//! parked records read back from the log and settled in their order, as records of the
//! partition are (a handler call, the shared retries, an exit), before any newer record of
//! the key, which keeps parking until the release ends. A released record that leaves again
//! is the key's new head, and the rest stay parked behind it. Its offset was committed when
//! it was parked: a release that stops half-way is done again from the last `released`
//! event by whoever owns the partition next (at least once).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::attempt::settle_record;
use super::Shared;
use crate::consumer::park::PartitionPark;
use crate::consumer::progress::{Leaving, Progress, Way};
use crate::consumer::settle::Exit;
use crate::consumer::settle::TopicMetrics;
use crate::failure::DeadLetterKind;
use crate::handler::BatchHandler;
use crate::park::{How, ParkEvent};
use crate::record::Record;
use crate::stopped::Stopped;

/// See the module docs. [`Stopped`] when `cancel` fired during a release.
pub(super) async fn park_turn<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let Some(park) = settled.park() else {
        return Ok(());
    };
    // Reads of the park log come between: no call follows the last one straight on.
    metrics.follows = None;
    // At most every 200 ms: a walk of the table.
    if park.catch_up_due() {
        park.catch_up().await;
        if let Some(max_age) = shared.out.park.as_ref().and_then(|p| p.max_age) {
            let now = shared.out.client.now();
            for pending in park.expire(now, max_age, cancel) {
                pending.await?;
            }
        }
    }
    let keys = settled.park().map(|p| p.releasable()).unwrap_or_default();
    if keys.is_empty() {
        return Ok(());
    }
    // A revoked worker starts no release: the next owner does it.
    if cancel.is_cancelled() {
        return Err(Stopped);
    }
    // The partition's own writes in flight are driven by its progress alone: done first, so
    // that they neither wait for the release nor hold the budget its writes need.
    settled.finish().await;
    // The released records settle by a progress of their own, pipelined: their offsets were
    // passed when they were parked, so it takes none and stores none. It parks by the
    // partition's table, lent to it.
    let park = settled.take_park().expect("checked above");
    let (topic, partition) = (park.source().to_string(), park.partition());
    let never = CancellationToken::new();
    let out = shared.out.clone();
    let mut released = Progress::new(&topic, partition, Way::pipelined(), never, out);
    released.set_park(park);
    let result = release(shared, metrics, &mut released, keys, cancel).await;
    settled.set_park(released.take_park().expect("lent back"));
    result
}

/// Releases the parked records of `keys` (each resolved), in one read of the park log from
/// the first of them: each key's records in their order, until none of it waits or one of
/// them leaves again (a read that fails is logged and tried again at the next turn). Their
/// settling is pipelined; once they are settled (every dead letter acknowledged), at most
/// every [`RELEASED_EVERY`] records and at the end, a `released` event per key says how far it
/// went.
async fn release<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    released: &mut Progress,
    keys: Vec<Vec<u8>>,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let park = released.park().expect("lent");
    // Each key's waiting records, in order (each is settled once its event comes), whether its
    // head expired, and the last record settled and its park-log offset, not yet said.
    let mut releasing: BTreeMap<Vec<u8>, Releasing> = BTreeMap::new();
    let mut from = i64::MAX;
    for key in keys {
        let Some(parked) = park.table().get(&key) else {
            continue;
        };
        from = from.min(parked.waiting.front().map_or(i64::MAX, |w| w.event));
        tracing::info!(event = "key_released", topic = %park.source(),
            partition = park.partition(), key = %String::from_utf8_lossy(&key),
            waiting = parked.waiting.len(), expired = parked.resolved == Some(How::Expired));
        releasing.insert(
            key,
            Releasing {
                waiting: parked.waiting.iter().map(|w| w.offset).collect(),
                expired: parked.resolved == Some(How::Expired),
                done: None,
            },
        );
    }
    if releasing.is_empty() {
        return Ok(());
    }
    let events = match park.read_from(from).await {
        Ok(events) => events,
        Err(error) => {
            tracing::warn!(event = "park_log_read_failed", topic = %park.source(),
                partition = park.partition(), %error, "the release is tried again in a moment");
            return Ok(());
        }
    };
    let mut since_said = 0;
    for (at, event) in events {
        let ParkEvent::Parked {
            key,
            offset,
            id,
            timestamp,
            headers,
            value,
        } = event
        else {
            continue;
        };
        let Some(state) = releasing.get_mut(&key) else {
            continue;
        };
        if state.waiting.front() != Some(&offset) {
            // Released already, or parked twice (it came again before its offset was
            // committed): the first copy counts.
            continue;
        }
        if cancel.is_cancelled() {
            return Err(Stopped);
        }
        state.waiting.pop_front();
        let park = released.park().expect("lent");
        let record = Record {
            id,
            key: Some(key.clone()),
            payload: value,
            headers,
            timestamp: timestamp.and_then(chrono::DateTime::from_timestamp_millis),
            timestamp_type: timestamp.map(|_| crate::record::TimestampType::CreateTime),
            ..Record::new(park.source(), park.partition(), offset)
        };
        if state.expired {
            // It follows its expired head to the dead-letter topic.
            let leaving = Leaving {
                exit: Exit::DeadLetter {
                    kind: DeadLetterKind::Parked,
                    attempts: 0,
                },
                message: expiry_message(park, &key, shared),
                fetched: Instant::now(),
                span: tracing::Span::current(),
            };
            released.exit(&record, leaving, cancel).await?;
            // One at a time: were a later record's dead letter to land while an earlier one's
            // is retried, and this member stop, the next owner would write the earlier one
            // after it, and a replay of the dead-letter topic would apply them out of order.
            released.finish().await;
            if cancel.is_cancelled() {
                return Err(Stopped);
            }
            // Its write may have waited for the budget: the next call does not follow
            // straight on.
            metrics.follows = None;
        } else {
            settle_record(shared, metrics, &record, Instant::now(), released, cancel).await?;
        }
        let park = released.park().expect("lent");
        if park
            .table()
            .get(&key)
            .is_some_and(|k| k.heads.contains_key(&offset))
        {
            // It left again: the key's new head; the rest stay parked behind it. Said to be
            // released once its exit landed, so that it waits no longer as well.
            releasing.remove(&key).expect("releasing");
            say_released(released, &key, Some((offset, at)), cancel).await?;
            metrics.follows = None;
            continue;
        }
        state.done = Some((offset, at));
        since_said += 1;
        if since_said == RELEASED_EVERY {
            for (key, state) in &mut releasing {
                say_released(released, key, state.done.take(), cancel).await?;
            }
            metrics.follows = None;
            since_said = 0;
        }
    }
    for (key, state) in releasing {
        say_released(released, &key, state.done, cancel).await?;
    }
    metrics.follows = None;
    Ok(())
}

/// A key being released.
struct Releasing {
    /// Its waiting records' source offsets, in order.
    waiting: VecDeque<i64>,
    /// Whether its head expired (its records follow it to the dead-letter topic).
    expired: bool,
    /// The last record settled (source offset, park-log offset), not yet said.
    done: Option<(i64, i64)>,
}

/// A release says how far it went at most every this many records: a member that stops
/// half-way leaves at most these to be handled again by the next owner.
const RELEASED_EVERY: usize = 100;

/// Once every write of the records released so far is acknowledged, writes that `key`'s
/// parked records were settled through `done` (source offset, park-log offset).
async fn say_released(
    released: &mut Progress,
    key: &[u8],
    done: Option<(i64, i64)>,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    released.finish().await;
    let Some((offset, at)) = done else {
        return Ok(());
    };
    // A write given up (the worker stopping) leaves its record to the next owner.
    if cancel.is_cancelled() {
        return Err(Stopped);
    }
    let park = released.park().expect("lent");
    park.released(key, offset, at, cancel.clone()).await?;
    Ok(())
}

/// Why a parked record of `key` follows its head to the dead-letter topic: the head's id
/// and coordinates, when it left, and `park_max_age`.
fn expiry_message<H>(park: &PartitionPark, key: &[u8], shared: &Shared<H>) -> String {
    let max_age = shared.out.park.as_ref().and_then(|p| p.max_age);
    let max_age = max_age.unwrap_or_default().as_millis();
    let head = park.table().get(key).and_then(|k| k.resolved_head.as_ref());
    match head {
        Some(h) => format!(
            "parked behind {} ({}-{} offset {}), which left at {} and was not resolved within park_max_age ({max_age} ms)",
            h.id,
            park.source(),
            park.partition(),
            h.offset,
            h.since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        ),
        None => format!(
            "parked behind an earlier record of its key that was not resolved within park_max_age ({max_age} ms)"
        ),
    }
}
