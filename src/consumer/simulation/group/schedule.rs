//! One seeded schedule: the settings, the records and their plans, and the steps
//! (rebalances, outages of the downstream and of the dead-letter topic, new records, commits,
//! time) drawn from the seed, with the guarantees checked after every step; then every
//! partition assigned, the outages over, and the records must all settle and be committed;
//! then shutdown, which must end in time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::task::AbortHandle;

use super::coordinator::Tally;
use super::member::{member, settings, Mode, SimMember, Transactions};
use super::plan::{Outcome, Plan, Wait};
use super::replay::replay;
use super::world::{World, WorldRef, GROUP, SOURCE};
use crate::config::ConsumerConfig;
use crate::consumer::client::TopicPartition;
use crate::record::retry::redrive_topic;
use crate::retry_tier::RetryTiers;

/// What schedules ran, for the test's summary.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub schedules: u64,
    pub records: usize,
    pub handled: usize,
    pub dead_letters: u64,
    /// Exactly once: what the transactions did.
    pub transactions: Tally,
    /// The first record handled while an earlier record of its key was not
    /// (`key_sequence`), if any.
    pub key_sequence_break: Option<String>,
    /// With parking: the records parked, and the records released, in the park logs; and
    /// the park-log events their owners trimmed (deleted, no longer needed).
    pub parked: usize,
    pub released: usize,
    pub trimmed: i64,
}

impl crate::consumer::simulation::Summary for Report {
    fn add(&mut self, one: &Self) {
        self.schedules += one.schedules;
        self.records += one.records;
        self.handled += one.handled;
        self.dead_letters += one.dead_letters;
        self.transactions.add(&one.transactions);
        self.parked += one.parked;
        self.released += one.released;
        self.trimmed += one.trimmed;
    }

    fn handled_nothing(&self) -> bool {
        self.handled == 0 && self.records > 0
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} schedules, {} records, {} handled, {} dead letters",
            self.schedules, self.records, self.handled, self.dead_letters
        )?;
        if self.parked > 0 {
            write!(
                f,
                "; {} records parked, {} released, {} park-log events trimmed",
                self.parked, self.released, self.trimmed
            )?;
        }
        let t = &self.transactions;
        if t.commits > 0 {
            write!(
                f,
                "; {} transactions committed ({} outputs), {} aborted ({} writes discarded), {} producers fenced, {} commits of zombies refused, {} commits' outcomes unknown",
                t.commits, t.outputs, t.aborts, t.aborted_writes, t.fences, t.zombie_refusals, t.unknowns
            )?;
        }
        Ok(())
    }
}

/// The members of the group.
const MEMBERS: usize = 2;
/// The source topic's partitions.
const PARTITIONS: i32 = 2;
/// The longest a handler call sleeps (one that outlives a revocation).
const LONGEST_CALL: Duration = Duration::from_secs(4);
/// How long a revoked or stopped worker may take to end: its handler calls in flight run to
/// their end, its writes in flight are acknowledged or given up.
const STOP_BOUND: Duration = Duration::from_secs(6);
/// How long a partition may stay paused with nothing holding it before that is a stall.
const STALL_AFTER: Duration = Duration::from_secs(1);

/// A revoked (or stopped) worker that has not ended yet.
struct Stopping {
    member: usize,
    tp: TopicPartition,
    handle: AbortHandle,
    since: tokio::time::Instant,
}

/// What a schedule adds to the plain one, each drawn from a generator of its own so that the
/// plain schedules stay exactly as they were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Variant {
    /// Nothing.
    Plain,
    /// Another service's retry records on the shared retry topics.
    OtherGroup,
    /// `dlq replay` putting dead letters back on the group's redrive topic now and then,
    /// some claiming to be due in 2099.
    Redrive,
    /// `key_order_after_failure = "park"` (in order, one record at a time), with replays to
    /// the redrive topic after the fix (a redriven record's call succeeds): keys in order
    /// after a failure is a guarantee.
    Park,
    /// Exactly once (in order, one record at a time): outputs, dead letters and retry records
    /// committed with the offsets in transactions; commits refused (aborts), producers fenced,
    /// members that lost partitions without knowing (zombies), outputs too large.
    ExactlyOnce,
}

