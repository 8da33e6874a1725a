//! Exactly once in the simulation: each member's transactional producer ([`SimProducer`],
//! behind the real `consumer::progress::transaction`), over the coordinator's state
//! ([`super::coordinator`]). A transaction's writes stay invisible until it commits; a commit
//! is refused when the schedule says so (the coordinator unavailable), when a write in it
//! failed (an output too large for the topic or invalid, a dead letter with its payload too
//! large), when it sends the offsets of a partition the group moved away from the member
//! (KIP-447: a zombie's generation is over), and fatally when the producer was fenced (its
//! transaction timed out on the broker); its answers are lost when the schedule says so
//! (committed or not, the producer cannot tell); an abort discards the writes. At each commit the guarantee is checked: a committed offset implies exactly one
//! committed effect (an output, a dead letter or a retry record) of each record before it,
//! and no record ever has two.

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::coordinator::{Coordinator, Write};
use super::plan::Outcome;
use super::world::{delivered, World, WorldRef, GROUP};
use crate::consumer::client::TopicPartition;
use crate::consumer::progress::transaction::{Cause, OutputTooLarge, TxnError};
use crate::consumer::progress::transaction::{Handed, TransactionalProducer};
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::record::retry::RetryStage;
use crate::record::Record;

/// The topic the simulated handler's outputs go to.
pub(super) const OUTPUTS: &str = "t-out";

/// The header that marks an output as larger than the topic accepts.
pub(super) const TOO_LARGE: &str = "simulated-too-large";

/// The header that marks an output the broker refuses as invalid.
pub(super) const INVALID: &str = "simulated-invalid";

/// A member's transactional producer; see the module docs.
pub(super) struct SimProducer {
    world: WorldRef,
    member: usize,
    id: u64,
}

impl SimProducer {
    /// A new producer of `member` (a new transactional id).
    pub(super) fn new(world: &WorldRef, member: usize) -> Self {
        let id = coordinator(&mut world.lock()).register(member);
        Self {
            world: world.clone(),
            member,
            id,
        }
    }

    /// Adds `write` to the open transaction: taken, or refused at once now and then (the
    /// producer's queue full), which dooms the transaction.
    fn hand(&self, write: Write, topic: &str) -> Handed {
        let mut w = self.world.lock();
        let refused_at_once = w.rng.u16(0..2_000) == 0;
        let answer = if refused_at_once {
            Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))
        } else {
            let refused = match &write {
                Write::Refused(code) => Some(KafkaError::MessageProduction(*code)),
                _ => None,
            };
            coordinator(&mut w)
                .open
                .entry(self.id)
                .or_insert((self.member, Vec::new()))
                .1
                .push(write);
            Ok(futures_util::future::ready(refused).boxed())
        };
        Handed {
            topic: topic.to_string(),
            answer,
        }
    }
}

fn coordinator(w: &mut World) -> &mut Coordinator {
    w.exactly_once
        .as_mut()
        .expect("an exactly-once schedule has a coordinator")
}

/// The coordinator's answer `code` to `call`.
fn answer(call: &'static str, code: RDKafkaErrorCode) -> Cause {
    Cause::Kafka {
        call,
        error: KafkaError::Global(code),
    }
}

/// The producer was fenced: its transaction timed out on the broker.
fn fenced() -> TxnError {
    TxnError::Fatal(answer(
        "commit_transaction",
        RDKafkaErrorCode::ProducerFenced,
    ))
}

impl TransactionalProducer for SimProducer {
    fn start(&self) -> Result<(), TxnError> {
        Ok(())
    }

    fn begin(&self) -> Result<(), TxnError> {
        let mut w = self.world.lock();
        if coordinator(&mut w).fenced.contains(&self.id) {
            return Err(fenced());
        }
        Ok(())
    }

