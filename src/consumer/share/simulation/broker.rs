//! The simulated share partition: each record available, acquired by one member under a lock
//! (expiring unless renewed), accepted or archived, with its delivery count, as Kafka's share
//! partition keeps them (KIP-932); and each member's client of it, checking what the member
//! asks as it asks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::acknowledgement::Ack;
use super::super::client::{Acquired, Pending, ShareClient};
use crate::breaker::Breaker;
use crate::record::Record;

/// The topic of the simulated partition.
pub(super) const TOPIC: &str = "jobs";

/// A record's state on the broker.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum State {
    Available,
    Acquired {
        member: usize,
        token: u64,
        until: Instant,
    },
    Accepted,
    /// Never delivered again: rejected, or its last delivery released or expired.
    Archived(&'static str),
}

/// One record of the partition.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub state: State,
    pub deliveries: u16,
}

/// The partition and what the checks need to know about the members.
pub(super) struct Partition {
    pub lock_duration: Duration,
    pub limit: u16,
    pub slots: Vec<Slot>,
    next_token: u64,
    /// Members killed (their tasks dropped): their locks may expire.
    pub killed: Vec<usize>,
    /// Records a handler call succeeded for, with how many successful calls.
    pub handled: HashMap<usize, u32>,
    /// The delivery of each record its last successful call was made in.
    pub handled_in: HashMap<usize, u16>,
    /// Records whose dead letter was acknowledged.
    pub dead_lettered: HashMap<usize, u32>,
    /// Handler calls in progress, by record: the member making it.
    pub in_call: HashMap<usize, usize>,
    /// Handler calls made, by record.
    pub calls: HashMap<usize, u32>,
    /// Records whose call or dead-letter write was dropped before it ended (the shutdown
    /// deadline).
    pub cut_calls: HashSet<usize>,
    /// Whether the downstream is down (every call fails transiently).
    pub downstream_down: bool,
    /// Locks that expired, with whether their member had been killed.
    pub expired: Vec<(usize, bool)>,
    /// Acknowledgements on their way to the broker: when they arrive, from which member, for
    /// which token. A killed member's are lost with it.
    pub pending: Vec<(Instant, usize, u64, Ack)>,
    /// Acknowledgements the broker refused: their lock had expired before they arrived.
    pub refused: u64,
    pub violations: Vec<String>,
}

/// The partition, shared by the members' clients, handlers and dead-letter writers.
#[derive(Clone)]
pub(super) struct PartitionRef(pub Arc<Mutex<Partition>>);

impl PartitionRef {
    pub(super) fn new(records: usize, lock: Duration, limit: u16) -> Self {
        Self(Arc::new(Mutex::new(Partition {
            lock_duration: lock,
            limit,
            slots: vec![
                Slot {
                    state: State::Available,
                    deliveries: 0,
                };
                records
            ],
            next_token: 0,
            killed: Vec::new(),
            handled: HashMap::new(),
            handled_in: HashMap::new(),
            dead_lettered: HashMap::new(),
            in_call: HashMap::new(),
            calls: HashMap::new(),
            cut_calls: HashSet::new(),
            downstream_down: false,
            expired: Vec::new(),
            pending: Vec::new(),
            refused: 0,
            violations: Vec::new(),
        })))
    }

    /// The partition as it is now: the acknowledgements that have arrived applied, in the
    /// order they arrived, and the locks that have expired meanwhile released (or archived on
    /// their last delivery).
    pub(super) fn lock(&self) -> MutexGuard<'_, Partition> {
        let mut p = self.0.lock().expect("partition lock");
        let now = Instant::now();
        p.pending.sort_by_key(|(at, ..)| *at);
        let arrived: Vec<_> = {
            let split = p.pending.partition_point(|(at, ..)| *at <= now);
            p.pending.drain(..split).collect()
        };
        for (at, member, token, ack) in arrived {
            p.expire(at);
            p.arrive(member, token, ack, at);
        }
        p.expire(now);
        p
    }
}

impl Partition {
    /// An acknowledgement from `member` for `token` arriving at `at`.
    fn arrive(&mut self, member: usize, token: u64, ack: Ack, at: Instant) {
        let Some((record, holder)) = self.holder(token) else {
            self.refused += 1;
            return;
        };
        if holder != member {
            self.violations.push(format!(
                "member {member} acknowledged member {holder}'s record"
            ));
        }
        let deliveries = self.slots[record].deliveries;
        self.slots[record].state = match ack {
            Ack::Accept => State::Accepted,
            Ack::Release if deliveries >= self.limit => {
                State::Archived("released on its last delivery")
            }
            Ack::Release => State::Available,
            Ack::Reject => State::Archived("rejected"),
            Ack::Renew => State::Acquired {
                member,
                token,
                until: at + self.lock_duration,
            },
        };
    }

