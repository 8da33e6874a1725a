//! The simulated world of the workers: partitions' logs, each member's fetch queues, pauses,
//! stored and committed positions (librdkafka's rules: a pause outlives revocation and
//! re-assignment, pausing drops what was fetched, a store on a partition no longer assigned
//! fails), dead-letter and retry-topic writes acknowledged late, failing or out of order, and
//! the handler whose every call is scripted by the seed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::super::client::{Client, TopicPartition};
use super::super::exit::{ExitWriter, PendingExit};
use super::super::input::RecordSource;
use crate::dlq::{DeadLettered, RetryWritten};
use crate::failure::{DeadLetterKind, HandlerError};
use crate::handler::BatchHandler;
use crate::record::Record;
use crate::retry_tier::{RetryDelivery, RetryStage};

/// What a record's handler calls do, drawn from the seed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    pub wait: Wait,
    pub outcome: Outcome,
}

/// How a call waits before it answers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    /// Finishes without awaiting anything.
    None,
    /// Yields to the scheduler once.
    Yield,
    /// Sleeps this many milliseconds (long ones outlive a revocation).
    Sleep(u64),
}

/// How a record's calls end.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    Ok,
    /// Fails transiently on its first n calls, then succeeds.
    Transient(u32),
    Permanent,
    Panic,
}

/// One member's fetch state of one partition.
#[derive(Default)]
pub(super) struct Queue {
    records: VecDeque<Record>,
    /// The next offset to fetch into `records`.
    fetch: i64,
    /// The next offset to hand out: one past the last one handed out.
    app: i64,
    waker: Option<Waker>,
}

/// One member's view of the group.
#[derive(Default)]
pub(super) struct Member {
    pub assigned: BTreeSet<TopicPartition>,
    pub paused: BTreeSet<TopicPartition>,
    pub stored: BTreeMap<TopicPartition, i64>,
    pub queues: BTreeMap<TopicPartition, Queue>,
    /// The retry record last handed out per retry partition, and when.
    pub handed_retry: BTreeMap<TopicPartition, (i64, tokio::time::Instant)>,
}

/// See the module docs.
pub(super) struct World {
    pub start: tokio::time::Instant,
    pub logs: BTreeMap<TopicPartition, Vec<Record>>,
    pub members: Vec<Member>,
    pub committed: BTreeMap<TopicPartition, i64>,
    /// Records (where delivered) a handler call returned success for.
    pub handled: BTreeSet<(TopicPartition, i64)>,
    /// Records (where delivered) whose dead letter or retry record was acknowledged.
    pub exited: BTreeSet<(TopicPartition, i64)>,
    pub dead_letters: u64,
    pub first_called: BTreeSet<(TopicPartition, i64)>,
    /// Calls per record id (its source record's, kept by its retry records).
    pub calls: BTreeMap<String, u32>,
    pub plans: BTreeMap<String, Plan>,
    /// The topics the consumer reads: where exits may be routed.
    pub sources: Vec<String>,
    pub downstream_down: bool,
    pub dlq_down: bool,
    pub key_order: bool,
    /// Records a member fetches into a partition's queue at most.
    pub queue_capacity: usize,
    pub violations: Vec<String>,
    pub rng: fastrand::Rng,
    /// Upper bound of an exit write's acknowledgement delay.
    pub max_ack: Duration,
}

/// The wall clock at the simulation's start.
fn epoch() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("a valid date")
        .to_utc()
}

