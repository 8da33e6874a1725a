//! Sending dead letters back once the bug is fixed.
//!
//! [`replay`] reads a dead-letter topic and produces each matching envelope's original record —
//! its key, headers and payload bytes exactly — through an idempotent producer with
//! `acks=all`, to where [`Destination`] says: by default the redrive topic of the group that
//! dead-lettered it, which only that group reads (several services on one topic: a replay
//! reaches only the one that failed); or explicitly its source topic, where every group reading
//! it handles it again; or a topic of the operator's choice.
//!
//! **Resumable.** Up to 1,000 sends are in flight at once; a DLQ record is dealt with when it
//! and every record read before it are sent and acknowledged (or passed over). Every 200 ms,
//! and when the replay ends or is interrupted, the position after the last one dealt with is
//! committed for a consumer group of the replay's own: `kafka-dlq-replay` for a replay without
//! filters, `kafka-dlq-replay-<hash>` for one with filters or `--to`. Running the same replay
//! again after an interruption (Ctrl-C: the sends in flight are finished first) starts after
//! the last record dealt with, so nothing is sent twice; a hard kill can resend what was
//! acknowledged since the last commit (at most 200 ms of it; at most 10 ms of it while a
//! `--rate` replay waits for its next slot, a wait spent committing), and a failed send stops the
//! replay before it (the sends already in flight after it may go out again on the next run).
//! The monitor counts what the unfiltered replay has passed as no longer outstanding.
//!
//! **One at a time.** A replay holds a [`ReplayLock`] (a consumer-group membership) while it
//! runs; a second replay with the same position group refuses to start
//! ([`ReplayError::Locked`]). A dry run takes no lock: it sends nothing.
//!
//! **Undecodable dead letters** (an envelope that parses but whose payload, key or headers do
//! not decode) are counted in [`ReplayReport::undecodable`] and passed over, not sent; the
//! replay goes on.
//!
//! **References** (dead letters too large to hold their payload) are read back from the
//! source topic. When that fails for now (a timeout, denied, a broker outage) the replay stops
//! with [`ReplayError::Unresolved`] and commits nothing past it. When the source record is gone
//! for good (retention, compaction, the topic deleted or recreated), it is counted in
//! [`ReplayReport::lost`], passed over unsent, and its offset kept in the replay position's
//! commit metadata, so the monitor still counts it as outstanding ([`crate::dlq_reader::position`]).
//!
//! **Bounded memory.** Records are dealt with one at a time; each outcome goes to the
//! `progress` callback as it happens, and the report keeps counts and a sample of
//! [`REPORT_SAMPLE`].
//!
//! **Loop guard.** Each replayed record carries the header `kafka_dlq-replay-count`, one more
//! than its dead letter had. A record that would be replayed more than `max_replays` times is
//! refused and reported, not sent: a record that keeps failing is not replayed forever.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use crate::dlq::EnvelopeDecodeError;
use crate::dlq_reader::{DlqReader, Filter, Unresolved};
use crate::kafka::LogContext;

pub mod audit;
mod destination;
mod in_flight;
mod lock;
mod readers;
mod report;
pub use destination::Destination;
use destination::RedriveTopics;
use in_flight::{Dealt, InFlight, WINDOW};
pub use lock::{LockError, ReplayLock};
pub use readers::{groups_reading, MAX_GROUPS_ASKED};
pub use report::{Outcome, ReplayReport, REPORT_SAMPLE};

/// The header counting how often a record was replayed.
pub const HEADER_REPLAY_COUNT: &str = "kafka_dlq-replay-count";

/// What to replay and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// Bootstrap servers.
    pub brokers: String,
    /// Raw librdkafka properties for the reader and the producer.
    pub librdkafka: crate::kafka::ClientOptions,
    /// The dead-letter topic to read.
    pub dlq_topic: String,
    /// Where each dead letter goes: its group's redrive topic (the default), its source
    /// topic, or one topic.
    pub destination: Destination,
    /// Which dead letters.
    pub filter: Filter,
    /// Report what would be sent; send and commit nothing.
    pub dry_run: bool,
    /// At most this many records per second (`None`: as fast as the broker takes them).
    pub rate_per_sec: Option<u32>,
    /// The loop guard: a record already replayed this many times is refused. Default 3.
    pub max_replays: u32,
    /// Who runs it, for the audit (default: the login name, [`audit::operator_name`]).
    pub operator: String,
    /// The topic each run that is not a dry run appends its summary to ([`audit`]); `None`
    /// for none. Default [`audit::DEFAULT_AUDIT_TOPIC`].
    pub audit_topic: Option<String>,
}

