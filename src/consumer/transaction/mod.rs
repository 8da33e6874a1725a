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
//! fresh inbox and worker; the old worker's records are refused from then on. A record whose
//! output or dead letter the broker refused as too large is remembered, and when it comes
//! again it is dead-lettered (its dead letter as a reference), so it never wedges its
//! partition. The broker refuses a whole produce request, so when it held several records'
//! writes, each of them goes again in a transaction of its own, which tells which are too
//! large themselves. A fatal error (the producer fenced) stops the consumer.

mod committer;
mod open;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::consumer::settle::ExitWrite;
use crate::dlq::DeadLetterPublisher;
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::kafka::send::{is_too_large, Sent};
use crate::kafka::LogContext;
use crate::metrics::Metrics;
use crate::record::Record;
use crate::retry_tier::RetryWriter;
pub(crate) use committer::{commit_when_due, rewind};
use open::Open;
pub(crate) use open::TopicPartition;

/// How long one transactional call to the broker may take.
const TIMEOUT: Duration = Duration::from_secs(30);

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

/// A write handed to the producer in the open transaction, and whose record it is.
struct Pending {
    partition: TopicPartition,
    offset: i64,
    output: bool,
    topic: String,
    sent: Sent,
}

/// The transactional producer and what writes through it. Replaced when the producer is
/// fenced (its transaction timed out on the broker during an outage): a new one, with a new
/// transactional id, takes over.
struct Writers {
    producer: FutureProducer<LogContext>,
    dead_letters: DeadLetterPublisher,
    retries: RetryWriter,
}

impl Writers {
    fn new(dead_letters: DeadLetterPublisher) -> Self {
        Self {
            producer: dead_letters.producer().clone(),
            retries: RetryWriter::new(&dead_letters),
            dead_letters,
        }
    }

    /// `record`'s dead letter as a permanent failure `why` after `attempts` calls.
    fn dead_letter(
        &self,
        record: &Record,
        why: &str,
        attempts: u32,
        smallest: bool,
    ) -> Vec<(String, Sent)> {
        tracing::error!(event = "record_output_refused", id = %record.id, error = %why,
            "dead-lettering the record instead of writing its outputs");
        vec![self.dead_letters.send_once(
            record,
            DeadLetterKind::Permanent,
            why,
            attempts,
            smallest,
        )]
    }

    /// Hands `outputs` to the producer; an output it refuses at once as too large makes the
    /// record's outputs a permanent failure (then nothing of them has been handed over when
    /// it is the first; a later one dooms the transaction instead).
    fn produce(&self, outputs: &[Output]) -> Result<Vec<(String, Sent)>, String> {
        let mut sent = Vec::with_capacity(outputs.len());
        for output in outputs {
            let mut headers =
                rdkafka::message::OwnedHeaders::new_with_capacity(output.headers.len());
            for (name, value) in &output.headers {
                headers = crate::kafka::headers::add(headers, name.as_bytes(), Some(value));
            }
            let mut record = FutureRecord::<[u8], [u8]>::to(&output.topic).headers(headers);
            if let Some(value) = output.value.as_deref() {
                record = record.payload(value);
            }
            if let Some(key) = output.key.as_deref() {
                record = record.key(key);
            }
            let result = self.producer.send_result(record).map_err(|(e, _)| e);
            match result {
                Err(error) if is_too_large(&error) && sent.is_empty() => {
                    return Err(format!(
                        "output to {} is too large for the producer: {error}",
                        output.topic
                    ))
                }
                result => sent.push((output.topic.clone(), result)),
            }
        }
        Ok(sent)
    }
}

struct State {
    writers: Writers,
    open: Open,
    pending: Vec<Pending>,
    /// Why the open transaction must abort (a write the producer did not take).
    doomed: Option<String>,
    /// Partitions that rewind: their records are refused until the poll loop restarted them.
    rewinding: HashSet<TopicPartition>,
    /// Rewinds for the poll loop: each partition and where it starts again.
    rewinds: Vec<(TopicPartition, i64)>,
    too_large: HashMap<(TopicPartition, i64), TooLarge>,
    /// Records whose writes went in a produce request the broker refused as too large, with
    /// others: each goes into a transaction of its own when it comes again, which tells
    /// whether its own writes are too large.
    suspects: HashSet<(TopicPartition, i64)>,
    fatal: Option<String>,
}

impl State {
    fn new(writers: Writers) -> Self {
        Self {
            writers,
            open: Open::default(),
            pending: Vec::new(),
            doomed: None,
            rewinding: HashSet::new(),
            rewinds: Vec::new(),
            too_large: HashMap::new(),
            suspects: HashSet::new(),
            fatal: None,
        }
    }
}

/// Creates a dead-letter publisher on a new transactional producer.
pub(crate) type NewWriters = Box<dyn Fn() -> Result<DeadLetterPublisher, String> + Send + Sync>;

