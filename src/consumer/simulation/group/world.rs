//! The simulated world of the workers: each partition's log and what became of its records,
//! each member's fetch queues (each partition's own librdkafka queue, which its worker reads
//! through the real intake: `fetcher.rs`, `SimFeed`), pauses, stored and committed
//! positions, with librdkafka's rules (a pause outlives revocation and re-assignment,
//! pausing drops what was fetched and fetches again from the last record handed to the
//! application, a store on a partition no longer assigned fails), and the guarantees checked
//! as positions are stored and committed and as records are first called.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::plan::Plan;
use crate::consumer::client::TopicPartition;
use crate::record::Record;

/// The source topic every schedule reads.
pub(super) const SOURCE: &str = "t";

/// The group of every simulated member, which writes the retry records.
pub(super) const GROUP: &str = "simulated";

/// Another service reading the same topic, whose retry records share the retry topics.
pub(super) const OTHER_GROUP: &str = "other-service";

/// One partition: its log and what became of its records, where they were delivered.
#[derive(Default)]
pub(super) struct Partition {
    pub log: Vec<Record>,
    /// Records a handler call returned success for.
    pub handled: BTreeSet<i64>,
    /// Records of this source partition a handler call returned success for, wherever they
    /// were delivered from (this partition, a retry topic, the redrive topic).
    pub applied: BTreeSet<i64>,
    /// Records of this source partition whose place in their key's order `park_max_age`
    /// gave up: heads it expired, and the records parked behind them that followed them to
    /// the dead-letter topic.
    pub gave_up: BTreeSet<i64>,
    /// Records whose dead letter or retry record was acknowledged.
    pub exited: BTreeSet<i64>,
    /// Retry records another group wrote: never this group's to handle, settled as they are.
    pub foreign: BTreeSet<i64>,
    /// No record before this offset is unsettled (settled records only accumulate).
    settled_below: i64,
    /// Per key (one group for all without key order): its offsets in log order, and how many
    /// of them have had their first call.
    order: BTreeMap<Option<Vec<u8>>, (Vec<i64>, usize)>,
}

impl Partition {
    pub(super) fn is_settled(&self, offset: i64) -> bool {
        self.handled.contains(&offset)
            || self.exited.contains(&offset)
            || self.foreign.contains(&offset)
    }

    /// The first offset neither handled nor acknowledged where it exits.
    pub(super) fn first_unsettled(&mut self) -> i64 {
        while self.settled_below < self.log.len() as i64 && self.is_settled(self.settled_below) {
            self.settled_below += 1;
        }
        self.settled_below
    }
}

/// One member's fetch state of one partition.
#[derive(Default)]
pub(super) struct Queue {
    pub records: VecDeque<Record>,
    /// The next offset to fetch into `records`.
    pub fetch: i64,
    /// The next offset to hand to the application (the poll loop): one past the last one
    /// handed out.
    pub app: i64,
}

/// One member's view of the group.
#[derive(Default)]
pub(super) struct Member {
    pub assigned: BTreeSet<TopicPartition>,
    pub paused: BTreeSet<TopicPartition>,
    pub stored: BTreeMap<TopicPartition, i64>,
    /// Where each assigned partition's fetches started: the position committed then.
    pub starts: BTreeMap<TopicPartition, i64>,
    pub queues: BTreeMap<TopicPartition, Queue>,
    /// Each partition's worker waiting for fetched records.
    pub waiting: BTreeMap<TopicPartition, Waker>,
    /// Retry partitions their worker paused to wait for a record's due time, and since when.
    pub retry_waits: BTreeMap<TopicPartition, tokio::time::Instant>,
    /// Partitions their worker paused to drop what their queue held, until it wants more.
    pub trimmed: BTreeSet<TopicPartition>,
}

