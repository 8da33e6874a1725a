//! The console's redrives: each a [`crate::replay::replay`] run in a task, its progress kept
//! for the page, with pause (the run stops after the sends in flight; its position is
//! committed), resume (a new run from that position, under the same filter) and cancel. One
//! redrive per DLT at a time; the replay lock keeps out `dlq replay` and other consoles with
//! the same filter.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::ConsoleConfig;
use crate::dlq_reader::Filter;
use crate::outstanding::watch::Watch;
use crate::replay::audit::Edit;
use crate::replay::{Destination, Outcome, ReplayError, ReplayOptions};

/// Redrives kept for the page at most; the oldest finished ones go first.
const KEPT: usize = 100;
/// What a dry run lists at most.
pub const PREVIEW: usize = 200;

/// What to redrive and how.
#[derive(Debug, Clone)]
pub struct Request {
    /// The DLT.
    pub dlq_topic: String,
    /// Which dead letters.
    pub filter: Filter,
    /// Where they go.
    pub destination: Destination,
    /// At most this many per second.
    pub rate: Option<u32>,
    /// List what would go where; send nothing.
    pub dry_run: bool,
    /// One dead letter's payload, edited.
    pub edit: Option<Edit>,
    /// Who asked (`console:<name>` in the audit).
    pub operator: String,
    /// The approved request it carries out.
    pub request: Option<String>,
    /// A bulk fix applied to each payload.
    pub transform: Option<crate::replay::transform::Transform>,
}

/// Where a redrive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Sending.
    Running,
    /// Stopped by the operator; resumes from its position.
    Paused,
    /// Every selected dead letter dealt with.
    Done,
    /// Stopped for good by the operator.
    Cancelled,
    /// Stopped by an error (`error` says which); its position stays before the record
    /// concerned.
    Failed,
}

/// One dead letter a dry run would send: where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// The record id.
    pub id: String,
    /// The topic it would go to.
    pub to: String,
}

/// A redrive's progress, as `GET /api/redrives/{id}` answers it.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// Its id.
    pub id: String,
    /// Where it is.
    pub state: State,
    /// The DLT.
    pub dlq_topic: String,
    /// Its filter (`name=value&…`).
    pub filter: String,
    /// `group`, `source` or the topic.
    pub destination: String,
    /// Its rate, if any.
    pub rate: Option<u32>,
    /// A dry run.
    pub dry_run: bool,
    /// An edit then redrive.
    pub edited: bool,
    /// Who started it.
    pub operator: String,
    /// When.
    pub started: DateTime<Utc>,
    /// When it ended (done, cancelled, failed).
    pub ended: Option<DateTime<Utc>>,
    /// DLQ records left to read when it started.
    pub total: u64,
    /// DLQ records read.
    pub scanned: u64,
    /// Sent and acknowledged (a dry run: would be).
    pub sent: u64,
    /// Refused by the loop guard.
    pub refused: u64,
    /// Not sent again: an earlier action resolved them (discarded, or sent by another
    /// replay).
    pub already_resolved: u64,
    /// Passed over unsent: not envelopes, undecodable, source record gone, destination
    /// refused.
    pub failed: u64,
    /// Why it failed, or the first dead letters passed over, and why.
    pub problems: Vec<String>,
    /// How many go to each destination topic.
    pub destinations: BTreeMap<String, u64>,
    /// A dry run: the first [`PREVIEW`] dead letters it would send, and where.
    pub preview: Vec<Planned>,
    /// The audit run ids of its runs (a pause and a resume make two).
    pub runs: Vec<String>,
    /// With a bulk transformation: what it did in the last run (changed, unchanged, failed,
    /// and the digests of the payloads before and after).
    pub transform: Option<crate::replay::transform::TransformSummary>,
}

struct Redrive {
    request: Request,
    progress: Mutex<Progress>,
    /// Cancels the run in progress (a pause or a cancel).
    stop: Mutex<CancellationToken>,
    /// Resume or cancel while paused.
    wake: Notify,
    wanted: Mutex<Wanted>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Run,
    Pause,
    Cancel,
}

/// Why a redrive cannot start or be changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedriveError {
    /// Another redrive of the DLT is running or paused: 409.
    #[error("redrive {0} of this dead-letter topic is running or paused; cancel it or wait for it to end")]
    Busy(String),
    /// No such redrive: 404.
    #[error("no redrive with this id")]
    Unknown,
    /// Not in a state that allows it: 409.
    #[error("the redrive is {0}")]
    Finished(&'static str),
}

/// The redrives started since the console started (the latest [`KEPT`]).
pub struct Redrives {
    config: Arc<ConsoleConfig>,
    watch: Arc<Watch>,
    runs: Mutex<BTreeMap<String, Arc<Redrive>>>,
}

impl Redrives {
    /// None yet.
    pub fn new(config: Arc<ConsoleConfig>, watch: Arc<Watch>) -> Arc<Redrives> {
        Arc::new(Redrives {
            config,
            watch,
            runs: Mutex::new(BTreeMap::new()),
        })
    }

