//! The outage breaker: when the downstream is down, stop, probe, and resume — instead of
//! draining the topic into the dead-letter topic.
//!
//! Retries per record are right for a record that fails; they are wrong for a downstream that
//! is down for ten minutes: every record would use up its retries and be dead-lettered. The
//! breaker watches the outcome of every handler call over a sliding window. When at least
//! `min_calls` calls ended within `window`, the share of transient failures among them reaches
//! `failure_ratio`, and the failures come from more than one record (one record failing again
//! and again is that record's problem, and goes to the dead-letter topic after its retries),
//! the downstream is down, not the records: the breaker **opens**.
//!
//! The breaker needs failures from two records to tell an outage from one bad record, so on a
//! topic with a single partition the first record caught by an outage can use up its retries
//! and be dead-lettered before a second record shows the outage; with several partitions
//! failing at once the breaker opens long before that.
//!
//! While open: every assigned partition is paused; no handler call is made except one
//! **probe** at a time, first after `probe_initial`, then doubling up to `probe_max`; a transient
//! failure while open neither uses up a record's retries nor dead-letters it; the record simply
//! waits. The first probe that does not fail transiently (success, or a permanent failure,
//! which proves the downstream answers) **closes** the breaker: partitions resume, waiting
//! records go on, the window starts empty.
//!
//! Permanent failures never count: they are problems of records, not of the downstream.
//!
//! # Default
//! window 30 s, `min_calls` 20, `failure_ratio` 0.5, probes 1 s doubling to 60 s.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Settings of the breaker.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// The sliding window of call outcomes.
    pub window: Duration,
    /// Fewer calls than this in the window never open the breaker.
    pub min_calls: u32,
    /// Share of transient failures (0 < ratio ≤ 1) that opens the breaker.
    pub failure_ratio: f64,
    /// Wait before the first probe.
    pub probe_initial: Duration,
    /// Cap on the wait between probes.
    pub probe_max: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(30),
            min_calls: 20,
            failure_ratio: 0.5,
            probe_initial: Duration::from_secs(1),
            probe_max: Duration::from_secs(60),
        }
    }
}

/// Open or closed, as published to observers (the monitor, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls flow.
    Closed,
    /// The downstream is considered down; only probes are made.
    Open,
}

/// What a worker may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Call the handler as usual.
    Normal,
    /// Call the handler as the probe of an open breaker; report with [`Breaker::record`].
    Probe,
}

/// How a call ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The downstream answered (success, or a permanent failure of the record).
    Answered,
    /// A transient failure.
    Transient,
}

#[derive(Debug)]
enum Inner {
    Closed(Window),
    Open {
        next_probe: Instant,
        delay: Duration,
        probing: bool,
    },
}

/// The calls of the sliding window, kept cheap at any rate: calls are counted in 100 ms slots;
/// transient failures are kept one by one (they are rare until there is an outage, and then
/// the breaker opens and the window starts over), with a count per failing record.
#[derive(Debug, Default)]
struct Window {
    /// Start of each 100 ms slot and the calls that ended in it.
    slots: VecDeque<(Instant, u32)>,
    calls: u64,
    /// Each transient failure: when, and for which record.
    failures: VecDeque<(Instant, u64)>,
    /// Transient failures per record in the window.
    failing: HashMap<u64, u32>,
}

const SLOT: Duration = Duration::from_millis(100);

/// A window with this many calls, every one of them a transient failure (of at least two
/// records), shows an outage even below `min_calls`; see `Window::outage`.
pub const NOTHING_ANSWERED_CALLS: u64 = 3;

impl Window {
    /// Adds `calls` calls that ended by `now`, `transient` telling whether the last of them
    /// failed transiently (for `record`).
    fn add(&mut self, now: Instant, calls: u32, transient: bool, record: u64, window: Duration) {
        match self.slots.back_mut() {
            Some((start, n)) if now.duration_since(*start) < SLOT => *n += calls,
            _ => self.slots.push_back((now, calls)),
        }
        self.calls += u64::from(calls);
        if transient {
            self.failures.push_back((now, record));
            *self.failing.entry(record).or_default() += 1;
        }
        while let Some((start, n)) = self.slots.front().copied() {
            if now.duration_since(start) <= window {
                break;
            }
            self.slots.pop_front();
            self.calls -= u64::from(n);
        }
        while let Some((at, r)) = self.failures.front().copied() {
            if now.duration_since(at) <= window {
                break;
            }
            self.failures.pop_front();
            if let Some(n) = self.failing.get_mut(&r) {
                *n -= 1;
                if *n == 0 {
                    self.failing.remove(&r);
                }
            }
        }
    }