/// See the module docs.
pub(super) struct World {
    pub start: tokio::time::Instant,
    pub partitions: BTreeMap<TopicPartition, Partition>,
    pub members: Vec<Member>,
    pub committed: BTreeMap<TopicPartition, i64>,
    pub dead_letters: u64,
    /// How long the handler calls that ended (returned or panicked) took, together.
    pub handler_time: Duration,
    /// Calls per record id (its source record's, kept by its retry records).
    pub calls: BTreeMap<String, u32>,
    pub plans: BTreeMap<String, Plan>,
    /// Handler calls at one instant of the simulated clock: when, and how many.
    pub calls_at: (tokio::time::Instant, u64),
    pub downstream_down: bool,
    pub dlq_down: bool,
    pub key_order: bool,
    /// Records a member fetches into a partition's queue at most.
    pub queue_capacity: usize,
    /// Each partition's share of a member's buffer: what a worker's chunk may come to
    /// beyond its first record.
    pub share: usize,
    pub violations: Vec<String>,
    /// Records handled while an earlier record of their key was not (`key_sequence`): not a
    /// violation without parking.
    pub key_sequence_breaks: Vec<String>,
    pub rng: fastrand::Rng,
    /// When another service's retry records share the retry topics: the generator that
    /// decides which of this group's retry writes one follows.
    pub other_group: Option<fastrand::Rng>,
    /// Upper bound of an exit write's acknowledgement delay.
    pub max_ack: Duration,
    /// When `dlq replay` puts dead letters back on the group's redrive topic: the dead
    /// letters acknowledged and not replayed yet.
    pub dead_lettered: Option<Vec<crate::dlq::Envelope>>,
    /// Exactly once: the transaction coordinator, which commits effects and offsets.
    pub exactly_once: Option<super::coordinator::Coordinator>,
    /// With parking ([`super::schedule::Variant::Park`]): each source partition's park log,
    /// and a record handled before an earlier one of its key is a violation.
    pub park_logs: BTreeMap<i32, Vec<crate::park::ParkEvent>>,
    /// Where each park log starts: its events before were trimmed (deleted) by their owner.
    pub park_log_starts: BTreeMap<i32, i64>,
    pub parking: bool,
}

/// Handler calls at one instant that make a loop: far more than a schedule's records.
const LOOPING_CALLS: u64 = 100_000;

/// The wall clock at the simulation's start.
fn epoch() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("a valid date")
        .to_utc()
}

/// Where `record` was delivered: its partition and offset there.
pub(super) fn delivered(record: &Record) -> (TopicPartition, i64) {
    match &record.retry {
        Some(retry) => ((retry.topic.clone(), retry.partition), retry.offset),
        None => ((record.topic.clone(), record.partition), record.offset),
    }
}

