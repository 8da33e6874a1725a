//! The at-least-once consumer: poll, hand each record to the handler, retry, dead-letter,
//! commit.
//!
//! # How records flow
//! One loop polls rdkafka's `StreamConsumer` and puts each record on its partition's queue;
//! each assigned partition has one worker task that settles its records **in offset order**:
//! it calls the [`Handler`], retries transient failures with backoff, and dead-letters
//! permanent failures and exhausted retries. A record is *settled* when the handler succeeded
//! or the dead-letter topic acknowledged it; only then is its offset stored, and stored offsets
//! are committed every second, on rebalance and at shutdown. So an offset never passes a record
//! that was neither handled nor safely dead-lettered.
//!
//! # Why per-partition queues
//! A record in backoff holds back only its own partition: the other partitions' workers carry
//! on. The poll loop never waits for a handler, so the consumer keeps polling (and stays in the
//! group) however long a backoff lasts. When a partition's queue holds
//! [`max_buffered_records`](ConsumerConfig::max_buffered_records) records, that partition is
//! paused in librdkafka and resumed when half of them are done: memory stays bounded when the
//! handler is slower than the broker.
//!
//! # Key order
//! With [`ordering`](ConsumerConfig::ordering) `key`, a partition's worker runs records of
//! different keys concurrently (up to `max_in_flight`), records of one key in offset order, and
//! stores offsets only over the longest prefix of settled records.
//!
//! # Batches
//! With a [`BatchHandler`](crate::handler::BatchHandler) and
//! [`batch_size`](ConsumerConfig::batch_size) > 1, a worker hands its partition's records over
//! in batches (up to `batch_size`, waiting up to `batch_linger_ms` after the first); a failed
//! batch is bisected until the failing records stand alone, and only they go through the
//! retry and dead-letter policy. Offsets are stored as each part settles, in order.
//!
//! # Outage breaker
//! All workers share one [`Breaker`](crate::breaker::Breaker): when most recent calls fail
//! transiently, every partition is paused and one record probes the downstream at growing
//! intervals; records wait without using up their retries, so an outage does not drain the
//! topic into the dead-letter topic. See [`crate::breaker`].
//!
//! # Rebalance
//! On revocation the revoked partitions' workers stop: a handler call in progress runs to its
//! end, a record in backoff is abandoned (not dead-lettered) and its offset is not stored; then
//! the stored offsets are committed, so the new owner starts after the last settled record.
//!
//! # Shutdown
//! When the `shutdown` future given to [`Consumer::run`] completes: polling stops, each worker
//! finishes its handler call in progress (within
//! [`shutdown_timeout_ms`](ConsumerConfig::shutdown_timeout_ms); past it, the remaining calls
//! are dropped), records waiting or in backoff are left for the next run, stored offsets are
//! committed, and the consumer leaves the group.
//!
//! # Broker trouble
//! librdkafka reconnects by itself; the poll loop logs each poll error and waits before
//! polling again, 1 s doubling to 30 s, reset by the next record. Errors that queued up during
//! the wait are taken at once afterwards, so recovery is not delayed by a backlog of stale
//! errors. A broker outage never ends [`Consumer::run`]; only a fatal client error does (after
//! the usual drain and commit).

mod context;
mod partition;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::Message;
use thiserror::Error;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backoff::ExponentialBackoff;
use crate::config::{ConfigError, ConsumerConfig};
use crate::dlq::DeadLetterPublisher;
use crate::handler::BatchHandler;
use crate::metrics::Metrics;
use crate::record::Record;
use context::{commit_stored, PartitionSlot, Partitions, RebalanceContext};
use partition::{run_worker, PartitionQueue, Shared};

/// How long the poll loop waits for a full partition queue to drain before pausing the
/// partition: a worker that keeps up drains it in time, so fast partitions never pause (a pause
/// makes librdkafka drop and fetch again what it had prefetched for the partition).
const PAUSE_GRACE: std::time::Duration = std::time::Duration::from_millis(5);