struct Run {
    seed: u64,
    variant: Variant,
    /// With [`Variant::Redrive`]: when to replay and what.
    replays: Option<fastrand::Rng>,
    rng: fastrand::Rng,
    world: WorldRef,
    members: Vec<SimMember>,
    /// What each member owns.
    owned: Vec<BTreeSet<TopicPartition>>,
    /// The worker of each partition a member owns, once its poll loop started it.
    workers: Vec<BTreeMap<TopicPartition, AbortHandle>>,
    stopping: Vec<Stopping>,
    partitions: Vec<TopicPartition>,
    sources: Vec<String>,
    tiers: RetryTiers,
    keys: u8,
    /// Paused partitions nothing holds, since when.
    unheld: BTreeMap<(usize, TopicPartition), tokio::time::Instant>,
    mode: Mode,
    /// With [`Variant::ExactlyOnce`]: the faults of the transactions.
    faults: Option<fastrand::Rng>,
    /// Members working on a partition the group gave another (their worker, once started):
    /// they do not know until their revocation callback runs ([`Run::wake`]).
    zombies: Vec<(usize, TopicPartition, Option<AbortHandle>)>,
}

/// Runs the schedule of `seed` with `variant`; `Err` names the first broken guarantee.
pub(super) fn run(seed: u64, variant: Variant) -> Result<Report, String> {
    fastrand::seed(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let result = runtime.block_on(schedule(seed, variant));
    // A handler call still running is dropped with the runtime.
    drop(runtime);
    result
}

async fn schedule(seed: u64, variant: Variant) -> Result<Report, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let exactly_once = variant == Variant::ExactlyOnce;
    let mode = match rng.u8(0..3) {
        0 => Mode::InOrder,
        1 => Mode::Batch {
            size: rng.usize(2..=8),
            linger_ms: [0, 0, 5, 20][rng.usize(0..4)],
        },
        _ => Mode::ByKey {
            max_in_flight: [1, 2, 4, 16, 64][rng.usize(0..5)],
        },
    };
    // Exactly once and parking settle one record at a time, in order (the settings refuse the
    // others).
    let parking = variant == Variant::Park;
    let mode = if exactly_once || parking {
        Mode::InOrder
    } else {
        mode
    };
    let tiers = match rng.u8(0..4) {
        0 | 1 => RetryTiers::default(),
        2 => RetryTiers::new([rng.u64(20..=500)]),
        _ => RetryTiers::new([rng.u64(20..=300), rng.u64(20..=300)]),
    };
    let queue_capacity = [1, 3, 16, 64, 300][rng.usize(0..5)];
    // Each partition's share of the buffer, what a worker's chunk may come to beyond its
    // first record: from less than a record (a chunk of one) to far more than a schedule
    // produces.
    let share = [1, 1_000, 8_000, 64_000, 16 << 20][rng.usize(0..5)];
    let key_order = matches!(mode, Mode::ByKey { .. });
    let mut world = World::new(seed, MEMBERS, queue_capacity, share, key_order);
    world.other_group =
        (variant == Variant::OtherGroup).then(|| fastrand::Rng::with_seed(seed ^ 0x07e4));
    let redrive = matches!(variant, Variant::Redrive | Variant::Park);
    world.dead_lettered = redrive.then(Vec::new);
    world.parking = parking;
    let mut faults = exactly_once.then(|| fastrand::Rng::with_seed(seed ^ 0xe05));
    world.exactly_once = exactly_once.then(Default::default);
    let transactions = faults.as_mut().map(|rng| Transactions {
        records: [1, 3, 20, 1_000][rng.usize(0..4)],
        interval: Duration::from_millis([5, 50, 300][rng.usize(0..3)]),
    });
    let world = WorldRef::new(world);
    let max_retries = rng.u32(0..=3);
    let config = ConsumerConfig {
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(40),
        max_retries,
        key_order_after_failure: if parking {
            crate::config::KeyOrderAfterFailure::Park
        } else {
            crate::config::KeyOrderAfterFailure::Continue
        },
        // Some schedules give a key's order up after a while (drawn from a generator of
        // their own, so that the other variants stay as they were).
        park_max_age: if parking {
            let mut ages = fastrand::Rng::with_seed(seed ^ 0xa9e);
            Duration::from_millis([0, 0, 300, 3_000][ages.usize(0..4)])
        } else {
            Duration::ZERO
        },
        ..settings(mode, &tiers)
    };
    let budget_kib = rng.usize(2..=8);
    let sources = vec![SOURCE.to_string()];
    let mut partitions: Vec<TopicPartition> =
        (0..PARTITIONS).map(|p| (SOURCE.to_string(), p)).collect();
    for topic in tiers.topics(SOURCE) {
        partitions.push((topic, 0));
    }
    if redrive {
        partitions.push((redrive_topic(SOURCE, GROUP), 0));
    }
    let members = (0..MEMBERS)
        .map(|m| member(&world, m, &config, budget_kib, transactions))
        .collect();
    let mut run = Run {
        seed,
        variant,
        replays: redrive.then(|| fastrand::Rng::with_seed(seed ^ 0x4ed1)),
        keys: rng.u8(1..=4),
        rng,
        world,
        members,
        owned: (0..MEMBERS).map(|_| BTreeSet::new()).collect(),
        workers: (0..MEMBERS).map(|_| BTreeMap::new()).collect(),
        stopping: Vec::new(),
        partitions,
        sources,
        tiers,
        unheld: BTreeMap::new(),
        mode,
        faults,
        zombies: Vec::new(),
    };
    // Mostly small partitions; sometimes ones long enough that a worker takes more records
    // in one poll than tokio's budget allows (128).
    let initial = match run.rng.u8(0..4) {
        0 => run.rng.usize(300..=1_500),
        _ => run.rng.usize(10..=60),
    };
    run.produce(initial);
    for tp in run.partitions.clone() {
        let member = run.rng.usize(0..MEMBERS);
        run.assign(member, &tp);
    }
    let steps = run.rng.usize(20..=80);
    for _ in 0..steps {
        run.step().await;
        run.check()?;
    }
    run.heal().await?;
    if run.variant == Variant::Park {
        run.drain().await?;
    }
    run.shutdown().await?;
    run.check_handler_time()?;
    let context = run.context();
    let world = run.world.lock();
    let mut report = Report {
        schedules: 1,
        records: world.partitions.values().map(|p| p.log.len()).sum(),
        handled: world.partitions.values().map(|p| p.handled.len()).sum(),
        dead_letters: world.dead_letters,
        key_sequence_break: world.key_sequence_breaks.first().cloned(),
        parked: park_events(&world, |e| {
            matches!(e, crate::park::ParkEvent::Parked { .. })
        }),
        released: park_events(&world, |e| {
            matches!(e, crate::park::ParkEvent::Released { .. })
        }),
        trimmed: world.park_log_starts.values().sum(),
        ..Report::default()
    };
    if let Some(c) = &world.exactly_once {
        let t = c.tally;
        if t.aborts == 0 || t.fences == 0 {
            return Err(format!(
                "the schedule aborted {} transactions and fenced {} producers: every schedule must do both; {context}",
                t.aborts, t.fences
            ));
        }
        // The members counted each exit once its transaction committed, not each time it
        // went into one that aborted; not those of a transaction whose answers were lost
        // (committed, but its producer never learned it).
        let counted = |family: fn(&crate::metrics::Metrics) -> &prometheus::IntCounterVec| -> u64 {
            use prometheus::core::Collector;
            run.members
                .iter()
                .flat_map(|member| family(&member.shared.out.metrics).collect())
                .flat_map(|family| family.get_metric().to_vec())
                .map(|metric| metric.get_counter().get_value() as u64)
                .sum()
        };
        let (dead_letters, retries) = (
            counted(|m| &m.dead_lettered),
            counted(|m| &m.retry_tier_sent),
        );
        let known = (
            t.dead_letters - t.unknown_dead_letters,
            t.retries - t.unknown_retries,
        );
        if (dead_letters, retries) != known {
            return Err(format!(
                "the members counted {dead_letters} dead letters and {retries} retry records, but {} and {} were committed; {context}",
                t.dead_letters, t.retries
            ));
        }
        report.dead_letters = t.dead_letters;
        report.transactions = t;
    }
    Ok(report)
}

