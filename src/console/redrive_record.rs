//! A redrive as every console replica sees it: what it asks ([`Request`]) and how far it got
//! ([`Progress`]), the records it keeps on the positions topic (shared records,
//! [`crate::state::SHARED_PREFIX`]), and what a replica that does not run it should do about
//! it ([`step`]). Pure: no I/O.
//!
//! Two records per redrive, each written by one side only, so that neither overwrites the
//! other's: `redrive/<id>` ([`Shared`]: the request and its progress, written by the replica
//! running it, once a second while it runs) and `redrive/<id>/wanted` ([`Asked`]: the control
//! last asked for, written by the replica that was asked). The positions topic is compacted:
//! Kafka keeps the latest of each for ever.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::dlq_reader::Filter;
use crate::replay::audit::Edit;
use crate::replay::Destination;

/// A runner writes its redrive's record this often while it runs: its lease's heartbeat.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// A running redrive whose record is older than this is taken to have lost its runner (the
/// replica died): another replica takes it over. Longer than the replay lock's session
/// timeout (10 s), after which Kafka has dropped a dead runner's lock.
pub const LEASE: Duration = Duration::seconds(15);

/// A redrive released by its runner (paused and resumed, its replica stopping, or waiting for
/// the replay lock) is taken by another replica after this long: the replica that was asked
/// to resume it, or started it, tries first.
pub const RELEASED: Duration = Duration::seconds(3);

/// What starts the shared records of redrives.
pub const PREFIX: &str = "redrive/";

/// What a dry run lists at most.
pub const PREVIEW: usize = 200;

/// What to redrive and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

impl Request {
    /// A redrive of everything on `dlq_topic` to each dead letter's group.
    #[cfg(test)]
    pub(crate) fn for_tests(dlq_topic: &str) -> Request {
        Request {
            dlq_topic: dlq_topic.to_string(),
            filter: Filter::default(),
            destination: Destination::Group,
            rate: None,
            dry_run: false,
            edit: None,
            operator: "console:alice".into(),
            request: None,
            transform: None,
        }
    }
}

/// Where a redrive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Sending, or about to (`runner` says where; none while it waits for a replica to take
    /// it).
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    /// The record id.
    pub id: String,
    /// The topic it would go to.
    pub to: String,
}

/// A redrive's progress, as `GET /api/redrives/{id}` answers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The console replica running it now (`host:pid`); none while paused, ended, or waiting
    /// for a replica to take it.
    #[serde(default)]
    pub runner: Option<String>,
    /// When its record was last written: every second while it runs.
    pub updated: DateTime<Utc>,
    /// Why no replica runs it right now, while it should (another replay holds the DLT's
    /// lock, its runner stopped or went silent).
    #[serde(default)]
    pub waiting: Option<String>,
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
    /// The parked keys whose heads it sent (a dry run: would send), and the records waiting
    /// behind them, as the park logs said when each was sent: released in order once its
    /// head is handled (`key_order_after_failure = "park"`).
    #[serde(default)]
    pub parked: crate::outstanding::parked::Parked,
    /// A dry run: the first [`PREVIEW`] dead letters it would send, and where.
    pub preview: Vec<Planned>,
    /// The audit run ids of its runs (a pause and a resume make two, and so does a move to
    /// another replica).
    pub runs: Vec<String>,
    /// With a bulk transformation: what it did in the last run (changed, unchanged, failed,
    /// and the digests of the payloads before and after).
    pub transform: Option<crate::replay::transform::TransformSummary>,
}

impl Progress {
    /// The progress of redrive `id` of `request`, started at `started`, before it read
    /// anything.
    pub fn new(id: &str, request: &Request, started: DateTime<Utc>) -> Progress {
        let destination = match &request.destination {
            Destination::Group => "group".to_string(),
            Destination::Source => "source".to_string(),
            Destination::Topic(t) => t.clone(),
        };
        Progress {
            id: id.to_string(),
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
            runner: None,
            updated: started,
            waiting: None,
            total: 0,
            scanned: 0,
            sent: 0,
            refused: 0,
            already_resolved: 0,
            failed: 0,
            problems: Vec::new(),
            destinations: BTreeMap::new(),
            parked: Default::default(),
            preview: Vec::new(),
            transform: None,
            runs: Vec::new(),
        }
    }
}

/// A redrive's record: what it does and how far it got.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shared {
    /// What it does.
    pub request: Request,
    /// Where it is.
    pub progress: Progress,
}

/// What an operator last asked of a redrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wanted {
    /// Run to the end.
    Run,
    /// Stop after the sends in flight, keeping the position.
    Pause,
    /// Stop for good.
    Cancel,
}

/// The control record: what was asked, by whom, when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Asked {
    /// What.
    pub wanted: Wanted,
    /// Who (`console:<name>`).
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// The name of redrive `id`'s record.
pub fn shared_name(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// The name of redrive `id`'s control record.
pub fn asked_name(id: &str) -> String {
    format!("{PREFIX}{id}/wanted")
}

/// Which record a shared record's name is: the redrive's id, and whether it is the control.
pub fn parse_name(name: &str) -> Option<(&str, bool)> {
    let rest = name.strip_prefix(PREFIX)?;
    match rest.strip_suffix("/wanted") {
        Some(id) if !id.is_empty() && !id.contains('/') => Some((id, true)),
        Some(_) => None,
        None if !rest.is_empty() && !rest.contains('/') => Some((rest, false)),
        None => None,
    }
}

/// The names of the records of the ended redrives among `shared` (by id; `asked` holds their
/// controls) past the `kept` latest started: Kafka need keep them no longer.
pub fn past_kept(
    shared: &BTreeMap<&str, Shared>,
    asked: &BTreeMap<&str, Asked>,
    kept: usize,
) -> Vec<String> {
    let mut ended: Vec<(DateTime<Utc>, &str)> = shared
        .iter()
        .filter(|(_, r)| r.progress.ended.is_some())
        .map(|(id, r)| (r.progress.started, *id))
        .collect();
    ended.sort();
    ended[..ended.len().saturating_sub(kept)]
        .iter()
        .flat_map(|(_, id)| {
            let control = asked.contains_key(id).then(|| asked_name(id));
            std::iter::once(shared_name(id)).chain(control)
        })
        .collect()
}

/// What a replica that does not run a redrive does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing: it runs elsewhere, or is over.
    Wait,
    /// Try to run it (take the replay lock; another replica holding it means wait).
    TakeOver,
    /// Write it as paused or cancelled: it was asked to stop, and no one runs it.
    Settle(State),
}

