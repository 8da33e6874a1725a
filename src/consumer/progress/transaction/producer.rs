//! The transactional producer as the transaction uses it: begin, hand writes over, commit
//! with the group's offsets, abort. A trait so that the seeded simulation runs the real
//! [`Transaction`](super::Transaction) against a simulated coordinator
//! (`consumer/simulation/group/coordinator.rs`); [`KafkaProducer`] is librdkafka's.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::TopicPartition;
use crate::dlq::DeadLetterPublisher;
use crate::failure::DeadLetterKind;
use crate::handler::Output;
use crate::kafka::send::{is_too_large, Sent};
use crate::record::retry::RetryStage;
use crate::record::Record;
use crate::retry_tier::RetryWriter;

/// How long one transactional call to the broker may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A write handed to the producer in the open transaction: its topic, and the error the
/// broker answered it with (`None` once acknowledged), or why the producer refused it at once.
pub(crate) struct Handed {
    pub topic: String,
    pub answer: Result<BoxFuture<'static, Option<KafkaError>>, KafkaError>,
}

impl Handed {
    fn from_sent(topic: String, sent: Sent) -> Self {
        let answer = sent.map(|delivery| {
            delivery
                .map(|answered| match answered {
                    Ok(Err((error, _))) => Some(error),
                    // Acknowledged, or the producer went away (its transaction with it).
                    Ok(Ok(_)) | Err(_) => None,
                })
                .boxed()
        });
        Self { topic, answer }
    }

    /// The error it was refused with, if the answer is known now.
    pub(crate) fn refused_now(self) -> Option<KafkaError> {
        match self.answer {
            Ok(answer) => answer.now_or_never().flatten(),
            Err(error) => Some(error),
        }
    }
}

/// Why a transactional call failed, as the transaction must take it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TxnError {
    /// The open transaction must abort (and may be tried again).
    #[error("{0}")]
    Abort(Cause),
    /// The producer cannot go on (fenced: its transaction timed out on the broker, which
    /// aborted it); a new one must take over.
    #[error("{0}")]
    Fatal(Cause),
    /// A commit's outcome could not be learned (the broker's answers did not come): the
    /// transaction may have committed. The producer cannot go on, and nothing may rewind
    /// before the broker says what is committed.
    #[error("{0}")]
    Unknown(Cause),
}

/// What a failed transactional call ran into.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Cause {
    /// librdkafka's answer to `call`.
    #[error("{call} failed: {error}")]
    Kafka {
        /// The producer's call: `init_transactions`, `send_offsets_to_transaction`, …
        call: &'static str,
        #[source]
        error: KafkaError,
    },
    /// The consumer had no group metadata to commit with (it is not in the group).
    #[error("the consumer has no group metadata to commit with")]
    NoGroupMetadata,
    /// A write of the open transaction the producer did not take.
    #[error("the producer did not take a record for {topic}: {error}")]
    NotTaken {
        /// The write's topic.
        topic: String,
        #[source]
        error: KafkaError,
    },
    /// The commit was asked again `tries` times, each `secs` long, and never answered.
    #[error("the commit's outcome is unknown after {tries} tries of {secs} s: {error}")]
    Unanswered {
        /// How often it was asked.
        tries: u32,
        /// How long each try waited.
        secs: u64,
        #[source]
        error: KafkaError,
    },
}

/// An output the producer refused at once, before anything of its record's outputs was
/// handed over: larger than the producer takes.
#[derive(Debug, Clone, thiserror::Error)]
#[error("output to {topic} is too large for the producer: {error}")]
pub(crate) struct OutputTooLarge {
    /// The output's topic.
    pub topic: String,
    #[source]
    pub error: KafkaError,
}

/// One transactional producer (one transactional id). Every call but the `write` ones waits
/// for the coordinator.
pub(crate) trait TransactionalProducer: Send + Sync {
    /// Registers with the coordinator (fencing an earlier producer of the id) and begins the
    /// first transaction.
    fn start(&self) -> Result<(), TxnError>;