impl World {
    pub fn new(seed: u64, members: usize, queue_capacity: usize, key_order: bool) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            logs: BTreeMap::new(),
            members: (0..members).map(|_| Member::default()).collect(),
            committed: BTreeMap::new(),
            handled: BTreeSet::new(),
            exited: BTreeSet::new(),
            dead_letters: 0,
            first_called: BTreeSet::new(),
            calls: BTreeMap::new(),
            plans: BTreeMap::new(),
            sources: vec!["t".to_string()],
            downstream_down: false,
            dlq_down: false,
            key_order,
            queue_capacity,
            violations: Vec::new(),
            rng: fastrand::Rng::with_seed(seed ^ 0x5eed),
            max_ack: Duration::from_millis(300),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        epoch()
            + chrono::TimeDelta::from_std(tokio::time::Instant::now() - self.start)
                .expect("simulated time fits")
    }

    /// Appends `record` to `tp`'s log at its end (setting where it was written) and lets every
    /// member fetch it.
    pub fn append(&mut self, tp: &TopicPartition, mut record: Record) {
        let log = self.logs.entry(tp.clone()).or_default();
        let offset = log.len() as i64;
        match record.retry.as_mut() {
            Some(retry) => retry.offset = offset,
            None => {
                record.offset = offset;
                record.id = format!("{}-{}-{offset}", tp.0, tp.1);
            }
        }
        log.push(record);
        for member in 0..self.members.len() {
            self.fetch(member, tp);
        }
    }

    /// Fills `member`'s queue of `tp` from the log while it is assigned and not paused.
    pub fn fetch(&mut self, member: usize, tp: &TopicPartition) {
        let capacity = self.queue_capacity;
        let Some(log) = self.logs.get(tp) else { return };
        let m = &mut self.members[member];
        if !m.assigned.contains(tp) || m.paused.contains(tp) {
            return;
        }
        let queue = m.queues.entry(tp.clone()).or_default();
        let mut woke = false;
        while queue.records.len() < capacity && (queue.fetch as usize) < log.len() {
            queue.records.push_back(log[queue.fetch as usize].clone());
            queue.fetch += 1;
            woke = true;
        }
        if woke {
            if let Some(waker) = queue.waker.take() {
                waker.wake();
            }
        }
    }

    /// `tp` assigned to `member`: fetched from the committed position (or the start); its
    /// stored position cleared; its pause, if any, kept (as librdkafka does).
    pub fn assign(&mut self, member: usize, tp: &TopicPartition) {
        let start = self.committed.get(tp).copied().unwrap_or(0);
        let m = &mut self.members[member];
        m.assigned.insert(tp.clone());
        m.stored.remove(tp);
        m.handed_retry.remove(tp);
        let queue = m.queues.entry(tp.clone()).or_default();
        queue.records.clear();
        queue.fetch = start;
        queue.app = start;
        self.fetch(member, tp);
    }

    /// `tp` revoked from `member`: its stored position committed, its queue dropped.
    pub fn revoke(&mut self, member: usize, tp: &TopicPartition) {
        self.commit_one(member, tp);
        let m = &mut self.members[member];
        m.assigned.remove(tp);
        m.stored.remove(tp);
        if let Some(queue) = m.queues.get_mut(tp) {
            queue.records.clear();
        }
    }

    /// Commits `member`'s stored positions (the auto-commit, or a commit on revocation).
    pub fn commit(&mut self, member: usize) {
        let assigned: Vec<TopicPartition> = self.members[member].assigned.iter().cloned().collect();
        for tp in assigned {
            self.commit_one(member, &tp);
        }
    }

    fn commit_one(&mut self, member: usize, tp: &TopicPartition) {
        if let Some(position) = self.members[member].stored.get(tp).copied() {
            self.check_position(tp, position, "committed");
            self.committed.insert(tp.clone(), position);
        }
    }

    /// The first offset of `tp` that is neither handled nor acknowledged where it exits.
    pub fn first_unsettled(&self, tp: &TopicPartition) -> i64 {
        let len = self.logs.get(tp).map_or(0, Vec::len) as i64;
        (0..len)
            .find(|o| {
                !self.handled.contains(&(tp.clone(), *o))
                    && !self.exited.contains(&(tp.clone(), *o))
            })
            .unwrap_or(len)
    }

    /// The guarantee: no stored or committed position passes a record that is neither handled
    /// nor acknowledged by its dead-letter or retry topic.
    pub fn check_position(&mut self, tp: &TopicPartition, position: i64, what: &str) {
        let first = self.first_unsettled(tp);
        if position > first {
            let violation = format!(
                "{what} position {position} of {}-{} passes offset {first}, which was neither handled nor acknowledged by its dead-letter or retry topic",
                tp.0, tp.1
            );
            self.violations.push(violation);
        }
    }

    fn delivered(record: &Record) -> (TopicPartition, i64) {
        match &record.retry {
            Some(retry) => ((retry.topic.clone(), retry.partition), retry.offset),
            None => ((record.topic.clone(), record.partition), record.offset),
        }
    }

    /// A handler call of `record` begins: counts it and checks the order of first calls (per
    /// partition; per key in key order). Returns the record's plan and which call this is.
    fn called(&mut self, record: &Record) -> (Plan, u32) {
        let (tp, offset) = Self::delivered(record);
        if !self.first_called.contains(&(tp.clone(), offset)) {
            let log = &self.logs[&tp];
            let key = &log[offset as usize].key;
            let skipped = (0..offset).find(|o| {
                (!self.key_order || &log[*o as usize].key == key)
                    && !self.first_called.contains(&(tp.clone(), *o))
            });
            if let Some(skipped) = skipped {
                self.violations.push(format!(
                    "first call of {}-{} offset {offset} before offset {skipped}'s{}",
                    tp.0,
                    tp.1,
                    if self.key_order { " (same key)" } else { "" }
                ));
            }
            self.first_called.insert((tp, offset));
        }
        let n = self.calls.entry(record.id.clone()).or_default();
        *n += 1;
        let plan = self.plans[&record.id];
        (plan, *n)
    }
}

