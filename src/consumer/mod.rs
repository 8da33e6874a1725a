//! The at-least-once consumer: poll, hand each record to the handler, retry, dead-letter,
//! commit.
//!
//! # How records flow
//! Each assigned partition has one worker task, which reads the partition's own librdkafka
//! queue (split from the consumer's when the partition is assigned), copies each record out
//! of librdkafka and settles them **in offset order**: it calls the
//! [`Handler`](crate::handler::Handler), retries transient failures with backoff, and
//! dead-letters permanent failures and exhausted retries. The consumer's own queue, polled by
//! [`Consumer::run`], serves rebalances, errors and statistics. A record is *settled* when the
//! handler succeeded or the dead-letter topic acknowledged it; only then is its offset stored,
//! and stored offsets are committed every second, on rebalance and at shutdown. So an offset
//! never passes a record that was neither handled nor safely dead-lettered.
//!
//! # Bounded memory, per consumer
//! Fetched records waiting for their workers hold about
//! [`max_buffered_bytes`](ConsumerConfig::max_buffered_bytes) (default 32 MiB) for the whole
//! consumer, whatever the number of partitions it owns. When it starts, the consumer counts
//! the partitions of the topics it subscribes to (source, retry and redrive topics: the most
//! one member can own), and gives each partition's librdkafka queue an equal share of half of
//! it (`queued.max.messages.kbytes`; at most
//! [`max_buffered_records`](ConsumerConfig::max_buffered_records) records each,
//! `queued.min.messages`): librdkafka stops fetching a partition while its queue holds its
//! share. A worker holds out of its queue at most one record and its share beyond it (in
//! order; up to `max_in_flight` per partition by key; `batch_size` in batches): the other
//! half. In order, while its handler runs, a worker copies what reaches its queue into its
//! hands for its next chunk, up to its share; then it pauses the partition until it takes
//! that chunk. librdkafka keeps each fetch response whole while any of its messages waits in
//! a queue, so messages copied out at once free it. One fetch brings up to a share of a
//! partition (at least 64 kB, at most 1 MB: `poll::fetch_size`), and a broker holds one that
//! finds nothing new for 25 to 100 ms, growing with the partitions (`poll::fetch_wait`). A
//! broker never splits a record batch, so a queue may come to hold more than its share and a
//! fetch (librdkafka's producer writes batches of up to 1 MB, Java's 16 kB): a worker that
//! finds that much in its queue pauses the partition, which drops it (the worker reads the
//! queue empty: librdkafka frees what a pause discarded only then), and the partition is
//! fetched again from where the worker stopped when it wants more. Dead letters in flight
//! come on top (their own bound). A topic given more partitions while the consumer runs
//! shares the same half until the consumer restarts.
//!
//! A record in backoff holds back only its own partition: its queue fills and librdkafka stops
//! fetching it; the other partitions' workers carry on, and the consumer's queue keeps being
//! polled (so the member stays in the group) however long a backoff lasts.
//!
//! # Key order
//! With [`ordering`](ConsumerConfig::ordering) `key`, a partition's worker runs records of
//! different keys concurrently (up to `max_in_flight`), records of one key in offset order, and
//! stores offsets only over the longest prefix of settled records.
//!
//! # Batches
//! With a [`BatchHandler`] and
//! [`batch_size`](ConsumerConfig::batch_size) > 1, a worker hands its partition's records over
//! in batches (up to `batch_size`, waiting up to `batch_linger_ms` after the first); a failed
//! batch is bisected until the failing records stand alone, and only they go through the
//! retry and dead-letter policy. Offsets are stored as each part settles, in order.
//!
//! # Retry topics
//! With [`retry_topic_delays_ms`](ConsumerConfig::retry_topic_delays_ms), the consumer also
//! reads the retry topics `<topic>-retry-<n>` (created at start when missing): a record whose
//! retries are used up goes to its next tier instead of the dead-letter topic, and a retry
//! partition's worker hands each record over, as the original, once it is due. See
//! [`crate::retry_tier`].
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
//! [`shutdown_timeout`](ConsumerConfig::shutdown_timeout); past it, the remaining calls
//! are dropped), records waiting or in backoff are left for the next run, stored offsets are
//! committed, and the consumer leaves the group.
//!
//! # Broker trouble
//! librdkafka reconnects and fetches again by itself; the poll loop logs each error (the same
//! kind once, then a count every 30 s) and polls on at once: an error of one partition never
//! holds up the others. A connection the brokers refuse (a wrong password, an untrusted CA: see
//! `kafka::connect`) is logged as what to check and keeps `/readyz` not ready until a broker
//! connection is up. A record batch librdkafka cannot decode stops its partition there, named
//! on `/readyz` and counted (`undecodable`). A broker outage never ends [`Consumer::run`];
//! only a fatal client error does (after the usual drain and commit).