    fn write_outputs(&self, outputs: &[Output]) -> Result<Vec<Handed>, OutputTooLarge> {
        let mut handed = Vec::new();
        for output in outputs {
            let of = String::from_utf8(output.value.clone().unwrap_or_default())
                .ok()
                .and_then(|at| parse_position(&at));
            let marked = |marker: &str| output.headers.iter().any(|h| h.key == marker.as_bytes());
            let (too_large, invalid) = (marked(TOO_LARGE), marked(INVALID));
            // Half the time the producer refuses a record too large itself, before anything
            // is written; else the broker does, and the transaction cannot commit.
            if too_large && handed.is_empty() && self.world.lock().rng.bool() {
                return Err(OutputTooLarge {
                    topic: output.topic.clone(),
                    error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
                });
            }
            let write = match (too_large, invalid, of) {
                (true, _, _) | (_, _, None) => {
                    Write::Refused(RDKafkaErrorCode::MessageSizeTooLarge)
                }
                (false, true, _) => Write::Refused(RDKafkaErrorCode::InvalidRecord),
                (false, false, Some(of)) => Write::Output { of },
            };
            handed.push(self.hand(write, &output.topic));
        }
        Ok(handed)
    }

    fn write_dead_letter(
        &self,
        record: &Record,
        _kind: DeadLetterKind,
        _message: &str,
        _attempts: u32,
        smallest: bool,
    ) -> Handed {
        // A record whose output is huge carries a payload its dead letter cannot hold either:
        // only the reference fits.
        let huge = matches!(
            self.world.lock().plans.get(&record.id).map(|p| p.outcome),
            Some(Outcome::Huge)
        );
        let write = match huge && !smallest {
            true => Write::Refused(RDKafkaErrorCode::MessageSizeTooLarge),
            false => Write::DeadLetter {
                of: delivered(record),
            },
        };
        self.hand(write, "t-dlt")
    }

    fn write_retry(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
    ) -> Handed {
        let topic = crate::record::retry::topic_name(record.source_topic(), tier);
        let written = Record {
            headers: crate::retry_tier::retry_headers(record, tier, due, left, GROUP),
            retry: None,
            ..record.clone()
        };
        let write = Write::Retry {
            of: delivered(record),
            to: (topic.clone(), 0),
            record: written,
        };
        self.hand(write, &topic)
    }

    fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), TxnError> {
        let mut guard = self.world.lock();
        let w = &mut *guard;
        let c = coordinator(w);
        if c.fenced.contains(&self.id) {
            return Err(fenced());
        }
        let writes = c.open.get(&self.id).map_or(0, |(_, writes)| writes.len());
        if writes > 0 && std::mem::take(&mut c.unknown_next) {
            // The answers are lost: the commit went through or not, and the producer never
            // learns which (librdkafka's retries outlived the broker's transaction timeout).
            c.tally.unknowns += 1;
            let went_through = w.rng.bool();
            tracing::debug!(
                producer = self.id,
                went_through,
                "the commit's answers are lost"
            );
            let lost = TxnError::Unknown(Cause::Unanswered {
                tries: 1,
                secs: 0,
                error: KafkaError::Global(RDKafkaErrorCode::OperationTimedOut),
            });
            drop(guard);
            if went_through {
                let before = {
                    let mut w = self.world.lock();
                    let t = coordinator(&mut w).tally;
                    (t.dead_letters, t.retries)
                };
                self.commit_now(positions)?;
                let mut w = self.world.lock();
                let t = &mut coordinator(&mut w).tally;
                t.unknown_dead_letters += t.dead_letters - before.0;
                t.unknown_retries += t.retries - before.1;
            } else {
                // The broker aborts it once it times out.
                let mut w = self.world.lock();
                let c = coordinator(&mut w);
                let (_, aborted) = c.open.remove(&self.id).unwrap_or_default();
                c.tally.aborted_writes += aborted.len() as u64;
            }
            let mut w = self.world.lock();
            coordinator(&mut w).fenced.insert(self.id);
            return Err(lost);
        }
        drop(guard);
        self.commit_now(positions)
    }

    fn abort(&self) -> Result<(), TxnError> {
        let mut w = self.world.lock();
        let c = coordinator(&mut w);
        if c.fenced.contains(&self.id) {
            return Err(fenced());
        }
        c.tally.aborts += 1;
        if let Some((_, writes)) = c.open.get_mut(&self.id) {
            c.tally.aborted_writes += writes.len() as u64;
            writes.clear();
        }
        Ok(())
    }
}