/// What a replica that does not run the redrive whose progress is `p` and of which `wanted` was
/// asked last does about it at `now`.
pub fn step(p: &Progress, wanted: Wanted, now: DateTime<Utc>) -> Step {
    if p.ended.is_some() || p.dry_run {
        return Step::Wait;
    }
    let age = now - p.updated;
    let held = match &p.runner {
        Some(_) => age < LEASE,
        None => age < RELEASED,
    };
    match (wanted, p.state) {
        (Wanted::Run, State::Running | State::Paused) if !held => Step::TakeOver,
        (Wanted::Pause, State::Running) if !held || p.runner.is_none() => {
            Step::Settle(State::Paused)
        }
        (Wanted::Cancel, State::Paused) => Step::Settle(State::Cancelled),
        (Wanted::Cancel, State::Running) if !held || p.runner.is_none() => {
            Step::Settle(State::Cancelled)
        }
        _ => Step::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(state: State, runner: Option<&str>, age_secs: i64) -> Progress {
        let mut p = Progress::new(
            "r1",
            &Request::for_tests("orders-dlt"),
            Utc::now() - Duration::seconds(60),
        );
        p.state = state;
        p.runner = runner.map(String::from);
        p.updated = Utc::now() - Duration::seconds(age_secs);
        p
    }

    #[test]
    fn a_redrive_whose_runner_beats_is_left_to_it() {
        let p = progress(State::Running, Some("a:1"), 1);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::Wait);
        assert_eq!(step(&p, Wanted::Pause, Utc::now()), Step::Wait);
        assert_eq!(step(&p, Wanted::Cancel, Utc::now()), Step::Wait);
    }

    #[test]
    fn a_redrive_whose_runner_went_silent_is_taken_over_after_the_lease() {
        let p = progress(State::Running, Some("a:1"), 14);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::Wait);
        let p = progress(State::Running, Some("a:1"), 16);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::TakeOver);
    }

    #[test]
    fn a_released_or_resumed_redrive_is_taken_after_a_short_wait() {
        let p = progress(State::Running, None, 1);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::Wait);
        let p = progress(State::Running, None, 4);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::TakeOver);
        let p = progress(State::Paused, None, 4);
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::TakeOver);
    }

    #[test]
    fn a_stop_no_runner_carries_out_is_settled_by_any_replica() {
        let released = progress(State::Running, None, 0);
        assert_eq!(
            step(&released, Wanted::Pause, Utc::now()),
            Step::Settle(State::Paused)
        );
        let dead = progress(State::Running, Some("a:1"), 20);
        assert_eq!(
            step(&dead, Wanted::Cancel, Utc::now()),
            Step::Settle(State::Cancelled)
        );
        let paused = progress(State::Paused, None, 0);
        assert_eq!(
            step(&paused, Wanted::Cancel, Utc::now()),
            Step::Settle(State::Cancelled)
        );
        assert_eq!(step(&paused, Wanted::Pause, Utc::now()), Step::Wait);
    }

    #[test]
    fn an_ended_redrive_or_a_dry_run_is_never_taken() {
        let mut p = progress(State::Done, None, 100);
        p.ended = Some(Utc::now());
        assert_eq!(step(&p, Wanted::Run, Utc::now()), Step::Wait);
        let mut dry = progress(State::Running, None, 100);
        dry.dry_run = true;
        assert_eq!(step(&dry, Wanted::Run, Utc::now()), Step::Wait);
    }

    #[test]
    fn only_ended_redrives_past_the_latest_kept_are_pruned() {
        let record = |started: i64, ended: bool| {
            let mut p = progress(State::Running, None, 0);
            p.started = Utc::now() - Duration::seconds(started);
            if ended {
                p.state = State::Done;
                p.ended = Some(Utc::now());
            }
            Shared {
                request: Request::for_tests("orders-dlt"),
                progress: p,
            }
        };
        let shared = BTreeMap::from([
            ("oldest", record(40, true)),
            ("old", record(30, true)),
            ("running", record(50, false)),
            ("new", record(10, true)),
        ]);
        let asked = BTreeMap::from([(
            "oldest",
            Asked {
                wanted: Wanted::Pause,
                by: "console:alice".into(),
                at: Utc::now(),
            },
        )]);
        assert_eq!(
            past_kept(&shared, &asked, 1),
            ["redrive/oldest", "redrive/oldest/wanted", "redrive/old"]
        );
        assert!(past_kept(&shared, &asked, 3).is_empty());
    }

    #[test]
    fn names_parse_back_to_their_redrive() {
        assert_eq!(
            parse_name(&shared_name("20261205T1-ab")),
            Some(("20261205T1-ab", false))
        );
        assert_eq!(
            parse_name(&asked_name("20261205T1-ab")),
            Some(("20261205T1-ab", true))
        );
        for bad in [
            "redrive/",
            "redrive//wanted",
            "redrive/a/b",
            "other/a",
            "redrive/a/b/wanted",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
