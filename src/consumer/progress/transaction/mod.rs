//! Exactly once: one transactional producer per consumer, and the transaction every settled
//! record's effect goes into with its offset.
//!
//! A worker settles a record by [`Transaction::apply`]: its outputs (or its dead letter, or
//! its retry record) are handed to the producer and its position noted, under one lock, so a
//! commit takes a record's effect and its offset together or neither. [`Transaction::commit`]
//! (`transaction_interval` after its first record — sized by time, as Kafka Streams does —
//! or at `transaction_records`, at revocation and at shutdown) sends the positions with the
//! group's metadata (KIP-447: a member whose generation is over is refused) and commits.
//!
//! **No lock across a broker call, no worker waiting for a commit.** The lock is held only
//! to hand writes over and to note what a commit decided. While a commit talks to the broker
//! (librdkafka takes no writes then), records that settle are queued ([`queued`]) and handed
//! to the next transaction as it begins; only when the queue is full does a worker wait, off
//! the runtime's other work (tokio's `block_in_place` on a multi-threaded runtime), so the
//! rest of the process — the health probes, the poll loop — goes on.
//!
//! **Aborts.** When a commit fails, the transaction aborts and every partition that had
//! records in it starts again at its first one: the poll loop takes the rewinds
//! ([`Transaction::take_rewinds`]), seeks there and gives the partition a fresh
//! worker; the old worker's records are refused from then on. A rewind belongs to the
//! assignment whose records were in the transaction: once that assignment ended, the
//! partition's next one starts from the committed position and is not rewound.
//!
//! **Writes the broker never takes.** A record whose output the broker refused for good
//! ([`crate::kafka::send::refused_for_good`]: too large, invalid — a compacted topic and no
//! key —, a topic missing or not writable) is remembered, and when it comes again it is
//! dead-lettered instead, naming the refusal; one whose dead letter or retry record was too
//! large goes as a reference. The broker refuses a whole produce request, so when it held
//! several records' writes, each of them goes again in a transaction of its own, which tells
//! which are refused themselves. A record whose own dead letter keeps being refused (the
//! dead-letter topic missing or not writable, even its reference too large) stops the
//! consumer, naming it, after [`MAX_REFUSALS`] refusals: no record is ever skipped.
//!
//! **A commit whose outcome is unknown** (its answers lost for longer than the broker keeps a
//! transaction open) is never aborted and never rewound to the transaction's first records:
//! a new producer takes over, and each partition starts again where the broker says the
//! group's offset is committed (asked with `read_committed`, which waits for the old
//! transaction to be resolved): an input's effect is never committed twice. A fenced producer
//! is replaced the same way; only when none can start does the consumer stop. Dead letters
//! and retry records are counted when their transaction commits.

mod committer;
mod open;
mod producer;
mod queued;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::consumer::progress::writer::ExitWrite;
use crate::consumer::TransactionError;
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::kafka::send::{is_too_large, refused_for_good};
use crate::metrics::Metrics;
use crate::record::Record;
pub(crate) use committer::commit_when_due;
use open::Open;
pub(crate) use open::TopicPartition;
pub(crate) use producer::{
    Cause, GroupReader, Handed, KafkaProducer, TransactionalProducer, TxnError,
};
// The simulation's producer and the tests answer with it.
#[cfg(test)]
pub(crate) use producer::OutputTooLarge;
use queued::{Owned, Queue, Queued};

/// What a settled record leaves behind.
pub(crate) enum Effect<'a> {
    /// Handled: the records its call produced (none for a plain handler).
    Handled(Vec<Output>),
    /// It exits its stage: its dead letter or retry record.
    Exit(&'a ExitWrite),
}

impl Effect<'_> {
    /// Whether it writes nothing: handled, with no outputs.
    fn writes_nothing(&self) -> bool {
        matches!(self, Effect::Handled(outputs) if outputs.is_empty())
    }

    fn owned(self) -> Owned {
        match self {
            Effect::Handled(outputs) => Owned::Handled(outputs),
            Effect::Exit(write) => Owned::Exit(write.clone()),
        }
    }
}

/// Whether [`Transaction::apply`] took a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Its effect and position are in the open transaction.
    Taken,
    /// Refused: its assignment ended, or its partition rewinds, or the producer failed for
    /// good. It is consumed again from the committed position.
    Refused,
}

/// How a [`Transaction::commit`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Nothing was open.
    Nothing,
    /// Committed, with this many records.
    Records(usize),
    /// Aborted, or its producer replaced, for this; its partitions rewind
    /// ([`Transaction::take_rewinds`]).
    Aborted(TxnError),
    /// The consumer cannot go on.
    Fatal(TransactionError),
}

/// What the broker refused of a record for good, for when the record comes again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refused {
    /// One of its outputs: it is dead-lettered instead, for this reason.
    Output(String),
    /// Its dead letter or retry record, as too large: it is dead-lettered as a reference.
    ExitTooLarge,
    /// Both: its output, and then its dead letter as too large; its dead letter goes as a
    /// reference, for this reason.
    OutputAndExit(String),
}

/// How often a record's own dead letter (or retry record) may be refused for good before the
/// consumer stops: once as too large is expected (its reference goes next), more means the
/// dead-letter topic refuses every write, or even the reference is too large (a key larger
/// than the topic takes), and no record may be skipped.
pub(crate) const MAX_REFUSALS: u32 = 5;

