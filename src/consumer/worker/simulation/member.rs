//! A simulated member: its worker settings (one breaker, one dead-letter budget, its consumer,
//! writes and handler over the shared world), its real [`Assignments`] and poll-loop hand-off,
//! and its rebalances: what the rebalance callback and the consumer's loop do, with the world
//! as librdkafka.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::super::client::TopicPartition;
use super::super::Shared;
use super::client::SimClient;
use super::handler::SimHandler;
use super::poll_loop::poll_loop;
use super::world::{WorldRef, SOURCE};
use super::writes::SimExits;
use crate::backoff::ExponentialBackoff;
use crate::breaker::{Breaker, BreakerPolicy};
use crate::consumer::assignments::{Assigned, Assignments};
use crate::consumer::settle::Caller;
use crate::metrics::Metrics;
use crate::retry_tier::RetryTiers;

/// How a schedule's workers settle records.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    InOrder,
    Batch { size: usize, linger_ms: u64 },
    ByKey { max_in_flight: usize },
}

/// A simulated member: its workers' settings and its partitions.
pub(super) struct SimMember {
    pub shared: Arc<Shared<SimHandler>>,
    pub assignments: Arc<Assignments>,
    /// Where `assignments` sends newly assigned partitions.
    assigned: Mutex<mpsc::UnboundedReceiver<Assigned>>,
}

/// Member `member`'s worker settings and world: its consumer, writes, handler and breaker;
/// its partitions, and its poll loop, started (it runs until the runtime ends).
pub(super) fn member(
    world: &WorldRef,
    member: usize,
    mode: Mode,
    tiers: &RetryTiers,
    backoff: &ExponentialBackoff,
    budget_kib: usize,
) -> SimMember {
    let metrics = Metrics::new();
    let (sender, assigned) = mpsc::unbounded_channel();
    let inbox_budget = world.lock().inbox_budget;
    let assignments = Arc::new(Assignments::new(
        metrics.clone(),
        sender,
        CancellationToken::new(),
        inbox_budget,
    ));
    tokio::spawn(poll_loop(world.clone(), member, assignments.clone()));
    let shared = Arc::new(Shared {
        group: super::world::GROUP.to_string(),
        caller: Caller {
            handler: SimHandler {
                world: world.clone(),
            },
            breaker: Arc::new(Breaker::new(Some(BreakerPolicy {
                window: Duration::from_secs(1),
                min_calls: 4,
                failure_ratio: 0.5,
                probe_initial: Duration::from_millis(50),
                probe_max: Duration::from_millis(400),
            }))),
            backoff: backoff.clone(),
            metrics: metrics.clone(),
            trace_records: false,
            while_open: "each partition waits",
        },
        exits: Arc::new(SimExits {
            world: world.clone(),
            retry_partitions: 1,
        }),
        client: Arc::new(SimClient {
            world: world.clone(),
            member,
        }),
        retry_from_beginning: false,
        metrics,
        batch_size: match mode {
            Mode::Batch { size, .. } => size,
            _ => 1,
        },
        batch_linger: match mode {
            Mode::Batch { linger_ms, .. } => Duration::from_millis(linger_ms),
            _ => Duration::ZERO,
        },
        key_ordered: match mode {
            Mode::ByKey { max_in_flight } => Some(max_in_flight),
            _ => None,
        },
        retry_tiers: tiers.clone(),
        dead_letter_budget: Arc::new(tokio::sync::Semaphore::new(budget_kib)),
    });
    SimMember {
        shared,
        assignments,
        assigned: Mutex::new(assigned),
    }
}

impl SimMember {
    /// `tp` assigned to this member (`member`): the rebalance callback's assignment, librdkafka
    /// fetching it from its committed position, and the consumer's loop starting its worker.
    pub(super) fn assign(
        &self,
        world: &WorldRef,
        member: usize,
        tp: &TopicPartition,
    ) -> JoinHandle<()> {
        self.assignments.rebalancing();
        self.assignments.assign(std::slice::from_ref(tp));
        world.lock().assign(member, tp);
        let assigned = self
            .assigned
            .lock()
            .expect("assigned lock")
            .try_recv()
            .expect("the assignment sent its partition");
        let sources = [SOURCE.to_string()];
        tokio::spawn(super::super::start(&self.shared, assigned, &sources))
    }

    /// `tp` revoked from this member (`member`): the rebalance callback ends its assignment
    /// and commits the positions stored so far.
    pub(super) fn revoke(&self, world: &WorldRef, member: usize, tp: &TopicPartition) {
        self.assignments.rebalancing();
        self.assignments.revoke(std::slice::from_ref(tp));
        world.lock().revoke(member, tp);
    }
}