mod client;
mod error;
mod park;
mod poll;
mod poll_loop;
mod progress;
mod settle;
pub mod share;
#[cfg(test)]
mod simulation;
mod start;
#[cfg(feature = "share")]
pub use share::ShareConsumer;
mod worker;

pub use error::{ConsumerError, TransactionError};

use std::future::Future;
use std::sync::{Arc, OnceLock};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::ConsumerConfig;
use crate::dlq::DeadLetterPublisher;
use crate::handler::BatchHandler;
use crate::metrics::Metrics;
use poll::assignments::Assignments;
use poll::context::{commit_stored, RebalanceContext};
use poll_loop::PollLoop;
use worker::Shared;

/// The dead-letter producer of `config`'s group, counting its failed writes in `metrics`.
fn dead_letter_publisher(
    config: &ConsumerConfig,
    metrics: &Metrics,
) -> Result<DeadLetterPublisher, ConsumerError> {
    DeadLetterPublisher::new(
        &config.producer_client_config(),
        config.dlq_topic()?,
        &config.group_id,
        config.dlq_format,
        metrics.clone(),
    )
    .map_err(ConsumerError::CreateProducer)
}

/// An at-least-once consumer with retries and a dead-letter topic. See the
/// [module docs](self) for exactly what it does.
pub struct Consumer<H: BatchHandler> {
    config: ConsumerConfig,
    /// The Kafka consumer, created by [`Consumer::run`] once it knows how many partitions its
    /// topics have (each partition's librdkafka queue holds its share of
    /// `max_buffered_bytes`); its workers reach it through `shared.out.client`.
    consumer: Arc<OnceLock<Arc<BaseConsumer<RebalanceContext>>>>,
    /// The transactional producers' view of the consumer's group membership.
    group: progress::transaction::GroupReader,
    shared: Arc<Shared<H>>,
    assignments: Arc<Assignments>,
    /// What starts the workers and serves the queue.
    poll_loop: PollLoop<H>,
    /// Parent of every worker's token.
    stop_workers: CancellationToken,
}

impl<H: BatchHandler> Consumer<H> {
    /// Checks `config` and creates the Kafka consumer and the dead-letter producer. Nothing
    /// connects yet; brokers that are down are not an error here. A `config` that says
    /// `consumption = "share"` is refused: that is `ShareConsumer`'s (joining a
    /// consumer group instead would consume as another kind of group without a word).
    pub fn new(config: ConsumerConfig, handler: H) -> Result<Self, ConsumerError> {
        config.validate()?;
        if config.consumption != crate::config::Consumption::Group {
            return Err(crate::ConfigError::new(
                "consumption",
                config.consumption,
                "Consumer joins a consumer group: set consumption = \"group\" (or use ShareConsumer, feature `share`)",
            )
            .into());
        }
        if handler.produces_outputs() && !config.exactly_once {
            return Err(crate::ConfigError::new(
                "exactly_once",
                false,
                "a Transactional handler's outputs are written only with exactly_once = true",
            )
            .into());
        }
        let metrics = Metrics::for_group(&config.group_id);
        let (assigned_tx, assigned) = mpsc::unbounded_channel();
        let stop_workers = CancellationToken::new();
        let assignments = Arc::new(Assignments::new(
            metrics.clone(),
            assigned_tx,
            stop_workers.clone(),
        ));
        let dlq = dead_letter_publisher(&config, &metrics)?;
        // The transactional producers commit as the member the consumer is then.
        let group = progress::transaction::GroupReader::default();
        let transaction = config.exactly_once.then(|| {
            let (for_new, metrics_for_new, group_for_new) =
                (config.clone(), metrics.clone(), group.clone());
            Arc::new(progress::transaction::Transaction::new(
                Box::new(progress::transaction::KafkaProducer::new(
                    dlq.clone(),
                    group.clone(),
                )),
                Box::new(move || {
                    let dead_letters = dead_letter_publisher(&for_new, &metrics_for_new)
                        .map_err(|e| e.to_string())?;
                    Ok(Box::new(progress::transaction::KafkaProducer::new(
                        dead_letters,
                        group_for_new.clone(),
                    ))
                        as Box<dyn progress::transaction::TransactionalProducer>)
                }),
                config.transaction_records,
                config.transaction_interval,
                metrics.clone(),
            ))
        });
        // Checked now; the client itself is created when the consumer runs.
        config
            .consumer_client_config()
            .create_native_config()
            .map_err(ConsumerError::CreateConsumer)?;
        let consumer = Arc::new(OnceLock::new());
        let park = (config.key_order_after_failure == crate::config::KeyOrderAfterFailure::Park)
            .then(|| progress::Parking {
                log: Arc::new(park::KafkaParkLog::new(
                    dlq.producer().clone(),
                    &config.group_id,
                    config.consumer_client_config(),
                )),
                group: config.group_id.clone(),
                max_age: (!config.park_max_age.is_zero()).then_some(config.park_max_age),
            });
        let mut shared = Shared::new(
            &config,
            handler,
            metrics,
            Arc::new(progress::writer::KafkaExits::new(dlq, config.trace_records)),
            Arc::new(client::KafkaClient::<RebalanceContext>(consumer.clone())),
        )?;
        Arc::get_mut(&mut shared.out)
            .expect("not shared before the workers start")
            .park = park;
        shared.transaction = transaction;
        let shared = Arc::new(shared);
        let poll_loop = PollLoop::new(
            shared.clone(),
            assignments.clone(),
            assigned,
            config.topics.clone(),
            None,
        );
        Ok(Self {
            shared,
            config,
            consumer,
            group,
            assignments,
            poll_loop,
            stop_workers,
        })
    }