/// The world, shared by every simulated part.
#[derive(Clone)]
pub(super) struct WorldRef(pub Arc<Mutex<World>>);

impl WorldRef {
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().expect("world lock")
    }
}

/// A member's consumer, as its workers see it.
pub(super) struct SimClient {
    pub world: WorldRef,
    pub member: usize,
}

impl Client for SimClient {
    fn store_position(&self, topic: &str, partition: i32, position: i64) -> Result<(), String> {
        let mut world = self.world.lock();
        let tp = (topic.to_string(), partition);
        if !world.members[self.member].assigned.contains(&tp) {
            return Err("not assigned".into());
        }
        world.check_position(&tp, position, "stored");
        world.members[self.member].stored.insert(tp, position);
        Ok(())
    }

    fn pause(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        let member = &mut world.members[self.member];
        for tp in partitions {
            member.paused.insert(tp.clone());
            // Pausing drops what was fetched; it is fetched again from the app position.
            if let Some(queue) = member.queues.get_mut(tp) {
                queue.records.clear();
                queue.fetch = queue.app;
            }
        }
        Ok(())
    }

    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        for tp in partitions {
            world.members[self.member].paused.remove(tp);
            world.fetch(self.member, tp);
        }
        Ok(())
    }

    fn start_at_beginning_unless_committed(
        &self,
        _topic: &str,
        _partition: i32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // Simulated partitions without a committed position always start at their beginning.
        Box::pin(async {})
    }

    fn now(&self) -> DateTime<Utc> {
        self.world.lock().now()
    }
}

/// One member's reader of one partition's queue.
pub(super) struct SimSource {
    pub world: WorldRef,
    pub member: usize,
    pub tp: TopicPartition,
}

