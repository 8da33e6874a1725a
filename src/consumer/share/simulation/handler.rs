//! The handler and the dead-letter topic of a schedule. What each record's calls do is its
//! plan, drawn from the seed: take no time at all (finish without awaiting), yield, sleep, or
//! outlast the acquisition lock; then succeed, fail transiently n times, always, permanently,
//! or panic. While the downstream is down every call fails transiently. Dead letters are
//! acknowledged at once, late, or later than a lock lasts.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::broker::{PartitionRef, TOPIC};
use crate::config::ShareDlq;
use crate::consumer::progress::writer::ExitWrite;
use crate::consumer::progress::writer::ExitWriter;
use crate::dlq::DeadLettered;
use crate::failure::{DeadLetterKind, HandlerError};
use crate::handler::BatchHandler;
use crate::record::Record;
use crate::retry_tier::RetryWritten;

use crate::consumer::simulation::SIMULATED_PANIC;

/// How long a call takes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pace {
    /// No await at all: the call is over when first polled.
    Immediate,
    Yield,
    Sleep(Duration),
}

/// What a record's calls answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Answer {
    Ok,
    /// Transient for the first n calls (of every delivery together), then ok.
    Transient(u32),
    AlwaysTransient,
    Permanent,
    Panic,
}

/// One record's plan.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    pub pace: Pace,
    pub answer: Answer,
    /// How long its dead letter takes to be acknowledged.
    pub dead_letter_after: Duration,
}

/// The handler of one member.
pub(super) struct SimHandler {
    pub partition: PartitionRef,
    pub plans: std::sync::Arc<Vec<Plan>>,
    pub member: usize,
}

/// Takes a record's call out of the calls in progress when the call ends or is dropped, and
/// marks it cut when dropped before its end.
struct InCall<'a>(&'a PartitionRef, usize, bool);

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        let mut p = self.0.lock();
        p.in_call.remove(&self.1);
        if !self.2 {
            p.cut_calls.insert(self.1);
        }
    }
}

/// Marks a record's dead-letter write cut when it is dropped before its end.
struct Writing(PartitionRef, usize, bool);

impl Drop for Writing {
    fn drop(&mut self) {
        if !self.2 {
            self.0.lock().cut_calls.insert(self.1);
        }
    }
}

impl BatchHandler for SimHandler {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let record = records[0].offset as usize;
        let plan = self.plans[record];
        let calls = {
            let mut p = self.partition.lock();
            if let Some(other) = p.in_call.insert(record, self.member) {
                p.violations.push(format!(
                    "record {record} in the handler of members {other} and {} at once",
                    self.member
                ));
            }
            let n = p.calls.entry(record).or_default();
            *n += 1;
            *n
        };
        let mut guard = InCall(&self.partition, record, false);
        match plan.pace {
            Pace::Immediate => {}
            Pace::Yield => tokio::task::yield_now().await,
            Pace::Sleep(d) => tokio::time::sleep(d).await,
        }
        guard.2 = true;
        let down = self.partition.lock().downstream_down;
        let result = if down {
            Err(HandlerError::transient("downstream down"))
        } else {
            match plan.answer {
                Answer::Ok => Ok(()),
                Answer::Transient(n) if calls <= n => {
                    Err(HandlerError::transient(format!("try {calls} of {n}")))
                }
                Answer::Transient(_) => Ok(()),
                Answer::AlwaysTransient => Err(HandlerError::transient("never works")),
                Answer::Permanent => Err(HandlerError::permanent("rejected")),
                Answer::Panic => {
                    drop(guard);
                    panic!("{SIMULATED_PANIC}")
                }
            }
        };
        if result.is_ok() {
            let mut p = self.partition.lock();
            *p.handled.entry(record).or_default() += 1;
            let delivery = p.slots[record].deliveries;
            p.handled_in.insert(record, delivery);
        }
        drop(guard);
        result
    }
}

/// The dead-letter topic: acknowledges each record's dead letter after its plan's delay,
/// checking that a record whose retries were used up is dead-lettered by us only on its last
/// delivery.
pub(super) struct SimDeadLetters {
    pub partition: PartitionRef,
    pub plans: std::sync::Arc<Vec<Plan>>,
    pub share_dlq: ShareDlq,
    /// The limit the members were told (`None`: unknown to them).
    pub known_limit: Option<u16>,
}

impl ExitWriter for SimDeadLetters {
    fn write(
        &self,
        record: &Record,
        write: &ExitWrite,
        cancel: CancellationToken,
    ) -> crate::consumer::progress::writer::PendingExit {
        let &ExitWrite::DeadLetter { kind, .. } = write else {
            unreachable!("a share group has no retry topics")
        };
        let index = record.offset as usize;
        let delivery = record.delivery_count.unwrap_or(0);
        {
            let mut p = self.partition.lock();
            if self.share_dlq == ShareDlq::Broker {
                p.violations.push(format!(
                    "record {index} dead-lettered by us with share_dlq = broker"
                ));
            }
            if kind == DeadLetterKind::RetriesExhausted
                && self.known_limit.is_some_and(|l| delivery < l)
            {
                p.violations.push(format!(
                    "record {index} dead-lettered on delivery {delivery} of {:?}: it should have been released",
                    self.known_limit
                ));
            }
        }
        let partition = self.partition.clone();
        let delay = self.plans[index].dead_letter_after;
        Box::pin(async move {
            let mut writing = Writing(partition.clone(), index, false);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    writing.2 = true;
                    return Err(crate::stopped::Stopped);
                }
                _ = tokio::time::sleep(delay) => {}
            }
            writing.2 = true;
            let mut p = partition.lock();
            *p.dead_lettered.entry(index).or_default() += 1;
            Ok(RetryWritten::DeadLettered(DeadLettered {
                topic: format!("{TOPIC}-dlt"),
                partition: 0,
                offset: index as i64,
            }))
        })
    }
}