/// A record's exit in the open transaction, counted when it commits (an aborted one is done
/// again, and counted then).
enum Counted {
    DeadLetter { topic: String, kind: DeadLetterKind },
    Retry { topic: String, tier: u32 },
}

/// A write handed to the producer in the open transaction, and whose record it is.
struct Pending {
    partition: TopicPartition,
    offset: i64,
    output: bool,
    /// A dead letter written instead of the record's refused outputs: why they were.
    instead: Option<String>,
    handed: Handed,
}

/// Notes that `partition` has records of the assignment `revoked` in the open transaction
/// (once: every record of a partition in one transaction is of one assignment).
fn note_assignment(state: &mut State, partition: &TopicPartition, revoked: &CancellationToken) {
    if !state.assignments.contains_key(partition) {
        state.assignments.insert(partition.clone(), revoked.clone());
    }
}

/// `record`'s dead letter, through `producer`, as a permanent failure `why` after `attempts`
/// calls, in place of its outputs.
fn dead_letter_instead(
    producer: &dyn TransactionalProducer,
    record: &Record,
    why: &str,
    attempts: u32,
    smallest: bool,
) -> Vec<Handed> {
    tracing::error!(event = "record_output_refused", id = %record.id, error = %why,
        "dead-lettering the record instead of writing its outputs");
    vec![producer.write_dead_letter(record, DeadLetterKind::Permanent, why, attempts, smallest)]
}

struct State {
    /// Replaced when the producer is fenced (its transaction timed out on the broker during
    /// an outage) or a commit's outcome is unknown: a new one, with a new transactional id,
    /// takes over.
    producer: Arc<dyn TransactionalProducer>,
    open: Open,
    pending: Vec<Pending>,
    /// What the open transaction's exits add to the metrics once it commits.
    exits: Vec<Counted>,
    /// Why the open transaction must abort (a write the producer did not take).
    doomed: Option<Cause>,
    /// A commit is talking to the broker: no write may be handed over until it is done;
    /// records that settle meanwhile wait in `queue`.
    committing: bool,
    /// Records settled while a commit talks to the broker, for the next transaction.
    queue: Queue,
    /// Partitions that rewind: their records are refused until the poll loop restarted them.
    /// Keyed by partition, the assignment whose records rewind: refused while it lasts (a
    /// later assignment of the partition started from the committed position).
    rewinding: HashMap<TopicPartition, CancellationToken>,
    /// Rewinds for the poll loop: each partition and where it starts again.
    rewinds: Vec<Rewind>,
    /// The assignment (its revocation token) of each partition with records in the open
    /// transaction.
    assignments: HashMap<TopicPartition, CancellationToken>,
    refused: HashMap<(TopicPartition, i64), Refused>,
    /// Records whose writes went in a produce request the broker refused with others: each
    /// goes into a transaction of its own when it comes again, which tells whether its own
    /// writes are refused.
    suspects: HashSet<(TopicPartition, i64)>,
    /// How often each record's own dead letter was refused for another reason than its size.
    exit_refusals: HashMap<(TopicPartition, i64), u32>,
    fatal: Option<TransactionError>,
}

impl State {
    /// Whether the record at `offset` of `partition` is a suspect. Every record asks, under the
    /// lock, and there are almost never any: no key is made for an empty set.
    fn is_suspect(&self, partition: &TopicPartition, offset: i64) -> bool {
        !self.suspects.is_empty() && self.suspects.contains(&(partition.clone(), offset))
    }

    /// Forgets that the record at `offset` of `partition` is a suspect; whether it was.
    fn take_suspect(&mut self, partition: &TopicPartition, offset: i64) -> bool {
        !self.suspects.is_empty() && self.suspects.remove(&(partition.clone(), offset))
    }

    /// What the broker refused for good of the record at `offset` of `partition`, if anything
    /// (as [`State::is_suspect`], no key is made while nothing is refused).
    fn refusal(&self, partition: &TopicPartition, offset: i64) -> Option<&Refused> {
        if self.refused.is_empty() {
            return None;
        }
        self.refused.get(&(partition.clone(), offset))
    }

    /// Whether a record of `partition` settled in the assignment `revoked` is refused now:
    /// the producer failed for good, the assignment ended, or the partition rewinds.
    fn refuses(&self, partition: &TopicPartition, revoked: &CancellationToken) -> bool {
        self.fatal.is_some() || revoked.is_cancelled() || self.rewinds_now(partition)
    }

    /// Whether `partition`'s records are refused now: the assignment whose records rewind
    /// lasts (any record taken now is of that assignment).
    fn rewinds_now(&self, partition: &TopicPartition) -> bool {
        self.rewinding
            .get(partition)
            .is_some_and(|assignment| !assignment.is_cancelled())
    }

    fn new(producer: Box<dyn TransactionalProducer>) -> Self {
        Self {
            producer: Arc::from(producer),
            open: Open::default(),
            pending: Vec::new(),
            exits: Vec::new(),
            doomed: None,
            committing: false,
            queue: Queue::default(),
            rewinding: HashMap::new(),
            rewinds: Vec::new(),
            assignments: HashMap::new(),
            refused: HashMap::new(),
            suspects: HashSet::new(),
            exit_refusals: HashMap::new(),
            fatal: None,
        }
    }
}