/// See the module docs.
pub(crate) struct Transaction {
    /// Creates the producer that replaces a fenced one.
    new_writers: NewWriters,
    state: Mutex<State>,
    max_records: usize,
    interval: Duration,
    metrics: Metrics,
    /// Woken when the open transaction has its most records.
    pub(crate) full: tokio::sync::Notify,
    /// Woken when rewinds wait for the poll loop, or the producer failed for good.
    pub(crate) rewound: tokio::sync::Notify,
    /// The consumer's group metadata now, for a commit that [`Transaction::apply`] makes
    /// itself (a suspect's transaction of its own); set once the consumer runs.
    group: std::sync::OnceLock<GroupMetadata>,
}

/// Where the consumer's group metadata is read (its generation changes at each rebalance).
pub(crate) type GroupMetadata = Box<dyn Fn() -> Option<ConsumerGroupMetadata> + Send + Sync>;

impl Transaction {
    /// The transaction of `dead_letters`' producer (transactional: `exactly_once`), committing
    /// every `max_records` records or `interval`; `new_writers` makes the producer that
    /// replaces a fenced one.
    pub(crate) fn new(
        dead_letters: DeadLetterPublisher,
        new_writers: NewWriters,
        max_records: usize,
        interval: Duration,
        metrics: Metrics,
    ) -> Self {
        Self {
            new_writers,
            state: Mutex::new(State::new(Writers::new(dead_letters))),
            max_records,
            interval,
            metrics,
            full: tokio::sync::Notify::new(),
            rewound: tokio::sync::Notify::new(),
            group: std::sync::OnceLock::new(),
        }
    }

    /// Where commits made by [`Transaction::apply`] read the consumer's group metadata.
    pub(crate) fn read_group_from(&self, group: GroupMetadata) {
        let _ = self.group.set(group);
    }

    fn group_now(&self) -> Option<ConsumerGroupMetadata> {
        self.group.get().and_then(|group| group())
    }