    /// Whether the window shows an outage under `policy`: transient failures of at least two
    /// records, at least `failure_ratio` of the calls, and either `min_calls` calls or
    /// [`NOTHING_ANSWERED_CALLS`] calls none of which was answered. The second case is an
    /// outage seen on a topic with one to three partitions: each partition in backoff makes
    /// only a few calls a window, too few for `min_calls`, yet nothing gets through.
    fn outage(&self, policy: &BreakerPolicy) -> bool {
        let failures = self.failures.len() as u64;
        let enough = self.calls >= u64::from(policy.min_calls)
            || (self.calls >= NOTHING_ANSWERED_CALLS && failures >= self.calls);
        enough
            && self.failing.len() >= 2
            && failures as f64 / self.calls as f64 >= policy.failure_ratio
    }
}

/// A breaker shared by all partitions of a consumer.
#[derive(Debug)]
pub struct Breaker {
    policy: Option<BreakerPolicy>,
    inner: Mutex<Inner>,
    changed: Notify,
    state: watch::Sender<BreakerState>,
    /// Whether the breaker is open: lets calls through without taking the lock while closed.
    open: AtomicBool,
    /// Calls answered since the window was last updated, counted without the lock; they join
    /// the window at its next update, at most one slot (100 ms) later.
    answered: AtomicU64,
    /// When (nanoseconds after `epoch`) answered calls must next update the window.
    fold_at_ns: AtomicU64,
    epoch: Instant,
}