/// Why the consumer could not start.
#[derive(Debug, Error)]
pub enum ConsumerError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused the consumer configuration.
    #[error("could not create the Kafka consumer: {0}")]
    CreateConsumer(#[source] KafkaError),
    /// librdkafka refused the dead-letter producer configuration.
    #[error("could not create the dead-letter producer: {0}")]
    CreateProducer(#[source] KafkaError),
    /// The Kafka client hit a fatal error (for example, fenced by a newer instance with the
    /// same `group.instance.id`) and cannot go on.
    #[error("fatal Kafka client error {code}: {reason}")]
    Fatal {
        /// librdkafka's error code.
        code: rdkafka::types::RDKafkaErrorCode,
        /// librdkafka's description.
        reason: String,
    },
    /// Subscribing to the topics failed.
    #[error("could not subscribe to {topics:?}: {source}")]
    Subscribe {
        /// The topics.
        topics: Vec<String>,
        /// The cause.
        #[source]
        source: KafkaError,
    },
}

/// An at-least-once consumer with retries and a dead-letter topic. See the
/// [module docs](self) for exactly what it does.
pub struct Consumer<H: BatchHandler> {
    config: ConsumerConfig,
    shared: Arc<Shared<H>>,
    partitions: Partitions,
}

impl<H: BatchHandler> Consumer<H> {
    /// Checks `config` and creates the Kafka consumer and the dead-letter producer. Nothing
    /// connects yet; brokers that are down are not an error here.
    pub fn new(config: ConsumerConfig, handler: H) -> Result<Self, ConsumerError> {
        config.validate()?;
        let partitions: Partitions = Arc::new(Mutex::new(HashMap::new()));
        let metrics = Metrics::new();
        let consumer: StreamConsumer<RebalanceContext> = config
            .consumer_client_config()
            .create_with_context(RebalanceContext {
                partitions: partitions.clone(),
                metrics: metrics.clone(),
            })
            .map_err(ConsumerError::CreateConsumer)?;
        let dlq = DeadLetterPublisher::new(&config, config.dlq_topic()?, metrics.clone())
            .map_err(ConsumerError::CreateProducer)?;
        Ok(Self {
            shared: Arc::new(Shared {
                handler,
                dlq,
                backoff: config.backoff()?,
                consumer: Arc::new(consumer),
                metrics,
                breaker: crate::breaker::Breaker::new(config.breaker()),
                partitions: partitions.clone(),
                batch_size: config.batch_size,
                batch_linger: std::time::Duration::from_millis(config.batch_linger_ms),
                key_ordered: (config.ordering == crate::config::Ordering::Key)
                    .then_some(config.max_in_flight),
            }),
            config,
            partitions,
        })
    }

    /// Watches the outage breaker (open or closed), e.g. to tell the team.
    pub fn breaker_state(&self) -> tokio::sync::watch::Receiver<crate::breaker::BreakerState> {
        self.shared.breaker.subscribe()
    }

    /// The consumer's metrics and readiness, to serve or read while it runs.
    pub fn metrics(&self) -> Metrics {
        self.shared.metrics.clone()
    }

    /// Consumes until `shutdown` completes, then drains, commits and leaves the group. Returns
    /// an error only when subscribing fails or the client hits a fatal error (after the same
    /// drain and commit); broker trouble is retried, not returned.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ConsumerError> {
        let topics: Vec<&str> = self.config.topics.iter().map(String::as_str).collect();
        self.shared
            .consumer
            .subscribe(&topics)
            .map_err(|source| ConsumerError::Subscribe {
                topics: self.config.topics.clone(),
                source,
            })?;
        tracing::info!(event = "consumer_started", topics = ?self.config.topics,
            group = %self.config.group_id);

        let stop_workers = CancellationToken::new();
        let mut workers = JoinSet::new();
        let mut poll_delays = ExponentialBackoff::infrastructure().delays();
        let mut outcome = Ok(());
        tokio::pin!(shutdown);
        loop {
            let polled = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                polled = self.shared.consumer.recv() => polled,
            };
            match polled {
                Ok(message) => {
                    poll_delays.reset();
                    self.dispatch(&message, &mut workers, &stop_workers).await;
                }
                Err(error) => {
                    if let Some((code, reason)) = self.shared.consumer.client().fatal_error() {
                        tracing::error!(event = "consumer_fatal_error", error = %code, %reason,
                            "the Kafka client cannot go on; stopping");
                        outcome = Err(ConsumerError::Fatal { code, reason });
                        break;
                    }
                    let delay = poll_delays
                        .next()
                        .expect("infrastructure backoff never ends");
                    tracing::warn!(event = "poll_failed", error = %error,
                        retry_in_ms = delay.as_millis() as u64);
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    // Errors queued while we slept belong to the same trouble: take them
                    // without sleeping again, up to the first record. A poll that finds no
                    // error may still have consumed a log or statistics event, so only a run
                    // of empty polls means the queue is drained.
                    let mut skipped = 0u32;
                    let mut empty = 0u32;
                    while skipped < 10_000 && empty < 64 {
                        match self.shared.consumer.recv().now_or_never() {
                            Some(Err(_)) => {
                                skipped += 1;
                                empty = 0;
                            }
                            Some(Ok(message)) => {
                                poll_delays.reset();
                                self.dispatch(&message, &mut workers, &stop_workers).await;
                                break;
                            }
                            None => empty += 1,
                        }
                    }
                    if skipped > 0 {
                        tracing::debug!(event = "poll_errors_skipped", count = skipped);
                    }
                }
            }
            while let Some(done) = workers.try_join_next() {
                if let Err(e) = done {
                    tracing::error!(event = "worker_failed", error = %e);
                }
            }
        }
        self.shutdown(workers, stop_workers).await;
        outcome
    }

    /// Queues a copy of `message` on its partition, starting the partition's worker if it has
    /// none.
    async fn dispatch<M: Message>(
        &self,
        message: &M,
        workers: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) {
        let record = Record::from_message(message, self.config.id_header.as_deref());
        self.shared
            .metrics
            .consumed
            .with_label_values(&[record.topic.as_str()])
            .inc();
        let key = (record.topic.clone(), record.partition);
        let queue = {
            let mut partitions = self.partitions.lock().expect("partitions lock");
            let slot = partitions.entry(key).or_insert_with(|| {
                let queue = Arc::new(PartitionQueue::new(
                    &record.topic,
                    record.partition,
                    self.config.max_buffered_records,
                    self.shared.metrics.buffered_records.clone(),
                ));
                let cancel = stop.child_token();
                workers.spawn(run_worker(
                    self.shared.clone(),
                    queue.clone(),
                    cancel.clone(),
                ));
                PartitionSlot { queue, cancel }
            });
            slot.queue.clone()
        };
        queue.push(record, &self.shared.consumer, PAUSE_GRACE).await;
    }

    async fn shutdown(self, mut workers: JoinSet<()>, stop_workers: CancellationToken) {
        tracing::info!(event = "shutdown_started", workers = workers.len());
        stop_workers.cancel();
        let deadline = self.config.shutdown_timeout();
        let drained = tokio::time::timeout(deadline, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                event = "shutdown_deadline_exceeded",
                busy_partitions = workers.len(),
                deadline_ms = deadline.as_millis() as u64,
                "handlers still running were dropped; their records will be consumed again"
            );
            workers.abort_all();
            while workers.join_next().await.is_some() {}
        }
        commit_stored(self.shared.consumer.as_ref(), "shutdown");
        self.shared.consumer.unsubscribe();
        self.partitions.lock().expect("partitions lock").clear();
        // Dropping the last handle closes the consumer, which leaves the group; it blocks
        // while librdkafka finishes, so it runs off the async threads.
        let shared = self.shared;
        let _ = tokio::task::spawn_blocking(move || drop(shared)).await;
        tracing::info!(event = "shutdown_complete");
    }
}
