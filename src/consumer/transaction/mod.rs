//! Exactly once: one transactional producer per consumer, and the transaction every settled
//! record's effect goes into with its offset.
//!
//! A worker settles a record by [`Transaction::apply`]: its outputs (or its dead letter, or
//! its retry record) are handed to the producer and its position noted, under one lock, so a
//! commit takes a record's effect and its offset together or neither. [`Transaction::commit`]
//! (every `transaction_records` records or `transaction_interval`, at revocation and at
//! shutdown) sends the positions with the group's metadata (KIP-447: a member whose
//! generation is over is refused) and commits. When a commit fails, the transaction aborts
//! and every partition that had records in it starts again at its first one: the poll loop
//! takes the rewinds ([`Transaction::take_rewinds`]), seeks there and gives the partition a
//! fresh inbox and worker; the old worker's records are refused from then on. A rewind
//! belongs to the assignment whose records were in the transaction: once that assignment
//! ended, the partition's next one starts from the committed position and is not rewound. A
//! record whose output or dead letter the broker refused as too large is remembered, and when
//! it comes again it is dead-lettered (its dead letter as a reference), so it never wedges its
//! partition. The broker refuses a whole produce request, so when it held several records'
//! writes, each of them goes again in a transaction of its own, which tells which are too
//! large themselves. A fenced producer is replaced by a new one (a new transactional id);
//! only when none can start does the consumer stop. Dead letters and retry records are
//! counted when their transaction commits.

mod committer;
mod open;
mod producer;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::consumer::settle::ExitWrite;
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::kafka::send::is_too_large;
use crate::metrics::Metrics;
use crate::record::Record;
pub(crate) use committer::{commit_when_due, rewind, Seek};
use open::Open;
pub(crate) use open::TopicPartition;
pub(crate) use producer::{GroupReader, Handed, KafkaProducer, TransactionalProducer};

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

/// What the broker refused of a record as too large, for when the record comes again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TooLarge {
    /// One of its outputs: it is dead-lettered instead.
    Output(String),
    /// Its dead letter or retry record: it is dead-lettered as a reference.
    Exit,
}

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
    /// an outage): a new one, with a new transactional id, takes over.
    producer: Box<dyn TransactionalProducer>,
    open: Open,
    pending: Vec<Pending>,
    /// What the open transaction's exits add to the metrics once it commits.
    exits: Vec<Counted>,
    /// Why the open transaction must abort (a write the producer did not take).
    doomed: Option<String>,
    /// Partitions that rewind: their records are refused until the poll loop restarted them.
    /// Keyed by partition, the assignment whose records rewind: refused while it lasts (a
    /// later assignment of the partition started from the committed position).
    rewinding: HashMap<TopicPartition, CancellationToken>,
    /// Rewinds for the poll loop: each partition and where it starts again.
    rewinds: Vec<Rewind>,
    /// The assignment (its revocation token) of each partition with records in the open
    /// transaction.
    assignments: HashMap<TopicPartition, CancellationToken>,
    too_large: HashMap<(TopicPartition, i64), TooLarge>,
    /// Records whose writes went in a produce request the broker refused as too large, with
    /// others: each goes into a transaction of its own when it comes again, which tells
    /// whether its own writes are too large.
    suspects: HashSet<(TopicPartition, i64)>,
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
            producer,
            open: Open::default(),
            pending: Vec::new(),
            exits: Vec::new(),
            doomed: None,
            rewinding: HashMap::new(),
            rewinds: Vec::new(),
            assignments: HashMap::new(),
            too_large: HashMap::new(),
            suspects: HashSet::new(),
            fatal: None,
        }
    }
}