    /// Starts `request` in a task, which holds `permit` (a dry run's read of the cluster,
    /// [`crate::console::limits`]) until it ends; its id.
    pub fn start(
        self: &Arc<Self>,
        request: Request,
        permit: Option<crate::console::limits::Permit>,
    ) -> Result<String, RedriveError> {
        let mut runs = self.runs.lock().expect("runs");
        if !request.dry_run {
            if let Some((id, _)) = runs.iter().find(|(_, r)| {
                !r.request.dry_run
                    && r.request.dlq_topic == request.dlq_topic
                    && matches!(
                        r.progress.lock().expect("progress").state,
                        State::Running | State::Paused
                    )
            }) {
                return Err(RedriveError::Busy(id.clone()));
            }
        }
        let started = Utc::now();
        let id = format!(
            "{}-{:08x}",
            started.format("%Y%m%dT%H%M%S%3fZ"),
            fastrand::u32(..)
        );
        let destination = match &request.destination {
            Destination::Group => "group".to_string(),
            Destination::Source => "source".to_string(),
            Destination::Topic(t) => t.clone(),
        };
        let redrive = Arc::new(Redrive {
            progress: Mutex::new(Progress {
                id: id.clone(),
                state: State::Running,
                dlq_topic: request.dlq_topic.clone(),
                filter: request.filter.key(),
                destination,
                rate: request.rate,
                dry_run: request.dry_run,
                edited: request.edit.is_some(),
                operator: request.operator.clone(),
                started,
                ended: None,
                total: 0,
                scanned: 0,
                sent: 0,
                refused: 0,
                already_resolved: 0,
                failed: 0,
                problems: Vec::new(),
                destinations: BTreeMap::new(),
                preview: Vec::new(),
                transform: None,
                runs: Vec::new(),
            }),
            request,
            stop: Mutex::new(CancellationToken::new()),
            wake: Notify::new(),
            wanted: Mutex::new(Wanted::Run),
        });
        while runs.len() >= KEPT {
            let finished = runs
                .iter()
                .find(|(_, r)| r.progress.lock().expect("progress").ended.is_some())
                .map(|(id, _)| id.clone());
            match finished {
                Some(old) => runs.remove(&old),
                None => break,
            };
        }
        runs.insert(id.clone(), redrive.clone());
        let this = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            this.drive(redrive).await
        });
        Ok(id)
    }

    /// The progress of redrive `id`.
    pub fn progress(&self, id: &str) -> Option<Progress> {
        let runs = self.runs.lock().expect("runs");
        runs.get(id)
            .map(|r| r.progress.lock().expect("progress").clone())
    }

    /// Whether redrive `id` is kept and `holds` its DLT and filter (who may see or steer it).
    pub fn held_by(&self, id: &str, holds: impl Fn(&str, &Filter) -> bool) -> bool {
        let runs = self.runs.lock().expect("runs");
        runs.get(id)
            .is_some_and(|r| holds(&r.request.dlq_topic, &r.request.filter))
    }

    /// Every redrive kept, the latest first.
    pub fn all(&self) -> Vec<Progress> {
        let runs = self.runs.lock().expect("runs");
        let mut all: Vec<Progress> = runs
            .values()
            .map(|r| r.progress.lock().expect("progress").clone())
            .collect();
        all.sort_by_key(|p| std::cmp::Reverse(p.started));
        all
    }

    /// Pauses, resumes or cancels redrive `id`.
    pub fn control(&self, id: &str, action: Control) -> Result<Progress, RedriveError> {
        let redrive = self
            .runs
            .lock()
            .expect("runs")
            .get(id)
            .cloned()
            .ok_or(RedriveError::Unknown)?;
        let state = redrive.progress.lock().expect("progress").state;
        match (state, action) {
            (State::Done, _) => return Err(RedriveError::Finished("done")),
            (State::Cancelled, _) => return Err(RedriveError::Finished("cancelled")),
            (State::Failed, _) => return Err(RedriveError::Finished("failed")),
            // What is wanted is set before the run is stopped: the driver reads it after it
            // stores each run's token, so a pause or cancel is never lost between two runs.
            (_, Control::Pause) => {
                *redrive.wanted.lock().expect("wanted") = Wanted::Pause;
                redrive.stop.lock().expect("stop").cancel();
            }
            (_, Control::Resume) => {
                *redrive.wanted.lock().expect("wanted") = Wanted::Run;
                redrive.wake.notify_one();
            }
            (_, Control::Cancel) => {
                *redrive.wanted.lock().expect("wanted") = Wanted::Cancel;
                redrive.stop.lock().expect("stop").cancel();
                redrive.wake.notify_one();
            }
        }
        let progress = redrive.progress.lock().expect("progress").clone();
        Ok(progress)
    }

    /// Stops every redrive (the console is shutting down) and waits, at most `within`, until
    /// each has finished its sends in flight and committed its position; a redrive still
    /// running then resends at most what was acknowledged since its last commit when run
    /// again.
    pub async fn stop_all(&self, within: std::time::Duration) {
        let all: Vec<Arc<Redrive>> = self.runs.lock().expect("runs").values().cloned().collect();
        for redrive in &all {
            *redrive.wanted.lock().expect("wanted") = Wanted::Cancel;
            redrive.stop.lock().expect("stop").cancel();
            redrive.wake.notify_one();
        }
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline
            && all
                .iter()
                .any(|r| r.progress.lock().expect("progress").ended.is_none())
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The replay a redrive of `r` runs.
    pub fn options(&self, r: &Request) -> ReplayOptions {
        ReplayOptions {
            destination: r.destination.clone(),
            filter: r.filter.clone(),
            dry_run: r.dry_run,
            rate_per_sec: r.rate,
            max_replays: self.config.max_replays,
            operator: r.operator.clone(),
            state: self.config.state.clone(),
            dlq_template: self.config.dlq_template.clone(),
            librdkafka: self.config.librdkafka.clone(),
            edit: r.edit.clone(),
            request: r.request.clone(),
            transform: r.transform.clone(),
            ..ReplayOptions::new(&self.config.brokers, &r.dlq_topic)
        }
    }

    async fn drive(&self, redrive: Arc<Redrive>) {
        let options = self.options(&redrive.request);
        let mut first = true;
        loop {
            let stop = CancellationToken::new();
            *redrive.stop.lock().expect("stop") = stop.clone();
            // Paused (asked before this run started, or after the last one stopped) until
            // resumed or cancelled.
            while *redrive.wanted.lock().expect("wanted") == Wanted::Pause {
                redrive.progress.lock().expect("progress").state = State::Paused;
                redrive.wake.notified().await;
            }
            if *redrive.wanted.lock().expect("wanted") == Wanted::Cancel {
                self.end(&redrive, State::Cancelled, None);
                return;
            }
            redrive.progress.lock().expect("progress").state = State::Running;
            let progress = &redrive.progress;
            let result = crate::replay::replay(
                &options,
                |_, total, outcome| {
                    let mut p = progress.lock().expect("progress");
                    if first {
                        p.total = total;
                        first = false;
                    }
                    count(&mut p, outcome);
                },
                &stop,
            )
            .await;
            self.watch.poke();
            match result {
                Err(e) => {
                    self.end(&redrive, State::Failed, Some(describe(&e)));
                    return;
                }
                Ok(report) => {
                    if report.transform.is_some() {
                        redrive.progress.lock().expect("progress").transform =
                            report.transform.clone();
                    }
                    if let Some(run) = report.run {
                        redrive.progress.lock().expect("progress").runs.push(run);
                    }
                    if let Some(audit) = report.audit_error {
                        redrive
                            .progress
                            .lock()
                            .expect("progress")
                            .problems
                            .push(audit);
                    }
                    if !report.interrupted {
                        self.end(&redrive, State::Done, None);
                        return;
                    }
                }
            }
            // Interrupted: paused or cancelled, which the loop's start tells.
        }
    }

    fn end(&self, redrive: &Redrive, state: State, error: Option<String>) {
        let mut p = redrive.progress.lock().expect("progress");
        p.state = state;
        p.ended = Some(Utc::now());
        if let Some(e) = error {
            p.problems.insert(0, e);
        }
        drop(p);
        self.watch.poke();
    }
}

