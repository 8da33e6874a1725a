//! The console's redrives: each a [`crate::replay::replay`] run, its progress kept for the
//! page, with pause (the run stops after the sends in flight; its position is committed),
//! resume (a run from that position, under the same filter) and cancel. One redrive per DLT
//! at a time; the replay lock keeps out `dlq replay` and other consoles.
//!
//! **Shared by the replicas.** A redrive (not a dry run, which stays on the replica that runs
//! it) lives in Kafka: its request and progress, and the control last asked for, are records
//! of the positions topic ([`super::redrive_record`]) that every replica follows
//! ([`Redrives::follow`]), so any replica shows it and any replica pauses, resumes or cancels
//! it. Exactly one replica runs it: the one holding the DLT's replay lock (a consumer-group
//! membership, [`crate::replay::ReplayLock`]), which writes the record once a second as its
//! lease's heartbeat. A replica that stops releases it (its sends finished, its position
//! committed, its record saying so) and another takes it within seconds; a replica that dies
//! loses the lock when its group session times out (10 s) and another takes the redrive over
//! once its record is [`super::redrive_record::LEASE`] old. Either way the next runner goes on
//! from the replay position in the positions topic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::redrive_record::{self, Asked, Shared, Step, Wanted};
pub use super::redrive_record::{Planned, Progress, Request, State, PREVIEW};
use super::ConsoleConfig;
use crate::dlq_reader::Filter;
use crate::outstanding::watch::Watch;
use crate::replay::{Destination, LockError, Outcome, ReplayError, ReplayLock, ReplayOptions};
use crate::state::PositionStore;

/// Redrives kept for the page at most; the oldest finished ones go first.
const KEPT: usize = 100;
/// How often a replica reads what the others wrote.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

struct Redrive {
    request: Request,
    progress: Mutex<Progress>,
    /// What was asked last.
    wanted: Mutex<Wanted>,
    /// While this replica runs it: stops the run.
    running: Mutex<Option<CancellationToken>>,
    /// This replica runs it and saw another replica's newer record: it stops without writing.
    lost: AtomicBool,
    /// When this replica tries to take it next.
    next_try: Mutex<Option<tokio::time::Instant>>,
    /// The latest control known, so that an older one read late changes nothing.
    asked: Mutex<Option<Asked>>,
}

impl Redrive {
    fn new(request: Request, progress: Progress, wanted: Wanted) -> Arc<Redrive> {
        Arc::new(Redrive {
            request,
            progress: Mutex::new(progress),
            wanted: Mutex::new(wanted),
            running: Mutex::new(None),
            lost: AtomicBool::new(false),
            next_try: Mutex::new(None),
            asked: Mutex::new(None),
        })
    }

    fn progress(&self) -> Progress {
        self.progress.lock().expect("progress").clone()
    }

    fn wanted(&self) -> Wanted {
        *self.wanted.lock().expect("wanted")
    }

    fn runs_here(&self) -> bool {
        self.running.lock().expect("running").is_some()
    }

    /// Stops its run on this replica, if it has one.
    fn interrupt(&self) {
        if let Some(stop) = self.running.lock().expect("running").as_ref() {
            stop.cancel();
        }
    }

    fn shared(&self) -> Shared {
        Shared {
            request: self.request.clone(),
            progress: self.progress(),
        }
    }
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
    /// A dry run has no pause or resume: 409.
    #[error("a dry run cannot be paused or resumed; cancel it")]
    DryRun,
    /// The control could not be written to Kafka, so other replicas would not learn it: 503.
    #[error("the control was not recorded in the positions topic, nothing changed: {0}")]
    Unrecorded(String),
}

/// Whether a replica has read the redrives in Kafka, as `/readyz` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Read on the last round: this replica answers for every redrive.
    Read,
    /// Not read yet (the console just started).
    Reading,
    /// The last read failed, for this reason.
    Unreadable(String),
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readiness::Read => write!(f, "the redrives were read from the positions topic"),
            Readiness::Reading => {
                write!(f, "the redrives are being read from the positions topic")
            }
            Readiness::Unreadable(e) => {
                write!(f, "cannot read the redrives from the positions topic: {e}")
            }
        }
    }
}