impl SimProducer {
    /// The coordinator's part of a commit whose answer is not lost.
    fn commit_now(&self, positions: &[(TopicPartition, i64)]) -> Result<(), TxnError> {
        let mut guard = self.world.lock();
        let w = &mut *guard;
        let c = coordinator(w);
        let writes = c.open.get(&self.id).map_or(0, |(_, writes)| writes.len());
        if writes > 0 && c.fence_next {
            c.fence_next = false;
            c.fenced.insert(self.id);
            c.tally.fences += 1;
            // The broker aborted the transaction when it timed out.
            let (_, aborted) = c.open.remove(&self.id).unwrap_or_default();
            c.tally.aborted_writes += aborted.len() as u64;
            return Err(fenced());
        }
        if writes > 0 && std::mem::take(&mut c.abort_next) {
            return Err(TxnError::Abort(answer(
                "commit_transaction",
                RDKafkaErrorCode::CoordinatorNotAvailable,
            )));
        }
        let open = c.open.get(&self.id).map(|(_, writes)| writes);
        let refused = open.and_then(|writes| {
            writes.iter().find_map(|w| match w {
                Write::Refused(code) => Some(*code),
                _ => None,
            })
        });
        if let Some(code) = refused {
            return Err(TxnError::Abort(answer("commit_transaction", code)));
        }
        if let Some((tp, _)) = positions
            .iter()
            .find(|(tp, _)| c.lost.contains(&(self.member, tp.clone())))
        {
            c.tally.zombie_refusals += 1;
            tracing::debug!(topic = %tp.0, partition = tp.1, "the group's generation moved on");
            return Err(TxnError::Abort(answer(
                "send_offsets_to_transaction",
                RDKafkaErrorCode::IllegalGeneration,
            )));
        }
        let (_, writes) = c
            .open
            .insert(self.id, (self.member, Vec::new()))
            .unwrap_or_default();
        c.tally.commits += 1;
        tracing::debug!(event = "simulated_commit", member = self.member, producer = self.id,
            ?positions, writes = ?writes.iter().map(Write::of).collect::<Vec<_>>());
        let mut retries = Vec::new();
        let mut twice = Vec::new();
        for write in writes {
            let of = write.of().cloned().expect("refused writes do not commit");
            let n = c.effects.entry(of.clone()).or_default();
            *n += 1;
            if *n > 1 {
                twice.push(format!(
                    "{}-{} offset {} has {n} committed effects",
                    of.0 .0, of.0 .1, of.1
                ));
            }
            match write {
                Write::Output { .. } => c.tally.outputs += 1,
                Write::DeadLetter { .. } => c.tally.dead_letters += 1,
                Write::Retry { to, record, .. } => {
                    c.tally.retries += 1;
                    retries.push((to, record));
                }
                Write::Refused(_) => {}
            }
        }
        w.violations.extend(twice);
        for (to, record) in retries {
            w.append(&to, record);
        }
        for (tp, position) in positions {
            let from = w.committed.get(tp).copied().unwrap_or(0);
            if *position < from {
                let violation = format!(
                    "the committed position of {}-{} moves back from {from} to {position}",
                    tp.0, tp.1
                );
                w.violations.push(violation);
            }
            let c = coordinator(w);
            let missing = (from..*position).find(|o| c.effects.get(&(tp.clone(), *o)) != Some(&1));
            if let Some(offset) = missing {
                let violation = format!(
                    "{}-{} is committed to {position}, but offset {offset} has no committed effect",
                    tp.0, tp.1
                );
                w.violations.push(violation);
            }
            w.committed.insert(tp.clone(), (*position).max(from));
        }
        Ok(())
    }
}

/// `topic-partition-offset` (a delivered record's position, as the handler's output carries
/// it) parsed.
fn parse_position(at: &str) -> Option<(TopicPartition, i64)> {
    let mut parts = at.rsplitn(3, '-');
    let offset = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    Some(((parts.next()?.to_string(), partition), offset))
}

/// The output the handler writes for `record`, whose calls end in `outcome`: where it was
/// delivered, marked too large or invalid as the outcome says.
pub(super) fn output_of(record: &Record, outcome: Outcome) -> Output {
    let ((topic, partition), offset) = delivered(record);
    let output = Output::new(OUTPUTS, format!("{topic}-{partition}-{offset}"));
    match outcome {
        Outcome::TooLarge | Outcome::Huge => output.header(TOO_LARGE, ""),
        Outcome::Invalid => output.header(INVALID, ""),
        _ => output,
    }
}
