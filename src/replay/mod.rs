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

use tokio_util::sync::CancellationToken;

use crate::dlq_reader::{DlqReader, Unresolved};

pub mod audit;
mod destination;
mod error;
mod in_flight;
mod lock;
mod options;
mod readers;
mod report;
mod send;
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
    let template = options.dlq_template.clone();
    let mut reader = tokio::task::spawn_blocking(move || {
        // A dry run lists what a real run would send: from the same position.
        DlqReader::open(&brokers, &raw, &topic, &group, true).map(|r| r.with_template(template))
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
        let dealt = if !options.filter.matches(&entry) {
            Ok((Outcome::FilteredOut, None))
        } else {
            match (entry.content.envelope(), &entry.unresolved) {
                (None, _) => Ok((Outcome::NotAnEnvelope { id: entry.id() }, None)),
                (Some(envelope), Some(Unresolved::Gone(why) | Unresolved::Refused(why))) => {
                    let kept = if options.dry_run {
                        Ok(())
                    } else {
                        reader.lose(entry.partition, entry.offset)
                    };
                    kept.map(|()| {
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
                replaying.finish_all(&mut sends, reader).await?;
                return Err(e);
            }
        };
        // A dead letter passed over unsent was not resolved: its offset goes into the position,
        // so the monitor still counts it as outstanding.
        let unsent = matches!(
            outcome,
            Outcome::Refused { .. } | Outcome::Undecodable { .. } | Outcome::NotAnEnvelope { .. }
        );
        if unsent && !options.dry_run {
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
                biased;
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(step.min(Duration::from_millis(10))) => {}
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