/// A partition to start again after an aborted transaction.
pub(crate) struct Rewind {
    pub partition: TopicPartition,
    /// Its first record in the transaction.
    pub position: i64,
    /// The transaction's outcome is not known (its producer was replaced): the partition
    /// starts where the broker says the group's offset is committed, `position` when nothing
    /// is.
    pub ask_broker: bool,
    /// Cancelled once the assignment whose records those were ended: then the partition's
    /// next assignment (if any) starts from the committed position itself, and the rewind
    /// must not move it (it could be behind what another member committed since).
    pub assignment: CancellationToken,
}

/// Creates a new transactional producer (a new transactional id), not started yet.
pub(crate) type NewProducer =
    Box<dyn Fn() -> Result<Box<dyn TransactionalProducer>, String> + Send + Sync>;

/// See the module docs.
pub(crate) struct Transaction {
    /// Creates the producer that replaces a fenced one.
    new_producer: NewProducer,
    /// Never held across a broker call.
    state: Mutex<State>,
    /// Signalled when a commit has done talking to the broker.
    committed: Condvar,
    /// Held by the one commit running: two never interleave (the committer's, a
    /// revocation's, an isolated record's).
    commit_gate: Mutex<()>,
    max_records: usize,
    interval: Duration,
    metrics: Metrics,
    /// Woken when the open transaction has its most records.
    pub(crate) full: tokio::sync::Notify,
    /// Woken when rewinds wait for the poll loop, or the producer failed for good.
    pub(crate) rewound: tokio::sync::Notify,
}

impl Transaction {
    /// The transactions of `producer` (not started yet: [`Transaction::start`]), committing
    /// every `max_records` records or `interval`; `new_producer` makes the producer that
    /// replaces a fenced one.
    pub(crate) fn new(
        producer: Box<dyn TransactionalProducer>,
        new_producer: NewProducer,
        max_records: usize,
        interval: Duration,
        metrics: Metrics,
    ) -> Self {
        Self {
            new_producer,
            state: Mutex::new(State::new(producer)),
            committed: Condvar::new(),
            commit_gate: Mutex::new(()),
            max_records,
            interval,
            metrics,
            full: tokio::sync::Notify::new(),
            rewound: tokio::sync::Notify::new(),
        }
    }

    /// Registers the producer with the transaction coordinator (fencing an earlier producer
    /// of its id) and opens the first transaction. Blocks.
    pub(crate) fn start(&self) -> Result<(), TxnError> {
        let producer = self.lock().producer.clone();
        producer.start()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no commit is talking to the broker; the lock, then. Off the runtime's
    /// other work on a multi-threaded runtime ([`off_the_runtime`]).
    fn lock_between_commits(&self) -> std::sync::MutexGuard<'_, State> {
        let state = self.lock();
        if !state.committing {
            return state;
        }
        off_the_runtime(|| {
            self.committed
                .wait_while(state, |s| s.committing)
                .unwrap_or_else(|e| e.into_inner())
        })
    }

    /// `record`, taken from `partition`, settled with `effect`: hands its writes to the
    /// producer and notes its position, together. While a commit talks to the broker
    /// (librdkafka takes no writes then) the record is queued for the next transaction
    /// ([`queued`]) and the worker goes on; it waits for the commit only when the queue is
    /// full or the record must go alone into a transaction of its own. A queued record whose
    /// assignment ends, or whose partition rewinds, before the next transaction begins is
    /// dropped there, with every later record of its partition: it is consumed again from
    /// the committed position, as a record of an aborted transaction is.
    pub(crate) fn apply(
        &self,
        partition: &TopicPartition,
        record: &Record,
        revoked: &CancellationToken,
        effect: Effect<'_>,
    ) -> Applied {
        let offset = record.delivered_offset();
        let mut state = self.lock();
        if state.refuses(partition, revoked) {
            return Applied::Refused;
        }
        if state.committing {
            if !state.is_suspect(partition, offset) && state.queue.has_room() {
                // Its record is kept only when what it writes needs it: a record the broker
                // refused before is dead-lettered instead, from it.
                if effect.writes_nothing() && state.refusal(partition, offset).is_none() {
                    state.queue.push_nothing(partition, offset, revoked);
                } else {
                    state.queue.push(Queued {
                        partition: partition.clone(),
                        offset,
                        revoked: revoked.clone(),
                        record: Box::new(record.clone()),
                        effect: effect.owned(),
                    });
                }
                return Applied::Taken;
            }
            drop(state);
            state = self.lock_between_commits();
            if state.refuses(partition, revoked) {
                return Applied::Refused;
            }
        }
        let suspect = state.take_suspect(partition, offset);
        if suspect && !state.open.is_empty() {
            // Alone in its transaction: the one before commits first.
            drop(state);
            off_the_runtime(|| self.commit());
            state = self.lock_between_commits();
            if state.refuses(partition, revoked) {
                return Applied::Refused;
            }
        }
        self.hand_over(&mut state, partition, offset, record, revoked, effect);
        let full = state.open.records() >= self.max_records;
        drop(state);
        if suspect {
            // Its transaction of its own commits now: if the broker refuses its writes
            // again, they are its own.
            tracing::info!(event = "transaction_isolating", id = %record.id,
                "committing the record alone: its writes were refused with others'");
            off_the_runtime(|| self.commit());
        } else if full {
            self.full.notify_one();
        }
        Applied::Taken
    }