    /// Watches the outage breaker (open or closed), e.g. to tell the team.
    pub fn breaker_state(&self) -> tokio::sync::watch::Receiver<crate::breaker::BreakerState> {
        self.shared.caller.breaker.subscribe()
    }

    /// The consumer's metrics and readiness, to serve or read while it runs.
    pub fn metrics(&self) -> Metrics {
        self.shared.out.metrics.clone()
    }

    /// Consumes until `shutdown` completes, then drains, commits and leaves the group. Returns
    /// an error only when subscribing fails or the client hits a fatal error (after the same
    /// drain and commit); broker trouble is retried, not returned.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), ConsumerError> {
        tokio::pin!(shutdown);
        let config = self.config.consumer_client_config();
        if !start::cluster::wait_until_admitted(
            &config,
            &self.shared.out.metrics,
            shutdown.as_mut(),
        )
        .await
        {
            self.shutdown().await;
            return Ok(());
        }
        let topics = start::prepare(
            &self.config,
            &self.stop_workers,
            self.shared.transaction.clone(),
        )
        .await?;
        let partitions = start::partitions::count(&config, &topics).await;
        let (consumer, queue_waker) = self.create(partitions)?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&names)
            .map_err(|source| ConsumerError::Subscribe {
                topics: topics.clone(),
                source,
            })?;
        tracing::info!(event = "consumer_started", topics = ?topics,
            group = %self.config.group_id);

        if let Some(transaction) = &self.shared.transaction {
            self.poll_loop.spawn(progress::transaction::commit_when_due(
                transaction.clone(),
                self.stop_workers.child_token(),
                |t| async { tokio::task::spawn_blocking(move || t.commit()).await.ok() },
            ));
        }
        let seeker = client::KafkaClient(self.consumer.clone());
        let mut fetcher = poll::fetcher::KafkaFetcher {
            consumer,
            waker: queue_waker,
        };
        let outcome = self
            .poll_loop
            .run(&mut fetcher, &seeker, shutdown.as_mut())
            .await;
        drop(fetcher);
        self.shutdown().await;
        outcome
    }

    /// Creates the Kafka consumer for topics with `partitions` partitions in all: the most
    /// this member can own, so that each partition's librdkafka queue is bounded by its share
    /// of half of `max_buffered_bytes`. (`max_buffered_records` bounds each queue whole: a
    /// share of it stopped a fast partition at every few hundred records, for librdkafka's
    /// `fetch.queue.backoff.ms` each time: no-op 0.51–0.66 of the bare loop against
    /// 0.82–1.02.)
    fn create(
        &self,
        partitions: usize,
    ) -> Result<
        (
            Arc<BaseConsumer<RebalanceContext>>,
            Arc<futures_util::task::AtomicWaker>,
        ),
        ConsumerError,
    > {
        let config = &self.config;
        let Sized {
            client,
            share,
            bound,
        } = sized_client_config(config, partitions);
        let budget = poll::queue_budget::QueueBudget::new(bound.saturating_mul(partitions.max(1)));
        let mut consumer: BaseConsumer<RebalanceContext> = crate::kafka::create(
            &client,
            RebalanceContext {
                rebalancing: poll::rebalance::Rebalancing {
                    assignments: self.assignments.clone(),
                    transaction: self.shared.transaction.clone(),
                },
                metrics: self.shared.out.metrics.clone(),
                undecodable: Default::default(),
                cluster: crate::kafka::cluster_of(&client),
            },
        )
        .map_err(ConsumerError::CreateConsumer)?;
        let queue_waker = Arc::new(futures_util::task::AtomicWaker::new());
        let wake = queue_waker.clone();
        consumer.set_nonempty_callback(move || wake.wake());
        let consumer = Arc::new(consumer);
        // Weak: a queue holds its consumer, whose context holds the assignments.
        let (splitter, id_header) = (
            Arc::downgrade(&consumer),
            config.id_header.as_deref().map(Arc::<str>::from),
        );
        self.assignments.split_with(
            Box::new(move |(topic, partition)| {
                let consumer = splitter.upgrade()?;
                let feed = poll::partition_queue::KafkaFeed::split(
                    &consumer,
                    topic,
                    *partition,
                    id_header.clone(),
                    share,
                    bound,
                );
                if feed.is_none() {
                    tracing::error!(event = "partition_queue_split_failed", %topic, partition,
                    "its records would come to the consumer's own queue");
                }
                Some(Arc::new(feed?) as Arc<dyn poll::feed::Feed>)
            }),
            budget,
        );
        let weak = Arc::downgrade(&consumer);
        let _ = self.group.set(Box::new(move || {
            weak.upgrade().and_then(|c| c.group_metadata())
        }));
        let _ = self.consumer.set(consumer.clone());
        tracing::info!(
            event = "partition_queues_sized",
            partitions,
            queue_bytes = share
        );
        Ok((consumer, queue_waker))
    }

    async fn shutdown(self) {
        let mut workers = self.poll_loop.into_workers();
        tracing::info!(event = "shutdown_started", workers = workers.len());
        self.stop_workers.cancel();
        let deadline = self.config.shutdown_timeout;
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
        // Not created when the consumer stopped before subscribing: nothing to commit.
        let consumer = self.consumer.get().cloned();
        match (self.shared.transaction.clone(), &consumer) {
            (Some(transaction), Some(_)) => {
                let _ = tokio::task::spawn_blocking(move || transaction.commit()).await;
            }
            (None, Some(consumer)) => commit_stored(consumer.as_ref(), "shutdown"),
            (_, None) => {}
        }
        if let Some(consumer) = &consumer {
            consumer.unsubscribe();
        }
        self.assignments.end_all();
        // Dropping the last handle closes the consumer, which leaves the group; it blocks
        // while librdkafka finishes, so it runs off the async threads.
        let metrics = self.shared.out.metrics.clone();
        let (shared, consumer) = (self.shared, self.consumer);
        let _ = tokio::task::spawn_blocking(move || drop((shared, consumer))).await;
        // The queues went with the consumer; its last statistics may be two seconds old.
        metrics.buffered_records.set(0);
        metrics.buffered_bytes.set(0);
        tracing::info!(event = "shutdown_complete");
    }
}