/// How many events of the world's park logs `which` takes.
fn park_events(world: &World, which: fn(&crate::park::ParkEvent) -> bool) -> usize {
    world
        .park_logs
        .values()
        .flatten()
        .filter(|e| which(e))
        .count()
}

impl Run {
    fn context(&self) -> String {
        format!(
            "seed {} ({:?}, tiers {:?}{})",
            self.seed,
            self.mode,
            self.tiers.delays_ms(),
            match self.variant {
                Variant::Plain => "",
                Variant::OtherGroup => ", another group's retry records",
                Variant::Redrive => ", replays to the redrive topic",
                Variant::Park => ", keys parked after a failure, replays after the fix",
                Variant::ExactlyOnce => ", exactly once",
            },
        )
    }

    /// `n` new records on the source partitions, each with its plan.
    fn produce(&mut self, n: usize) {
        let mut world = self.world.lock();
        for _ in 0..n {
            let partition = self.rng.i32(0..PARTITIONS);
            let key = self.rng.u8(0..self.keys);
            let wait = match self.rng.u8(0..20) {
                0..=9 => Wait::None,
                10..=13 => Wait::Yield,
                14..=18 => Wait::Sleep(self.rng.u64(1..=30)),
                _ => Wait::Sleep(self.rng.u64(1_000..=LONGEST_CALL.as_millis() as u64)),
            };
            let outcome = match self.rng.u8(0..40) {
                0..=27 => Outcome::Ok,
                28..=33 => Outcome::Transient(self.rng.u32(1..=6)),
                34..=37 => Outcome::Permanent,
                _ => Outcome::Panic,
            };
            // Now and then an output the broker never takes: too large, invalid, or too large
            // with a dead letter too large itself.
            let refused = self
                .faults
                .as_mut()
                .and_then(|f| (f.u8(0..60) == 0).then(|| f.u8(0..3)));
            let outcome = match refused {
                Some(0) => Outcome::TooLarge,
                Some(1) => Outcome::Invalid,
                Some(_) => Outcome::Huge,
                None => outcome,
            };
            world.produce(partition, Some(vec![b'k', key]), Plan { wait, outcome });
        }
    }