    /// Hands the writes of the record at `offset` of `partition`, settled with `effect`, to
    /// the producer and notes its position in the open transaction.
    fn hand_over(
        &self,
        state: &mut State,
        partition: &TopicPartition,
        offset: i64,
        record: &Record,
        revoked: &CancellationToken,
        effect: Effect<'_>,
    ) {
        // Remembered until the record's transaction commits: one that aborts for another
        // record's sake brings it back, still refused.
        let refused = state.refusal(partition, offset).cloned();
        self.write(state, partition, offset, record, refused, effect);
        state.open.add(partition, offset, Instant::now());
        note_assignment(state, partition, revoked);
    }

    /// Writes what `record` settled as (`effect`) into the open transaction, or its dead
    /// letter instead when the broker refused it before (`refused`).
    fn write(
        &self,
        state: &mut State,
        partition: &TopicPartition,
        offset: i64,
        record: &Record,
        refused: Option<Refused>,
        effect: Effect<'_>,
    ) {
        let p = state.producer.clone();
        let p = p.as_ref();
        let permanent = || Counted::DeadLetter {
            topic: record.topic.clone(),
            kind: DeadLetterKind::Permanent,
        };
        let mut instead = None;
        let (handed, exit) = match (refused, effect) {
            (Some(Refused::Output(why)), _) => {
                let handed = dead_letter_instead(p, record, &why, 1, false);
                instead = Some(why);
                (handed, Some(permanent()))
            }
            // Its output refused, and then its dead letter as too large: the reference.
            (Some(Refused::OutputAndExit(why)), _) => (
                dead_letter_instead(p, record, &why, 1, true),
                Some(permanent()),
            ),
            (Some(Refused::ExitTooLarge), Effect::Exit(ExitWrite::Retry { left, .. })) => {
                let attempts = record.retry.as_ref().map_or(0, |r| r.attempts) + left.attempts;
                let handed = dead_letter_instead(p, record, &left.error, attempts, true);
                (handed, Some(permanent()))
            }
            (Some(Refused::ExitTooLarge), Effect::Handled(_)) => {
                let why = "its outputs and its dead letter were refused as too large";
                (
                    dead_letter_instead(p, record, why, 1, true),
                    Some(permanent()),
                )
            }
            (_, Effect::Handled(outputs)) => match p.write_outputs(&outputs) {
                Ok(handed) => (handed, None),
                // The producer refused it before anything of it was written.
                Err(too_large) => {
                    let why = too_large.to_string();
                    let handed = dead_letter_instead(p, record, &why, 1, false);
                    instead = Some(why);
                    (handed, Some(permanent()))
                }
            },
            // A dead letter refused as too large goes again as a reference, which fits.
            (
                refused,
                Effect::Exit(ExitWrite::DeadLetter {
                    kind,
                    message,
                    attempts,
                }),
            ) => {
                let smallest = refused == Some(Refused::ExitTooLarge);
                let handed = p.write_dead_letter(record, *kind, message, *attempts, smallest);
                let topic = record.topic.clone();
                (
                    vec![handed],
                    Some(Counted::DeadLetter { topic, kind: *kind }),
                )
            }
            (_, Effect::Exit(ExitWrite::Retry { tier, due, left })) => {
                let handed = p.write_retry(record, *tier, *due, left.clone());
                let topic = record.topic.clone();
                (vec![handed], Some(Counted::Retry { topic, tier: *tier }))
            }
        };
        let output = exit.is_none();
        state.exits.extend(exit);
        for handed in handed {
            if let Err(error) = &handed.answer {
                state.doomed.get_or_insert_with(|| Cause::NotTaken {
                    topic: handed.topic.clone(),
                    error: error.clone(),
                });
            }
            state.pending.push(Pending {
                partition: partition.clone(),
                offset,
                output,
                instead: instead.clone(),
                handed,
            });
        }
    }

    /// Whether the open transaction should commit now.
    pub(crate) fn is_due(&self) -> bool {
        self.lock()
            .open
            .is_due(Instant::now(), self.max_records, self.interval)
    }

    /// How long until the open transaction is due by time; its interval while empty.
    pub(crate) fn due_in(&self) -> Duration {
        self.lock()
            .open
            .due_in(Instant::now(), self.interval)
            .unwrap_or(self.interval)
    }

