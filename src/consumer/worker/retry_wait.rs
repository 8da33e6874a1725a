//! A retry topic's partition waiting until its next record is due: its fetches paused (that
//! partition alone, resumed whichever way the wait ends, so the pause never outlives it),
//! its progress stored, and its dead letters acknowledged meanwhile settled as they come.
//!
//! The due time is the writer's clock plus the tier's delay, or whatever a foreign writer put
//! in the record, so it is not trusted without a bound: a record waits at most its tier's
//! delay from when it was taken. A writer whose clock runs ahead, or a due time centuries
//! away, delays the partition by at most one delay (logged as `retry_due_clamped`), never
//! stops it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::intake::Intake;
use super::Shared;
use crate::consumer::progress::Progress;
use crate::handler::BatchHandler;
use crate::metrics::GaugeGuard;
use crate::record::Record;
use crate::stopped::Stopped;

/// How long `record`, delivered from a retry topic and due at its `due`, waits from `now`:
/// until it is due, at most its tier's `delay` (none for a tier that has no delay here).
/// `Some((wait, clamped))`: it waits, and whether the bound cut the wait short.
pub(super) fn wait_for(
    due: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
    delay: Option<Duration>,
) -> Option<(Duration, bool)> {
    let wait = (due - now).to_std().ok().filter(|w| !w.is_zero())?;
    let bound = delay.unwrap_or_default();
    if wait > bound {
        return (!bound.is_zero()).then_some((bound, true));
    }
    Some((wait, false))
}

/// Waits until `record`, delivered from a retry topic, is due (at most its tier's delay); at
/// once for a record of a source topic or one already due. [`Stopped`] when `cancel` fires
/// first: the record is consumed again by the partition's next owner.
pub(super) async fn wait_until_due<H: BatchHandler>(
    shared: &Shared<H>,
    record: &Record,
    intake: &Intake,
    progress: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    let Some(retry) = &record.retry else {
        return Ok(());
    };
    // A redrive topic's records are due at once: no wait whatever they say.
    let delay = retry.tier.and_then(|tier| shared.out.tiers.delay(tier));
    let Some((wait, clamped)) = wait_for(retry.due, shared.out.client.now(), delay) else {
        return Ok(());
    };
    if clamped {
        tracing::warn!(event = "retry_due_clamped", tier = retry.tier, retry_topic = %retry.topic,
            retry_partition = retry.partition, retry_offset = retry.offset, id = %record.id,
            due = %retry.due.to_rfc3339(), wait_ms = wait.as_millis() as u64,
            "the record's due time is further away than its tier's delay (writer clock ahead, or a foreign due time): waiting the delay only");
    }
    progress.store();
    tracing::info!(event = "retry_record_waiting", tier = retry.tier, retry_topic = %retry.topic,
        retry_partition = retry.partition, retry_offset = retry.offset, id = %record.id,
        due = %retry.due.to_rfc3339(), wait_ms = wait.as_millis() as u64,
        "the retry partition is paused until its next record is due");
    let _waiting = GaugeGuard::inc(&shared.out.metrics.retry_partitions_waiting);
    // Paused so that librdkafka does not fetch records that would only wait; fetched again
    // when the hold drops, whichever way the wait ends.
    let _hold = intake.hold_fetches();
    let until = tokio::time::Instant::now() + wait;
    progress
        .meanwhile(async {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(Stopped),
                _ = tokio::time::sleep_until(until) => Ok(()),
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_beyond_the_tiers_delay_waits_the_delay_only() {
        let now = chrono::Utc::now();
        let delay = Some(Duration::from_secs(60));
        let due = |s: i64| now + chrono::TimeDelta::seconds(s);
        assert_eq!(
            wait_for(due(30), now, delay),
            Some((Duration::from_secs(30), false))
        );
        assert_eq!(wait_for(due(0), now, delay), None, "due now");
        assert_eq!(wait_for(due(-5), now, delay), None, "overdue");
        assert_eq!(
            wait_for(due(7_200), now, delay),
            Some((Duration::from_secs(60), true)),
            "a writer two hours ahead"
        );
        let year_2099 = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            wait_for(year_2099, now, delay),
            Some((Duration::from_secs(60), true))
        );
        assert_eq!(
            wait_for(year_2099, now, None),
            None,
            "a tier without a delay here: at once"
        );
    }
}