    /// Begins the next transaction.
    fn begin(&self) -> Result<(), TxnError>;

    /// Hands `outputs` over. `Err` when the first is refused at once as too large: nothing of
    /// them was handed over. A later refusal dooms the transaction instead (its
    /// [`Handed::answer`] is the error).
    fn write_outputs(&self, outputs: &[Output]) -> Result<Vec<Handed>, OutputTooLarge>;

    /// Hands `record`'s dead letter over (`smallest`: as a reference, the payload left out).
    fn write_dead_letter(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        smallest: bool,
    ) -> Handed;

    /// Hands `record`'s retry record for `tier`, due at `due`, over.
    fn write_retry(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
    ) -> Handed;

    /// Sends `positions` as the group member the consumer is now (KIP-447: a member whose
    /// generation is over is refused) and commits. A commit the broker answers with a
    /// retriable error is tried again (librdkafka resumes it) for as long as the broker's
    /// transaction timeout allows, and then is [`TxnError::Unknown`], never aborted.
    fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), TxnError>;

    /// Aborts the open transaction.
    fn abort(&self) -> Result<(), TxnError>;
}

/// Where the consumer's group metadata is read (its generation changes at each rebalance);
/// set once the consumer exists.
pub(crate) type GroupReader =
    Arc<OnceLock<Box<dyn Fn() -> Option<ConsumerGroupMetadata> + Send + Sync>>>;

/// librdkafka's transactional producer (`transactional.id` set: `exactly_once`), with the
/// dead-letter and retry writers over it.
pub(crate) struct KafkaProducer {
    producer: FutureProducer<crate::kafka::LogContext>,
    dead_letters: DeadLetterPublisher,
    retries: RetryWriter,
    group: GroupReader,
}

impl KafkaProducer {
    /// The producer of `dead_letters`, committing as the member `group` reads.
    pub(crate) fn new(dead_letters: DeadLetterPublisher, group: GroupReader) -> Self {
        Self {
            producer: dead_letters.producer().clone(),
            retries: RetryWriter::new(&dead_letters),
            dead_letters,
            group,
        }
    }
}

impl TransactionalProducer for KafkaProducer {
    fn start(&self) -> Result<(), TxnError> {
        self.producer
            .init_transactions(TIMEOUT)
            .map_err(|e| classify("init_transactions", e))?;
        self.begin()
    }

    fn begin(&self) -> Result<(), TxnError> {
        self.producer
            .begin_transaction()
            .map_err(|e| classify("begin_transaction", e))
    }

    fn write_outputs(&self, outputs: &[Output]) -> Result<Vec<Handed>, OutputTooLarge> {
        let mut handed = Vec::with_capacity(outputs.len());
        for output in outputs {
            let mut headers =
                rdkafka::message::OwnedHeaders::new_with_capacity(output.headers.len());
            for header in &output.headers {
                headers = crate::kafka::headers::add(headers, &header.key, header.value.as_deref());
            }
            let mut record = FutureRecord::<[u8], [u8]>::to(&output.topic).headers(headers);
            if let Some(value) = output.value.as_deref() {
                record = record.payload(value);
            }
            if let Some(key) = output.key.as_deref() {
                record = record.key(key);
            }
            let sent = self.producer.send_result(record).map_err(|(e, _)| e);
            match sent {
                Err(error) if is_too_large(&error) && handed.is_empty() => {
                    return Err(OutputTooLarge {
                        topic: output.topic.clone(),
                        error,
                    })
                }
                sent => handed.push(Handed::from_sent(output.topic.clone(), sent)),
            }
        }
        Ok(handed)
    }

    fn write_dead_letter(
        &self,
        record: &Record,
        kind: DeadLetterKind,
        message: &str,
        attempts: u32,
        smallest: bool,
    ) -> Handed {
        let (topic, sent) = self
            .dead_letters
            .send_once(record, kind, message, attempts, smallest);
        Handed::from_sent(topic, sent)
    }

