//! Sending dead letters back once the bug is fixed.
//!
//! [`replay`] reads a dead-letter topic and produces each matching envelope's original record —
//! its key, headers and payload bytes exactly — through an idempotent producer with
//! `acks=all`, to where [`Destination`] says: by default the redrive topic of the group that
//! dead-lettered it, which only that group reads (several services on one topic: a replay
//! reaches only the one that failed); or explicitly its source topic, where every group reading
//! it handles it again; or a topic of the operator's choice.
//!
//! **Resumable, for ever.** Up to 1,000 sends are in flight at once; a DLQ record is dealt with
//! when it and every record read before it are sent and acknowledged (or passed over). Every
//! 200 ms, and when the replay ends or is interrupted, the position after the last one dealt
//! with is written to the positions topic ([`crate::state`], compacted: Kafka never expires
//! it) under a group of the replay's own: `kafka-dlq-replay` for a replay without filters,
//! `kafka-dlq-replay-<hash>` for one with filters, `--to` or an edit. Running the same replay
//! again after an interruption (Ctrl-C: the sends in flight are finished first), or a year
//! later, starts after the last record dealt with, so nothing is sent twice; a hard kill can
//! resend what was acknowledged since the last write (at most 200 ms of it; at most 10 ms of it
//! while a `--rate` replay waits for its next slot, a wait spent writing), and a failed send
//! stops the replay before it (the sends already in flight after it may go out again on the
//! next run). A position written by an older version as a committed offset of that group is
//! moved to the positions topic the first time it is read.
//!
//! **Only what is outstanding.** A dead letter an earlier action resolved — discarded in the
//! console (and not restored), or sent by another replay (a filtered one, a console redrive,
//! the unfiltered one) — is not sent again ([`Outcome::AlreadyResolved`]): the monitor, the
//! console, `dlq list` and the replay decide with the same ledger ([`crate::state::ledger`]).
//! An edit then redrive is sent whatever resolved its dead letter: the operator asked for it.
//!
//! **Only where it belongs.** The audit and positions topics, dead-letter and retry topics and
//! internal topics are never destinations ([`destination::refusal`]); a `--to` topic that holds
//! dead-letter envelopes is refused too. A dead letter goes back to its source (directly or
//! through its group's redrive topic) only when that source's dead letters go to the DLT read
//! ([`destination::source_belongs`]): whoever can write a DLT cannot choose where a replay
//! writes. One refused is passed over unsent ([`Outcome::DestinationRefused`]) and stays
//! outstanding.
//!
//! **One at a time.** A replay holds a [`ReplayLock`] (a consumer-group membership) while it
//! runs; a second replay of the same DLQ refuses to start ([`ReplayError::Locked`]), whatever
//! its filter. A dry run takes no lock: it sends nothing.
//!
//! **Undecodable dead letters** (an envelope that parses but whose payload, key or headers do
//! not decode) are counted in [`ReplayReport::undecodable`] and passed over, not sent; the
//! replay goes on.
//!
//! **References** (dead letters too large to hold their payload) are read back from the
//! source topic. When that fails for now (a timeout, denied, a broker outage) the replay stops
//! with [`ReplayError::Unresolved`] and commits nothing past it. When the source record is gone
//! for good (retention, compaction, the topic deleted or recreated), it is counted in
//! [`ReplayReport::lost`], passed over unsent, and its offset kept in the replay position, so
//! the monitor still counts it as outstanding ([`crate::dlq_reader::position`]).
//!
//! **Bounded memory.** Records are dealt with one at a time; each outcome goes to the
//! `progress` callback as it happens, and the report keeps counts and a sample of
//! [`REPORT_SAMPLE`].
//!
//! **Loop guard.** Each replayed record carries the header `kafka_dlq-replay-count`, one more
//! than its dead letter had. A record that would be replayed more than `max_replays` times is
//! refused and reported, not sent: a record that keeps failing is not replayed forever.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::dlq_reader::position::Position;
use crate::dlq_reader::{DlqReader, Unresolved};
use crate::state::ledger::{Ledger, Resolution};
use crate::state::{PositionKey, PositionRecord, PositionStore};