/// A partition to start again after an aborted transaction.
pub(crate) struct Rewind {
    pub partition: TopicPartition,
    /// Its first record in the transaction.
    pub position: i64,
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
    state: Mutex<State>,
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
        self.lock().producer.start()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `record`, taken from `partition`, settled with `effect`: hands its writes to the
    /// producer and notes its position, together. Never waits for the broker (the lock is
    /// held only while a commit runs).
    pub(crate) fn apply(
        &self,
        partition: &TopicPartition,
        record: &Record,
        revoked: &CancellationToken,
        effect: Effect<'_>,
    ) -> Applied {
        let mut state = self.lock();
        if state.fatal.is_some() || revoked.is_cancelled() || state.rewinds_now(partition) {
            return Applied::Refused;
        }
        let offset = record.delivered_offset();
        let key = (partition.clone(), offset);
        let suspect = state.suspects.remove(&key);
        if suspect && !state.open.is_empty() {
            // Alone in its transaction: the one before commits first.
            self.commit_locked(&mut state);
            if state.fatal.is_some() || state.rewinds_now(partition) {
                return Applied::Refused;
            }
        }
        let too_large = state.too_large.remove(&key);
        let p = state.producer.as_ref();
        let permanent = || Counted::DeadLetter {
            topic: record.topic.clone(),
            kind: DeadLetterKind::Permanent,
        };
        let (handed, exit) = match (too_large, effect) {
            (Some(TooLarge::Output(why)), _) => (
                dead_letter_instead(p, record, &why, 1, false),
                Some(permanent()),
            ),
            (Some(TooLarge::Exit), Effect::Exit(ExitWrite::Retry { left, .. })) => {
                let attempts = record.retry.as_ref().map_or(0, |r| r.attempts) + left.attempts;
                let handed = dead_letter_instead(p, record, &left.error, attempts, true);
                (handed, Some(permanent()))
            }
            (_, Effect::Handled(outputs)) => match p.write_outputs(&outputs) {
                Ok(handed) => (handed, None),
                // The producer refused it before anything of it was written.
                Err(why) => (
                    dead_letter_instead(p, record, &why, 1, false),
                    Some(permanent()),
                ),
            },
            // A dead letter refused as too large goes again as a reference, which fits.
            (
                too_large,
                Effect::Exit(ExitWrite::DeadLetter {
                    kind,
                    message,
                    attempts,
                }),
            ) => {
                let smallest = too_large == Some(TooLarge::Exit);
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
                handed,
            });
        }
        state.open.add(partition, offset, Instant::now());
        if !state.assignments.contains_key(partition) {
            state.assignments.insert(partition.clone(), revoked.clone());
        }
        if suspect {
            // Its transaction of its own commits now: if the broker refuses its writes as
            // too large again, they are its own.
            tracing::info!(event = "transaction_isolating", id = %record.id,
                "committing the record alone: its writes were refused with others' as too large");
            self.commit_locked(&mut state);
        } else if state.open.records() >= self.max_records {
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
    /// partitions. Blocks until the broker answered; records wait meanwhile.
    pub(crate) fn commit(&self) -> Committed {
        let mut state = self.lock();
        self.commit_locked(&mut state)
    }

    fn commit_locked(&self, state: &mut State) -> Committed {
        if let Some(fatal) = &state.fatal {
            return Committed::Fatal(fatal.clone());
        }
        if state.open.is_empty() && state.doomed.is_none() {
            return Committed::Nothing;
        }
        let started = Instant::now();
        let records = state.open.records();
        let outcome = match state.doomed.take() {
            Some(why) => Err(why),
            None => {
                let positions: Vec<_> = state
                    .open
                    .positions()
                    .map(|(p, o)| (p.clone(), o))
                    .collect();
                state.producer.commit(&positions)
            }
        };
        match outcome {
            Ok(()) => {
                state.open.end();
                state.assignments.clear();
                state.pending.clear();
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
                match state.producer.begin() {
                    Ok(()) => Committed::Records(records),
                    Err(e) => self.fail(state, format!("could not begin a transaction: {e}")),
                }
            }
            Err(why) => self.abort(state, why),
        }
    }

    /// Aborts the open transaction for `why`, remembers what the broker refused as too large,
    /// and rewinds its partitions.
    fn abort(&self, state: &mut State, why: String) -> Committed {
        if why.starts_with("fatal: ") {
            return self.fail(state, why);
        }
        if let Err(e) = state.producer.abort() {
            return self.fail(
                state,
                format!("could not abort the transaction ({why}): {e}"),
            );
        }
        let mut refused = HashMap::new();
        for pending in state.pending.drain(..).collect::<Vec<_>>() {
            let topic = pending.handed.topic.clone();
            if let Some(error) = pending.handed.refused_now().filter(is_too_large) {
                let too_large = if pending.output {
                    TooLarge::Output(format!(
                        "output to {topic} is too large for the topic: {error}"
                    ))
                } else {
                    TooLarge::Exit
                };
                refused
                    .entry((pending.partition, pending.offset))
                    .or_insert(too_large);
            }
        }
        // The broker refuses a whole produce request: only a record refused alone is known
        // to be too large itself.
        if refused.len() == 1 {
            state.too_large.extend(refused);
        } else {
            state.suspects.extend(refused.into_keys());
        }
        let partitions = self.rewind_open(state);
        tracing::warn!(event = "transaction_aborted", error = %why, partitions,
            "the transaction's records are consumed again from their partitions' committed positions");
        match state.producer.begin() {
            Ok(()) => Committed::Aborted(why),
            Err(e) => self.fail(state, format!("could not begin a transaction: {e}")),
        }
    }

    /// Ends the open transaction as aborted: counts it, and has its partitions rewound by the
    /// poll loop (their records refused until then). Returns how many partitions rewind.
    fn rewind_open(&self, state: &mut State) -> usize {
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
                assignment,
            });
        }
        state.assignments.clear();
        self.rewound.notify_one();
        partitions
    }

    /// The producer failed for `why` and cannot go on. When it was fenced (its transaction
    /// timed out on the broker, during an outage) or its transaction is stuck, a new producer
    /// with a new transactional id takes over and the open transaction's partitions rewind (the
    /// broker aborted it, or will once it times out); when no new producer can start, the
    /// consumer stops.
    fn fail(&self, state: &mut State, why: String) -> Committed {
        tracing::error!(event = "transaction_failed", error = %why,
            "the transactional producer cannot go on; starting a new one");
        let renewed = (self.new_producer)().and_then(|producer| {
            producer.start()?;
            Ok(producer)
        });
        match renewed {
            Ok(producer) => {
                state.producer = producer;
                state.pending.clear();
                state.doomed = None;
                let partitions = self.rewind_open(state);
                tracing::warn!(event = "transaction_producer_renewed", partitions,
                    "a new transactional producer took over; the failed transaction's records are consumed again");
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