    fn owner(&self, tp: &TopicPartition) -> Option<usize> {
        (0..MEMBERS).find(|m| self.owned[*m].contains(tp))
    }

    /// The rebalance callback's assignment (the member's poll loop starts the worker). A
    /// zombie of the partition learns first that it lost it.
    fn assign(&mut self, member: usize, tp: &TopicPartition) {
        self.adopt_started();
        if self.owner(tp).is_some() {
            return;
        }
        if let Some(at) = self
            .zombies
            .iter()
            .position(|z| z.0 == member && z.1 == *tp)
        {
            self.wake(at);
        }
        tracing::debug!(event = "simulated_assign", member, topic = %tp.0, partition = tp.1);
        self.members[member].assign(&self.world, member, tp);
        self.owned[member].insert(tp.clone());
    }

    /// The rebalance callback's revocation: the worker cancelled, the stored positions
    /// committed, the partition unassigned.
    fn revoke(&mut self, tp: &TopicPartition) {
        let Some((member, handle)) = self.disown(tp) else {
            return;
        };
        tracing::debug!(event = "simulated_revoke", member, topic = %tp.0, partition = tp.1);
        self.members[member].revoke(&self.world, member, tp);
        self.stop(member, tp.clone(), handle);
    }

    /// `tp` leaves its owner, if it has one: the member, and its worker's handle when its
    /// poll loop has started it (workers started so far are taken over first).
    fn disown(&mut self, tp: &TopicPartition) -> Option<(usize, Option<AbortHandle>)> {
        self.adopt_started();
        let member = self.owner(tp)?;
        self.owned[member].remove(tp);
        Some((member, self.workers[member].remove(tp)))
    }

    /// `handle`, the worker of `tp` on `member`, must end from now on (one not started yet
    /// is taken over as stopping when it starts).
    fn stop(&mut self, member: usize, tp: TopicPartition, handle: Option<AbortHandle>) {
        if let Some(handle) = handle {
            self.stopping.push(Stopping {
                member,
                tp,
                handle,
                since: tokio::time::Instant::now(),
            });
        }
    }

