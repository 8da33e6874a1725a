//! A parking partition's turn between its chunks of records ([`park_turn`]): the park log read
//! again for resolutions others wrote, and each key whose head is resolved released — its
//! parked records read back from the log and settled in their order, as records of the
//! partition are (a handler call, the shared retries, an exit), before any newer record of
//! the key, which keeps parking until the release ends. A released record that leaves again
//! is the key's new head, and the rest stay parked behind it. Its offset was committed when
//! it was parked: a release that stops half-way is done again from the last `released`
//! event by whoever owns the partition next (at least once).

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
    while let Some(key) = settled.park().and_then(|p| p.releasable()) {
        // A revoked worker starts no release: the next owner does it.
        if cancel.is_cancelled() {
            return Err(Stopped);
        }
        // The partition's own writes in flight are driven by its progress alone: done first,
        // so that they neither wait for the release nor hold the budget its writes need.
        settled.finish().await;
        // The released records settle by a progress of their own, pipelined: their offsets
        // were passed when they were parked, so it takes none and stores none. It parks by
        // the partition's table, lent to it.
        let park = settled.take_park().expect("checked above");
        let (topic, partition) = (park.source().to_string(), park.partition());
        let never = CancellationToken::new();
        let out = shared.out.clone();
        let mut released = Progress::new(&topic, partition, Way::pipelined(), never, out);
        released.set_park(park);
        let result = release(shared, metrics, &mut released, &key, cancel).await;
        settled.set_park(released.take_park().expect("lent back"));
        result?;
    }
    Ok(())
}

/// Releases `key`'s parked records, in order, until none waits or one leaves again (or the
/// log cannot be read now: logged, tried again at the next turn). Their settling is
/// pipelined; once they are settled (every dead letter acknowledged), at most every
/// [`RELEASED_EVERY`] records and at the end, a `released` event says how far it went.
async fn release<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    released: &mut Progress,
    key: &[u8],
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let park = released.park().expect("lent");
    let Some(from) = waiting_front(park, key) else {
        return Ok(());
    };
    let events = match park.read_from(from).await {
        Ok(events) => events,
        Err(error) => {
            tracing::warn!(event = "park_log_read_failed", topic = %park.source(),
                partition = park.partition(), %error, "the release is tried again in a moment");
            return Ok(());
        }
    };
    let expired = park
        .table()
        .get(key)
        .is_some_and(|k| k.resolved == Some(How::Expired));
    tracing::info!(event = "key_released", topic = %park.source(), expired,
        partition = park.partition(), key = %String::from_utf8_lossy(key),
        waiting = park.table().get(key).map_or(0, |k| k.waiting.len()));
    // The key's waiting records, in order: each is settled once its event comes.
    let mut waiting: std::collections::VecDeque<i64> = park
        .table()
        .get(key)
        .map(|k| k.waiting.iter().map(|w| w.offset).collect())
        .unwrap_or_default();
    // The last record settled and its park-log offset, not yet said in a `released` event.
    let mut done: Option<(i64, i64)> = None;
    let mut since_said = 0;
    for (at, event) in events {
        let ParkEvent::Parked {
            key: parked_key,
            offset,
            id,
            timestamp,
            headers,
            value,
        } = event
        else {
            continue;
        };
        if parked_key != key {
            continue;
        }
        if cancel.is_cancelled() {
            return Err(Stopped);
        }
        let Some(&next) = waiting.front() else {
            break;
        };
        if offset != next {
            // Released already, or parked twice (it came again before its offset was
            // committed): the first copy counts.
            continue;
        }
        waiting.pop_front();
        let park = released.park().expect("lent");
        let record = Record {
            id,
            key: Some(parked_key),
            payload: value,
            headers,
            timestamp: timestamp.and_then(chrono::DateTime::from_timestamp_millis),
            timestamp_type: timestamp.map(|_| crate::record::TimestampType::CreateTime),
            ..Record::new(park.source(), park.partition(), offset)
        };
        if expired {
            // It follows its expired head to the dead-letter topic.
            let leaving = Leaving {
                exit: Exit::DeadLetter {
                    kind: DeadLetterKind::Parked,
                    attempts: 0,
                },
                message: expiry_message(park, key, shared),
                fetched: Instant::now(),
                span: tracing::Span::current(),
            };
            released.exit(&record, leaving, cancel).await?;
        } else {
            settle_record(shared, metrics, &record, Instant::now(), released, cancel).await?;
        }
        let park = released.park().expect("lent");
        if park
            .table()
            .get(key)
            .is_some_and(|k| k.heads.contains_key(&offset))
        {
            // It left again: the key's new head; the rest stay parked behind it.
            break;
        }
        done = Some((offset, at));
        since_said += 1;
        if since_said == RELEASED_EVERY {
            say_released(released, key, done.take(), cancel).await?;
            since_said = 0;
        }
    }
    say_released(released, key, done, cancel).await?;
    metrics.follows = None;
    Ok(())
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

/// The park-log offset of `key`'s first waiting record, while its heads are resolved.
fn waiting_front(park: &PartitionPark, key: &[u8]) -> Option<i64> {
    let parked = park.table().get(key).filter(|k| k.releasable())?;
    Some(parked.waiting.front()?.event)
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