    fn write_retry(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
    ) -> Handed {
        let (topic, sent) = self.retries.send_once(record, tier, due, left);
        Handed::from_sent(topic, sent)
    }

    fn commit(&self, positions: &[(TopicPartition, i64)]) -> Result<(), TxnError> {
        let group = self.group.get().and_then(|read| read());
        let Some(group) = group else {
            return Err(TxnError::Abort(Cause::NoGroupMetadata));
        };
        send_and_commit(&self.producer, positions, &group)
    }

    fn abort(&self) -> Result<(), TxnError> {
        self.producer
            .abort_transaction(TIMEOUT)
            .map_err(|e| classify("abort_transaction", e))
    }
}

/// What the error of the transactional `call` means for the transaction: librdkafka says
/// whether the producer can go on (`is_fatal`); anything else aborts.
fn classify(call: &'static str, error: KafkaError) -> TxnError {
    let fatal = matches!(&error, KafkaError::Transaction(t) if t.is_fatal());
    let cause = Cause::Kafka { call, error };
    match fatal {
        true => TxnError::Fatal(cause),
        false => TxnError::Abort(cause),
    }
}

/// Waits, in short steps, until the producer has no write in flight (its polling thread
/// serves their acknowledgements), for at most [`TIMEOUT`].
///
/// rust-rdkafka's `commit_transaction` flushes first, and its flush, finding a write still
/// in flight, polls the producer's queue for up to 100 ms: a queue the producer's own
/// polling thread serves, so that poll sees nothing come and waits the whole 100 ms. A
/// transaction with dead letters in it took 100 ms more to commit for that alone. Once the
/// writes are acknowledged here, that flush finds nothing to wait for.
fn delivered(producer: &FutureProducer<crate::kafka::LogContext>) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Sends `positions` as the member of `group` and commits, on `producer`; what went wrong.
fn send_and_commit(
    producer: &FutureProducer<crate::kafka::LogContext>,
    positions: &[(TopicPartition, i64)],
    group: &ConsumerGroupMetadata,
) -> Result<(), TxnError> {
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), position) in positions {
        offsets
            .add_partition_offset(topic, *partition, Offset::Offset(*position))
            .map_err(|e| {
                TxnError::Abort(Cause::Kafka {
                    call: "send_offsets_to_transaction",
                    error: e,
                })
            })?;
    }
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
            Err(e) => return Err(classify("send_offsets_to_transaction", e)),
        }
    }
    delivered(producer);
    // A commit that timed out is resumed by calling it again (librdkafka keeps it the
    // current call, and refuses an abort meanwhile). Its answers lost for longer than the
    // broker keeps a transaction open, its outcome is unknown: the broker may have written
    // the commit (then it completes it), or aborted the transaction.
    let mut tries = 0;
    loop {
        match producer.commit_transaction(TIMEOUT) {
            Ok(()) => return Ok(()),
            Err(KafkaError::Transaction(e)) if e.is_retriable() && tries < COMMIT_TRIES => {
                tries += 1;
                tracing::warn!(event = "transaction_commit_retried", error = %e, tries,
                    "the commit's answer did not come; asking again");
            }
            Err(KafkaError::Transaction(e)) if e.is_retriable() => {
                return Err(TxnError::Unknown(Cause::Unanswered {
                    tries: tries + 1,
                    secs: TIMEOUT.as_secs(),
                    error: KafkaError::Transaction(e),
                }))
            }
            Err(e) => return Err(classify("commit_transaction", e)),
        }
    }
}

/// How often a commit that timed out is asked again: with [`TIMEOUT`] each, beyond the longest
/// transaction timeout kafka-dlq sets (`transaction.timeout.ms`, at most 900 s).
const COMMIT_TRIES: u32 = 31;