    /// Commits the open transaction with the positions of its records, as the group member
    /// the consumer is now, and opens the next; on failure aborts it and rewinds its
    /// partitions. Blocks until the broker answered; records that settle meanwhile wait, and
    /// nothing else does: the lock is not held while the broker is asked.
    pub(crate) fn commit(&self) -> Committed {
        let _one = self.commit_gate.lock().unwrap_or_else(|e| e.into_inner());
        let (producer, positions, records, doomed) = {
            let mut state = self.lock();
            if let Some(fatal) = &state.fatal {
                return Committed::Fatal(fatal.clone());
            }
            if state.open.is_empty() && state.doomed.is_none() {
                return Committed::Nothing;
            }
            state.committing = true;
            let positions: Vec<_> = state
                .open
                .positions()
                .map(|(p, o)| (p.clone(), o))
                .collect();
            let records = state.open.records();
            (
                state.producer.clone(),
                positions,
                records,
                state.doomed.take(),
            )
        };
        let started = Instant::now();
        let outcome = match doomed {
            Some(why) => Err(TxnError::Abort(why)),
            None => producer.commit(&positions),
        };
        let committed = match outcome {
            Ok(()) => {
                let began = producer.begin();
                let mut state = self.lock();
                state.open.end();
                state.assignments.clear();
                // Drained, not taken: the next transaction's writes reuse its room.
                let s = &mut *state;
                for pending in s.pending.drain(..) {
                    let key = (pending.partition, pending.offset);
                    s.refused.remove(&key);
                    s.exit_refusals.remove(&key);
                }
                for exit in state.exits.drain(..) {
                    self.count(exit);
                }
                self.metrics
                    .transactions
                    .with_label_values(&["committed"])
                    .inc();
                self.metrics.transaction_records.observe(records as f64);
                self.metrics
                    .transaction_commit_seconds
                    .observe(started.elapsed().as_secs_f64());
                tracing::debug!(event = "transaction_committed", records);
                match began {
                    Ok(()) => Committed::Records(records),
                    Err(e) => {
                        drop(state);
                        // Nothing is open: a new producer, and nothing to rewind.
                        self.fail(e)
                    }
                }
            }
            Err(TxnError::Abort(why)) => self.abort(&producer, why),
            Err(failed) => self.fail(failed),
        };
        let mut state = self.lock();
        state.committing = false;
        // Under the same lock: no record settles between the queued ones and the next.
        self.hand_over_queued(&mut state);
        drop(state);
        self.committed.notify_all();
        committed
    }

    /// Hands the records queued while the commit talked to the broker to the transaction
    /// that began after it: those that write, in the order they settled, and each
    /// partition's run of those that write nothing; those whose assignment ended or whose
    /// partition rewinds are dropped.
    fn hand_over_queued(&self, state: &mut State) {
        let (mut queued, mut runs) = state.queue.take();
        for queued in queued.drain(..) {
            let Queued {
                partition,
                offset,
                revoked,
                record,
                effect,
            } = queued;
            if state.refuses(&partition, &revoked) {
                continue;
            }
            // Not alone in its transaction: if its writes are refused with others' again,
            // it is a suspect again, and goes alone when it comes again.
            state.take_suspect(&partition, offset);
            match effect {
                Owned::Handled(outputs) => {
                    let effect = Effect::Handled(outputs);
                    self.hand_over(state, &partition, offset, &record, &revoked, effect);
                }
                Owned::Exit(write) => {
                    let effect = Effect::Exit(&write);
                    self.hand_over(state, &partition, offset, &record, &revoked, effect);
                }
            }
        }
        let now = Instant::now();
        for (partition, run) in runs.drain() {
            if state.refuses(&partition, &run.revoked) {
                continue;
            }
            let of_run = |(p, o): &(TopicPartition, i64)| {
                *p == partition && (run.first..=run.last).contains(o)
            };
            if !state.suspects.is_empty() {
                state.suspects.retain(|key| !of_run(key));
            }
            // Nothing of it can have been refused while it waited: only an abort notes
            // refusals, of its own transaction's records, and their partitions rewind, which
            // drops their queued runs above. (A run of the partition's next assignment wrote
            // nothing this time: nothing of it to refuse.)
            state
                .open
                .add_run(&partition, run.first, run.last, run.records, now);
            note_assignment(state, &partition, &run.revoked);
        }
        state.queue.reuse((queued, runs));
        if state.open.records() >= self.max_records {
            self.full.notify_one();
        }
    }

    /// Aborts the open transaction (of `producer`) for `why`, remembers what the broker
    /// refused for good, and rewinds its partitions to their first records in it.
    fn abort(&self, producer: &Arc<dyn TransactionalProducer>, why: Cause) -> Committed {
        if let Err(e) = producer.abort() {
            tracing::error!(event = "transaction_abort_failed", error = %e, cause = %why,
                "could not abort the transaction");
            return self.fail(e);
        }
        let mut state = self.lock();
        let mut refused: HashMap<(TopicPartition, i64), Refused> = HashMap::new();
        let mut exits_refused = Vec::new();
        for pending in state.pending.drain(..).collect::<Vec<_>>() {
            let topic = pending.handed.topic.clone();
            let Some(error) = pending.handed.refused_now().filter(refused_for_good) else {
                continue;
            };
            let key = (pending.partition, pending.offset);
            if !pending.output {
                // Counted, whatever the refusal: a reference refused too (a key too large
                // for the dead-letter topic) must not go round for ever either.
                exits_refused.push((key.clone(), topic.clone(), error.clone()));
            }
            let now = match (pending.output, is_too_large(&error)) {
                (true, _) => {
                    Refused::Output(format!("the broker refuses the output to {topic}: {error}"))
                }
                // Written instead of its refused outputs: that dead letter, as a reference.
                (false, true) => match &pending.instead {
                    Some(why) => Refused::OutputAndExit(why.clone()),
                    None => Refused::ExitTooLarge,
                },
                (false, false) => continue,
            };
            refused.entry(key).or_insert(now);
        }
        // The broker refuses a whole produce request: only a record refused alone is known
        // to be refused itself.
        if refused.len() == 1 {
            state.refused.extend(refused);
        } else {
            state.suspects.extend(refused.into_keys());
        }
        for (key, topic, error) in exits_refused {
            let tries = state.exit_refusals.entry(key.clone()).or_default();
            *tries += 1;
            if *tries >= MAX_REFUSALS {
                let ((record_topic, partition), offset) = key;
                let fatal = TransactionError::ExitRefused {
                    topic: record_topic,
                    partition,
                    offset,
                    refusals: MAX_REFUSALS,
                    to: topic,
                    error: Box::new(error),
                };
                tracing::error!(event = "transaction_fatal", error = %fatal, "stopping the consumer");
                state.fatal = Some(fatal.clone());
                self.rewound.notify_one();
                return Committed::Fatal(fatal);
            }
        }
        let partitions = self.rewind_open(&mut state, false);
        tracing::warn!(event = "transaction_aborted", error = %why, partitions,
            "the transaction's records are consumed again from their partitions' committed positions");
        match producer.begin() {
            Ok(()) => Committed::Aborted(TxnError::Abort(why)),
            Err(e) => {
                drop(state);
                self.fail(e)
            }
        }
    }

