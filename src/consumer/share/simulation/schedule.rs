//! One schedule of the share simulation: drawn from its seed, run on a paused clock, checked
//! at the end (see the module docs of `simulation`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::broker::{PartitionRef, SimClient, State, TOPIC};
use super::handler::{Answer, Pace, Plan, SimDeadLetters, SimHandler};
use crate::backoff::ExponentialBackoff;
use crate::breaker::{Breaker, BreakerPolicy};
use crate::config::ShareDlq;
use crate::consumer::settle::Caller;
use crate::consumer::share::delivery::Member;
use crate::consumer::share::member;
use crate::metrics::Metrics;

/// What the schedules did, summed.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub schedules: u64,
    pub records: u64,
    pub handled: u64,
    pub dead_letters: u64,
    /// Records handled more than once (after a kill, or a call the shutdown deadline cut).
    pub duplicates: u64,
    pub kills: u64,
    pub archived: u64,
}

impl crate::consumer::simulation::Summary for Report {
    fn handled_nothing(&self) -> bool {
        self.handled == 0 && self.schedules > 0
    }

    fn add(&mut self, other: &Report) {
        self.schedules += other.schedules;
        self.records += other.records;
        self.handled += other.handled;
        self.dead_letters += other.dead_letters;
        self.duplicates += other.duplicates;
        self.kills += other.kills;
        self.archived += other.archived;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} schedules, {} records: {} handled, {} dead-lettered, {} archived by the broker, {} handled twice or more, {} members killed",
            self.schedules, self.records, self.handled, self.dead_letters, self.archived,
            self.duplicates, self.kills
        )
    }
}

/// A member running in the schedule.
struct Running {
    index: usize,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// What every member of the schedule is given.
struct Setup {
    partition: PartitionRef,
    plans: Arc<Vec<Plan>>,
    share_dlq: ShareDlq,
    known_limit: Option<u16>,
    max_retries: u32,
    breaker: bool,
    shutdown_timeout: Duration,
}

impl Setup {
    /// Starts member `index`, acquiring up to `size.acquire` records per fetch and handling
    /// `size.in_flight` of them at once.
    fn start(&self, index: usize, size: Size) -> Running {
        let breaker = Arc::new(Breaker::new(self.breaker.then(|| BreakerPolicy {
            window: Duration::from_secs(5),
            min_calls: 4,
            failure_ratio: 0.5,
            probe_initial: Duration::from_millis(500),
            probe_max: Duration::from_secs(2),
        })));
        let stop = CancellationToken::new();
        let client = Arc::new(SimClient {
            partition: self.partition.clone(),
            member: index,
            max: size.acquire,
            breaker: breaker.clone(),
            stop: stop.clone(),
            outstanding: Default::default(),
        });
        let metrics = Metrics::new();
        let member = Arc::new(Member {
            caller: Caller {
                handler: SimHandler {
                    partition: self.partition.clone(),
                    plans: self.plans.clone(),
                    member: index,
                },
                breaker,
                backoff: ExponentialBackoff::new(
                    Duration::from_millis(100),
                    2.0,
                    Duration::from_secs(1),
                    0.0,
                    Some(self.max_retries),
                )
                .expect("valid backoff"),
                metrics: metrics.clone(),
                spans: None,
                while_open: "no more records are acquired",
            },
            exits: Arc::new(SimDeadLetters {
                partition: self.partition.clone(),
                plans: self.plans.clone(),
                share_dlq: self.share_dlq,
                known_limit: self.known_limit,
            }),
            metrics,
            share_dlq: self.share_dlq,
            delivery_limit: crate::consumer::share::delivery_limit::DeliveryLimit::fixed(
                self.known_limit,
            ),
            in_flight: tokio::sync::Semaphore::new(size.in_flight),
            sources: vec![TOPIC.to_string()],
            group: "workers".to_string(),
        });
        let task = tokio::spawn(member::run(
            member,
            client,
            stop.clone(),
            self.shutdown_timeout,
        ));
        Running { index, stop, task }
    }
}

/// A member's fetch size and concurrency.
#[derive(Debug, Clone, Copy)]
struct Size {
    acquire: usize,
    in_flight: usize,
}

impl Size {
    /// Drawn as members are configured: often a batch handled one record at a time (the
    /// others waiting, their locks renewed), sometimes all at once.
    fn draw(rng: &mut fastrand::Rng) -> Size {
        let in_flight = rng.usize(1..=4);
        let acquire = match rng.u8(0..3) {
            0 => in_flight,
            _ => rng.usize(in_flight..=16),
        };
        Size { acquire, in_flight }
    }
}

/// A record's plan. With the breaker on, a record failing transiently on every call would
/// keep it open for good (its own probes fail: nothing tells it from an outage), so it
/// fails for many calls, more than a delivery's retries, then works.
fn plan(rng: &mut fastrand::Rng, breaker: bool) -> Plan {
    let pace = match rng.u8(0..10) {
        0..=3 => Pace::Immediate,
        4..=5 => Pace::Yield,
        6..=8 => Pace::Sleep(Duration::from_millis(rng.u64(1..300))),
        // Past the 3 s lock: renewed while it runs.
        _ => Pace::Sleep(Duration::from_millis(rng.u64(3_500..9_000))),
    };
    let answer = match rng.u8(0..20) {
        0..=9 => Answer::Ok,
        10..=13 => Answer::Transient(rng.u32(1..=6)),
        14..=15 if breaker => Answer::Transient(rng.u32(7..=40)),
        14..=15 => Answer::AlwaysTransient,
        16..=18 => Answer::Permanent,
        _ => Answer::Panic,
    };
    let dead_letter_after = match rng.u8(0..10) {
        0..=6 => Duration::ZERO,
        7..=8 => Duration::from_millis(rng.u64(1..500)),
        // A dead-letter topic slower than a lock: renewed while the write waits.
        _ => Duration::from_millis(rng.u64(3_000..8_000)),
    };
    Plan {
        pace,
        answer,
        dead_letter_after,
    }
}

/// Runs schedule `seed`; the first broken guarantee is the error.
pub(super) fn run(seed: u64) -> Result<Report, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(run_schedule(seed))
}