impl RecordSource for SimSource {
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        let mut world = self.world.lock();
        let member = &mut world.members[self.member];
        let queue = member.queues.entry(self.tp.clone()).or_default();
        match queue.records.pop_front() {
            Some(record) => {
                let delivered = World::delivered(&record).1;
                queue.app = delivered + 1;
                if record.retry.is_some() {
                    member
                        .handed_retry
                        .insert(self.tp.clone(), (delivered, tokio::time::Instant::now()));
                }
                let tp = self.tp.clone();
                world.fetch(self.member, &tp);
                Poll::Ready(record)
            }
            None => {
                queue.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A member's dead-letter and retry-topic writes.
pub(super) struct SimExits {
    pub world: WorldRef,
    /// The retry topics' partition count.
    pub retry_partitions: i32,
}

impl SimExits {
    fn write(
        &self,
        record: &Record,
        retry: Option<(u32, DateTime<Utc>, RetryStage)>,
        cancel: CancellationToken,
    ) -> PendingExit {
        let (delay, mut fails) = {
            let mut world = self.world.lock();
            let max = world.max_ack.as_millis() as u64;
            let delay = Duration::from_millis(world.rng.u64(0..=max));
            let fails = if world.rng.u8(0..10) == 0 {
                world.rng.u32(1..4)
            } else {
                0
            };
            (delay, fails)
        };
        let world = self.world.clone();
        let record = record.clone();
        let retry_partitions = self.retry_partitions;
        // Handed to the producer now: the acknowledgement comes `delay` after this call.
        let mut at = tokio::time::Instant::now() + delay;
        Box::pin(async move {
            loop {
                tokio::time::sleep_until(at).await;
                let acknowledged = {
                    let mut w = world.lock();
                    (fails == 0 && !w.dlq_down)
                        .then(|| acknowledge(&mut w, &record, retry.clone(), retry_partitions))
                };
                if let Some(acknowledged) = acknowledged {
                    return Ok(acknowledged);
                }
                fails = fails.saturating_sub(1);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(crate::dlq::Abandoned),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                at = tokio::time::Instant::now() + delay;
            }
        })
    }
}

/// The write of `record` is acknowledged: it has exited where it was delivered; a retry
/// record is appended to its retry topic.
fn acknowledge(
    w: &mut World,
    record: &Record,
    retry: Option<(u32, DateTime<Utc>, RetryStage)>,
    retry_partitions: i32,
) -> RetryWritten {
    w.exited.insert(World::delivered(record));
    let written = DeadLettered {
        topic: String::new(),
        partition: 0,
        offset: 0,
    };
    let Some((tier, due, left)) = retry else {
        w.dead_letters += 1;
        return RetryWritten::DeadLettered(written);
    };
    // Routed as the real writers route it.
    let source = record.source_topic().to_string();
    if !w.sources.contains(&source) {
        w.violations.push(format!(
            "the retry record of {} is routed to {source}'s retry topic, a topic the consumer does not read",
            record.id
        ));
    }
    let partition = (record.offset as i32).rem_euclid(retry_partitions);
    let tp = (crate::retry_tier::topic_name(&source, tier), partition);
    let before = record.retry.as_ref();
    let mut history = before.map_or_else(Vec::new, |r| r.history.clone());
    let attempts = before.map_or(0, |r| r.attempts) + left.attempts;
    history.push(left);
    let mut copy = record.clone();
    // Some writers claim another source topic (a foreign or hostile account), and some run
    // with a clock ahead, or write due times far away.
    if w.rng.u8(0..10) == 0 {
        copy.topic = "payments".into();
    }
    let due = match w.rng.u8(0..20) {
        0 => due + chrono::TimeDelta::hours(2),
        1 => DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .expect("a valid date")
            .to_utc(),
        _ => due,
    };
    copy.retry = Some(Box::new(RetryDelivery {
        tier,
        topic: tp.0.clone(),
        partition,
        offset: 0,
        due,
        attempts,
        history,
    }));
    w.append(&tp, copy);
    RetryWritten::RetryTopic(written)
}

impl ExitWriter for SimExits {
    fn dead_letter(
        &self,
        record: &Record,
        _kind: DeadLetterKind,
        _message: &str,
        _attempts: u32,
        cancel: CancellationToken,
    ) -> PendingExit {
        self.write(record, None, cancel)
    }

    fn retry(
        &self,
        record: &Record,
        tier: u32,
        due: DateTime<Utc>,
        left: RetryStage,
        cancel: CancellationToken,
    ) -> PendingExit {
        self.write(record, Some((tier, due, left)), cancel)
    }
}

/// The handler: each call does what its records' plans say.
pub(super) struct SimHandler {
    pub world: WorldRef,
}

/// The marker of a simulated panic, kept out of the test output.
pub(super) const SIMULATED_PANIC: &str = "simulated handler panic";

impl BatchHandler for SimHandler {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let (results, wait, down, partial) = {
            let mut world = self.world.lock();
            let down = world.downstream_down;
            let mut wait = Wait::None;
            let mut results = Vec::with_capacity(records.len());
            for record in records {
                let (plan, call) = world.called(record);
                wait = match (wait, plan.wait) {
                    (Wait::Sleep(a), Wait::Sleep(b)) => Wait::Sleep(a.max(b)),
                    (Wait::Sleep(a), _) | (_, Wait::Sleep(a)) => Wait::Sleep(a),
                    (Wait::Yield, _) | (_, Wait::Yield) => Wait::Yield,
                    _ => Wait::None,
                };
                results.push(match plan.outcome {
                    Outcome::Ok => Ok(()),
                    Outcome::Transient(n) if call <= n => {
                        Err(HandlerError::transient(format!("try {call} of {n}")))
                    }
                    Outcome::Transient(_) => Ok(()),
                    Outcome::Permanent => Err(HandlerError::permanent("rejected")),
                    Outcome::Panic => Err(HandlerError::permanent(SIMULATED_PANIC)),
                });
            }
            let partial = records.len() > 1 && world.rng.bool();
            (results, wait, down, partial)
        };
        match wait {
            Wait::None => {}
            Wait::Yield => tokio::task::yield_now().await,
            Wait::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        if down {
            return Err(HandlerError::transient("downstream down"));
        }
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if e.message() == SIMULATED_PANIC))
        {
            panic!("{SIMULATED_PANIC}");
        }
        let mut world = self.world.lock();
        if results.iter().all(Result::is_ok) {
            for record in records {
                world.handled.insert(World::delivered(record));
            }
            return Ok(());
        }
        if partial {
            let mut failures = Vec::new();
            for (record, result) in records.iter().zip(results) {
                match result {
                    Ok(()) => {
                        world.handled.insert(World::delivered(record));
                    }
                    Err(error) => failures.push((record.offset, error)),
                }
            }
            return Err(HandlerError::partial(failures));
        }
        let mut errors = results.into_iter().filter_map(Result::err);
        let first = errors.next().expect("one failed");
        Err(errors
            .find(|e| e.kind() == crate::failure::FailureKind::Permanent)
            .unwrap_or(first))
    }
}