    fn expire(&mut self, now: Instant) {
        let limit = self.limit;
        let mut expired = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let State::Acquired { member, until, .. } = slot.state {
                if until <= now {
                    slot.state = if slot.deliveries >= limit {
                        State::Archived("last delivery's lock expired")
                    } else {
                        State::Available
                    };
                    expired.push((i, member));
                }
            }
        }
        for (record, member) in expired {
            let killed = self.killed.contains(&member);
            if !killed {
                self.violations.push(format!(
                    "the lock of record {record} expired while member {member}, alive, held it (never renewed)"
                ));
            }
            self.expired.push((record, killed));
        }
    }

    pub(super) fn holder(&self, token: u64) -> Option<(usize, usize)> {
        self.slots
            .iter()
            .enumerate()
            .find_map(|(i, s)| match s.state {
                State::Acquired {
                    member, token: t, ..
                } if t == token => Some((i, member)),
                _ => None,
            })
    }

    /// Whether every record is accepted or archived.
    pub(super) fn settled(&self) -> bool {
        self.slots
            .iter()
            .all(|s| matches!(s.state, State::Accepted | State::Archived(_)))
    }
}

/// One member's client of the partition.
pub(super) struct SimClient {
    pub partition: PartitionRef,
    pub member: usize,
    pub max: usize,
    /// The member's breaker and stop, for the check that nothing is released for an outage.
    pub breaker: Arc<Breaker>,
    pub stop: CancellationToken,
    /// The records this member was given and has not acknowledged, by token.
    pub outstanding: Mutex<HashMap<u64, usize>>,
}

impl ShareClient for SimClient {
    fn acquire(&self, wait: Duration) -> Pending<'_, Result<Vec<Acquired>, String>> {
        Box::pin(async move {
            let until = Instant::now() + wait;
            loop {
                {
                    let mut p = self.partition.lock();
                    let mut outstanding = self.outstanding.lock().expect("outstanding lock");
                    if !outstanding.is_empty() {
                        p.violations.push(format!(
                            "member {} fetched while it held records not yet acknowledged",
                            self.member
                        ));
                    }
                    let lock = p.lock_duration;
                    let now = Instant::now();
                    let mut acquired = Vec::new();
                    // Like batch_optimized acquisition: up to `max`, sometimes a few more
                    // (the rest of a producer batch).
                    let max = self.max + (p.next_token % 3) as usize;
                    for i in 0..p.slots.len() {
                        if acquired.len() == max {
                            break;
                        }
                        if p.slots[i].state != State::Available {
                            continue;
                        }
                        let token = p.next_token;
                        p.next_token += 1;
                        let slot = &mut p.slots[i];
                        slot.deliveries += 1;
                        slot.state = State::Acquired {
                            member: self.member,
                            token,
                            until: now + lock,
                        };
                        let mut record = Record::new(TOPIC, 0, i as i64);
                        record.delivery_count = Some(slot.deliveries);
                        outstanding.insert(token, i);
                        acquired.push(Acquired { record, token });
                    }
                    if !acquired.is_empty() {
                        // For the trace a replayed seed is compared by.
                        let records: Vec<i64> = acquired.iter().map(|a| a.record.offset).collect();
                        tracing::debug!(member = self.member, ?records, "acquired");
                        return Ok(acquired);
                    }
                }
                if Instant::now() >= until {
                    return Ok(Vec::new());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }

    fn acknowledge(&self, token: u64, ack: Ack) -> Result<(), String> {
        let mut p = self.partition.lock();
        let mut outstanding = self.outstanding.lock().expect("outstanding lock");
        let Some(&record) = outstanding.get(&token) else {
            return Err("the record is not awaiting acknowledgement".into());
        };
        match ack {
            Ack::Accept => {
                if !p.handled.contains_key(&record) && !p.dead_lettered.contains_key(&record) {
                    p.violations.push(format!(
                        "record {record} accepted, neither handled nor dead-lettered"
                    ));
                }
            }
            Ack::Release => {
                if p.handled_in.get(&record) == Some(&p.slots[record].deliveries) {
                    p.violations.push(format!(
                        "record {record} released by member {} after it was handled in this delivery",
                        self.member
                    ));
                }
                if self.breaker.is_open() && !self.stop.is_cancelled() {
                    p.violations.push(format!(
                        "record {record} released by member {} while its breaker was open (an outage is not the record's fault)",
                        self.member
                    ));
                }
            }
            Ack::Reject | Ack::Renew => {}
        }
        if ack != Ack::Renew {
            outstanding.remove(&token);
        }
        tracing::debug!(member = self.member, record, ?ack, "acknowledged");
        // On its way: it arrives a little later (0 to 150 ms), or never if the member is
        // killed first.
        let delay = Duration::from_millis((token * 7_919 + ack as u64 * 31) % 150);
        p.pending
            .push((Instant::now() + delay, self.member, token, ack));
        Ok(())
    }

    fn flush(&self) -> Pending<'_, ()> {
        Box::pin(async move {
            // The last acknowledgements of a member that stops arrive now.
            let now = Instant::now();
            let mut p = self.partition.0.lock().expect("partition lock");
            for pending in p.pending.iter_mut().filter(|(_, m, ..)| *m == self.member) {
                pending.0 = pending.0.min(now);
            }
        })
    }

    fn lock_duration(&self) -> Option<Duration> {
        Some(self.partition.lock().lock_duration)
    }

    fn assigned_partitions(&self) -> usize {
        1
    }
}