impl Breaker {
    /// A breaker with `policy`; `None` never opens.
    pub fn new(policy: Option<BreakerPolicy>) -> Self {
        Self {
            policy,
            inner: Mutex::new(Inner::Closed(Window::default())),
            changed: Notify::new(),
            state: watch::channel(BreakerState::Closed).0,
            open: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            fold_at_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Watches the state.
    pub fn subscribe(&self) -> watch::Receiver<BreakerState> {
        self.state.subscribe()
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        *self.state.borrow()
    }

    /// [`Breaker::permit`] when it answers at once: `Some(Permit::Normal)` while the breaker
    /// is closed; `None` while it is open (then `permit` is to be awaited).
    pub fn permit_now(&self) -> Option<Permit> {
        (!self.open.load(Ordering::Acquire)).then_some(Permit::Normal)
    }

    /// Waits until a handler call may be made: at once when closed; when open, until this
    /// caller is granted the probe or the breaker closes.
    pub async fn permit(&self) -> Permit {
        if !self.open.load(Ordering::Acquire) {
            return Permit::Normal;
        }
        loop {
            let notified = self.changed.notified();
            let wait = {
                let mut inner = self.inner.lock().expect("breaker lock");
                match &mut *inner {
                    Inner::Closed { .. } => return Permit::Normal,
                    Inner::Open {
                        next_probe,
                        probing,
                        ..
                    } => {
                        let now = Instant::now();
                        if !*probing && now >= *next_probe {
                            *probing = true;
                            return Permit::Probe;
                        }
                        if *probing {
                            None
                        } else {
                            Some(*next_probe)
                        }
                    }
                }
            };
            match wait {
                Some(at) => {
                    tokio::select! {
                        biased;
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Records how a call made with `permit` for the record identified by `record` (any stable
    /// number, e.g. a hash of topic, partition and offset) ended. Returns the new state when it
    /// changed.
    pub fn record(
        &self,
        permit: Permit,
        outcome: CallOutcome,
        record: u64,
    ) -> Option<BreakerState> {
        self.record_at(permit, outcome, record, Instant::now())
    }

    /// [`record`](Self::record) for a call that ended at `now` (saves reading the clock when
    /// the caller has just read it).
    pub fn record_at(
        &self,
        permit: Permit,
        outcome: CallOutcome,
        record: u64,
        now: Instant,
    ) -> Option<BreakerState> {
        let policy = self.policy.as_ref()?;
        if permit == Permit::Normal && outcome == CallOutcome::Answered {
            self.record_answered(1, now);
            return None;
        }
        let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
        let mut inner = self.inner.lock().expect("breaker lock");
        let earlier = self.answered.swap(0, Ordering::Relaxed) as u32;
        self.fold_at_ns
            .store(now_ns + SLOT.as_nanos() as u64, Ordering::Relaxed);
        let changed = match (&mut *inner, permit) {
            (Inner::Closed(window), _) => {
                if earlier > 0 {
                    window.add(now, earlier, false, record, policy.window);
                }
                window.add(
                    now,
                    1,
                    outcome == CallOutcome::Transient,
                    record,
                    policy.window,
                );
                if window.outage(policy) {
                    *inner = Inner::Open {
                        next_probe: now + policy.probe_initial,
                        delay: policy.probe_initial,
                        probing: false,
                    };
                    Some(BreakerState::Open)
                } else {
                    None
                }
            }
            (Inner::Open { .. }, Permit::Probe) if outcome == CallOutcome::Answered => {
                *inner = Inner::Closed(Window::default());
                Some(BreakerState::Closed)
            }
            (
                Inner::Open {
                    next_probe,
                    delay,
                    probing,
                },
                Permit::Probe,
            ) => {
                *delay = (*delay * 2).min(policy.probe_max);
                *next_probe = now + *delay;
                *probing = false;
                None
            }
            // A call that started before the breaker opened: it neither opens nor closes it.
            (Inner::Open { .. }, Permit::Normal) => None,
        };
        if let Some(state) = changed {
            self.open
                .store(state == BreakerState::Open, Ordering::Release);
        }
        drop(inner);
        if let Some(state) = changed {
            self.state.send_replace(state);
        }
        if changed.is_some() || permit == Permit::Probe {
            self.changed.notify_waiters();
        }
        changed
    }

    /// Records `calls` calls made with [`Permit::Normal`] that were answered, the last of them
    /// ending at `now`: the same as [`record_at`](Self::record_at) for each of them, in one
    /// step. Answered calls never change the state. For a caller that counts its calls
    /// itself (a worker settling many records a second), so that the count shared by all
    /// workers is touched once per batch rather than once per record.
    pub fn record_answered(&self, calls: u32, now: Instant) {
        let Some(policy) = self.policy.as_ref().filter(|_| calls > 0) else {
            return;
        };
        let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
        self.answered.fetch_add(u64::from(calls), Ordering::Relaxed);
        if now_ns < self.fold_at_ns.load(Ordering::Relaxed) {
            return;
        }
        let mut inner = self.inner.lock().expect("breaker lock");
        let answered = self.answered.swap(0, Ordering::Relaxed) as u32;
        self.fold_at_ns
            .store(now_ns + SLOT.as_nanos() as u64, Ordering::Relaxed);
        // While open, calls that started before it opened neither open nor close it.
        if let Inner::Closed(window) = &mut *inner {
            window.add(now, answered, false, 0, policy.window);
        }
    }

    /// Gives back a probe that was granted but whose call never ended (its future was dropped,
    /// e.g. at revocation): the next caller may probe at once. Without this, every later
    /// [`permit`](Self::permit) would wait forever for a probe that no one makes.
    pub fn abandon_probe(&self) {
        let mut inner = self.inner.lock().expect("breaker lock");
        if let Inner::Open {
            next_probe,
            probing,
            ..
        } = &mut *inner
        {
            if *probing {
                *probing = false;
                *next_probe = Instant::now();
                drop(inner);
                self.changed.notify_waiters();
            }
        }
    }

    /// Whether a transient failure now should wait for the breaker instead of using up a retry.
    pub fn is_open(&self) -> bool {
        self.state() == BreakerState::Open
    }
}

#[cfg(test)]
mod tests;