    /// A member loses `tp` without knowing (stopped past its session, say): the group gives
    /// it to the other member, which starts at the committed position, while this one's
    /// worker goes on and its transaction holds the partition's records.
    fn lose(&mut self, tp: &TopicPartition) {
        let Some((member, handle)) = self.disown(tp) else {
            return;
        };
        tracing::debug!(event = "simulated_lose", member, topic = %tp.0, partition = tp.1);
        let mut world = self.world.lock();
        let coordinator = world.exactly_once.as_mut().expect("exactly once");
        coordinator.lost.insert((member, tp.clone()));
        drop(world);
        self.zombies.push((member, tp.clone(), handle));
        self.assign((member + 1) % MEMBERS, tp);
    }

    /// Zombie `at` learns it lost its partition: its revocation callback runs (the commit of
    /// its transaction is refused when it holds the partition's records: an abort).
    fn wake(&mut self, at: usize) {
        self.adopt_started();
        let (member, tp, handle) = self.zombies.remove(at);
        tracing::debug!(event = "simulated_wake", member, topic = %tp.0, partition = tp.1);
        self.members[member].revoke(&self.world, member, &tp);
        self.stop(member, tp, handle);
    }

    /// Takes over the workers the members' poll loops started, in the order they started:
    /// the worker of a partition the member owns (or a zombie's) replaces the one it had, if
    /// any (a rewind's fresh worker; the old one ends); one of a partition gone meanwhile
    /// must end at once. Called before every change of who owns what.
    fn adopt_started(&mut self) {
        for member in 0..MEMBERS {
            let started =
                std::mem::take(&mut *self.members[member].started.lock().expect("started lock"));
            for (tp, handle) in started {
                tracing::debug!(event = "simulated_worker_started", member, topic = %tp.0, partition = tp.1);
                let zombie = self.zombies.iter_mut().find(|z| z.0 == member && z.1 == tp);
                let old = if self.owned[member].contains(&tp) {
                    self.workers[member].insert(tp.clone(), handle)
                } else if let Some(zombie) = zombie {
                    zombie.2.replace(handle)
                } else {
                    Some(handle)
                };
                self.stop(member, tp, old);
            }
        }
    }

    /// With [`Variant::ExactlyOnce`]: now and then the next commit is refused, a producer is
    /// fenced, a commit's answers are lost, a member loses a partition without knowing, or a
    /// zombie learns it.
    fn transaction_faults(&mut self, tp: &TopicPartition) {
        let Some(faults) = self.faults.as_mut() else {
            return;
        };
        let (abort, fence, lose, wake, unknown) = (
            faults.u8(0..10) == 0,
            faults.u8(0..15) == 0,
            faults.u8(0..12) == 0,
            faults.u8(0..5) == 0,
            faults.u8(0..20) == 0,
        );
        let zombie = (!self.zombies.is_empty()).then(|| faults.usize(0..self.zombies.len()));
        {
            let mut world = self.world.lock();
            let coordinator = world.exactly_once.as_mut().expect("exactly once");
            coordinator.abort_next |= abort;
            coordinator.fence_next |= fence;
            coordinator.unknown_next |= unknown;
        }
        if lose {
            self.lose(tp);
        }
        if let Some(at) = zombie.filter(|_| wake) {
            self.wake(at);
        }
    }