/// What the operator asks of a redrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Stop after the sends in flight, keeping the position.
    Pause,
    /// Go on from the position.
    Resume,
    /// Stop for good.
    Cancel,
}

fn count(p: &mut Progress, outcome: &Outcome) {
    p.scanned += 1;
    let problem = match outcome {
        Outcome::Replayed { id, to } => {
            p.sent += 1;
            *p.destinations.entry(to.clone()).or_default() += 1;
            if p.dry_run && p.preview.len() < PREVIEW {
                p.preview.push(Planned {
                    id: id.clone(),
                    to: to.clone(),
                });
            }
            None
        }
        Outcome::FilteredOut => None,
        Outcome::Refused { id, replays } => {
            p.refused += 1;
            Some(format!(
                "{id}: refused by the loop guard, replayed {replays} times already"
            ))
        }
        Outcome::NotAnEnvelope { id } => {
            p.failed += 1;
            Some(format!("{id}: not an envelope, never replayed"))
        }
        Outcome::Undecodable { id, why } => {
            p.failed += 1;
            Some(format!("{id}: does not decode: {why}"))
        }
        Outcome::Lost { id, why } => {
            p.failed += 1;
            Some(format!("{id}: source record gone: {why}"))
        }
        Outcome::AlreadyResolved { id, by } => {
            p.already_resolved += 1;
            Some(format!("{id}: not sent again, {by}"))
        }
        Outcome::DestinationRefused { id, to, why } => {
            p.failed += 1;
            Some(format!("{id}: not sent to `{to}`: {why}"))
        }
        Outcome::Untransformable { id, why } => {
            p.failed += 1;
            Some(format!("{id}: not sent, the transformation failed: {why}"))
        }
    };
    if let Some(problem) = problem {
        if p.problems.len() < crate::replay::REPORT_SAMPLE {
            p.problems.push(problem);
        }
    }
}

fn describe(e: &ReplayError) -> String {
    crate::failure::error_chain(e)
}