impl ReplayOptions {
    /// Replays everything on `dlq_topic` to its source topics, with the defaults.
    pub fn new(brokers: &str, dlq_topic: &str) -> Self {
        Self {
            brokers: brokers.into(),
            librdkafka: crate::kafka::ClientOptions::new(),
            dlq_topic: dlq_topic.into(),
            destination: Destination::Group,
            filter: Filter::default(),
            dry_run: false,
            rate_per_sec: None,
            max_replays: 3,
            operator: audit::operator_name(),
            audit_topic: Some(audit::DEFAULT_AUDIT_TOPIC.to_string()),
        }
    }

    /// The consumer group holding this replay's position: [`crate::dlq_reader::REPLAY_GROUP`]
    /// for a replay without filters that puts each dead letter back (to its group or its
    /// source: either way it is replayed once), another for each filter or `--to` topic.
    pub fn position_group(&self) -> String {
        let to = match &self.destination {
            Destination::Topic(topic) => Some(topic),
            Destination::Group | Destination::Source => None,
        };
        if self.filter.is_empty() && to.is_none() {
            return crate::dlq_reader::REPLAY_GROUP.to_string();
        }
        // A hash of the filter and destination: the same replay resumes, another starts anew.
        let key = format!("{}|{:?}", self.filter.key(), to);
        let hash = crate::fingerprint::stable_hash(&key);
        format!("{}-{hash:016x}", crate::dlq_reader::REPLAY_GROUP)
    }
}

