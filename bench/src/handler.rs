//! The handler kafka-dlq runs in each scenario, and how the bench knows it is done.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kafka_dlq::{FailureKind, Handler, HandlerError, Record};

use crate::figures::cpu_time;

/// What the handler does with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Nothing.
    Noop,
    /// Fails every 100th offset permanently.
    Poison1,
    /// Fails every 10th offset permanently: ten times the dead letters of [`Poison1`], so
    /// that the CPU a dead letter costs stands out of the run's noise.
    ///
    /// [`Poison1`]: Behaviour::Poison1
    Poison10,
    /// Fails partition 0's first record transiently (into a 10-minute back-off).
    Stalled,
    /// A 1 ms downstream call ([`downstream`]).
    Slow,
    /// Parallel Consumer's README workload: the value's first digit is the milliseconds of
    /// work (0 to 5).
    Readme,
}

/// A count per partition, each on its own cache line: the workers of different partitions
/// run on different threads, and one shared counter bumped for every record would cost the
/// scenario more than the plain loop's local count costs the baseline.
pub struct Counts(Box<[Counter]>);

#[repr(align(128))]
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counts {
    pub fn new(partitions: i32) -> Self {
        Self((0..partitions.max(1)).map(|_| Counter::default()).collect())
    }

    /// Counts one more for `partition`; returns its count now.
    pub fn add(&self, partition: i32) -> u64 {
        let shard = &self.0[partition as usize % self.0.len()];
        shard.0.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// Tells the bench when the handler has seen every record of the partitions it watches,
/// without the bench polling a counter (a timer firing every millisecond costs the consumer
/// CPU that the baseline does not pay).
pub struct Goal {
    /// Records to see per partition.
    targets: Box<[u64]>,
    /// Partitions whose records are not all seen yet.
    left: AtomicUsize,
    /// When the last of them was seen, and the CPU time then.
    pub reached: OnceLock<(Instant, Duration)>,
    pub notify: tokio::sync::Notify,
}

impl Goal {
    pub fn new(targets: &[u64]) -> Self {
        Self {
            targets: targets.into(),
            left: targets.iter().filter(|t| **t > 0).count().into(),
            reached: OnceLock::new(),
            notify: tokio::sync::Notify::new(),
        }
    }

    /// The handler has now seen `seen` records of `partition`.
    pub fn saw(&self, partition: i32, seen: u64) {
        let target = self.targets.get(partition as usize).copied().unwrap_or(0);
        if seen == target && self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _ = self.reached.set((Instant::now(), cpu_time()));
            self.notify.notify_one();
        }
    }
}

/// The scenario's handler: behaves as told, counts what it is done with.
pub struct BenchHandler {
    pub behaviour: Behaviour,
    /// When the handler was first called, and the process's CPU time then: the clock's start.
    pub first: Arc<OnceLock<(Instant, Duration)>>,
    /// Records the handler is done with (accepted or failed permanently), per partition.
    pub seen: Arc<Counts>,
    /// Records that failed permanently: the dead letters to wait for.
    pub failed: Arc<AtomicU64>,
    pub goal: Option<Arc<Goal>>,
}

impl Handler for BenchHandler {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        self.first.get_or_init(|| (Instant::now(), cpu_time()));
        let result = self.outcome(record).await;
        let done = match &result {
            Ok(()) => true,
            Err(e) if e.kind() == FailureKind::Permanent => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        };
        if done {
            let seen = self.seen.add(record.partition);
            if let Some(goal) = &self.goal {
                goal.saw(record.partition, seen);
            }
        }
        result
    }
}

impl BenchHandler {
    async fn outcome(&self, record: &Record) -> Result<(), HandlerError> {
        match self.behaviour {
            Behaviour::Noop => Ok(()),
            Behaviour::Poison1 if record.offset % 100 == 0 => {
                Err(HandlerError::permanent("poison record"))
            }
            Behaviour::Poison1 => Ok(()),
            Behaviour::Poison10 if record.offset % 10 == 0 => {
                Err(HandlerError::permanent("poison record"))
            }
            Behaviour::Poison10 => Ok(()),
            Behaviour::Stalled if record.partition == 0 && record.offset == 0 => {
                Err(HandlerError::transient("stuck downstream for partition 0"))
            }
            Behaviour::Stalled => Ok(()),
            Behaviour::Slow => {
                downstream(1).await;
                Ok(())
            }
            Behaviour::Readme => {
                downstream(work_ms(record.payload.as_deref())).await;
                Ok(())
            }
        }
    }
}

/// A downstream call that takes `ms` milliseconds, as long as the Java peers'
/// `Thread.sleep(ms)` (see [`crate::delay`]).
pub async fn downstream(ms: u64) {
    if ms > 0 {
        crate::delay::delay(Duration::from_millis(ms)).await;
    }
}

/// Milliseconds of work a `readme` record takes: its value's first digit (the Java peers
/// read it the same way).
pub fn work_ms(value: Option<&[u8]>) -> u64 {
    match value.and_then(|v| v.first()) {
        Some(d) if d.is_ascii_digit() => u64::from(d - b'0'),
        _ => 0,
    }
}
