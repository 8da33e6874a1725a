//! A member's dead-letter and retry-topic writes: each acknowledged after a delay drawn from
//! the seed (so out of order), some failing a few times first, all failing while the
//! dead-letter topic is down and retried until the write is given up; a retry record lands
//! in its retry partition, some with a writer clock ahead, a far-away due time or a claim to
//! another source topic.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::super::exit::{ExitWriter, PendingExit};
use super::world::{World, WorldRef, GROUP, OTHER_GROUP, SOURCE};
use crate::dlq::DeadLettered;
use crate::failure::DeadLetterKind;
use crate::record::retry::{RetryDelivery, RetryStage};
use crate::record::Record;
use crate::retry_tier::RetryWritten;
use crate::stopped::Stopped;

/// A member's dead-letter and retry-topic writes.
pub(super) struct SimExits {
    pub world: WorldRef,
    /// The retry topics' partition count.
    pub retry_partitions: i32,
}

impl SimExits {
    fn write(
        &self,
        record: &Record,
        retry: Option<(u32, DateTime<Utc>, RetryStage)>,
        cancel: CancellationToken,
    ) -> PendingExit {
        let (delay, mut fails) = {
            let mut world = self.world.lock();
            let max = world.max_ack.as_millis() as u64;
            let delay = Duration::from_millis(world.rng.u64(0..=max));
            let fails = if world.rng.u8(0..10) == 0 {
                world.rng.u32(1..4)
            } else {
                0
            };
            (delay, fails)
        };
        let world = self.world.clone();
        let record = record.clone();
        let retry_partitions = self.retry_partitions;
        // Handed to the producer now: the acknowledgement comes `delay` after this call.
        let mut at = tokio::time::Instant::now() + delay;
        Box::pin(async move {
            loop {
                tokio::time::sleep_until(at).await;
                let acknowledged = {
                    let mut w = world.lock();
                    (fails == 0 && !w.dlq_down)
                        .then(|| acknowledge(&mut w, &record, retry.clone(), retry_partitions))
                };
                if let Some(acknowledged) = acknowledged {
                    return Ok(acknowledged);
                }
                fails = fails.saturating_sub(1);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(Stopped),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                at = tokio::time::Instant::now() + delay;
            }
        })
    }
}

/// The write of `record` is acknowledged: it has exited where it was delivered; a retry
/// record is appended to its retry topic.
fn acknowledge(
    w: &mut World,
    record: &Record,
    retry: Option<(u32, DateTime<Utc>, RetryStage)>,
    retry_partitions: i32,
) -> RetryWritten {
    w.exited(record);
    let written = DeadLettered {
        topic: String::new(),
        partition: 0,
        offset: 0,
    };
    let Some((tier, due, left)) = retry else {
        w.dead_letters += 1;
        if let Some(letters) = &mut w.dead_lettered {
            letters.push(record.clone());
        }
        return RetryWritten::DeadLettered(written);
    };
    // Routed as the real writers route it.
    let source = record.source_topic().to_string();
    if source != SOURCE {
        w.violations.push(format!(
            "the retry record of {} is routed to {source}'s retry topic, a topic the consumer does not read",
            record.id
        ));
    }
    let partition = (record.offset as i32).rem_euclid(retry_partitions);
    let tp = (crate::record::retry::topic_name(&source, tier), partition);
    let before = record.retry.as_ref();
    let mut history = before.map_or_else(Vec::new, |r| r.history.clone());
    let attempts = before.map_or(0, |r| r.attempts) + left.attempts;
    history.push(left);
    let mut copy = record.clone();
    // Some writers claim another source topic (a foreign or hostile account), and some run
    // with a clock ahead, or write due times far away.
    if w.rng.u8(0..10) == 0 {
        copy.topic = "payments".into();
    }
    let due = match w.rng.u8(0..20) {
        0 => due + chrono::TimeDelta::hours(2),
        1 => DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .expect("a valid date")
            .to_utc(),
        _ => due,
    };
    copy.retry = Some(Box::new(RetryDelivery {
        group: Some(GROUP.to_string()),
        tier: Some(tier),
        topic: tp.0.clone(),
        partition,
        offset: 0,
        due,
        attempts,
        history,
    }));
    // Another service (group) on the same topic writes its retry records to the same retry
    // topics, some due far ahead: this group must pass them over, not handle nor wait for them.
    if w.other_group.as_mut().is_some_and(|rng| rng.u8(0..3) == 0) {
        let mut other = copy.clone();
        other.id = format!("{}-of-{OTHER_GROUP}", copy.id);
        if let Some(retry) = other.retry.as_mut() {
            retry.group = Some(OTHER_GROUP.to_string());
            retry.due = DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
                .expect("a valid date")
                .to_utc();
        }
        w.append(&tp, copy);
        w.append(&tp, other);
    } else {
        w.append(&tp, copy);
    }
    RetryWritten::RetryTopic(written)
}

impl ExitWriter for SimExits {
    fn dead_letter(
        &self,
        record: &Record,
        _kind: DeadLetterKind,
        _message: &str,
        _attempts: u32,
        cancel: CancellationToken,
    ) -> PendingExit {
        self.write(record, None, cancel)
    }

    fn retry(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
        cancel: CancellationToken,
    ) -> PendingExit {
        self.write(record, Some((tier, due, left)), cancel)
    }
}