/// Why a replay stopped with an error. Its position stays before the record concerned, so
/// running it again retries that record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The DLQ topic could not be opened or read.
    #[error("cannot read dead-letter topic `{topic}`: {source}")]
    Read {
        /// The DLQ topic.
        topic: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
    /// Another replay with the same position is running, or the lock could not be taken.
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The producer could not be created.
    #[error("cannot create the replay producer: {0}")]
    CreateProducer(#[source] KafkaError),
    /// Sending a record failed.
    #[error("cannot send `{id}` to `{topic}`: {source}")]
    Send {
        /// The record id.
        id: String,
        /// The destination topic.
        topic: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
    /// A reference's source record could not be read now (a timeout, denied, a broker
    /// outage). Nothing was committed past it; run the replay again once the source is
    /// readable.
    #[error("cannot resolve `{id}` (dead letter {topic}/{partition}@{offset}): {source}; nothing was committed past it, run the replay again once the source topic is readable")]
    Unresolved {
        /// The record id.
        id: String,
        /// The DLQ topic.
        topic: String,
        /// The dead letter's DLQ partition.
        partition: i32,
        /// Its DLQ offset.
        offset: i64,
        /// Why.
        #[source]
        source: crate::dlq_reader::Unresolved,
    },
    /// A DLQ partition holds more lost references than its replay position can carry
    /// ([`crate::dlq_reader::position::MAX_LOST`]); nothing was committed past the last one.
    #[error("dead letter {topic}/{partition}@{offset}: {source}")]
    TooManyLost {
        /// The DLQ topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset of the one that did not fit.
        offset: i64,
        /// The cause.
        #[source]
        source: crate::dlq_reader::position::TooManyLost,
    },
    /// A dead letter names no consumer group (a foreign dead-letter topic, an envelope
    /// without `source.group`), so it has no group's redrive topic to go to. Nothing was
    /// committed past it.
    #[error("dead letter `{id}` ({topic}/{partition}@{offset}) names no consumer group, so it cannot go to its group's redrive topic; replay it with --to-source (every group reading its source topic handles it again) or --to TOPIC; nothing was committed past it")]
    NoGroup {
        /// The record id.
        id: String,
        /// The DLQ topic.
        topic: String,
        /// The dead letter's DLQ partition.
        partition: i32,
        /// Its DLQ offset.
        offset: i64,
    },
    /// A redrive topic was missing and could not be created, or the cluster's topics could
    /// not be read to tell. Nothing was committed past the record bound for it.
    #[error("cannot make sure of the redrive topic `{topic}`: {source}; nothing was committed past its first record")]
    RedriveTopic {
        /// The redrive topic (or, when the cluster could not be read, the DLQ topic).
        topic: String,
        /// The cause.
        #[source]
        source: crate::kafka::topics::TopicsError,
    },
    /// Committing the replay position failed.
    #[error("cannot commit the replay position of `{topic}`: {source}")]
    Commit {
        /// The DLQ topic.
        topic: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
}

/// Replays as [`ReplayOptions`] says; calls `progress(done, total, outcome)` after each DLQ
/// record, as it is dealt with, and stops early (with `interrupted`) when `cancel` fires. See
/// the [module docs](self).
pub async fn replay(
    options: &ReplayOptions,
    mut progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
) -> Result<ReplayReport, ReplayError> {
    let read_error = |source| ReplayError::Read {
        topic: options.dlq_topic.clone(),
        source,
    };
    let (brokers, raw, topic, group) = (
        options.brokers.clone(),
        options.librdkafka.clone(),
        options.dlq_topic.clone(),
        options.position_group(),
    );
    // A topic that does not exist: said at once, not as a group that never forms.
    {
        let (brokers, raw, topic) = (brokers.clone(), raw.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            crate::dlq_reader::check_exists(&brokers, &raw, &topic)
        })
        .await
        .expect("metadata task")
        .map_err(read_error)?;
    }
    let _lock = if options.dry_run {
        None
    } else {
        let (brokers, raw, topic, group) =
            (brokers.clone(), raw.clone(), topic.clone(), group.clone());
        Some(
            tokio::task::spawn_blocking(move || ReplayLock::take(&brokers, &raw, &topic, &group))
                .await
                .expect("lock task")?,
        )
    };
    let mut reader = tokio::task::spawn_blocking(move || {
        // A dry run lists what a real run would send: from the same position.
        DlqReader::open(&brokers, &raw, &topic, &group, true)
    })
    .await
    .expect("reader task")
    .map_err(read_error)?;
    let started = audit::Started::now();
    let result = send_all(options, &mut reader, &mut progress, cancel, &started).await;
    if options.dry_run {
        return result;
    }
    let Some(audit_topic) = &options.audit_topic else {
        return result;
    };
    let run = audit::ReplayRun::of(
        &started,
        options,
        result.as_ref().map_err(|e| crate::failure::error_chain(e)),
    );
    let appended = audit::append(&options.brokers, &options.librdkafka, audit_topic, &run).await;
    if let Err(e) = &appended {
        tracing::warn!(event = "replay_audit_failed", topic = %audit_topic, error = %e,
            run = %run.run, "the run's summary is not on the audit topic");
    }
    result.map(|mut report| {
        report.run = Some(run.run.clone());
        report.audit_error = appended
            .err()
            .map(|e| format!("audit topic `{audit_topic}`: {e}"));
        report
    })
}

/// The replay itself, once its reader is open: reads, sends and commits, as [`replay`] says.
async fn send_all(
    options: &ReplayOptions,
    reader: &mut DlqReader,
    mut progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
    started: &audit::Started,
) -> Result<ReplayReport, ReplayError> {
    let read_error = |source| ReplayError::Read {
        topic: options.dlq_topic.clone(),
        source,
    };
    let mut producer_config = ClientConfig::new();
    producer_config
        .set("bootstrap.servers", &options.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all");
    options.librdkafka.apply(&mut producer_config);
    let producer: FutureProducer<LogContext> = producer_config
        .create_with_context(LogContext)
        .map_err(ReplayError::CreateProducer)?;

    let mut redrive = match options.destination {
        Destination::Group if !options.dry_run => Some(
            RedriveTopics::read(&producer_config)
                .await
                .map_err(|source| ReplayError::RedriveTopic {
                    topic: options.dlq_topic.clone(),
                    source,
                })?,
        ),
        _ => None,
    };
    let total = reader.remaining();
    let mut report = ReplayReport {
        dry_run: options.dry_run,
        ..ReplayReport::default()
    };
    let pause = options
        .rate_per_sec
        .filter(|r| *r > 0)
        .map(|r| Duration::from_secs_f64(1.0 / f64::from(r)));
    let mut next_send = tokio::time::Instant::now();
    let mut sends = InFlight::default();
    let mut last_commit = tokio::time::Instant::now();
    let mut replaying = Replaying {
        options,
        total,
        finished: 0,
        report: &mut report,
        progress: &mut progress,
    };
    loop {
        if pause.is_some() && !options.dry_run {
            replaying
                .finish_while_waiting(&mut sends, reader, next_send, cancel)
                .await?;
        }
        if cancel.is_cancelled() {
            replaying.report.interrupted = true;
            break;
        }
        let entry = match reader.next_entry().await {
            None => break,
            Some(Err(e)) => {
                replaying.finish_all(&mut sends, reader).await?;
                return Err(read_error(e));
            }
            Some(Ok(entry)) => entry,
        };
        replaying.report.scanned += 1;
        let mut delivery = None;
        let outcome = if !options.filter.matches(&entry) {
            Outcome::FilteredOut
        } else {
            match (entry.content.envelope(), &entry.unresolved) {
                (None, _) => Outcome::NotAnEnvelope { id: entry.id() },
                (Some(envelope), Some(Unresolved::Gone(why))) => {
                    if !options.dry_run {
                        if let Err(source) = reader.lose(entry.partition, entry.offset) {
                            replaying.finish_all(&mut sends, reader).await?;
                            return Err(ReplayError::TooManyLost {
                                topic: options.dlq_topic.clone(),
                                partition: entry.partition,
                                offset: entry.offset,
                                source,
                            });
                        }
                    }
                    Outcome::Lost {
                        id: envelope.id.clone(),
                        why: why.clone(),
                    }
                }
                (Some(envelope), Some(unresolved)) => {
                    replaying.finish_all(&mut sends, reader).await?;
                    return Err(ReplayError::Unresolved {
                        id: envelope.id.clone(),
                        topic: options.dlq_topic.clone(),
                        partition: entry.partition,
                        offset: entry.offset,
                        source: unresolved.clone(),
                    });
                }
                (Some(envelope), None) => match decoded(envelope) {
                    Err(e) => {
                        tracing::warn!(event = "replay_undecodable", id = %envelope.id,
                                dlq_partition = entry.partition, dlq_offset = entry.offset,
                                error = %e, "passed over: its envelope does not decode");
                        Outcome::Undecodable {
                            id: envelope.id.clone(),
                            why: e.to_string(),
                        }
                    }
                    Ok((mut headers, key, payload)) => 'send: {
                        let Some(to) = options.destination.topic_of(envelope) else {
                            replaying.finish_all(&mut sends, reader).await?;
                            return Err(ReplayError::NoGroup {
                                id: envelope.id.clone(),
                                topic: options.dlq_topic.clone(),
                                partition: entry.partition,
                                offset: entry.offset,
                            });
                        };
                        if options.destination == Destination::Source {
                            replaying.warn_readers(&to).await;
                        }
                        if let Some(redrive) = &mut redrive {
                            if let Err(source) = redrive.ensure(&to, &envelope.source.topic).await {
                                replaying.finish_all(&mut sends, reader).await?;
                                return Err(ReplayError::RedriveTopic { topic: to, source });
                            }
                        }
                        headers.retain(|h| !audit::is_audit_header(&h.key));
                        let audit = started.headers(
                            &options.operator,
                            &options.dlq_topic,
                            entry.partition,
                            entry.offset,
                        );
                        headers.extend(audit.into_iter().map(|(k, v)| {
                            crate::record::RecordHeader {
                                key: k.as_bytes().to_vec(),
                                value: Some(v.into_bytes()),
                            }
                        }));
                        if options.destination == Destination::Group {
                            headers = redrive_headers(envelope, headers);
                        }
                        let sent = send_one(
                            options,
                            &producer,
                            envelope,
                            Outgoing {
                                to,
                                headers,
                                key,
                                payload,
                            },
                            pause,
                            &mut next_send,
                        )
                        .await;
                        match sent {
                            Ok((outcome, sent)) => {
                                delivery = sent;
                                break 'send outcome;
                            }
                            Err(e) => {
                                replaying.finish_all(&mut sends, reader).await?;
                                return Err(e);
                            }
                        }
                    }
                },
            }
        };
        sends.push(Dealt {
            partition: entry.partition,
            offset: entry.offset,
            outcome,
            delivery,
            failed: None,
        });
        // Those acknowledged so far, without waiting for the others, then room for the next.
        while sends.oldest_is_done() || sends.len() > WINDOW {
            replaying.finish_oldest(&mut sends, reader).await?;
        }
        if last_commit.elapsed() >= COMMIT_INTERVAL {
            replaying.commit(&mut sends, reader)?;
            last_commit = tokio::time::Instant::now();
        }
    }
    replaying.finish_all(&mut sends, reader).await?;
    if !options.dry_run && !report.interrupted {
        reader.commit_ends().map_err(|source| ReplayError::Commit {
            topic: options.dlq_topic.clone(),
            source,
        })?;
    }
    Ok(report)
}

/// How often a replay commits the position its acknowledged sends allow.
const COMMIT_INTERVAL: Duration = Duration::from_millis(200);

/// A replay's bookkeeping while it runs: what it reports as each dead letter is finished.
struct Replaying<'a, F> {
    options: &'a ReplayOptions,
    total: u64,
    finished: u64,
    report: &'a mut ReplayReport,
    progress: &'a mut F,
}

impl<F: FnMut(u64, u64, &Outcome)> Replaying<'_, F> {
    /// The first time the replay sends to the source topic `topic`: finds the groups that read
    /// it, logs them (`replay_to_source`) and keeps them in the report.
    async fn warn_readers(&mut self, topic: &str) {
        if self.report.source_readers.contains_key(topic) {
            return;
        }
        let (brokers, raw, t) = (
            self.options.brokers.clone(),
            self.options.librdkafka.clone(),
            topic.to_string(),
        );
        let found = tokio::task::spawn_blocking(move || groups_reading(&brokers, &raw, &t))
            .await
            .expect("group listing task");
        match &found {
            Ok(groups) => tracing::warn!(event = "replay_to_source", %topic,
                groups = %groups.join(", "),
                "every group reading the source topic handles these records again: {}",
                if groups.is_empty() { "none found".to_string() } else { groups.join(", ") }),
            Err(error) => tracing::warn!(event = "replay_to_source", %topic, %error,
                "every group reading the source topic handles these records again (could not list them)"),
        }
        self.report
            .source_readers
            .insert(topic.to_string(), found.unwrap_or_default());
    }

    /// Finishes the oldest dead letter in flight: counts and reports it.
    async fn finish_oldest(
        &mut self,
        sends: &mut InFlight,
        reader: &mut DlqReader,
    ) -> Result<(), ReplayError> {
        match sends.finish_oldest().await {
            None => Ok(()),
            Some(Ok(outcome)) => {
                self.report.count(&outcome);
                self.finished += 1;
                (self.progress)(self.finished, self.total, &outcome);
                Ok(())
            }
            Some(Err(failed)) => {
                // What was acknowledged before it stays replayed.
                self.commit(sends, reader)?;
                Err(ReplayError::Send {
                    id: failed.id,
                    topic: failed.to,
                    source: failed.source,
                })
            }
        }
    }

    /// Until `until` (the rate's next slot) or `cancel`: finishes the sends acknowledged
    /// meanwhile and commits their position every 10 ms, so that a hard kill while a `--rate`
    /// replay waits resends at most what was acknowledged in the last 10 ms.
    async fn finish_while_waiting(
        &mut self,
        sends: &mut InFlight,
        reader: &mut DlqReader,
        until: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Result<(), ReplayError> {
        while tokio::time::Instant::now() < until && !cancel.is_cancelled() {
            while sends.oldest_is_done() {
                self.finish_oldest(sends, reader).await?;
            }
            self.commit(sends, reader)?;
            let step = until.saturating_duration_since(tokio::time::Instant::now());
            tokio::select! {
                _ = tokio::time::sleep(step.min(Duration::from_millis(10))) => {}
                _ = cancel.cancelled() => {}
            }
        }
        Ok(())
    }

    /// Finishes every dead letter in flight and commits the position.
    async fn finish_all(
        &mut self,
        sends: &mut InFlight,
        reader: &mut DlqReader,
    ) -> Result<(), ReplayError> {
        while sends.len() > 0 {
            self.finish_oldest(sends, reader).await?;
        }
        self.commit(sends, reader)
    }

    /// Commits the positions the finished dead letters allow (nothing in a dry run).
    #[allow(clippy::result_large_err)] // at most one error per replay: its size costs nothing
    fn commit(&mut self, sends: &mut InFlight, reader: &mut DlqReader) -> Result<(), ReplayError> {
        let committable = sends.take_committable();
        if self.options.dry_run {
            return Ok(());
        }
        for (partition, next) in committable {
            reader
                .commit(partition, next)
                .map_err(|source| ReplayError::Commit {
                    topic: self.options.dlq_topic.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}

/// An envelope's headers, key and payload, decoded.
type Decoded = (
    Vec<crate::record::RecordHeader>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

fn decoded(envelope: &crate::dlq::Envelope) -> Result<Decoded, EnvelopeDecodeError> {
    Ok((
        envelope.headers()?,
        envelope.key_bytes()?,
        envelope.payload_bytes()?,
    ))
}

/// The headers of the record that goes to the group's redrive topic for `envelope`: the
/// original's `headers` (with the replay's own) and the retry account that lets the group's
/// consumer hand its handler the original record ([`crate::retry_tier::redrive_headers`]).
fn redrive_headers(
    envelope: &crate::dlq::Envelope,
    headers: Vec<crate::record::RecordHeader>,
) -> Vec<crate::record::RecordHeader> {
    let source = &envelope.source;
    let mut original = crate::record::Record::new(&source.topic, source.partition, source.offset)
        .with_id(&envelope.id);
    original.timestamp = source.timestamp;
    original.timestamp_type = source.timestamp_type;
    original.headers = headers;
    crate::retry_tier::redrive_headers(&original, envelope)
}

/// One record a replay sends: where, and what.
struct Outgoing {
    to: String,
    headers: Vec<crate::record::RecordHeader>,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
}

/// Sends one decoded dead letter (or, in a dry run, does not), unless the loop guard refuses
/// it; says which, with the send's acknowledgement to await.
async fn send_one(
    options: &ReplayOptions,
    producer: &FutureProducer<LogContext>,
    envelope: &crate::dlq::Envelope,
    outgoing: Outgoing,
    pause: Option<Duration>,
    next_send: &mut tokio::time::Instant,
) -> Result<(Outcome, Option<DeliveryFuture>), ReplayError> {
    let Outgoing {
        to: destination,
        mut headers,
        key,
        payload,
    } = outgoing;
    let replays = headers
        .iter()
        .rev()
        .find(|h| h.key == HEADER_REPLAY_COUNT.as_bytes())
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    if replays >= options.max_replays {
        tracing::warn!(event = "replay_refused", id = %envelope.id, replays,
            max_replays = options.max_replays,
            "replayed too often already; fix the cause or raise --max-replays");
        let refused = Outcome::Refused {
            id: envelope.id.clone(),
            replays,
        };
        return Ok((refused, None));
    }
    let replayed = Outcome::Replayed {
        id: envelope.id.clone(),
        to: destination.clone(),
    };
    if options.dry_run {
        return Ok((replayed, None));
    }
    if let Some(pause) = pause {
        tokio::time::sleep_until(*next_send).await;
        *next_send = tokio::time::Instant::now() + pause;
    }
    headers.retain(|h| h.key != HEADER_REPLAY_COUNT.as_bytes());
    let count = (replays + 1).to_string();
    let mut out_headers = OwnedHeaders::new_with_capacity(headers.len() + 1);
    for h in headers.iter() {
        out_headers = crate::kafka::headers::add(out_headers, &h.key, h.value.as_deref());
    }
    out_headers = out_headers.insert(Header {
        key: HEADER_REPLAY_COUNT,
        value: Some(count.as_bytes()),
    });
    let mut record = FutureRecord::<[u8], [u8]>::to(&destination).headers(out_headers);
    if let Some(k) = key.as_deref() {
        record = record.key(k);
    }
    if let Some(p) = payload.as_deref() {
        record = record.payload(p);
    }
    // At most WINDOW sends are in flight, far below the producer's queue: enqueuing does not
    // fail for want of room.
    let delivery = producer
        .send_result(record)
        .map_err(|(source, _)| ReplayError::Send {
            id: envelope.id.clone(),
            topic: destination.clone(),
            source,
        })?;
    tracing::debug!(event = "record_replayed", id = %envelope.id,
        to = %destination, replay_count = replays + 1);
    Ok((replayed, Some(delivery)))
}