    async fn step(&mut self) {
        self.adopt_started();
        let pick = self.rng.usize(0..self.partitions.len());
        let tp = self.partitions[pick].clone();
        match self.rng.u8(0..100) {
            0..=34 => tokio::time::sleep(Duration::from_millis(self.rng.u64(0..300))).await,
            35..=44 => self.revoke(&tp),
            45..=59 => {
                let member = self.rng.usize(0..MEMBERS);
                self.assign(member, &tp);
            }
            60..=67 => {
                self.revoke(&tp);
                let member = self.rng.usize(0..MEMBERS);
                self.assign(member, &tp);
            }
            68..=75 => {
                let mut world = self.world.lock();
                world.downstream_down = !world.downstream_down;
            }
            76..=80 => {
                let mut world = self.world.lock();
                world.dlq_down = !world.dlq_down;
            }
            81..=87 => {
                let n = match self.rng.u8(0..5) {
                    0 => self.rng.usize(100..=500),
                    _ => self.rng.usize(1..=40),
                };
                self.produce(n);
            }
            88..=93 => {
                let mut world = self.world.lock();
                for member in 0..MEMBERS {
                    world.commit(member);
                }
            }
            _ => {
                for _ in 0..self.rng.usize(1..10) {
                    tokio::task::yield_now().await;
                }
            }
        }
        if let Some(rng) = self.replays.as_mut() {
            if rng.u8(0..8) == 0 {
                replay(&mut self.world.lock(), rng);
            }
        }
        self.transaction_faults(&tp);
        // Let what the step set off run a little.
        tokio::time::sleep(Duration::from_millis(self.rng.u64(0..5))).await;
    }

    /// The guarantees after a step: positions (checked as they are stored and committed),
    /// revoked workers ending in time, every owned partition fetched unless a retry wait
    /// holds it now.
    fn check(&mut self) -> Result<(), String> {
        self.adopt_started();
        let now = tokio::time::Instant::now();
        if let Some(violation) = self.world.lock().violations.first() {
            return Err(format!("{violation}; {}", self.context()));
        }
        self.stopping.retain(|s| !s.handle.is_finished());
        if let Some(late) = self.stopping.iter().find(|s| now - s.since > STOP_BOUND) {
            return Err(format!(
                "the worker of {}-{} on member {} still runs {:?} after it was stopped; {}",
                late.tp.0,
                late.tp.1,
                late.member,
                now - late.since,
                self.context()
            ));
        }
        let world = self.world.lock();
        for (member, state) in world.members.iter().enumerate() {
            for tp in state.assigned.intersection(&state.paused) {
                let breaker = self.members[member].shared.caller.breaker.is_open();
                // A retry wait lasts its tier's delay at most.
                let waiting = self
                    .tiers
                    .tier_of(&tp.0, &self.sources)
                    .is_some_and(|(_, tier)| {
                        state.retry_waits.get(tp).is_some_and(|since| {
                            let delay = self.tiers.delay(tier).unwrap_or_default();
                            now < *since + delay + Duration::from_millis(100)
                        })
                    });
                // A trim holds the partition while its worker settles its chunk, not once it
                // waits for records again.
                let trimmed = state.trimmed.contains(tp) && !state.waiting.contains_key(tp);
                let key = (member, tp.clone());
                if breaker || waiting || trimmed {
                    self.unheld.remove(&key);
                    continue;
                }
                let since = *self.unheld.entry(key).or_insert(now);
                if now - since > STALL_AFTER {
                    return Err(format!(
                        "{}-{} is assigned to member {member} but not fetched for {:?}, though neither the breaker, a retry wait nor its worker's chunk holds it; {}",
                        tp.0,
                        tp.1,
                        now - since,
                        self.context()
                    ));
                }
            }
        }
        let paused: Vec<(usize, TopicPartition)> = world
            .members
            .iter()
            .enumerate()
            .flat_map(|(m, s)| s.paused.iter().map(move |tp| (m, tp.clone())))
            .collect();
        drop(world);
        self.unheld.retain(|k, _| paused.contains(k));
        Ok(())
    }