    /// Registers the producer with the transaction coordinator (fencing an earlier producer
    /// of its id) and opens the first transaction. Blocks.
    pub(crate) fn init(&self) -> Result<(), KafkaError> {
        let state = self.lock();
        state.writers.producer.init_transactions(TIMEOUT)?;
        state.writers.producer.begin_transaction()
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
        if state.fatal.is_some() || revoked.is_cancelled() || state.rewinding.contains(partition) {
            return Applied::Refused;
        }
        let offset = record.delivered_offset();
        let key = (partition.clone(), offset);
        let suspect = state.suspects.remove(&key);
        if suspect && !state.open.is_empty() {
            // Alone in its transaction: the one before commits first.
            self.commit_locked(&mut state, self.group_now());
            if state.fatal.is_some() || state.rewinding.contains(partition) {
                return Applied::Refused;
            }
        }
        let too_large = state.too_large.remove(&key);
        let w = &state.writers;
        let (sent, output) = match (too_large, effect) {
            (Some(TooLarge::Output(why)), _) => (w.dead_letter(record, &why, 1, false), false),
            (Some(TooLarge::Exit), Effect::Exit(ExitWrite::Retry { left, .. })) => {
                let attempts = record.retry.as_ref().map_or(0, |r| r.attempts) + left.attempts;
                (w.dead_letter(record, &left.error, attempts, true), false)
            }
            (_, Effect::Handled(outputs)) => match w.produce(&outputs) {
                Ok(sent) => (sent, true),
                // The producer refused it before anything of it was written.
                Err(why) => (w.dead_letter(record, &why, 1, false), false),
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
                let sent = w
                    .dead_letters
                    .send_once(record, *kind, message, *attempts, smallest);
                (vec![sent], false)
            }
            (_, Effect::Exit(ExitWrite::Retry { tier, due, left })) => (
                vec![w.retries.send_once(record, *tier, *due, left.clone())],
                false,
            ),
        };
        for (topic, sent) in sent {
            if let Err(error) = &sent {
                state.doomed.get_or_insert_with(|| {
                    format!("the producer did not take a record for {topic}: {error}")
                });
            }
            state.pending.push(Pending {
                partition: partition.clone(),
                offset,
                output,
                topic,
                sent,
            });
        }
        state.open.add(partition, offset, Instant::now());
        if suspect {
            // Its transaction of its own commits now: if the broker refuses its writes as
            // too large again, they are its own.
            tracing::info!(event = "transaction_isolating", id = %record.id,
                "committing the record alone: its writes were refused with others' as too large");
            self.commit_locked(&mut state, self.group_now());
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

    /// Commits the open transaction with the positions of its records, as the member of
    /// `group` (the consumer's metadata now), and opens the next; on failure aborts it and
    /// rewinds its partitions. Blocks until the broker answered; records wait meanwhile.
    pub(crate) fn commit(&self, group: Option<ConsumerGroupMetadata>) -> Committed {
        let mut state = self.lock();
        self.commit_locked(&mut state, group)
    }

    fn commit_locked(&self, state: &mut State, group: Option<ConsumerGroupMetadata>) -> Committed {
        if let Some(fatal) = &state.fatal {
            return Committed::Fatal(fatal.clone());
        }
        if state.open.is_empty() && state.doomed.is_none() {
            return Committed::Nothing;
        }
        let started = Instant::now();
        let records = state.open.records();
        let outcome = match (state.doomed.take(), group) {
            (Some(why), _) => Err(why),
            (None, None) => Err("the consumer has no group metadata".to_string()),
            (None, Some(group)) => send_and_commit(&state.writers.producer, &state.open, &group),
        };
        match outcome {
            Ok(()) => {
                state.open.end();
                state.pending.clear();
                self.metrics
                    .transactions
                    .with_label_values(&["committed"])
                    .inc();
                self.metrics.transaction_records.observe(records as f64);
                self.metrics
                    .transaction_commit_seconds
                    .observe(started.elapsed().as_secs_f64());
                tracing::debug!(event = "transaction_committed", records);
                match state.writers.producer.begin_transaction() {
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
        if let Err(e) = state.writers.producer.abort_transaction(TIMEOUT) {
            return self.fail(
                state,
                format!("could not abort the transaction ({why}): {e}"),
            );
        }
        let mut refused = HashMap::new();
        for pending in state.pending.drain(..).collect::<Vec<_>>() {
            let error = match pending.sent {
                Ok(delivery) => match delivery.now_or_never() {
                    Some(Ok(Err((error, _)))) => Some(error),
                    _ => None,
                },
                Err(error) => Some(error),
            };
            if let Some(error) = error.filter(is_too_large) {
                let too_large = if pending.output {
                    TooLarge::Output(format!(
                        "output to {} is too large for the topic: {error}",
                        pending.topic
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
        match state.writers.producer.begin_transaction() {
            Ok(()) => Committed::Aborted(why),
            Err(e) => self.fail(state, format!("could not begin a transaction: {e}")),
        }
    }

    /// Ends the open transaction as aborted: counts it, and has its partitions rewound by the
    /// poll loop (their records refused until then). Returns how many partitions rewind.
    fn rewind_open(&self, state: &mut State) -> usize {
        let rewinds = state.open.end();
        self.metrics
            .transactions
            .with_label_values(&["aborted"])
            .inc();
        state
            .rewinding
            .extend(rewinds.iter().map(|(p, _)| p.clone()));
        let partitions = rewinds.len();
        state.rewinds.extend(rewinds);
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
        let renewed = (self.new_writers)().and_then(|dead_letters| {
            let writers = Writers::new(dead_letters);
            writers
                .producer
                .init_transactions(TIMEOUT)
                .and_then(|()| writers.producer.begin_transaction())
                .map_err(|e| e.to_string())?;
            Ok(writers)
        });
        match renewed {
            Ok(writers) => {
                state.writers = writers;
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
    pub(crate) fn take_rewinds(&self) -> Result<Vec<(TopicPartition, i64)>, String> {
        let mut state = self.lock();
        match &state.fatal {
            Some(fatal) => Err(fatal.clone()),
            None => Ok(std::mem::take(&mut state.rewinds)),
        }
    }

    /// `partition` starts again (a fresh worker, after the seek): its records are taken again.
    pub(crate) fn restarted(&self, partition: &TopicPartition) {
        self.lock().rewinding.remove(partition);
    }
}

/// Sends the positions of `open` as the member of `group` and commits, on `producer`; what
/// went wrong, `fatal: `-prefixed when the producer cannot go on.
fn send_and_commit(
    producer: &FutureProducer<LogContext>,
    open: &Open,
    group: &ConsumerGroupMetadata,
) -> Result<(), String> {
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), position) in open.positions() {
        offsets
            .add_partition_offset(topic, *partition, Offset::Offset(position))
            .map_err(|e| e.to_string())?;
    }
    let fatal = |e: &KafkaError| match e {
        KafkaError::Transaction(e) => e.is_fatal(),
        _ => false,
    };
    let describe = |e: KafkaError| {
        if fatal(&e) {
            format!("fatal: {e}")
        } else {
            e.to_string()
        }
    };
    // Right after an abort the producer may still be getting its new epoch: the offsets
    // are sent again for a while rather than the transaction aborted again.
    let mut tries = 0;
    loop {
        match producer.send_offsets_to_transaction(&offsets, group, TIMEOUT) {
            Ok(()) => break,
            Err(KafkaError::Transaction(e))
                if !e.is_fatal()
                    && !e.txn_requires_abort()
                    && (e.is_retriable() || e.code() == RDKafkaErrorCode::State)
                    && tries < 20 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(describe(e)),
        }
    }
    // A commit that timed out may be tried again (librdkafka: retriable).
    let mut tries = 0;
    loop {
        match producer.commit_transaction(TIMEOUT) {
            Ok(()) => return Ok(()),
            Err(KafkaError::Transaction(e)) if e.is_retriable() && tries < 3 => tries += 1,
            Err(e) => return Err(describe(e)),
        }
    }
}
