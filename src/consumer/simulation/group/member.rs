//! A simulated member: its worker settings (one breaker, one dead-letter budget, its consumer,
//! writes and handler over the shared world), its real [`Assignments`], its real poll loop,
//! each partition's worker reading its queue in the world, and its rebalances: the rebalance callback's real decisions, with
//! the world as librdkafka.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::SimClient;
use super::fetcher::{SimFeed, SimFetcher};
use super::handler::SimHandler;
use super::park_log::SimParkLog;
use super::plan::{Outcome, Plan, Wait};
use super::producer::SimProducer;
use super::world::{World, WorldRef, SOURCE};
use super::writes::SimExits;
use crate::config::{ConsumerConfig, Ordering};
use crate::consumer::client::TopicPartition;
use crate::consumer::poll::assignments::Assignments;
use crate::consumer::poll::queue_budget::QueueBudget;
use crate::consumer::poll::rebalance::Rebalancing;
use crate::consumer::poll_loop::{PollLoop, Started};
use crate::consumer::progress::transaction::{commit_when_due, Transaction, TransactionalProducer};
use crate::consumer::progress::{Out, Parking};
use crate::consumer::worker::Shared;
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
    /// The rebalance callback's decisions.
    rebalancing: Rebalancing,
    /// Each worker its poll loop started (for an assignment, or again after an aborted
    /// transaction), in order, for the schedule to take over.
    pub started: Started,
}

/// Exactly once: how many records, or how long, a member's transactions take at most.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transactions {
    pub records: usize,
    pub interval: Duration,
}

/// A consumer's settings for `mode` and `tiers`, its breaker quick to open and probe; the
/// backoff is the caller's to set.
pub(super) fn settings(mode: Mode, tiers: &RetryTiers) -> ConsumerConfig {
    let mut config = ConsumerConfig {
        group_id: super::world::GROUP.to_string(),
        retry_topic_delays_ms: tiers.clone(),
        breaker_window: Duration::from_secs(1),
        breaker_min_calls: 4,
        breaker_failure_ratio: 0.5,
        breaker_probe_initial: Duration::from_millis(50),
        breaker_probe_max: Duration::from_millis(400),
        ..ConsumerConfig::default()
    };
    match mode {
        Mode::InOrder => {}
        Mode::Batch { size, linger_ms } => {
            config.batch_size = size;
            config.batch_linger = Duration::from_millis(linger_ms);
        }
        Mode::ByKey { max_in_flight } => {
            config.ordering = Ordering::Key;
            config.max_in_flight = max_in_flight;
        }
    }
    config
}