/// The redrives this replica knows: its dry runs, and every redrive the positions topic holds
/// (the latest [`KEPT`] finished ones, and all that are not).
pub struct Redrives {
    config: Arc<ConsoleConfig>,
    watch: Arc<Watch>,
    runs: Mutex<BTreeMap<String, Arc<Redrive>>>,
    /// This replica, as records name their runner: `host:pid`.
    me: String,
    /// Writes this replica's records.
    writer: tokio::sync::Mutex<PositionStore>,
    /// Whether the redrives were read from Kafka on the last round.
    read: Mutex<Readiness>,
    /// The console is stopping: a run interrupted releases its redrive.
    stopping: AtomicBool,
    /// Wakes the follower for a read now.
    wake: tokio::sync::Notify,
    /// Reads of the positions topic the follower finished.
    rounds: tokio::sync::watch::Sender<u64>,
}

impl Redrives {
    /// None yet; call [`Redrives::follow`] to learn those in Kafka.
    pub fn new(config: Arc<ConsoleConfig>, watch: Arc<Watch>) -> Arc<Redrives> {
        let writer = PositionStore::new(&config.brokers, &config.librdkafka, &config.state);
        Arc::new(Redrives {
            config,
            watch,
            runs: Mutex::new(BTreeMap::new()),
            me: format!(
                "{}:{}",
                crate::state::audit::host_name(),
                std::process::id()
            ),
            writer: tokio::sync::Mutex::new(writer),
            read: Mutex::new(Readiness::Reading),
            stopping: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            rounds: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Makes sure redrive `id` is known here if Kafka holds it: when it is not, waits (at most
    /// 5 s) for a read of the positions topic that starts now. So a redrive started, or
    /// moved, on another replica is answered for at once on this one.
    pub async fn learn_of(&self, id: &str) {
        if self.runs.lock().expect("runs").contains_key(id) {
            return;
        }
        let mut rounds = self.rounds.subscribe();
        let now = *rounds.borrow_and_update();
        self.wake.notify_one();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            rounds.wait_for(|r| *r >= now + 2),
        )
        .await;
    }

    /// Whether the redrives in Kafka were read on the last round (`/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.read.lock().expect("read").clone()
    }

    /// Starts `request` in a task, which holds `permit` (a dry run's read of the cluster,
    /// [`crate::console::limits`]) until it ends; its id. A redrive's record is written to
    /// Kafka before this returns (every replica answers for it from then on); then this
    /// replica tries to run it.
    pub async fn start(
        self: &Arc<Self>,
        request: Request,
        permit: Option<crate::console::limits::Permit>,
    ) -> Result<String, RedriveError> {
        let (id, redrive) = {
            let mut runs = self.runs.lock().expect("runs");
            if !request.dry_run {
                if let Some((id, _)) = runs.iter().find(|(_, r)| {
                    !r.request.dry_run
                        && r.request.dlq_topic == request.dlq_topic
                        && matches!(r.progress().state, State::Running | State::Paused)
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
            let progress = Progress::new(&id, &request, started);
            let redrive = Redrive::new(request, progress, Wanted::Run);
            runs.insert(id.clone(), redrive.clone());
            trim(&mut runs);
            (id, redrive)
        };
        if !redrive.request.dry_run {
            self.write(&redrive).await;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match redrive.request.dry_run {
                true => this.dry_run(redrive).await,
                false => this.run(redrive).await,
            }
        });
        Ok(id)
    }

    /// The progress of redrive `id`.
    pub fn progress(&self, id: &str) -> Option<Progress> {
        let runs = self.runs.lock().expect("runs");
        runs.get(id).map(|r| r.progress())
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
        let mut all: Vec<Progress> = runs.values().map(|r| r.progress()).collect();
        all.sort_by_key(|p| std::cmp::Reverse(p.started));
        all
    }

    /// Pauses, resumes or cancels redrive `id`, as `by` asks: written to Kafka (every replica
    /// acts on it from there), then carried out here when this replica runs the redrive, or
    /// no replica does. A resumed redrive is tried here first.
    pub async fn control(
        self: &Arc<Self>,
        id: &str,
        action: Control,
        by: &str,
    ) -> Result<Progress, RedriveError> {
        let redrive = self
            .runs
            .lock()
            .expect("runs")
            .get(id)
            .cloned()
            .ok_or(RedriveError::Unknown)?;
        let p = redrive.progress();
        match p.state {
            State::Done => return Err(RedriveError::Finished("done")),
            State::Cancelled => return Err(RedriveError::Finished("cancelled")),
            State::Failed => return Err(RedriveError::Finished("failed")),
            State::Running | State::Paused => {}
        }
        let wanted = match action {
            Control::Pause => Wanted::Pause,
            Control::Resume => Wanted::Run,
            Control::Cancel => Wanted::Cancel,
        };
        if p.dry_run {
            if wanted != Wanted::Cancel {
                return Err(RedriveError::DryRun);
            }
            *redrive.wanted.lock().expect("wanted") = wanted;
            redrive.interrupt();
            return Ok(redrive.progress());
        }
        let asked = Asked {
            wanted,
            by: by.to_string(),
            at: Utc::now(),
        };
        let value = serde_json::to_vec(&asked).expect("a control serialises");
        self.writer
            .lock()
            .await
            .share(&redrive_record::asked_name(id), Some(&value))
            .await
            .map_err(|e| RedriveError::Unrecorded(e.to_string()))?;
        redrive.ask(asked);
        if redrive.runs_here() {
            if wanted != Wanted::Run {
                redrive.interrupt();
            }
        } else if wanted == Wanted::Run && p.state == State::Paused {
            let this = self.clone();
            let r = redrive.clone();
            tokio::spawn(async move { this.run(r).await });
        } else if let Step::Settle(state) = redrive_record::step(&p, wanted, Utc::now()) {
            self.settle(&redrive, state).await;
        }
        Ok(redrive.progress())
    }

    /// Stops every run on this replica (the console is shutting down) and waits, at most
    /// `within`, until each has finished its sends in flight, committed its position and
    /// released its redrive for another replica; a run still going then resends at most what
    /// was acknowledged since its last commit when it goes on elsewhere.
    pub async fn stop_all(&self, within: std::time::Duration) {
        self.stopping.store(true, Ordering::Release);
        let all: Vec<Arc<Redrive>> = self.runs.lock().expect("runs").values().cloned().collect();
        for redrive in &all {
            redrive.interrupt();
        }
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline && all.iter().any(|r| r.runs_here()) {
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

    /// Follows the redrives in Kafka until `shutdown`: twice a second, reads what the other
    /// replicas wrote, stops a run here that was asked to stop, settles a stop no runner
    /// carries out, and takes over a redrive whose runner released it or went silent.
    pub async fn follow(self: Arc<Self>, shutdown: CancellationToken) {
        let mut store = PositionStore::new(
            &self.config.brokers,
            &self.config.librdkafka,
            &self.config.state,
        );
        let mut learnt = None;
        loop {
            let read = store.catch_up().await;
            if read.is_ok() {
                let served = self.served();
                let now = (store.table().shared_changes(), served);
                if learnt.as_ref() != Some(&now) {
                    let served = &now.1;
                    for name in self.learn(store.table(), served) {
                        if let Err(e) = store.share(&name, None).await {
                            tracing::warn!(event = "redrive_record_not_pruned", %name, error = %e);
                        }
                    }
                    learnt = Some(now);
                }
            }
            let readiness = match read {
                Ok(_) => Readiness::Read,
                Err(e) => {
                    tracing::warn!(event = "redrives_unread", error = %e,
                        "cannot read the redrives from the positions topic");
                    Readiness::Unreadable(e.to_string())
                }
            };
            *self.read.lock().expect("read") = readiness;
            self.rounds.send_modify(|r| *r += 1);
            self.act().await;
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            }
        }
    }

    /// The DLTs this console serves: another console on the same cluster (another team's,
    /// with its own grants and destinations) keeps to its own.
    fn served(&self) -> Vec<String> {
        match self.config.dlq_topics.is_empty() {
            false => self.config.dlq_topics.clone(),
            true => self.watch.topics(),
        }
    }

    /// Takes in the redrive records of `table` of the DLTs `served`; the names of the records
    /// of ended redrives past the [`KEPT`] latest, which Kafka need keep no longer.
    fn learn(&self, table: &crate::state::PositionTable, served: &[String]) -> Vec<String> {
        let mut shared: BTreeMap<&str, Shared> = BTreeMap::new();
        let mut asked: BTreeMap<&str, Asked> = BTreeMap::new();
        for (name, value) in table.shared(redrive_record::PREFIX) {
            let parsed = redrive_record::parse_name(name);
            let ok = match parsed {
                Some((id, true)) => serde_json::from_slice(value).map(|a| {
                    asked.insert(id, a);
                }),
                Some((id, false)) => serde_json::from_slice(value).map(|s| {
                    shared.insert(id, s);
                }),
                None => Ok(()),
            };
            if let Err(e) = ok {
                tracing::warn!(event = "redrive_record_unreadable", %name, error = %e);
            }
        }
        shared.retain(|_, record| served.contains(&record.request.dlq_topic));
        let pruned = redrive_record::past_kept(&shared, &asked, KEPT);
        let mut runs = self.runs.lock().expect("runs");
        for (id, record) in shared {
            let asked = asked.remove(id);
            let wanted = asked.as_ref().map_or(Wanted::Run, |a| a.wanted);
            let Some(redrive) = runs.get(id) else {
                if !record.request.dry_run {
                    let redrive = Redrive::new(record.request, record.progress, wanted);
                    if let Some(a) = asked {
                        redrive.ask(a);
                    }
                    runs.insert(id.to_string(), redrive);
                }
                continue;
            };
            if let Some(a) = asked {
                redrive.ask(a);
            }
            let mut p = redrive.progress.lock().expect("progress");
            if record.progress.updated <= p.updated {
                continue;
            }
            if redrive.runs_here() {
                // Another replica holds it now (this one lost its lock without noticing):
                // stop, writing nothing more.
                if record
                    .progress
                    .runner
                    .as_ref()
                    .is_some_and(|r| *r != self.me)
                {
                    drop(p);
                    redrive.lost.store(true, Ordering::Release);
                    redrive.interrupt();
                }
            } else {
                *p = record.progress;
            }
        }
        trim(&mut runs);
        pruned
    }

    /// What this replica does about the redrives it does not run.
    async fn act(self: &Arc<Self>) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let all: Vec<Arc<Redrive>> = self.runs.lock().expect("runs").values().cloned().collect();
        for redrive in all {
            if redrive.runs_here() || redrive.request.dry_run {
                continue;
            }
            let step = redrive_record::step(&redrive.progress(), redrive.wanted(), Utc::now());
            if step != Step::TakeOver {
                *redrive.next_try.lock().expect("next try") = None;
            }
            match step {
                Step::Wait => {}
                Step::Settle(state) => self.settle(&redrive, state).await,
                Step::TakeOver => {
                    // At a random moment: replicas that saw the release together and try at
                    // once all find the lock taken (each sees the others as members), so
                    // each tries, and tries again, a random while apart.
                    let now = tokio::time::Instant::now();
                    let apart = |least: u64| {
                        std::time::Duration::from_millis(least + fastrand::u64(..3_000))
                    };
                    let due = {
                        let mut next = redrive.next_try.lock().expect("next try");
                        match *next {
                            None => {
                                *next = Some(now + apart(0));
                                false
                            }
                            Some(at) if now >= at => {
                                *next = Some(now + apart(2_000));
                                true
                            }
                            Some(_) => false,
                        }
                    };
                    if due {
                        let this = self.clone();
                        tokio::spawn(async move { this.run(redrive).await });
                    }
                }
            }
        }
    }

    /// Runs `redrive` here if this replica takes the DLT's replay lock, until it ends, is
    /// paused or cancelled, or this replica stops (which releases it for another).
    async fn run(self: Arc<Self>, redrive: Arc<Redrive>) {
        let stop = CancellationToken::new();
        {
            let mut running = redrive.running.lock().expect("running");
            if running.is_some() {
                return;
            }
            *running = Some(stop.clone());
        }
        redrive.lost.store(false, Ordering::Release);
        self.run_once(&redrive, &stop).await;
        *redrive.running.lock().expect("running") = None;
        self.watch.poke();
    }

    async fn run_once(self: &Arc<Self>, redrive: &Arc<Redrive>, stop: &CancellationToken) {
        let (brokers, raw, topic) = (
            self.config.brokers.clone(),
            self.config.librdkafka.clone(),
            redrive.request.dlq_topic.clone(),
        );
        let taken = tokio::task::spawn_blocking(move || ReplayLock::take(&brokers, &raw, &topic))
            .await
            .expect("lock task");
        let lock = match taken {
            Ok(lock) => lock,
            Err(e) => {
                // Another replay holds the DLT (`dlq replay`, or a runner whose session has not
                // timed out yet): tried again in a few seconds, by any replica.
                let why = match &e {
                    LockError::Held { .. } => format!("waiting for the replay lock: {e}"),
                    _ => e.to_string(),
                };
                // Kept here only: written, it could overwrite the record of the replica
                // that holds the lock.
                redrive.progress.lock().expect("progress").waiting = Some(why);
                return;
            }
        };
        let wanted = redrive.wanted();
        if wanted != Wanted::Run {
            let state = match wanted {
                Wanted::Pause => State::Paused,
                _ => State::Cancelled,
            };
            self.settle(redrive, state).await;
            return;
        }
        // A record another replica wrote goes only where this console may send (checked with
        // the lock held, so that a replica of other settings never ends a redrive another
        // runs).
        if let Destination::Topic(to) = &redrive.request.destination {
            let allowed = &self.config.redrive_topics;
            if !allowed.is_empty() && !allowed.contains(to) {
                let why = format!("destination topic `{to}`: not one of the topics this console may redrive to (redrive_topics: {})", allowed.join(", "));
                self.end(redrive, State::Failed, Some(why)).await;
                return;
            }
        }
        {
            let mut p = redrive.progress.lock().expect("progress");
            p.state = State::Running;
            p.runner = Some(self.me.clone());
            p.waiting = None;
            tracing::info!(event = "redrive_taken", id = %p.id, runner = %self.me,
                scanned = p.scanned, sent = p.sent, "this replica runs the redrive");
        }
        self.write(redrive).await;
        let beat = CancellationToken::new();
        let heart = {
            let (this, redrive, beat) = (self.clone(), redrive.clone(), beat.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = beat.cancelled() => return,
                        _ = tokio::time::sleep(redrive_record::HEARTBEAT) => {}
                    }
                    this.write(&redrive).await;
                }
            })
        };
        let options = self.options(&redrive.request);
        let result = crate::replay::replay_holding(
            &options,
            &lock,
            counter(redrive, self.watch.parked()),
            stop,
        )
        .await;
        beat.cancel();
        let _ = heart.await;
        self.watch.poke();
        if redrive.lost.load(Ordering::Acquire) {
            tracing::warn!(event = "redrive_lost", id = %redrive.progress().id,
                "another replica runs this redrive now; this one stopped");
            return;
        }
        let report = match result {
            Err(e) => {
                self.end(redrive, State::Failed, Some(describe(&e))).await;
                return;
            }
            Ok(report) => report,
        };
        {
            let mut p = redrive.progress.lock().expect("progress");
            if report.transform.is_some() {
                p.transform = report.transform.clone();
            }
            if let Some(run) = &report.run {
                p.runs.push(run.clone());
            }
            if let Some(audit) = &report.audit_error {
                p.problems.push(audit.clone());
            }
        }
        if !report.interrupted {
            self.end(redrive, State::Done, None).await;
            return;
        }
        match redrive.wanted() {
            Wanted::Pause => self.settle(redrive, State::Paused).await,
            Wanted::Cancel => self.settle(redrive, State::Cancelled).await,
            // This replica stops: another goes on from the position just committed. Written
            // while the lock is held, so that the next runner's record comes after it.
            Wanted::Run => {
                {
                    let mut p = redrive.progress.lock().expect("progress");
                    p.runner = None;
                    p.waiting = Some(format!("released by {} as it stopped", self.me));
                }
                self.write(redrive).await;
            }
        }
        drop(lock);
    }

    /// A dry run: on this replica only; cancelled, not paused.
    async fn dry_run(&self, redrive: Arc<Redrive>) {
        let stop = CancellationToken::new();
        *redrive.running.lock().expect("running") = Some(stop.clone());
        let options = self.options(&redrive.request);
        let result =
            crate::replay::replay(&options, counter(&redrive, self.watch.parked()), &stop).await;
        *redrive.running.lock().expect("running") = None;
        let (state, error) = match result {
            Err(e) => (State::Failed, Some(describe(&e))),
            Ok(report) if report.interrupted => (State::Cancelled, None),
            Ok(_) => (State::Done, None),
        };
        let mut p = redrive.progress.lock().expect("progress");
        p.state = state;
        p.ended = Some(Utc::now());
        if let Some(e) = error {
            p.problems.insert(0, e);
        }
        drop(p);
        self.watch.poke();
    }

    /// Writes `redrive` as paused or cancelled: no replica runs it.
    async fn settle(&self, redrive: &Redrive, state: State) {
        match state {
            State::Paused => {
                let mut p = redrive.progress.lock().expect("progress");
                p.state = State::Paused;
                p.runner = None;
                p.waiting = None;
            }
            _ => return self.end(redrive, state, None).await,
        }
        self.write(redrive).await;
        self.watch.poke();
    }

    async fn end(&self, redrive: &Redrive, state: State, error: Option<String>) {
        {
            let mut p = redrive.progress.lock().expect("progress");
            p.state = state;
            p.ended = Some(Utc::now());
            p.runner = None;
            p.waiting = None;
            if let Some(e) = error {
                p.problems.insert(0, e);
            }
        }
        self.write(redrive).await;
        self.watch.poke();
    }

    /// Writes `redrive`'s record, stamped now; a failure is logged (the next write, a second
    /// later while it runs, tries again).
    async fn write(&self, redrive: &Redrive) {
        redrive.progress.lock().expect("progress").updated = Utc::now();
        let shared = redrive.shared();
        if shared.progress.runner.is_none() {
            tracing::info!(event = "redrive_written", id = %shared.progress.id,
                state = ?shared.progress.state, scanned = shared.progress.scanned,
                sent = shared.progress.sent, waiting = ?shared.progress.waiting);
        }
        let value = serde_json::to_vec(&shared).expect("a redrive record serialises");
        let name = redrive_record::shared_name(&shared.progress.id);
        let written = self.writer.lock().await.share(&name, Some(&value)).await;
        if let Err(e) = written {
            tracing::warn!(event = "redrive_record_not_written", id = %shared.progress.id,
                error = %e, "other replicas do not see this redrive's latest progress");
        }
    }
}

impl Redrive {
    /// Takes `asked` as what is wanted, unless a later control is known.
    fn ask(&self, asked: Asked) {
        let mut last = self.asked.lock().expect("asked");
        if last.as_ref().is_some_and(|l| l.at >= asked.at) {
            return;
        }
        *self.wanted.lock().expect("wanted") = asked.wanted;
        let stops = asked.wanted != Wanted::Run;
        *last = Some(asked);
        drop(last);
        if stops {
            self.interrupt();
        }
    }
}

/// Keeps every redrive that has not ended, and the [`KEPT`] latest that have.
fn trim(runs: &mut BTreeMap<String, Arc<Redrive>>) {
    let mut ended: Vec<(DateTime<Utc>, String)> = runs
        .iter()
        .filter_map(|(id, r)| {
            let p = r.progress();
            p.ended.map(|_| (p.started, id.clone()))
        })
        .collect();
    if ended.len() <= KEPT {
        return;
    }
    ended.sort();
    for (_, id) in &ended[..ended.len() - KEPT] {
        runs.remove(id);
    }
}

/// The progress callback of a run of `redrive`: counts each outcome into its progress.
/// `parked`: the heads parked as the run starts, that a dead letter sent resolves.
fn counter(
    redrive: &Redrive,
    parked: Arc<crate::outstanding::parked::Heads>,
) -> impl FnMut(u64, u64, &Outcome) + '_ {
    let mut first = redrive.progress().runs.is_empty() && redrive.progress().scanned == 0;
    let mut counted = std::collections::HashSet::new();
    move |_, total, outcome| {
        let mut p = redrive.progress.lock().expect("progress");
        if first {
            p.total = total;
            first = false;
        }
        count(&mut p, outcome);
        if let Outcome::Replayed { id, .. } = outcome {
            // A record dead-lettered twice is one head.
            if let Some(head) = parked.by_id(id).filter(|_| counted.insert(id.clone())) {
                p.parked.add(head);
            }
        }
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