    /// Ends the open transaction as aborted: counts it, and has its partitions rewound by the
    /// poll loop (their records refused until then), to their first records in it, or, when
    /// its outcome is not known (`ask_broker`), to what the broker says is committed.
    /// Returns how many partitions rewind.
    fn rewind_open(&self, state: &mut State, ask_broker: bool) -> usize {
        let rewinds = state.open.end();
        state.exits.clear();
        self.metrics
            .transactions
            .with_label_values(&["aborted"])
            .inc();
        let partitions = rewinds.len();
        for (partition, position) in rewinds {
            let assignment = state.assignments.remove(&partition).unwrap_or_default();
            state
                .rewinding
                .insert(partition.clone(), assignment.clone());
            state.rewinds.push(Rewind {
                partition,
                position,
                ask_broker,
                assignment,
            });
        }
        state.assignments.clear();
        self.rewound.notify_one();
        partitions
    }

    /// The producer failed (`failed`) and cannot go on: fenced (its transaction timed out on
    /// the broker), stuck, or its commit's outcome unknown. A new producer with a new
    /// transactional id takes over, and the open transaction's partitions start again where
    /// the broker says the group's offsets are committed — whatever became of the old
    /// transaction; when no new producer can start, the consumer stops.
    fn fail(&self, failed: TxnError) -> Committed {
        let why = failed.to_string();
        tracing::error!(event = "transaction_failed", error = %why,
            "the transactional producer cannot go on; starting a new one");
        let renewed = (self.new_producer)().and_then(|producer| {
            producer.start().map_err(|e| e.to_string())?;
            Ok(producer)
        });
        let mut state = self.lock();
        match renewed {
            Ok(producer) => {
                state.producer = Arc::from(producer);
                state.pending.clear();
                state.doomed = None;
                let partitions = self.rewind_open(&mut state, true);
                tracing::warn!(event = "transaction_producer_renewed", partitions,
                    "a new transactional producer took over; the failed transaction's partitions start again where the broker says they are committed");
                Committed::Aborted(failed)
            }
            Err(e) => {
                let fatal = TransactionError::NoProducer {
                    failed: why,
                    why: e,
                };
                tracing::error!(event = "transaction_fatal", error = %fatal, "stopping the consumer");
                state.fatal = Some(fatal.clone());
                self.rewound.notify_one();
                Committed::Fatal(fatal)
            }
        }
    }

    /// The rewinds waiting for the poll loop, each partition and where it starts again; or
    /// why the producer cannot go on.
    pub(crate) fn take_rewinds(&self) -> Result<Vec<Rewind>, TransactionError> {
        let mut state = self.lock();
        match &state.fatal {
            Some(fatal) => Err(fatal.clone()),
            None => Ok(std::mem::take(&mut state.rewinds)),
        }
    }

    /// Counts a committed exit.
    fn count(&self, exit: Counted) {
        match exit {
            Counted::DeadLetter { topic, kind } => self
                .metrics
                .dead_lettered
                .with_label_values(&[topic.as_str(), kind.as_str()])
                .inc(),
            Counted::Retry { topic, tier } => self
                .metrics
                .retry_tier_sent
                .with_label_values(&[topic.as_str(), &tier.to_string()])
                .inc(),
        }
    }

    /// Forgets the rewinds whose assignments have ended (the rewind started a new one, or a
    /// revocation ended it): the partitions' records are taken again. A rewind of a later
    /// assignment of the same partition stays.
    pub(crate) fn restarted(&self) {
        self.lock()
            .rewinding
            .retain(|_, assignment| !assignment.is_cancelled());
    }
}