/// Member `member`'s workers, set up from `config` as the consumer sets them up, over the
/// world: its consumer, writes and handler, `budget_kib` of dead-letter budget; its
/// partitions, and its real poll loop, started (it runs until the runtime ends; a rewind that
/// fails stops it, a violation).
///
/// With `transactions` (exactly once) its workers settle into a transaction of a
/// [`SimProducer`], committed when due by the real committer, and its poll loop rewinds the
/// partitions of aborted ones.
pub(super) fn member(
    world: &WorldRef,
    member: usize,
    config: &ConsumerConfig,
    budget_kib: usize,
    transactions: Option<Transactions>,
) -> SimMember {
    let metrics = Metrics::new();
    let (sender, assigned) = mpsc::unbounded_channel();
    let assignments = Arc::new(Assignments::new(
        metrics.clone(),
        sender,
        CancellationToken::new(),
    ));
    let (feeds, share) = (world.clone(), world.lock().share);
    // Two partitions' bounds: a queue a large batch overshoots is kept while it is the only
    // one, dropped once another is over its bound too.
    let budget = QueueBudget::new(share.saturating_mul(4));
    assignments.split_with(
        Box::new(move |tp| {
            Some(Arc::new(SimFeed {
                world: feeds.clone(),
                member,
                tp: tp.clone(),
                share,
            }))
        }),
        budget,
    );
    let handler = SimHandler {
        world: world.clone(),
    };
    let exits = Arc::new(SimExits {
        world: world.clone(),
        retry_partitions: 1,
    });
    let client = Arc::new(SimClient {
        world: world.clone(),
        member,
    });
    let shared =
        Shared::new(config, handler, metrics.clone(), exits, client).expect("valid settings");
    let transaction = transactions.map(|t| {
        let for_new = world.clone();
        Arc::new(Transaction::new(
            Box::new(SimProducer::new(world, member)),
            Box::new(move || {
                Ok(Box::new(SimProducer::new(&for_new, member)) as Box<dyn TransactionalProducer>)
            }),
            t.records,
            t.interval,
            metrics.clone(),
        ))
    });
    let parking = (config.key_order_after_failure == crate::config::KeyOrderAfterFailure::Park)
        .then(|| Parking {
            log: Arc::new(SimParkLog {
                world: world.clone(),
            }),
            group: config.group_id.clone(),
            max_age: (!config.park_max_age.is_zero()).then_some(config.park_max_age),
        });
    let out = Out {
        budget: Arc::new(tokio::sync::Semaphore::new(budget_kib)),
        park: parking,
        ..Out::clone(&shared.out)
    };
    let shared = Arc::new(Shared {
        out: Arc::new(out),
        transaction: transaction.clone(),
        ..shared
    });
    let started = Started::default();
    let mut poll_loop = PollLoop::new(
        shared.clone(),
        assignments.clone(),
        assigned,
        vec![SOURCE.to_string()],
        Some(started.clone()),
    );
    if let Some(transaction) = &transaction {
        poll_loop.spawn(commit_when_due(
            transaction.clone(),
            CancellationToken::new(),
            |t| async move { Some(t.commit()) },
        ));
    }
    let mut fetcher = SimFetcher;
    let seek = SimClient {
        world: world.clone(),
        member,
    };
    let stopped = world.clone();
    tokio::spawn(async move {
        let never = std::pin::pin!(std::future::pending::<()>());
        if let Err(why) = poll_loop.run(&mut fetcher, &seek, never).await {
            let violation = format!("member {member} stopped: {why}");
            stopped.lock().violations.push(violation);
        }
    });
    SimMember {
        shared,
        rebalancing: Rebalancing {
            assignments,
            transaction,
        },
        started,
    }
}

impl SimMember {
    /// `tp` assigned to this member (`member`): the rebalance callback's decisions, then
    /// librdkafka fetching it from its committed position (resumed). Its poll loop starts
    /// the worker.
    pub(super) fn assign(&self, world: &WorldRef, member: usize, tp: &TopicPartition) {
        self.rebalancing.assign(std::slice::from_ref(tp));
        world.lock().assign(member, tp);
    }

    /// `tp` revoked from this member (`member`): the rebalance callback's decisions (its
    /// assignment ends, then the member's stored positions are committed, or exactly once the
    /// open transaction), then librdkafka drops what it fetched.
    pub(super) fn revoke(&self, world: &WorldRef, member: usize, tp: &TopicPartition) {
        self.rebalancing
            .revoke(std::slice::from_ref(tp), || world.lock().commit(member));
        world.lock().revoke(member, tp);
    }
}

/// A schedule of one member settling in `mode`, with `budget_kib` of dead-letter budget, on
/// the paused clock: `body` runs it.
pub(super) fn one_member(
    mode: Mode,
    budget_kib: usize,
    backoff: std::time::Duration,
    body: impl AsyncFnOnce(WorldRef, SimMember),
) {
    crate::consumer::simulation::quiet();
    let _quiet = tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let world = WorldRef::new(World::new(
            0,
            1,
            64,
            16 << 20,
            matches!(mode, Mode::ByKey { .. }),
        ));
        // A backoff that never grows, without jitter, 3 retries.
        let config = crate::config::ConsumerConfig {
            backoff_initial: backoff,
            backoff_max: backoff,
            backoff_jitter: 0.0,
            max_retries: 3,
            ..settings(mode, &Default::default())
        };
        let member = member(&world, 0, &config, budget_kib, None);
        body(world, member).await;
    });
}

/// Records of `partition` without a key, each settling to its outcome at once.
pub(super) fn produce(world: &WorldRef, partition: i32, outcomes: &[Outcome]) {
    let mut w = world.lock();
    for outcome in outcomes {
        let plan = Plan {
            wait: Wait::None,
            outcome: *outcome,
        };
        w.produce(partition, None, plan);
    }
}
