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
use crate::consumer::progress::Progress;
use crate::consumer::settle::TopicMetrics;
use crate::handler::BatchHandler;
use crate::park::ParkEvent;
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
    if park.catch_up_due() {
        park.catch_up().await;
    }
    while let Some(key) = settled.park().and_then(|p| p.releasable()) {
        // The released records settle by a progress of their own: their offsets were passed
        // when they were parked. It parks by the partition's table, lent to it.
        let park = settled.take_park().expect("checked above");
        let (topic, partition) = (park.source().to_string(), park.partition());
        let mut released = Progress::detached(&topic, partition, shared.out.clone());
        released.set_park(park);
        let result = release(shared, metrics, &mut released, &key, cancel).await;
        settled.set_park(released.take_park().expect("lent back"));
        result?;
    }
    Ok(())
}

/// Releases `key`'s parked records, in order, until none waits or one leaves again (or the
/// log cannot be read now: logged, tried again at the next turn).
async fn release<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    metrics: &mut TopicMetrics<'_>,
    released: &mut Progress,
    key: &[u8],
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let park = released.park().expect("lent");
    let Some(from) = waiting_front(park, key).map(|(event, _)| event) else {
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
    tracing::info!(event = "key_released", topic = %park.source(),
        partition = park.partition(), key = %String::from_utf8_lossy(key),
        waiting = park.table().get(key).map_or(0, |k| k.waiting.len()));
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
        let park = released.park().expect("lent");
        let Some((_, next)) = waiting_front(park, key) else {
            break;
        };
        if offset != next {
            // Released already, or parked twice (it came again before its offset was
            // committed): the first copy counts.
            continue;
        }
        let record = Record {
            id,
            key: Some(parked_key),
            payload: value,
            headers,
            timestamp: timestamp.and_then(chrono::DateTime::from_timestamp_millis),
            timestamp_type: timestamp.map(|_| crate::record::TimestampType::CreateTime),
            ..Record::new(park.source(), park.partition(), offset)
        };
        settle_record(shared, metrics, &record, Instant::now(), released, cancel).await?;
        let park = released.park().expect("lent");
        if park
            .table()
            .get(key)
            .is_some_and(|k| k.heads.contains_key(&offset))
        {
            // It left again: the key's new head.
            return Ok(());
        }
        park.released(key, offset, at, cancel.clone()).await?;
        metrics.follows = None;
    }
    Ok(())
}

/// The park-log offset and source offset of `key`'s first waiting record, while its heads
/// are resolved.
fn waiting_front(park: &PartitionPark, key: &[u8]) -> Option<(i64, i64)> {
    let parked = park.table().get(key).filter(|k| k.releasable())?;
    let first = parked.waiting.front()?;
    Some((first.event, first.offset))
}
