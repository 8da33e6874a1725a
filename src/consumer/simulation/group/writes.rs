//! A member's dead-letter and retry-topic writes: each acknowledged after a delay drawn from
//! the seed (so out of order), some failing a few times first, all failing while the
//! dead-letter topic is down and retried until the write is given up; a retry record lands
//! in its retry partition — its headers written by the real `retry_tier::retry_headers`, read
//! back by the worker's real `restore` — some with a writer clock ahead, a far-away due time
//! or a claim to another source topic.

use std::time::Duration;

use chrono::DateTime;
use tokio_util::sync::CancellationToken;

use super::world::{World, WorldRef, GROUP, OTHER_GROUP, SOURCE};
use crate::consumer::progress::writer::ExitWrite;
use crate::consumer::progress::writer::{ExitWriter, PendingExit};
use crate::dlq::DeadLettered;
use crate::dlq::Envelope;
use crate::record::Record;
use crate::retry_tier::RetryWritten;
use crate::stopped::Stopped;

/// A member's dead-letter and retry-topic writes.
pub(super) struct SimExits {
    pub world: WorldRef,
    /// The retry topics' partition count.
    pub retry_partitions: i32,
}

impl ExitWriter for SimExits {
    fn write(&self, record: &Record, to: &ExitWrite, cancel: CancellationToken) -> PendingExit {
        let to = to.clone();
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
                        .then(|| acknowledge(&mut w, &record, to.clone(), retry_partitions))
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
/// record is appended to its retry topic as the real writer writes it.
fn acknowledge(
    w: &mut World,
    record: &Record,
    to: ExitWrite,
    retry_partitions: i32,
) -> RetryWritten {
    w.exited(record);
    let written = DeadLettered {
        topic: String::new(),
        partition: 0,
        offset: 0,
    };
    let (tier, due, left) = match to {
        ExitWrite::DeadLetter {
            kind,
            message,
            attempts,
        } => {
            w.dead_letters += 1;
            if kind == crate::failure::DeadLetterKind::Parked {
                // Its order given up by `park_max_age`: the key's later records go on.
                let tp = (record.topic.clone(), record.partition);
                w.partitions
                    .entry(tp)
                    .or_default()
                    .gave_up
                    .insert(record.offset);
            }
            if let Some(letters) = &mut w.dead_lettered {
                letters.push(Envelope::new(record, kind, &message, attempts, GROUP));
            }
            return RetryWritten::DeadLettered(written);
        }
        ExitWrite::Retry { tier, due, left } => (tier, due, left),
    };
    // Routed as the real writer routes it.
    let source = record.source_topic().to_string();
    if source != SOURCE {
        w.violations.push(format!(
            "the retry record of {} is routed to {source}'s retry topic, a topic the consumer does not read",
            record.id
        ));
    }
    let partition = (record.offset as i32).rem_euclid(retry_partitions);
    let tp = (crate::record::retry::topic_name(&source, tier), partition);
    let mut copy = record.clone();
    // Some writers claim another source topic (a foreign or hostile account), and some run
    // with a clock ahead, or write due times far away.
    if w.rng.u8(0..10) == 0 {
        copy.topic = "payments".into();
    }
    let far = DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
        .expect("a valid date")
        .to_utc();
    let due = match w.rng.u8(0..20) {
        0 => due + chrono::TimeDelta::hours(2),
        1 => far,
        _ => due,
    };
    let written_as = |record: &Record, due, group| Record {
        headers: crate::retry_tier::retry_headers(record, tier, due, left.clone(), group),
        retry: None,
        ..record.clone()
    };
    // Another service (group) on the same topic writes its retry records to the same retry
    // topics, some due far ahead: this group must pass them over, not handle nor wait for them.
    if w.other_group.as_mut().is_some_and(|rng| rng.u8(0..3) == 0) {
        let mut other = copy.clone();
        other.id = format!("{}-of-{OTHER_GROUP}", copy.id);
        w.append(&tp, written_as(&copy, due, GROUP));
        w.append_foreign(&tp, written_as(&other, far, OTHER_GROUP));
    } else {
        w.append(&tp, written_as(&copy, due, GROUP));
    }
    RetryWritten::RetryTopic(written)
}
