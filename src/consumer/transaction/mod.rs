//! Exactly once: one transactional producer per consumer, and the transaction every settled
//! record's effect goes into with its offset.
//!
//! A worker settles a record by [`Transaction::apply`]: its outputs (or its dead letter, or
//! its retry record) are handed to the producer and its position noted, under one lock, so a
//! commit takes a record's effect and its offset together or neither. [`Transaction::commit`]
//! (every `transaction_records` records or `transaction_interval`, at revocation and at
//! shutdown) sends the positions with the group's metadata (KIP-447: a member whose
//! generation is over is refused) and commits.
//!
//! **No lock across a broker call.** The lock is held only to hand writes over and to note
//! what a commit decided; while a commit talks to the broker (librdkafka takes no writes
//! then), a worker that settles a record waits for it off the runtime's other work (tokio's
//! `block_in_place` on a multi-threaded runtime), so the rest of the process — the health
//! probes, the poll loop — goes on.
//!
//! **Aborts.** When a commit fails, the transaction aborts and every partition that had
//! records in it starts again at its first one: the poll loop takes the rewinds
//! ([`Transaction::take_rewinds`]), seeks there and gives the partition a fresh inbox and
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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::consumer::settle::ExitWrite;
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::kafka::send::{is_too_large, refused_for_good};
use crate::metrics::Metrics;
use crate::record::Record;
pub(crate) use committer::{commit_when_due, rewind, Seek};
use open::Open;
pub(crate) use open::TopicPartition;
pub(crate) use producer::{GroupReader, Handed, KafkaProducer, TransactionalProducer, TxnError};

/// What a settled record leaves behind.
pub(crate) enum Effect<'a> {
    /// Handled: the records its call produced (none for a plain handler).
    Handled(Vec<Output>),
    /// It exits its stage: its dead letter or retry record.
    Exit(&'a ExitWrite),
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
    /// Aborted; its partitions rewind ([`Transaction::take_rewinds`]).
    Aborted(String),
    /// The producer cannot go on.
    Fatal(String),
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
    doomed: Option<String>,
    /// A commit is talking to the broker: no write may be handed over until it is done.
    committing: bool,
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
    fatal: Option<String>,
}

impl State {
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
    pub(crate) fn start(&self) -> Result<(), String> {
        let producer = self.lock().producer.clone();
        producer.start().map_err(|e| e.to_string())
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
    /// producer and notes its position, together. Waits only while a commit talks to the
    /// broker (librdkafka takes no writes then).
    pub(crate) fn apply(
        &self,
        partition: &TopicPartition,
        record: &Record,
        revoked: &CancellationToken,
        effect: Effect<'_>,
    ) -> Applied {
        let offset = record.delivered_offset();
        let key = (partition.clone(), offset);
        let mut state = self.lock_between_commits();
        if state.fatal.is_some() || revoked.is_cancelled() || state.rewinds_now(partition) {
            return Applied::Refused;
        }
        let suspect = state.suspects.remove(&key);
        if suspect && !state.open.is_empty() {
            // Alone in its transaction: the one before commits first.
            drop(state);
            off_the_runtime(|| self.commit());
            state = self.lock_between_commits();
            if state.fatal.is_some() || revoked.is_cancelled() || state.rewinds_now(partition) {
                return Applied::Refused;
            }
        }
        // Remembered until the record's transaction commits: one that aborts for another
        // record's sake brings it back, still refused.
        let refused = state.refused.get(&key).cloned();
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
                Err(why) => {
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
                let topic = &handed.topic;
                state.doomed.get_or_insert_with(|| {
                    format!("the producer did not take a record for {topic}: {error}")
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
        state.open.add(partition, offset, Instant::now());
        if !state.assignments.contains_key(partition) {
            state.assignments.insert(partition.clone(), revoked.clone());
        }
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
                for pending in std::mem::take(&mut state.pending) {
                    let key = (pending.partition, pending.offset);
                    state.refused.remove(&key);
                    state.exit_refusals.remove(&key);
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
                        self.fail(TxnError::Fatal(format!(
                            "could not begin a transaction: {e}"
                        )))
                    }
                }
            }
            Err(TxnError::Abort(why)) => self.abort(&producer, why),
            Err(failed) => self.fail(failed),
        };
        self.lock().committing = false;
        self.committed.notify_all();
        committed
    }

    /// Aborts the open transaction (of `producer`) for `why`, remembers what the broker
    /// refused for good, and rewinds its partitions to their first records in it.
    fn abort(&self, producer: &Arc<dyn TransactionalProducer>, why: String) -> Committed {
        if let Err(e) = producer.abort() {
            return self.fail(TxnError::Fatal(format!(
                "could not abort the transaction ({why}): {e}"
            )));
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
                let why = format!(
                    "the dead letter (or retry record) of {}-{} offset {} was refused {MAX_REFUSALS} times by {topic}: {error}; the consumer stops rather than skip the record (create the topic, or grant this principal Write on it)",
                    key.0 .0, key.0 .1, key.1
                );
                tracing::error!(event = "transaction_fatal", error = %why, "stopping the consumer");
                state.fatal = Some(why.clone());
                self.rewound.notify_one();
                return Committed::Fatal(why);
            }
        }
        let partitions = self.rewind_open(&mut state, false);
        tracing::warn!(event = "transaction_aborted", error = %why, partitions,
            "the transaction's records are consumed again from their partitions' committed positions");
        match producer.begin() {
            Ok(()) => Committed::Aborted(why),
            Err(e) => {
                drop(state);
                self.fail(TxnError::Fatal(format!(
                    "could not begin a transaction: {e}"
                )))
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
                Committed::Aborted(why)
            }
            Err(e) => {
                let why = format!("{why}; and no new transactional producer could start: {e}");
                tracing::error!(event = "transaction_fatal", error = %why, "stopping the consumer");
                state.fatal = Some(why.clone());
                self.rewound.notify_one();
                Committed::Fatal(why)
            }
        }
    }

    /// The rewinds waiting for the poll loop, each partition and where it starts again; or
    /// why the producer cannot go on.
    pub(crate) fn take_rewinds(&self) -> Result<Vec<Rewind>, String> {
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
