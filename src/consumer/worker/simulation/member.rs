//! A simulated member: its worker settings (one breaker, one dead-letter budget, its consumer,
//! writes and handler over the shared world) and the start of a partition's worker, as the
//! consumer's poll loop starts it.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::super::client::TopicPartition;
use super::super::input::PartitionInput;
use super::super::{run_worker, Shared};
use super::client::SimClient;
use super::handler::SimHandler;
use super::poll_loop::poll_loop;
use super::world::{WorldRef, SOURCE};
use super::writes::SimExits;
use crate::backoff::ExponentialBackoff;
use crate::breaker::{Breaker, BreakerPolicy};
use crate::consumer::context::Assigned;
use crate::consumer::inbox::Inbox;
use crate::metrics::Metrics;
use crate::retry_tier::RetryTiers;

/// How a schedule's workers settle records.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    InOrder,
    Batch { size: usize, linger_ms: u64 },
    ByKey { max_in_flight: usize },
}

/// Member `member`'s worker settings and world: its consumer, writes, handler and breaker;
/// and its poll loop, started (it runs until the runtime ends).
pub(super) fn member(
    world: &WorldRef,
    member: usize,
    mode: Mode,
    tiers: &RetryTiers,
    backoff: &ExponentialBackoff,
    budget_kib: usize,
) -> Arc<Shared<SimHandler>> {
    tokio::spawn(poll_loop(world.clone(), member));
    Arc::new(Shared {
        group: super::world::GROUP.to_string(),
        handler: SimHandler {
            world: world.clone(),
        },
        exits: Arc::new(SimExits {
            world: world.clone(),
            retry_partitions: 1,
        }),
        backoff: backoff.clone(),
        client: Arc::new(SimClient {
            world: world.clone(),
            member,
        }),
        retry_from_beginning: false,
        metrics: Metrics::new(),
        breaker: Breaker::new(Some(BreakerPolicy {
            window: Duration::from_secs(1),
            min_calls: 4,
            failure_ratio: 0.5,
            probe_initial: Duration::from_millis(50),
            probe_max: Duration::from_millis(400),
        })),
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
        trace_records: false,
        retry_tiers: tiers.clone(),
        dead_letter_budget: Arc::new(tokio::sync::Semaphore::new(budget_kib)),
    })
}

/// Assigns `tp` to `member` in the world with a fresh inbox and starts its worker, reading
/// under `reader`, as the consumer's rebalance callback and poll loop do.
pub(super) fn start_worker(
    world: &WorldRef,
    shared: &Arc<Shared<SimHandler>>,
    member: usize,
    tp: &TopicPartition,
    reader: Arc<tokio::sync::Mutex<()>>,
) -> (CancellationToken, JoinHandle<()>) {
    let (inbox, spares) = {
        let mut world = world.lock();
        let inbox = Arc::new(Inbox::new(world.members[member].budget.clone()));
        world.assign(member, tp, inbox.clone());
        (inbox, world.members[member].spares.clone())
    };
    let tiers = &shared.retry_tiers;
    let stage = tiers.stage_of(&tp.0, &[SOURCE.to_string()], &shared.group);
    let cancel = CancellationToken::new();
    let assigned = Assigned {
        topic: tp.0.clone(),
        partition: tp.1,
        inbox,
        reader,
        cancel: cancel.clone(),
        // Every end of a simulated assignment is a revocation.
        revoked: cancel.clone(),
        spares,
    };
    let input = PartitionInput::new(
        assigned,
        shared.client.clone(),
        &shared.metrics,
        stage,
        tiers.len(),
    );
    let handle = tokio::spawn(run_worker(shared.clone(), input, cancel.clone()));
    (cancel, handle)
}