pub mod audit;
pub mod destination;
mod error;
mod in_flight;
mod lock;
mod options;
mod readers;
mod report;
mod send;
pub mod transform;
pub use destination::Destination;
pub use error::ReplayError;
use in_flight::{Dealt, InFlight, WINDOW};
pub use lock::{LockError, ReplayLock};
pub use options::ReplayOptions;
pub use readers::{groups_reading, MAX_GROUPS_ASKED};
pub use report::{Outcome, ReplayReport, REPORT_SAMPLE};
use send::Sender;

/// The header counting how often a record was replayed.
pub const HEADER_REPLAY_COUNT: &str = "kafka_dlq-replay-count";

/// Replays as [`ReplayOptions`] says; calls `progress(done, total, outcome)` after each DLQ
/// record, as it is dealt with, and stops early (with `interrupted`) when `cancel` fires. See
/// the [module docs](self).
pub async fn replay(
    options: &ReplayOptions,
    progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
) -> Result<ReplayReport, ReplayError> {
    // A topic that does not exist: said at once, not as a lock group that never forms.
    check_exists(options).await?;
    // Held until the replay ends (a dry run sends nothing and takes none).
    let _lock = match options.dry_run {
        true => None,
        false => {
            let (brokers, raw, topic) = (
                options.brokers.clone(),
                options.librdkafka.clone(),
                options.dlq_topic.clone(),
            );
            Some(
                tokio::task::spawn_blocking(move || ReplayLock::take(&brokers, &raw, &topic))
                    .await
                    .expect("lock task")?,
            )
        }
    };
    replay_under(options, progress, cancel).await
}

/// [`replay`], by a caller that took the replay lock of `options.dlq_topic` already (the
/// console, whose redrive record names the replica holding it only once it is held).
pub async fn replay_holding(
    options: &ReplayOptions,
    _lock: &ReplayLock,
    progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
) -> Result<ReplayReport, ReplayError> {
    check_exists(options).await?;
    replay_under(options, progress, cancel).await
}

async fn check_exists(options: &ReplayOptions) -> Result<(), ReplayError> {
    let (brokers, raw, topic) = (
        options.brokers.clone(),
        options.librdkafka.clone(),
        options.dlq_topic.clone(),
    );
    tokio::task::spawn_blocking(move || crate::dlq_reader::check_exists(&brokers, &raw, &topic))
        .await
        .expect("metadata task")
        .map_err(|source| ReplayError::Read {
            topic: options.dlq_topic.clone(),
            source,
        })
}