async fn run_schedule(seed: u64) -> Result<Report, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let records = rng.usize(1..=30);
    let limit = rng.u16(2..=5);
    let breaker = rng.bool();
    let setup = Setup {
        partition: PartitionRef::new(records, Duration::from_secs(3), limit),
        plans: Arc::new((0..records).map(|_| plan(&mut rng, breaker)).collect()),
        share_dlq: if rng.u8(0..4) == 0 {
            ShareDlq::Broker
        } else {
            ShareDlq::Ours
        },
        known_limit: (rng.u8(0..5) != 0).then_some(limit),
        max_retries: rng.u32(0..=3),
        breaker,
        shutdown_timeout: Duration::from_millis(rng.u64(500..10_000)),
    };
    let partition = setup.partition.clone();
    let check = || -> Result<(), String> {
        match partition.lock().violations.first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    };
    let mut next_index = 0;
    let mut live: Vec<Running> = Vec::new();
    for _ in 0..rng.usize(1..=3) {
        live.push(setup.start(next_index, Size::draw(&mut rng)));
        next_index += 1;
    }
    let mut kills = 0;
    for _ in 0..rng.usize(0..=8) {
        tokio::time::sleep(Duration::from_millis(rng.u64(0..6_000))).await;
        check()?;
        match rng.u8(0..5) {
            0 if !live.is_empty() => {
                let m = live.swap_remove(rng.usize(..live.len()));
                m.task.abort();
                let _ = m.task.await;
                let mut p = partition.lock();
                p.killed.push(m.index);
                // Its acknowledgements not yet sent are lost with it.
                p.pending.retain(|(_, member, ..)| *member != m.index);
                drop(p);
                kills += 1;
            }
            1 if !live.is_empty() => {
                let m = live.swap_remove(rng.usize(..live.len()));
                stop(&setup, m).await?;
            }
            2 => {
                live.push(setup.start(next_index, Size::draw(&mut rng)));
                next_index += 1;
            }
            3 => partition.lock().downstream_down = true,
            _ => partition.lock().downstream_down = false,
        }
    }
    partition.lock().downstream_down = false;
    if live.is_empty() {
        live.push(setup.start(next_index, Size::draw(&mut rng)));
    }
    // Every record settles: each delivery takes at most its retries' backoff (a few seconds),
    // a slow call (9 s), a dead letter (8 s) and a lock (3 s), and there are at most 5.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3_600);
    while !partition.lock().settled() {
        check()?;
        if tokio::time::Instant::now() > deadline {
            let p = partition.lock();
            let stalled: Vec<String> = p
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !matches!(s.state, State::Accepted | State::Archived(_)))
                .map(|(i, s)| {
                    format!(
                        "{i}: {:?} after {} deliveries, {} calls, plan {:?}",
                        s.state,
                        s.deliveries,
                        p.calls.get(&i).copied().unwrap_or(0),
                        setup.plans[i]
                    )
                })
                .collect();
            return Err(format!("records stalled for an hour: {stalled:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for m in live {
        stop(&setup, m).await?;
    }
    check()?;
    let p = partition.lock();
    let mut report = Report {
        schedules: 1,
        records: records as u64,
        kills,
        ..Report::default()
    };
    for (i, slot) in p.slots.iter().enumerate() {
        if slot.deliveries > p.limit {
            return Err(format!(
                "record {i} delivered {} times, past the limit {}",
                slot.deliveries, p.limit
            ));
        }
        let plan = setup.plans[i];
        match slot.state {
            State::Accepted => {}
            State::Archived(why) => {
                report.archived += 1;
                let allowed = match (setup.share_dlq, why) {
                    (ShareDlq::Broker, "rejected") => {
                        matches!(plan.answer, Answer::Permanent | Answer::Panic)
                    }
                    (ShareDlq::Broker, _) => true,
                    (_, "last delivery's lock expired") => true, // its member was killed (checked at expiry)
                    (_, "released on its last delivery") => {
                        p.cut_calls.contains(&i) || setup.known_limit.is_none()
                    }
                    _ => false,
                };
                if !allowed {
                    return Err(format!(
                        "record {i} archived ({why}) without a dead letter of ours, plan {plan:?}"
                    ));
                }
            }
            ref other => return Err(format!("record {i} left {other:?}")),
        }
        let handled = p.handled.get(&i).copied().unwrap_or(0);
        report.handled += u64::from(handled > 0);
        report.duplicates += u64::from(handled > 1);
        report.dead_letters += u64::from(p.dead_lettered.contains_key(&i));
    }
    Ok(report)
}

/// Stops member `m` and checks that it ends within its shutdown timeout holding nothing.
async fn stop(setup: &Setup, m: Running) -> Result<(), String> {
    m.stop.cancel();
    let bound = setup.shutdown_timeout + Duration::from_secs(2);
    if tokio::time::timeout(bound, m.task).await.is_err() {
        return Err(format!("member {} did not stop within {bound:?}", m.index));
    }
    let p = setup.partition.lock();
    let held: Vec<usize> = p
        .slots
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.state, State::Acquired { member, .. } if member == m.index))
        .map(|(i, _)| i)
        .collect();
    if !held.is_empty() {
        return Err(format!(
            "member {} stopped holding records {held:?}",
            m.index
        ));
    }
    Ok(())
}