/// Runs `f`, which blocks (waiting for the broker, or for a commit that does): on a
/// multi-threaded tokio runtime through `block_in_place`, so that the runtime moves its other
/// tasks to another thread meanwhile; elsewhere (a current-thread runtime, the simulation, a
/// thread of its own) as it is.
pub(crate) fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use chrono::{DateTime, Utc};
    use futures_util::FutureExt;

    use super::*;
    use crate::consumer::progress::transaction::OutputTooLarge;
    use crate::record::retry::RetryStage;

    /// What the fake producer was asked, in order.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Asked {
        Begin,
        Write(String),
        Commit(Vec<(TopicPartition, i64)>),
        Abort,
    }

    /// A producer whose commits wait for the test: each says it started on `entered` and
    /// ends with what `outcome` sends.
    struct Held {
        asked: Arc<Mutex<Vec<Asked>>>,
        entered: Mutex<mpsc::Sender<()>>,
        outcome: Mutex<mpsc::Receiver<Result<(), TxnError>>>,
    }

    impl Held {
        fn ask(&self, asked: Asked) {
            self.asked.lock().unwrap().push(asked);
        }

        fn handed(topic: &str) -> Handed {
            Handed {
                topic: topic.to_string(),
                answer: Ok(futures_util::future::ready(None).boxed()),
            }
        }
    }

    impl TransactionalProducer for Held {
        fn start(&self) -> Result<(), TxnError> {
            self.begin()
        }

        fn begin(&self) -> Result<(), TxnError> {
            self.ask(Asked::Begin);
            Ok(())
        }

        fn write_outputs(&self, outputs: &[Output]) -> Result<Vec<Handed>, OutputTooLarge> {
            Ok(outputs
                .iter()
                .map(|o| {
                    let value = String::from_utf8_lossy(o.value.as_deref().unwrap_or_default());
                    self.ask(Asked::Write(value.into_owned()));
                    Self::handed(&o.topic)
                })
                .collect())
        }

        fn write_dead_letter(
            &self,
            record: &Record,
            _: DeadLetterKind,
            _: &str,
            _: u32,
            _: bool,
        ) -> Handed {
            self.ask(Asked::Write(format!("dead letter of {}", record.id)));
            Self::handed("orders-dlt")
        }

        fn write_retry(&self, _: &Record, _: u32, _: DateTime<Utc>, _: RetryStage) -> Handed {
            unreachable!("no retry tiers here")
        }

        fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), TxnError> {
            self.ask(Asked::Commit(positions.to_vec()));
            self.entered.lock().unwrap().send(()).unwrap();
            self.outcome.lock().unwrap().recv().unwrap()
        }

        fn abort(&self) -> Result<(), TxnError> {
            self.ask(Asked::Abort);
            Ok(())
        }
    }

    struct Fixture {
        transaction: Arc<Transaction>,
        asked: Arc<Mutex<Vec<Asked>>>,
        entered: mpsc::Receiver<()>,
        outcome: mpsc::Sender<Result<(), TxnError>>,
    }

    fn fixture() -> Fixture {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (entered_tx, entered) = mpsc::channel();
        let (outcome, outcome_rx) = mpsc::channel();
        let producer = Held {
            asked: asked.clone(),
            entered: Mutex::new(entered_tx),
            outcome: Mutex::new(outcome_rx),
        };
        let transaction = Arc::new(Transaction::new(
            Box::new(producer),
            Box::new(|| Err("no second producer here".to_string())),
            1_000,
            Duration::from_secs(1),
            Metrics::new(),
        ));
        transaction.start().expect("started");
        Fixture {
            transaction,
            asked,
            entered,
            outcome,
        }
    }

    fn tp(partition: i32) -> TopicPartition {
        ("orders".to_string(), partition)
    }

    fn record(partition: i32, offset: i64) -> Record {
        Record::new("orders", partition, offset).with_id(format!("orders-{partition}-{offset}"))
    }

    fn output(value: &str) -> Effect<'static> {
        Effect::Handled(vec![Output::new("orders-out", value)])
    }

    /// Applies on a thread of its own and returns its outcome, failing the test (instead of
    /// hanging it) when `apply` waits for the held commit.
    fn apply_beside(
        transaction: &Arc<Transaction>,
        partition: i32,
        offset: i64,
        revoked: &CancellationToken,
        value: &'static str,
    ) -> Applied {
        let (transaction, revoked) = (transaction.clone(), revoked.clone());
        beside(move || {
            let record = record(partition, offset);
            transaction.apply(&tp(partition), &record, &revoked, output(value))
        })
    }

    /// Runs `apply` on a thread of its own, so that a test whose commit is held fails (rather
    /// than hangs) when `apply` waits for the commit.
    fn beside(apply: impl FnOnce() -> Applied + Send + 'static) -> Applied {
        let (done, applied) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(apply());
        });
        applied
            .recv_timeout(Duration::from_secs(30))
            .expect("apply waited for the commit instead of queueing its record")
    }

    /// Starts a commit on a thread of its own and waits until it talks to the (held) broker.
    fn commit_beside(f: &Fixture) -> std::thread::JoinHandle<Committed> {
        let transaction = f.transaction.clone();
        let commit = std::thread::spawn(move || transaction.commit());
        f.entered.recv().expect("the commit started");
        commit
    }

    #[test]
    fn records_settled_during_a_commit_go_into_the_next_transaction_in_order() {
        let f = fixture();
        let assignment = CancellationToken::new();
        let first = apply_beside(&f.transaction, 0, 0, &assignment, "a");
        assert_eq!(first, Applied::Taken);
        let commit = commit_beside(&f);
        // The commit holds: these must not wait for it.
        for (partition, offset, value) in [(0, 1, "b"), (1, 7, "c"), (0, 2, "d")] {
            let applied = apply_beside(&f.transaction, partition, offset, &assignment, value);
            assert_eq!(applied, Applied::Taken);
        }
        assert!(
            !f.asked.lock().unwrap().contains(&Asked::Write("b".into())),
            "nothing is handed to the producer while it commits"
        );
        f.outcome.send(Ok(())).unwrap();
        assert!(matches!(commit.join().unwrap(), Committed::Records(1)));
        let second = commit_beside(&f);
        f.outcome.send(Ok(())).unwrap();
        assert!(matches!(second.join().unwrap(), Committed::Records(3)));
        let asked = f.asked.lock().unwrap().clone();
        let write = |v: &str| Asked::Write(v.to_string());
        assert_eq!(
            asked,
            vec![
                Asked::Begin,
                write("a"),
                Asked::Commit(vec![(tp(0), 1)]),
                Asked::Begin,
                write("b"),
                write("c"),
                write("d"),
                Asked::Commit(vec![(tp(0), 3), (tp(1), 8)]),
                Asked::Begin,
            ]
        );
    }

    #[test]
    fn a_queued_record_is_dropped_when_its_partition_rewinds_or_its_assignment_ends() {
        let f = fixture();
        let (kept, rewound, revoked) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        apply_beside(&f.transaction, 0, 5, &rewound, "in the aborted transaction");
        let commit = commit_beside(&f);
        for (partition, offset, assignment, value) in [
            (0, 6, &rewound, "x"),
            (1, 3, &kept, "kept"),
            (2, 9, &revoked, "y"),
        ] {
            let applied = apply_beside(&f.transaction, partition, offset, assignment, value);
            assert_eq!(applied, Applied::Taken);
        }
        let (transaction, assignment) = (f.transaction.clone(), rewound.clone());
        let nothing = beside(move || {
            let effect = Effect::Handled(vec![]);
            transaction.apply(&tp(0), &record(0, 7), &assignment, effect)
        });
        assert_eq!(
            nothing,
            Applied::Taken,
            "a record that writes nothing, queued too"
        );
        revoked.cancel();
        f.outcome
            .send(Err(TxnError::Abort(Cause::NoGroupMetadata)))
            .unwrap();
        assert!(matches!(commit.join().unwrap(), Committed::Aborted(_)));
        let rewinds = f.transaction.take_rewinds().expect("not fatal");
        let rewinds: Vec<_> = rewinds
            .iter()
            .map(|r| (r.partition.clone(), r.position))
            .collect();
        assert_eq!(rewinds, vec![(tp(0), 5)], "partition 0 starts again at 5");
        let next = commit_beside(&f);
        f.outcome.send(Ok(())).unwrap();
        assert!(matches!(next.join().unwrap(), Committed::Records(1)));
        let asked = f.asked.lock().unwrap().clone();
        assert_eq!(
            asked.last_chunk::<4>().unwrap(),
            &[
                Asked::Begin,
                Asked::Write("kept".into()),
                Asked::Commit(vec![(tp(1), 4)]),
                Asked::Begin,
            ],
            "only the record of the partition that neither rewinds nor was revoked: {asked:?}"
        );
    }

    #[test]
    fn records_that_write_nothing_during_a_commit_commit_their_positions_in_the_next() {
        let f = fixture();
        let (kept, revoked) = (CancellationToken::new(), CancellationToken::new());
        apply_beside(&f.transaction, 0, 0, &kept, "a");
        let commit = commit_beside(&f);
        let nothing = |partition: i32, offset: i64, assignment: &CancellationToken| {
            let (transaction, assignment) = (f.transaction.clone(), assignment.clone());
            beside(move || {
                let record = record(partition, offset);
                let effect = Effect::Handled(vec![]);
                transaction.apply(&tp(partition), &record, &assignment, effect)
            })
        };
        // Partition 0: a write between records that write nothing, which are past it too.
        for offset in 1..=3 {
            assert_eq!(nothing(0, offset, &kept), Applied::Taken);
        }
        assert_eq!(
            apply_beside(&f.transaction, 0, 4, &kept, "b"),
            Applied::Taken
        );
        for offset in 5..=9 {
            assert_eq!(nothing(0, offset, &kept), Applied::Taken);
        }
        // Partition 1 wrote nothing at all; partition 2's assignment ends before it commits.
        assert_eq!(nothing(1, 20, &kept), Applied::Taken);
        assert_eq!(nothing(2, 30, &revoked), Applied::Taken);
        revoked.cancel();
        f.outcome.send(Ok(())).unwrap();
        assert!(matches!(commit.join().unwrap(), Committed::Records(1)));
        let next = commit_beside(&f);
        f.outcome.send(Ok(())).unwrap();
        assert!(
            matches!(next.join().unwrap(), Committed::Records(10)),
            "nine of partition 0 and one of partition 1"
        );
        let asked = f.asked.lock().unwrap().clone();
        assert_eq!(
            asked.last_chunk::<4>().unwrap(),
            &[
                Asked::Begin,
                Asked::Write("b".into()),
                Asked::Commit(vec![(tp(0), 10), (tp(1), 21)]),
                Asked::Begin,
            ],
            "{asked:?}"
        );
    }

    #[test]
    fn a_dead_letter_settled_during_a_commit_keeps_its_record_for_the_next_transaction() {
        let f = fixture();
        let assignment = CancellationToken::new();
        apply_beside(&f.transaction, 0, 0, &assignment, "a");
        let commit = commit_beside(&f);
        let (transaction, revoked) = (f.transaction.clone(), assignment.clone());
        let applied = beside(move || {
            let write = ExitWrite::DeadLetter {
                kind: DeadLetterKind::Permanent,
                message: "malformed".into(),
                attempts: 1,
            };
            transaction.apply(&tp(0), &record(0, 1), &revoked, Effect::Exit(&write))
        });
        assert_eq!(applied, Applied::Taken);
        f.outcome.send(Ok(())).unwrap();
        commit.join().unwrap();
        assert!(f.asked.lock().unwrap().ends_with(&[
            Asked::Begin,
            Asked::Write("dead letter of orders-0-1".into())
        ]));
    }
}