/// The Kafka consumer's client settings for topics with `partitions` partitions in all, and
/// what each partition's queue is bounded by.
struct Sized {
    client: rdkafka::ClientConfig,
    /// A partition queue's share of half of `max_buffered_bytes`.
    share: usize,
    /// The most a partition queue holds: its share and one fetch.
    bound: usize,
}

/// See [`Consumer::create`]: each partition's librdkafka queue is bounded by its share, one
/// fetch of a partition is sized to that share ([`poll::fetch_size`]; in key order, one fetch
/// brings every partition's, up to a quarter of the buffer), and a broker holds a
/// fetch that finds nothing new for a time that grows with the partitions
/// ([`poll::fetch_wait`]).
fn sized_client_config(config: &ConsumerConfig, partitions: usize) -> Sized {
    let share = (config.max_buffered_bytes / 2 / partitions.max(1)).max(1);
    let mut client = config.consumer_client_config();
    client
        .set(
            "queued.max.messages.kbytes",
            (share / 1024).max(1).to_string(),
        )
        .set(
            "queued.min.messages",
            config.max_buffered_records.to_string(),
        );
    // A queue holds its share and one fetch beyond it, but for a record batch larger than a
    // fetch, which its worker drops while the queues together hold more than their budget
    // (`worker::intake`, `overshot`; `poll::queue_budget`).
    let fetch = poll::fetch_size::partition_fetch_bytes(&config.librdkafka, share);
    if let poll::fetch_size::Fetch::Share(bytes) = fetch {
        client.set("max.partition.fetch.bytes", bytes.to_string());
    }
    if let Some(ms) = poll::fetch_wait::fetch_wait_ms(&config.librdkafka, partitions) {
        client.set("fetch.wait.max.ms", ms.to_string());
    }
    if config.ordering == crate::config::Ordering::Key {
        if let Some(bytes) = poll::fetch_size::key_ordered_fetch_bytes(
            &config.librdkafka,
            partitions,
            fetch.bytes(),
            config.max_buffered_bytes,
        ) {
            client.set("fetch.max.bytes", bytes.to_string());
        }
    }
    Sized {
        client,
        share,
        bound: share + fetch.bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    impl crate::Handler for Nothing {
        async fn handle(&self, _record: &crate::Record) -> Result<(), crate::HandlerError> {
            Ok(())
        }
    }

    #[test]
    fn a_consumer_refuses_a_share_group_config_rather_than_joining_a_consumer_group() {
        let config = ConsumerConfig {
            consumption: crate::config::Consumption::Share,
            max_in_flight: 1,
            ..ConsumerConfig::new("127.0.0.1:9", "couriers", ["parcels"])
        };
        let Err(ConsumerError::Config(error)) = Consumer::new(config, Nothing) else {
            panic!("a share-group config is refused");
        };
        assert_eq!(error.key, "consumption", "{error}");
        assert!(error.to_string().contains("ShareConsumer"), "{error}");
    }

    #[test]
    fn the_consumer_sizes_its_fetches_to_its_partitions_unless_the_raw_options_say_otherwise() {
        let config = ConsumerConfig {
            max_buffered_bytes: 32 << 20,
            ..ConsumerConfig::new("127.0.0.1:9", "couriers", ["parcels"])
        };
        let sized = sized_client_config(&config, 24);
        let share = (16 << 20) / 24;
        assert_eq!(sized.share, share);
        assert_eq!(
            sized.bound,
            2 * share,
            "its share and one fetch of its share"
        );
        let set = |key: &str| sized.client.get(key).map(str::to_string);
        assert_eq!(set("max.partition.fetch.bytes"), Some(share.to_string()));
        assert_eq!(
            set("queued.max.messages.kbytes"),
            Some((share / 1024).to_string())
        );
        assert_eq!(set("fetch.wait.max.ms"), Some("25".into()));

        let many = sized_client_config(&config, 1_000);
        assert_eq!(
            many.client.get("max.partition.fetch.bytes"),
            Some("65536"),
            "never below 64 kB"
        );
        assert_eq!(many.bound, many.share + (64 << 10));
        assert_eq!(many.client.get("fetch.wait.max.ms"), Some("100"));

        let mut raw = config.clone();
        raw.librdkafka.insert("max.partition.fetch.bytes", "32768");
        raw.librdkafka.insert("fetch.wait.max.ms", "500");
        let raw = sized_client_config(&raw, 24);
        assert_eq!(
            raw.client.get("max.partition.fetch.bytes"),
            Some("32768"),
            "the raw option stands"
        );
        assert_eq!(raw.bound, share + 32_768);
        assert_eq!(raw.client.get("fetch.wait.max.ms"), Some("500"));
        assert_eq!(
            raw.client.get("fetch.max.bytes"),
            Some("2097152"),
            "in partition order, FETCH_SETTINGS' 2 MB"
        );

        let keyed = ConsumerConfig {
            ordering: crate::config::Ordering::Key,
            ..config.clone()
        };
        assert_eq!(
            sized_client_config(&keyed, 24)
                .client
                .get("fetch.max.bytes"),
            Some("8388608"),
            "in key order, every partition's fetch within a quarter of the buffer"
        );
        let mut keyed_raw = keyed;
        keyed_raw.librdkafka.insert("fetch.max.bytes", "1048576");
        assert_eq!(
            sized_client_config(&keyed_raw, 24)
                .client
                .get("fetch.max.bytes"),
            Some("1048576"),
            "the raw option stands"
        );
    }
}