/// The replay itself, once `options.dlq_topic` is known to exist and (unless a dry run) its
/// replay lock is held.
async fn replay_under(
    options: &ReplayOptions,
    mut progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
) -> Result<ReplayReport, ReplayError> {
    let read_error = |source| ReplayError::Read {
        topic: options.dlq_topic.clone(),
        source,
    };
    let state_error = |source| ReplayError::State {
        topic: options.dlq_topic.clone(),
        source,
    };
    let (brokers, raw, topic) = (
        options.brokers.clone(),
        options.librdkafka.clone(),
        options.dlq_topic.clone(),
    );
    if let Destination::Topic(to) = &options.destination {
        destination::check_named(options, to).await?;
    }
    let template = options.dlq_template.clone();
    let mut reader = tokio::task::spawn_blocking(move || {
        DlqReader::open(&brokers, &raw, &topic).map(|r| r.with_template(template))
    })
    .await
    .expect("reader task")
    .map_err(read_error)?;
    // A state topic that deletes what it holds would have this replay's work forgotten.
    {
        let mut client = rdkafka::ClientConfig::new();
        client.set("bootstrap.servers", &options.brokers);
        options.librdkafka.apply(&mut client);
        crate::state::topics::warn(&client, &options.brokers, &options.state).await;
    }
    // What was done before: the actions (audit) and every replay group's position.
    let mut store = PositionStore::new(&options.brokers, &options.librdkafka, &options.state);
    store.catch_up().await.map_err(state_error)?;
    let audit = {
        let (brokers, raw, state, dlq) = (
            options.brokers.clone(),
            options.librdkafka.clone(),
            options.state.clone(),
            options.dlq_topic.clone(),
        );
        tokio::task::spawn_blocking(move || {
            crate::state::audit::history(&brokers, &raw, &state, Some(&dlq))
        })
        .await
        .expect("audit task")
        .map_err(|source| {
            state_error(crate::state::StateError::Read {
                topic: options.state.audit.clone(),
                source,
            })
        })?
    };
    let group = options.position_group();
    let mut groups = Ledger::groups(&options.dlq_topic, &audit.runs);
    if !groups.contains(&group) {
        groups.push(group.clone());
    }
    for g in &groups {
        if let Err(e) = store.migrate(&options.dlq_topic, g, &audit.runs).await {
            // A dry run writes nothing of its own; it reads what it can.
            if !options.dry_run {
                return Err(state_error(e));
            }
            tracing::warn!(event = "replay_position_not_migrated", group = %g, error = %e);
        }
    }
    let ends = reader.ends();
    let ledger = Ledger::new(&options.dlq_topic, &ends, &audit.runs, store.table());
    let mut positions: HashMap<i32, Position> = store
        .table()
        .group(&options.dlq_topic, &group)
        .map(|g| {
            g.partitions
                .iter()
                .filter_map(|(p, position)| {
                    let end = ends.get(p).copied().unwrap_or(i64::MAX);
                    crate::state::position_record::still_valid(Some(position), end)
                        .map(|v| (*p, v.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    {
        let ranges: HashMap<i32, std::ops::Range<i64>> = ends
            .keys()
            .map(|p| (*p, positions.get(p).map_or(0, |pos| pos.next)..i64::MAX))
            .collect();
        reader.narrow(&ranges).map_err(read_error)?;
    }
    let started = audit::Started::now();
    let honoured = store
        .table()
        .group(&options.dlq_topic, &group)
        .map(|g| {
            g.honoured
                .iter()
                .map(|(p, runs)| (*p, runs.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut kept = Kept {
        store: &mut store,
        positions: &mut positions,
        honoured,
        options,
        group: &group,
        run: &started.run,
    };
    let result = send_all(
        options,
        &mut reader,
        &ledger,
        &mut kept,
        &mut progress,
        cancel,
        &started,
    )
    .await;
    if options.dry_run {
        return result;
    }
    let run = audit::ReplayRun::of(
        &started,
        options,
        result.as_ref().map_err(|e| crate::failure::error_chain(e)),
    );
    let appended = audit::append(&options.brokers, &options.librdkafka, &options.state, &run).await;
    if let Err(e) = &appended {
        tracing::warn!(event = "replay_audit_failed", topic = %options.state.audit, error = %e,
            run = %run.run, "the run's summary is not on the audit topic");
    }
    result.map(|mut report| {
        report.run = Some(run.run.clone());
        report.audit_error = appended
            .err()
            .map(|e| format!("audit topic `{}`: {e}", options.state.audit));
        report
    })
}

/// Where the replay keeps its position: the positions topic, under its group.
struct Kept<'a> {
    store: &'a mut PositionStore,
    /// The group's position per partition, as written so far (and the dead letters passed
    /// over unsent since).
    positions: &'a mut HashMap<i32, Position>,
    /// Per partition, the discards whose dead letters it passed unsent.
    honoured: HashMap<i32, Vec<String>>,
    options: &'a ReplayOptions,
    group: &'a str,
    run: &'a str,
}

impl Kept<'_> {
    /// Notes the dead letter at `offset` of `partition` as passed over unsent; the next
    /// [`Kept::write`] of the partition carries it, so it stays outstanding.
    fn lose(
        &mut self,
        partition: i32,
        offset: i64,
    ) -> Result<(), crate::dlq_reader::position::TooManyLost> {
        self.positions.entry(partition).or_default().lose(offset)
    }

    /// Notes that the dead letters of discard `run` on `partition` are passed unsent.
    fn honour(&mut self, partition: i32, run: &str) {
        let runs = self.honoured.entry(partition).or_default();
        if !runs.iter().any(|r| r == run) {
            runs.push(run.to_string());
        }
    }

    /// Writes `next` as the group's position on `partition` (with the dead letters passed over
    /// before it) and returns once the broker acknowledged it.
    async fn write(&mut self, partition: i32, next: i64) -> Result<(), ReplayError> {
        let position = self.positions.entry(partition).or_default();
        position.next = next;
        // The unfiltered replay's group has no filter to keep.
        let record = PositionRecord {
            lost: position.lost.clone(),
            selection: (self.group != crate::dlq_reader::REPLAY_GROUP)
                .then(|| self.options.filter.clone()),
            run: Some(self.run.to_string()),
            operator: Some(self.options.operator.clone()),
            honoured: self.honoured.get(&partition).cloned().unwrap_or_default(),
            ..PositionRecord::at(next)
        };
        let key = PositionKey {
            dlq_topic: self.options.dlq_topic.clone(),
            partition,
            group: self.group.to_string(),
        };
        self.store
            .write(&key, &record)
            .await
            .map_err(|source| ReplayError::Commit {
                topic: self.options.dlq_topic.clone(),
                source,
            })
    }

    /// Writes the end of each partition read to its end whose position is before it: offsets
    /// past the last record delivered that hold no record (transaction markers, aborted
    /// records), so they are not counted as outstanding.
    async fn write_ends(&mut self, reader: &DlqReader) -> Result<(), ReplayError> {
        for (partition, end) in reader.ended() {
            if self.positions.get(&partition).is_none_or(|p| p.next < end) {
                self.write(partition, end).await?;
            }
        }
        Ok(())
    }
}

/// What resolved a dead letter, for the report.
fn resolved_by(resolution: &Resolution) -> String {
    match resolution {
        Resolution::Replayed => "replayed".to_string(),
        Resolution::Redriven { run, operator } => format!("redriven by {operator} (run {run})"),
        Resolution::Discarded {
            run,
            operator,
            reason,
            ..
        } => format!("discarded by {operator} (run {run}): {reason}"),
    }
}

/// The replay itself, once its reader is open: reads, sends and keeps its position, as
/// [`replay`] says; `ledger` tells what an earlier action resolved.
async fn send_all(
    options: &ReplayOptions,
    reader: &mut DlqReader,
    ledger: &Ledger,
    kept: &mut Kept<'_>,
    mut progress: impl FnMut(u64, u64, &Outcome),
    cancel: &CancellationToken,
    started: &audit::Started,
) -> Result<ReplayReport, ReplayError> {
    let read_error = |source| ReplayError::Read {
        topic: options.dlq_topic.clone(),
        source,
    };
    let mut sender = Sender::new(options, started).await?;
    let total = reader.remaining();
    let mut report = ReplayReport {
        dry_run: options.dry_run,
        open_transactions: reader.open_transactions().to_vec(),
        ..ReplayReport::default()
    };
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
        if let Some(next_send) = sender.next_slot() {
            replaying
                .finish_while_waiting(&mut sends, kept, next_send, cancel)
                .await?;
        }
        if cancel.is_cancelled() {
            replaying.report.interrupted = true;
            break;
        }
        let entry = match reader.next_entry().await {
            None => break,
            Some(Err(e)) => {
                replaying.finish_all(&mut sends, kept).await?;
                return Err(read_error(e));
            }
            Some(Ok(entry)) => entry,
        };
        replaying.report.scanned += 1;
        let resolved = match options.edit {
            // An edit is sent whatever resolved its dead letter: the operator asked for it.
            Some(_) => None,
            None => ledger.resolution(&entry),
        };
        let dealt = if !options.filter.matches(&entry) {
            Ok((Outcome::FilteredOut, None))
        } else if let Some(resolution) = resolved {
            if let (Resolution::Discarded { run, .. }, false) = (&resolution, options.dry_run) {
                // Passed unsent: restored one day, it is outstanding again.
                kept.honour(entry.partition, run);
            }
            Ok((
                Outcome::AlreadyResolved {
                    id: entry.id(),
                    by: resolved_by(&resolution),
                },
                None,
            ))
        } else {
            match (entry.content.envelope(), &entry.unresolved) {
                (None, _) => Ok((Outcome::NotAnEnvelope { id: entry.id() }, None)),
                (Some(envelope), Some(Unresolved::Gone(why) | Unresolved::Refused(why))) => {
                    let kept_lost = match options.dry_run {
                        true => Ok(()),
                        false => kept.lose(entry.partition, entry.offset),
                    };
                    kept_lost
                        .map(|()| {
                            let id = envelope.id.clone();
                            (
                                Outcome::Lost {
                                    id,
                                    why: why.clone(),
                                },
                                None,
                            )
                        })
                        .map_err(|source| ReplayError::TooManyLost {
                            topic: options.dlq_topic.clone(),
                            partition: entry.partition,
                            offset: entry.offset,
                            source,
                        })
                }
                (Some(envelope), Some(unresolved)) => Err(ReplayError::Unresolved {
                    id: envelope.id.clone(),
                    topic: options.dlq_topic.clone(),
                    partition: entry.partition,
                    offset: entry.offset,
                    source: unresolved.clone(),
                }),
                (Some(envelope), None) => {
                    let readers = &mut replaying.report.source_readers;
                    sender.send(&entry, envelope, readers).await
                }
            }
        };
        let (outcome, delivery) = match dealt {
            Ok(dealt) => dealt,
            Err(e) => {
                replaying.finish_all(&mut sends, kept).await?;
                return Err(e);
            }
        };
        // A dead letter passed over unsent was not resolved: its offset goes into the position,
        // so the monitor still counts it as outstanding.
        let unsent = matches!(
            outcome,
            Outcome::Refused { .. }
                | Outcome::Undecodable { .. }
                | Outcome::NotAnEnvelope { .. }
                | Outcome::DestinationRefused { .. }
                | Outcome::Untransformable { .. }
        );
        if unsent && !options.dry_run {
            if let Err(source) = kept.lose(entry.partition, entry.offset) {
                replaying.finish_all(&mut sends, kept).await?;
                return Err(ReplayError::TooManyLost {
                    topic: options.dlq_topic.clone(),
                    partition: entry.partition,
                    offset: entry.offset,
                    source,
                });
            }
        }
        sends.push(Dealt {
            partition: entry.partition,
            offset: entry.offset,
            outcome,
            delivery,
            failed: None,
        });
        // Those acknowledged so far, without waiting for the others, then room for the next.
        while sends.oldest_is_done() || sends.len() > WINDOW {
            replaying.finish_oldest(&mut sends, kept).await?;
        }
        if last_commit.elapsed() >= COMMIT_INTERVAL {
            replaying.commit(&mut sends, kept).await?;
            last_commit = tokio::time::Instant::now();
        }
    }
    replaying.finish_all(&mut sends, kept).await?;
    if !options.dry_run && !report.interrupted {
        kept.write_ends(reader).await?;
    }
    report.transform = sender.transform_summary();
    Ok(report)
}

/// How often a replay writes the position its acknowledged sends allow.
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
    /// Finishes the oldest dead letter in flight: counts and reports it.
    async fn finish_oldest(
        &mut self,
        sends: &mut InFlight,
        kept: &mut Kept<'_>,
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
                self.commit(sends, kept).await?;
                Err(ReplayError::Send {
                    id: failed.id,
                    topic: failed.to,
                    source: failed.source,
                })
            }
        }
    }

    /// Until `until` (the rate's next slot) or `cancel`: finishes the sends acknowledged
    /// meanwhile and writes their position every 10 ms, so that a hard kill while a `--rate`
    /// replay waits resends at most what was acknowledged in the last 10 ms.
    async fn finish_while_waiting(
        &mut self,
        sends: &mut InFlight,
        kept: &mut Kept<'_>,
        until: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Result<(), ReplayError> {
        while tokio::time::Instant::now() < until && !cancel.is_cancelled() {
            while sends.oldest_is_done() {
                self.finish_oldest(sends, kept).await?;
            }
            self.commit(sends, kept).await?;
            let step = until.saturating_duration_since(tokio::time::Instant::now());
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(step.min(Duration::from_millis(10))) => {}
            }
        }
        Ok(())
    }

    /// Finishes every dead letter in flight and writes the position.
    async fn finish_all(
        &mut self,
        sends: &mut InFlight,
        kept: &mut Kept<'_>,
    ) -> Result<(), ReplayError> {
        while sends.len() > 0 {
            self.finish_oldest(sends, kept).await?;
        }
        self.commit(sends, kept).await
    }

    /// Writes the positions the finished dead letters allow (nothing in a dry run).
    async fn commit(
        &mut self,
        sends: &mut InFlight,
        kept: &mut Kept<'_>,
    ) -> Result<(), ReplayError> {
        let committable = sends.take_committable();
        if self.options.dry_run {
            return Ok(());
        }
        for (partition, next) in committable {
            kept.write(partition, next).await?;
        }
        Ok(())
    }
}
