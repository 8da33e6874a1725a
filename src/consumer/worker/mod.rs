//! The worker of one assigned partition: reads the partition's records from its own
//! librdkafka queue and settles them, storing offsets as they settle. One idea per file:
//!
//! | file | what |
//! |---|---|
//! | [`intake`] | what a partition's worker is given (the partition, its stage, its metrics) and the one reader of its queue: the next record, what is ready, chunks and batches; cancel-safe |
//! | [`in_order`] | one record (or batch) at a time, in offset order |
//! | [`by_key`] | records of one key in order, of different keys concurrently |
//! | [`bisect`] | a failed batch split in halves until its failing records stand alone |
//! | [`attempt`] | one record: its first call, the shared retries ([`crate::consumer::settle`]), its exit handed to the partition's progress ([`crate::consumer::progress`]) |
//! | [`release`] | a parking partition's turn between chunks: its park log read again, resolved keys' records released in order |
//! | [`retry_wait`] | a retry topic's partition waiting, paused, until its next record is due |
//!
//! The worker's world is behind two small traits — what it asks of the consumer
//! ([`crate::consumer::client::Client`]) and where records that exit are written ([`crate::consumer::progress::writer::ExitWriter`]) — and
//! its records come from the partition's [`Feed`](crate::consumer::poll::feed::Feed), so that
//! `simulation` (tests only) runs the whole worker, reading the world's queues, against simulated
//! partitions on tokio's paused clock, with seeded schedules, and checks its guarantees after
//! every step.

mod attempt;
mod bisect;
mod by_key;
mod in_order;
mod intake;
mod release;
mod retry_wait;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use intake::Intake;

use crate::config::{ConfigError, ConsumerConfig};
use crate::consumer::client::Client;
use crate::consumer::poll::assignments::Assigned;
use crate::consumer::progress::transaction::Transaction;
use crate::consumer::progress::writer::ExitWriter;
use crate::consumer::progress::Out;
use crate::consumer::settle::Caller;
use crate::handler::BatchHandler;
use crate::metrics::Metrics;

/// What the workers of all partitions share.
pub(super) struct Shared<H> {
    /// The handler, the outage breaker and the backoff of a record's calls.
    pub caller: Caller<H>,
    /// The consumer group: a retry record another group wrote is passed over.
    pub group: String,
    /// What the partitions' progress writes with: the exits' writer, the Kafka consumer as
    /// the workers use it, the metrics, the retry tiers, the dead-letter budget.
    pub out: Arc<Out>,
    /// Whether a retry partition without a committed offset is started at its first record
    /// (when `auto_offset_reset` is not `earliest`: a retry record must never be skipped).
    pub retry_from_beginning: bool,
    pub batch_size: usize,
    pub batch_linger: Duration,
    /// `Some(n)`: key-ordered mode with at most `n` records in flight per partition.
    pub key_ordered: Option<usize>,
    /// Exactly once: the transaction settled records go into (see `consumer::progress::transaction`).
    pub transaction: Option<Arc<Transaction>>,
}

impl<H> Shared<H> {
    /// The workers' settings from `config`, calling `handler`, counting in `metrics`, with
    /// their two seams: where records that exit are written and the consumer they use (Kafka,
    /// or the simulation's world). A bad backoff setting is named in the error.
    pub(super) fn new(
        config: &ConsumerConfig,
        handler: H,
        metrics: Metrics,
        exits: Arc<dyn ExitWriter>,
        client: Arc<dyn Client>,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            caller: Caller {
                handler,
                breaker: Arc::new(crate::breaker::Breaker::new(config.breaker())),
                backoff: config.backoff()?,
                metrics: metrics.clone(),
                spans: config
                    .trace_records
                    .then(|| crate::consumer::settle::Spans::new(&config.group_id)),
                while_open: "each partition waits with its next record, probing with one",
            },
            group: config.group_id.clone(),
            out: Arc::new(Out::new(
                exits,
                client,
                metrics,
                config.retry_topic_delays_ms.clone(),
            )),
            retry_from_beginning: config.auto_offset_reset != "earliest",
            batch_size: config.batch_size,
            batch_linger: config.batch_linger,
            key_ordered: (config.ordering == crate::config::Ordering::Key)
                .then_some(config.max_in_flight),
            transaction: None,
        })
    }
}

/// The worker of `assigned`, a newly assigned partition of one of `sources` (the source
/// topics) or of their retry or redrive topics, to run until its assignment ends.
pub(super) fn start<H: BatchHandler>(
    shared: &Arc<Shared<H>>,
    assigned: Assigned,
    sources: &[String],
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let cancel = assigned.cancel.clone();
    let tiers = &shared.out.tiers;
    let stage = tiers.stage_of(&assigned.topic, sources, &shared.group);
    let input = Intake::new(
        assigned,
        shared.out.client.clone(),
        &shared.out.metrics,
        stage,
        tiers.len(),
    );
    // The records a transactional handler's calls produce wait in the worker's task for
    // their record to settle.
    crate::handler::output::scope(run_worker(shared.clone(), input, cancel))
}

/// Runs the worker of one partition until `cancel` fires (revocation or shutdown): in offset
/// order ([`in_order`]; a retry topic's partition always, one record at a time, each when it
/// is due) or by key ([`by_key`]). A handler call in progress when `cancel`
/// fires runs to its end; a backoff wait, a wait for the breaker or a dead-letter retry does
/// not.
async fn run_worker<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    input: Intake,
    cancel: CancellationToken,
) {
    // One worker of a partition at a time: a worker of an earlier assignment of this
    // partition may still be finishing its handler call.
    let reader = input.reader();
    let _lease = tokio::select! {
        biased;
        _ = cancel.cancelled() => return,
        lease = reader.lock_owned() => lease,
    };
    // A retry or redrive topic's records are due one after another: always one at a time, in
    // order.
    if input.stage.is_retry() {
        if shared.retry_from_beginning {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = shared.out.client.start_at_beginning_unless_committed(&input.topic, input.partition) => {}
            }
        }
        return in_order::run(shared, input, cancel).await;
    }
    if let Some(max_in_flight) = shared.key_ordered {
        return by_key::run(shared, input, cancel, max_in_flight).await;
    }
    in_order::run(shared, input, cancel).await
}
