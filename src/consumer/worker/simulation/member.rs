//! A simulated member: its worker settings (one breaker, one dead-letter budget, its consumer,
//! writes and handler over the shared world), its real [`Assignments`] and poll-loop hand-off,
//! and its rebalances: what the rebalance callback and the consumer's loop do, with the world
//! as librdkafka.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::super::Shared;
use super::client::SimClient;
use super::handler::SimHandler;
use super::poll_loop::poll_loop;
use super::producer::SimProducer;
use super::world::{WorldRef, SOURCE};
use super::writes::SimExits;
use crate::config::{ConsumerConfig, Ordering};
use crate::consumer::client::TopicPartition;
use crate::consumer::poll::assignments::{Assigned, Assignments};
use crate::consumer::poll::rewind::rewind;
use crate::consumer::progress::transaction::{commit_when_due, Transaction, TransactionalProducer};
use crate::consumer::progress::Out;
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
    assigned: Arc<Mutex<mpsc::UnboundedReceiver<Assigned>>>,
    /// Exactly once: the workers its poll loop started again after an aborted transaction,
    /// for the schedule to take over.
    pub restarted: Restarted,
}

/// Workers a poll loop started again, each with its partition.
pub(super) type Restarted = Arc<Mutex<Vec<(TopicPartition, JoinHandle<()>)>>>;

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
/// partitions, and its poll loop, started (it runs until the runtime ends).
///
/// With `transactions` (exactly once) its workers settle into a transaction of a
/// [`SimProducer`], committed when due by the real committer, and its poll loop rewinds the
/// partitions of aborted ones with the real rewind.
pub(super) fn member(
    world: &WorldRef,
    member: usize,
    config: &ConsumerConfig,
    budget_kib: usize,
    transactions: Option<Transactions>,
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
    let out = Out {
        budget: Arc::new(tokio::sync::Semaphore::new(budget_kib)),
        ..Out::clone(&shared.out)
    };
    let shared = Arc::new(Shared {
        out: Arc::new(out),
        transaction: transaction.clone(),
        ..shared
    });
    let sim = SimMember {
        shared,
        assignments,
        assigned: Arc::new(Mutex::new(assigned)),
        restarted: Arc::default(),
    };
    if let Some(transaction) = transaction {
        tokio::spawn(commit_when_due(
            transaction.clone(),
            CancellationToken::new(),
            |t| async move { Some(t.commit()) },
        ));
        tokio::spawn(sim.rewinds(world.clone(), member, transaction));
    }
    sim
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
    /// and commits the positions stored so far (exactly once: the open transaction).
    pub(super) fn revoke(&self, world: &WorldRef, member: usize, tp: &TopicPartition) {
        self.assignments.rebalancing();
        self.assignments.revoke(std::slice::from_ref(tp));
        if let Some(transaction) = &self.shared.transaction {
            transaction.commit();
        }
        world.lock().revoke(member, tp);
    }

    /// The poll loop's part in exactly once: each time a transaction aborted, the real
    /// rewind of its partitions, and their new workers started.
    fn rewinds(
        &self,
        world: WorldRef,
        member: usize,
        transaction: Arc<Transaction>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (shared, assignments) = (self.shared.clone(), self.assignments.clone());
        let (assigned, restarted) = (self.assigned.clone(), self.restarted.clone());
        async move {
            let seek = SimClient {
                world: world.clone(),
                member,
            };
            let sources = [SOURCE.to_string()];
            loop {
                transaction.rewound.notified().await;
                if let Err(why) = rewind(&transaction, &seek, &assignments).await {
                    world
                        .lock()
                        .violations
                        .push(format!("member {member} stopped: {why}"));
                    return;
                }
                while let Ok(new) = assigned.lock().expect("assigned lock").try_recv() {
                    let tp = (new.topic.clone(), new.partition);
                    let handle = tokio::spawn(super::super::start(&shared, new, &sources));
                    restarted.lock().expect("restarted lock").push((tp, handle));
                }
            }
        }
    }
}