    /// The outages end and every partition is assigned: every record must settle and be
    /// committed.
    async fn heal(&mut self) -> Result<(), String> {
        while !self.zombies.is_empty() {
            self.wake(0);
        }
        {
            let mut world = self.world.lock();
            world.downstream_down = false;
            world.dlq_down = false;
            // Every schedule aborts a transaction and fences a producer: the faults not
            // met yet meet the records produced now.
            if let Some(c) = world.exactly_once.as_mut() {
                c.abort_next |= c.tally.aborts == 0;
                c.fence_next |= c.tally.fences == 0;
                c.unknown_next |= c.tally.unknowns == 0;
            }
        }
        if self.faults.is_some() {
            self.produce(10);
        }
        for tp in self.partitions.clone() {
            let member = self.rng.usize(0..MEMBERS);
            self.assign(member, &tp);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            {
                let mut world = self.world.lock();
                for member in 0..MEMBERS {
                    world.commit(member);
                }
            }
            self.check()?;
            let mut world = self.world.lock();
            let world = &mut *world;
            let mut behind = Vec::new();
            for (tp, partition) in world.partitions.iter_mut() {
                let committed = world.committed.get(tp).copied().unwrap_or(0);
                if committed < partition.log.len() as i64 {
                    // Where each member that has it stands: what holds it up.
                    let members: Vec<String> = world
                        .members
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.assigned.contains(tp))
                        .map(|(i, m)| {
                            let queue = m.queues.get(tp);
                            format!(
                                "member {i}: worker {}, paused {}, fetched to {}, handed out to {}, {} queued",
                                match self.workers[i].get(tp) {
                                    Some(w) if w.is_finished() => "ended",
                                    Some(_) => "running",
                                    None => "none",
                                },
                                m.paused.contains(tp),
                                queue.map_or(0, |q| q.fetch),
                                queue.map_or(0, |q| q.app),
                                queue.map_or(0, |q| q.records.len()),
                            )
                        })
                        .collect();
                    behind.push(format!(
                        "{}-{} committed {committed} of {} (first unsettled {}; {})",
                        tp.0,
                        tp.1,
                        partition.log.len(),
                        partition.first_unsettled(),
                        members.join("; ")
                    ));
                }
            }
            if behind.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "stalled: 600 s after the last outage (at {:?}), {}; {}",
                    tokio::time::Instant::now() - world.start,
                    behind.join(", "),
                    self.context()
                ));
            }
        }
    }

    /// With parking, after the fix: every dead letter is replayed until every record of the
    /// source was applied. A parked record is settled when it is in the park log, so `heal`
    /// cannot tell one that is still there, or lost from it (its events trimmed too early, a
    /// release that passed it over), from one handled: this can.
    async fn drain(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            {
                let mut world = self.world.lock();
                super::replay::replay_all(&mut world);
                for member in 0..MEMBERS {
                    world.commit(member);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.check()?;
            let world = self.world.lock();
            let missing: Vec<String> = world
                .partitions
                .iter()
                .filter(|(tp, _)| tp.0 == super::world::SOURCE)
                .filter_map(|(tp, p)| {
                    let unapplied: Vec<i64> = (0..p.log.len() as i64)
                        .filter(|o| !p.applied.contains(o))
                        .take(10)
                        .collect();
                    (!unapplied.is_empty())
                        .then(|| format!("{}-{} offsets {unapplied:?}", tp.0, tp.1))
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "records never applied 600 s after the fix, every dead letter replayed: {}; {}",
                    missing.join(", "),
                    self.context()
                ));
            }
        }
    }

    /// The workers timed every handler call that ended (`kafka_dlq_handler_duration_seconds`)
    /// as long as it took on the simulated clock, no more: a call timed from the end of the one
    /// before it (a worker going straight on) had nothing in between, no wait counted in.
    fn check_handler_time(&self) -> Result<(), String> {
        use prometheus::core::Collector;
        let timed: f64 = self
            .members
            .iter()
            .flat_map(|member| member.shared.out.metrics.handler_duration.collect())
            .flat_map(|family| family.get_metric().to_vec())
            .map(|metric| metric.get_histogram().get_sample_sum())
            .sum();
        let took = self.world.lock().handler_time.as_secs_f64();
        if (timed - took).abs() > 1e-6 {
            return Err(format!(
                "the workers timed the handler calls at {timed:.6} s, but they took {took:.6} s; {}",
                self.context()
            ));
        }
        Ok(())
    }

    /// Every worker stopped: each must end within its bound.
    async fn shutdown(&mut self) -> Result<(), String> {
        while !self.zombies.is_empty() {
            self.wake(0);
        }
        for tp in self.partitions.clone() {
            self.revoke(&tp);
        }
        let deadline = tokio::time::Instant::now() + STOP_BOUND + Duration::from_millis(100);
        while tokio::time::Instant::now() < deadline && !self.stopping.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.check()?;
        }
        self.check()
    }
}