impl World {
    pub(super) fn new(
        seed: u64,
        members: usize,
        queue_capacity: usize,
        share: usize,
        key_order: bool,
    ) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            partitions: BTreeMap::new(),
            members: (0..members).map(|_| Member::default()).collect(),
            committed: BTreeMap::new(),
            dead_letters: 0,
            handler_time: Duration::ZERO,
            calls: BTreeMap::new(),
            plans: BTreeMap::new(),
            calls_at: (tokio::time::Instant::now(), 0),
            downstream_down: false,
            dlq_down: false,
            key_order,
            queue_capacity,
            share,
            violations: Vec::new(),
            key_sequence_breaks: Vec::new(),
            rng: fastrand::Rng::with_seed(seed ^ 0x5eed),
            other_group: None,
            max_ack: Duration::from_millis(300),
            dead_lettered: None,
            exactly_once: None,
            park_logs: BTreeMap::new(),
            park_log_starts: BTreeMap::new(),
            parking: false,
        }
    }

    pub(super) fn now(&self) -> DateTime<Utc> {
        epoch()
            + chrono::TimeDelta::from_std(tokio::time::Instant::now() - self.start)
                .expect("simulated time fits")
    }

    pub(super) fn len(&self, tp: &TopicPartition) -> i64 {
        self.partitions.get(tp).map_or(0, |p| p.log.len() as i64)
    }

    /// A new record of the source topic's `partition` with `key`, whose calls follow `plan`.
    pub(super) fn produce(&mut self, partition: i32, key: Option<Vec<u8>>, plan: Plan) {
        let tp = (SOURCE.to_string(), partition);
        let offset = self.len(&tp);
        self.plans
            .insert(format!("{SOURCE}-{partition}-{offset}"), plan);
        let record = {
            let mut record = Record::new(SOURCE.to_string(), partition, 0)
                .with_id(String::new())
                .with_payload(vec![0; 64]);
            record.key = key;
            record
        };
        self.append(&tp, record);
    }

    /// Appends `record` (as written: a retry or redrive topic's record carries the original in
    /// its headers) to `tp`'s log at its end, setting where it was written, and lets every
    /// member fetch it.
    pub(super) fn append(&mut self, tp: &TopicPartition, record: Record) {
        self.append_written_by(tp, record, false);
    }

    /// Appends a retry record another group wrote, as [`World::append`] does.
    pub(super) fn append_foreign(&mut self, tp: &TopicPartition, record: Record) {
        self.append_written_by(tp, record, true);
    }

    fn append_written_by(&mut self, tp: &TopicPartition, mut record: Record, foreign: bool) {
        // Parking passes a parked key's records over: their first calls are in order per key.
        let key_order = self.key_order || self.parking;
        let partition = self.partitions.entry(tp.clone()).or_default();
        let offset = partition.log.len() as i64;
        (record.topic, record.partition, record.offset) = (tp.0.clone(), tp.1, offset);
        record.id = format!("{}-{}-{offset}", tp.0, tp.1);
        if foreign {
            // Never called: no place in the order of first calls.
            partition.foreign.insert(offset);
        } else {
            let key = record.key.clone().filter(|_| key_order);
            partition.order.entry(key).or_default().0.push(offset);
        }
        partition.log.push(record);
        for member in 0..self.members.len() {
            self.fetch(member, tp);
        }
    }

    /// Fills `member`'s queue of `tp` from the log while it is assigned and not paused.
    pub(super) fn fetch(&mut self, member: usize, tp: &TopicPartition) {
        let capacity = self.queue_capacity;
        let Some(partition) = self.partitions.get(tp) else {
            return;
        };
        let m = &mut self.members[member];
        if !m.assigned.contains(tp) || m.paused.contains(tp) {
            return;
        }
        let queue = m.queues.entry(tp.clone()).or_default();
        let mut woke = false;
        while queue.records.len() < capacity && (queue.fetch as usize) < partition.log.len() {
            queue
                .records
                .push_back(partition.log[queue.fetch as usize].clone());
            queue.fetch += 1;
            woke = true;
        }
        if woke {
            if let Some(waker) = m.waiting.remove(tp) {
                waker.wake();
            }
        }
    }

    /// Pauses `member`'s fetches of `tp`: what was fetched is dropped, and fetched again from
    /// the last record handed to the application once resumed.
    pub(super) fn pause(&mut self, member: usize, tp: &TopicPartition) {
        let member = &mut self.members[member];
        member.paused.insert(tp.clone());
        if let Some(queue) = member.queues.get_mut(tp) {
            queue.records.clear();
            queue.fetch = queue.app;
        }
    }

    /// Resumes `member`'s fetches of `tp`.
    pub(super) fn resume(&mut self, member: usize, tp: &TopicPartition) {
        let m = &mut self.members[member];
        m.paused.remove(tp);
        m.retry_waits.remove(tp);
        m.trimmed.remove(tp);
        self.fetch(member, tp);
    }

    /// `tp` assigned to `member`: fetched from the committed position (or the start); its
    /// stored position cleared; resumed, as the consumer's rebalance callback resumes what it
    /// is assigned (librdkafka keeps a pause across re-assignment).
    pub(super) fn assign(&mut self, member: usize, tp: &TopicPartition) {
        let start = self.committed.get(tp).copied().unwrap_or(0);
        let m = &mut self.members[member];
        m.assigned.insert(tp.clone());
        m.stored.remove(tp);
        m.starts.insert(tp.clone(), start);
        m.retry_waits.remove(tp);
        m.trimmed.remove(tp);
        let queue = m.queues.entry(tp.clone()).or_default();
        queue.records.clear();
        queue.fetch = start;
        queue.app = start;
        // A new generation of the group: the member's offsets for it count again.
        if let Some(coordinator) = &mut self.exactly_once {
            coordinator.lost.remove(&(member, tp.clone()));
        }
        self.resume(member, tp);
    }

    /// `member` fetches `tp` from `position` again (an aborted transaction's rewind): what
    /// was fetched is dropped. Fails when `tp` is not assigned to it.
    pub(super) fn seek(
        &mut self,
        member: usize,
        tp: &TopicPartition,
        position: i64,
    ) -> Result<(), rdkafka::error::KafkaError> {
        let m = &mut self.members[member];
        if !m.assigned.contains(tp) {
            let why = format!("{}-{} is not assigned", tp.0, tp.1);
            return Err(rdkafka::error::KafkaError::Seek(why));
        }
        let queue = m.queues.entry(tp.clone()).or_default();
        queue.records.clear();
        queue.fetch = position;
        queue.app = position;
        self.fetch(member, tp);
        Ok(())
    }

    /// `tp` revoked from `member`: its stored position committed, its queue dropped.
    pub(super) fn revoke(&mut self, member: usize, tp: &TopicPartition) {
        self.commit_one(member, tp);
        let m = &mut self.members[member];
        m.assigned.remove(tp);
        m.stored.remove(tp);
        if let Some(queue) = m.queues.get_mut(tp) {
            queue.records.clear();
        }
    }

    /// Commits `member`'s stored positions (the auto-commit, or a commit on revocation).
    pub(super) fn commit(&mut self, member: usize) {
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
    pub(super) fn first_unsettled(&mut self, tp: &TopicPartition) -> i64 {
        self.partitions
            .get_mut(tp)
            .map_or(0, Partition::first_unsettled)
    }

    /// The guarantee: no stored or committed position passes a record that is neither handled
    /// nor acknowledged by its dead-letter or retry topic.
    pub(super) fn check_position(&mut self, tp: &TopicPartition, position: i64, what: &str) {
        let first = self.first_unsettled(tp);
        if position > first {
            let violation = format!(
                "{what} position {position} of {}-{} passes offset {first}, which was neither handled nor acknowledged by its dead-letter or retry topic",
                tp.0, tp.1
            );
            self.violations.push(violation);
        }
    }

    /// A handler call returned success for `record`: noted where it was delivered, and in its
    /// source partition with any earlier record of its key not handled yet (`key_sequence`),
    /// which must at least have been called.
    pub(super) fn handled(&mut self, record: &Record) {
        let (tp, offset) = delivered(record);
        self.partitions
            .entry(tp)
            .or_default()
            .handled
            .insert(offset);
        let source = (record.topic.clone(), record.partition);
        let partition = self.partitions.entry(source.clone()).or_default();
        if let Some(earlier) = super::key_sequence::earlier_unapplied(
            &partition.log,
            |earlier| partition.applied.contains(&earlier) || partition.gave_up.contains(&earlier),
            record.offset,
        ) {
            let id = &partition.log[earlier as usize].id;
            let calls = self.calls.get(id).copied().unwrap_or(0);
            let what = format!(
                "{}-{} offset {} handled before offset {earlier} of its key ({calls} calls, not handled)",
                source.0, source.1, record.offset
            );
            if calls == 0 {
                self.violations.push(format!("{what}: never called"));
            } else if self.parking {
                self.violations
                    .push(format!("{what}: its key was not parked"));
            }
            self.key_sequence_breaks.push(what);
        }
        partition.applied.insert(record.offset);
    }

    /// `record`'s dead letter or retry record was acknowledged.
    pub(super) fn exited(&mut self, record: &Record) {
        let (tp, offset) = delivered(record);
        self.partitions.entry(tp).or_default().exited.insert(offset);
    }

    /// Whether the handler calls go round without the simulated clock moving: a loop that
    /// would never let the schedule take its next step (found as a violation, once).
    pub(super) fn looping(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if self.calls_at.0 != now {
            self.calls_at = (now, 0);
        }
        self.calls_at.1 += 1;
        if self.calls_at.1 == LOOPING_CALLS {
            self.violations.push(format!(
                "{LOOPING_CALLS} handler calls without the simulated clock moving: the workers go round in a loop"
            ));
        }
        self.calls_at.1 >= LOOPING_CALLS
    }

    /// A handler call of `record` begins: counts it and checks the order of first calls (per
    /// partition; per key in key order). Returns the record's plan and which call this is.
    pub(super) fn called(&mut self, record: &Record) -> (Plan, u32) {
        let (tp, offset) = delivered(record);
        if let Some(group) = record
            .retry
            .as_ref()
            .and_then(|r| r.group.as_deref())
            .filter(|g| *g != GROUP)
        {
            self.violations.push(format!(
                "the handler was called for {}-{} offset {offset}, a retry record of the group `{group}`",
                tp.0, tp.1
            ));
            let plan = Plan {
                wait: super::plan::Wait::None,
                outcome: super::plan::Outcome::Ok,
            };
            return (plan, 1);
        }
        // Parking passes a parked key's records over: their first calls are in order per key.
        let key_order = self.key_order || self.parking;
        let known = self.partitions.get_mut(&tp).and_then(|partition| {
            let key = partition.log.get(offset as usize)?.key.clone();
            let (offsets, first_called) = partition.order.get_mut(&key.filter(|_| key_order))?;
            // A record `park_max_age` sent to the dead-letter topic unhandled is never called.
            while offsets
                .get(*first_called)
                .is_some_and(|o| partition.gave_up.contains(o))
            {
                *first_called += 1;
            }
            Some((offsets.binary_search(&offset).ok()?, offsets, first_called))
        });
        let Some((at, offsets, first_called)) = known else {
            self.violations.push(format!(
                "the handler was called for {} as {}-{} offset {offset}, where no record of it was written",
                record.id, tp.0, tp.1
            ));
            let plan = Plan {
                wait: super::plan::Wait::None,
                outcome: super::plan::Outcome::Ok,
            };
            return (plan, 1);
        };
        if at > *first_called {
            let skipped = offsets[*first_called];
            self.violations.push(format!(
                "first call of {}-{} offset {offset} before offset {skipped}'s{}",
                tp.0,
                tp.1,
                if key_order { " (same key)" } else { "" }
            ));
        }
        *first_called = (*first_called).max(at + 1);
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
    pub(super) fn new(world: World) -> Self {
        Self(Arc::new(Mutex::new(world)))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().expect("world lock")
    }
}
