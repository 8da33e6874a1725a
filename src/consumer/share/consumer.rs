//! [`ShareConsumer`]: a share-group member with the consumer's configuration, on krafka.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::client::ShareClient;
use super::delivery::Member;
use super::delivery_limit::DeliveryLimit;
use super::kafka::{group_settings, KrafkaClient};
use crate::config::{ConsumerConfig, Consumption, ShareDlq};
use crate::consumer::settle::Caller;
use crate::consumer::start::{dlq_topics, retry_topics};
use crate::consumer::ConsumerError;
use crate::dlq::DeadLetterPublisher;
use crate::handler::BatchHandler;
use crate::metrics::Metrics;
use crate::ConfigError;

/// A member of the share group `group_id` (`consumption = "share"`) that settles every record
/// it acquires; see the [module docs](super) for exactly what it does. With the `share`
/// feature.
pub struct ShareConsumer<H: BatchHandler> {
    config: ConsumerConfig,
    handler: H,
    metrics: Metrics,
    breaker: Arc<crate::breaker::Breaker>,
    dlq: DeadLetterPublisher,
}

impl<H: BatchHandler> ShareConsumer<H> {
    /// Checks `config` (which must say `consumption = "share"`) and creates the dead-letter
    /// producer. Nothing connects yet.
    pub fn new(config: ConsumerConfig, handler: H) -> Result<Self, ConsumerError> {
        config.validate()?;
        if config.consumption != Consumption::Share {
            return Err(ConfigError::new(
                "consumption",
                config.consumption,
                "ShareConsumer joins a share group: set consumption = \"share\" (or use Consumer)",
            )
            .into());
        }
        // What krafka cannot honour is refused now, not found out at the first connection.
        super::auth::auth_config(&config.librdkafka)?;
        let metrics = Metrics::for_group(&config.group_id);
        let dlq = crate::consumer::dead_letter_publisher(&config, &metrics)?;
        Ok(Self {
            breaker: Arc::new(crate::breaker::Breaker::new(config.breaker())),
            config,
            handler,
            metrics,
            dlq,
        })
    }

    /// Watches the outage breaker (open or closed).
    pub fn breaker_state(&self) -> tokio::sync::watch::Receiver<crate::breaker::BreakerState> {
        self.breaker.subscribe()
    }

    /// The member's metrics and readiness, to serve or read while it runs.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Joins the share group and consumes until `shutdown` completes, then settles or releases
    /// what it holds and leaves the group (see the module docs). Returns an error when the
    /// dead-letter topic is missing and not created, or when the cluster refuses the share
    /// group (Kafka before 4.2, Redpanda, a group id in use by a consumer group).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ConsumerError> {
        tokio::pin!(shutdown);
        let mut config = self.config;
        let client = config.consumer_client_config();
        if !crate::consumer::start::cluster::wait_until_admitted(
            &client,
            &self.metrics,
            shutdown.as_mut(),
        )
        .await
        {
            return Ok(());
        }
        let group = config.group_id.clone();
        let refused = |reason: String| ConsumerError::ShareGroup {
            group: group.clone(),
            reason,
        };
        if config.share_dlq == ShareDlq::Ours {
            dlq_topics::ensure(&config).await?;
        }
        let stop = CancellationToken::new();
        retry_topics::ensure(&config, &stop).await;
        crate::consumer::start::topic_retention::check(&config).await?;
        let redrive: Vec<String> = retry_topics::follow_up_topics(&config)
            .into_iter()
            .map(|(topic, _)| topic)
            .collect();
        let kafka = krafka::Kafka::builder(config.brokers.clone())
            .client_id("kafka-dlq")
            .security(super::auth::auth_config(&config.librdkafka)?)
            .connect()
            .await
            .map_err(|e| refused(format!("cannot connect to {}: {e}", config.brokers)))?;
        let settings = group_settings(&kafka, &group, &config.auto_offset_reset).await;
        if settings.renew_enabled == Some(false) {
            // Without RENEW a call or backoff longer than the lock would see its record
            // delivered to another member meanwhile, each expiry counting as a delivery.
            return Err(refused(format!(
                "the group's {} is false, so the broker refuses to renew a record's acquisition lock: a record whose calls outlast share.record.lock.duration.ms would be delivered again while it is handled, and archived after its delivery limit; set it to true for the group",
                super::kafka::RENEW_ENABLED
            )));
        }
        let acquire = records_to_acquire(
            settings.renew_enabled,
            config.share_acquire_records,
            config.max_in_flight,
        );
        if acquire != config.share_acquire_records {
            tracing::warn!(event = "share_renew_unknown", %group,
                share_acquire_records = config.share_acquire_records,
                max_in_flight = config.max_in_flight,
                "the broker may not renew acquisition locks ({}): acquiring at most max_in_flight records at a time, so none waits unrenewed",
                super::kafka::RENEW_ENABLED);
            config.share_acquire_records = acquire;
        }
        if config.share_dlq == ShareDlq::Broker {
            // Without a dead-letter queue the broker archives what it would put there: records
            // lost without a word.
            match &settings.broker_dlq {
                Ok(Some(topic)) => super::kafka::broker_dlq_writable(&kafka, topic)
                    .await
                    .map_err(|why| refused(format!("share_dlq = \"broker\", but {why}")))?,
                Ok(None) => {
                    return Err(refused(format!(
                        "share_dlq = \"broker\", but the group has no dead-letter queue: set {} for it (Kafka 4.4+), or use share_dlq = \"ours\"",
                        super::kafka::BROKER_DLQ
                    )))
                }
                Err(error) => {
                    return Err(refused(format!(
                        "share_dlq = \"broker\", but the group's {} could not be read: {error}",
                        super::kafka::BROKER_DLQ
                    )))
                }
            }
        }
        let delivery_limit = {
            let (kafka, group) = (kafka.clone(), group.clone());
            DeliveryLimit::live(
                settings.delivery_limit,
                Box::new(move || {
                    let (kafka, group) = (kafka.clone(), group.clone());
                    Box::pin(async move { super::kafka::delivery_limit(&kafka, &group).await })
                }),
            )
        };
        // The group's redrive topics are read by a member of their own: the share assignor
        // gives each member at least one partition, so a member reading a source and its
        // redrive topic could be given only the redrive topic's partition, and the source's
        // partitions fewer members.
        let main = join(&kafka, &config, &config.topics, &self.metrics)
            .await
            .map_err(&refused)?;
        let redriven = join(&kafka, &config, &redrive, &self.metrics)
            .await
            .map_err(&refused)?;
        // Held while the member runs: krafka's undecodable batches reach its metrics.
        let _undecodable = super::undecodable::watch(
            config.topics.iter().chain(&redrive).cloned().collect(),
            self.metrics.clone(),
        );
        // Each topic's share series from the start, at 0: a rate or an alert on a lost lock
        // then sees its first increase, and the dashboard finds every family.
        for topic in config.topics.iter().chain(&redrive) {
            self.metrics.share_acquired.with_label_values(&[topic]);
            self.metrics.share_lock_lost.with_label_values(&[topic]);
        }
        tracing::info!(event = "share_consumer_started", topics = ?config.topics,
            redrive_topics = ?redrive, %group, delivery_limit = ?settings.delivery_limit,
            share_dlq = %config.share_dlq);
        let member = Arc::new(Member {
            caller: Caller {
                handler: self.handler,
                breaker: self.breaker,
                backoff: config.backoff()?,
                metrics: self.metrics.clone(),
                spans: config
                    .trace_records
                    .then(|| crate::consumer::settle::Spans::new(&group)),
                while_open: "no more records are acquired; those in hand wait, their locks renewed, one probing",
            },
            exits: Arc::new(crate::consumer::progress::writer::KafkaExits::new(
                self.dlq,
                config.trace_records,
            )),
            metrics: self.metrics,
            share_dlq: config.share_dlq,
            delivery_limit,
            in_flight: tokio::sync::Semaphore::new(config.max_in_flight),
            sources: config.topics.clone(),
            group: group.clone(),
        });
        let mut running = Vec::new();
        for (loop_name, client) in [
            ("source topics", main.clone()),
            ("redrive topics", redriven.clone()),
        ] {
            let member_loop = tokio::spawn(super::member::run(
                member.clone(),
                client,
                stop.clone(),
                config.shutdown_timeout,
            ));
            let name = format!("share group {group} ({loop_name})");
            running.push(supervise(name, member_loop, member.metrics.clone()));
        }
        let assigned = tokio::spawn({
            let (main, redriven, member) = (main.clone(), redriven.clone(), member.clone());
            async move {
                let mut ticks = 0u32;
                loop {
                    let partitions = main.assigned_partitions() + redriven.assigned_partitions();
                    member.metrics.partitions_assigned.set(partitions as i64);
                    // The limit for the decisions that do not read it afresh: every 30 s.
                    ticks += 1;
                    if ticks % 60 == 0 {
                        member.delivery_limit.fresh().await;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        });
        shutdown.await;
        tracing::info!(event = "shutdown_started");
        stop.cancel();
        for task in running {
            let _ = task.await;
        }
        assigned.abort();
        main.close().await;
        redriven.close().await;
        member.metrics.partitions_assigned.set(0);
        tracing::info!(event = "shutdown_complete");
        Ok(())
    }
}

/// Watches a member loop as it runs: one that panics is reported at once (`worker_died`, and
/// `/healthz` fails naming `name`), not only at shutdown — the other loop of the member
/// would otherwise go on while half of it consumes nothing.
fn supervise(
    name: String,
    member_loop: tokio::task::JoinHandle<()>,
    metrics: Metrics,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = member_loop.await {
            if e.is_panic() {
                let panic = crate::failure::panic_message(&e.into_panic());
                tracing::error!(event = "worker_died", member_loop = %name, error = %panic,
                    "this member loop consumes nothing more; /healthz fails until the process restarts");
                metrics.worker_died(&name, &panic);
            }
        }
    })
}

/// The longest a share fetch waits at the broker; see `join`.
const FETCH_MAX_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// A share consumer of the group in `config`, subscribed to `topics`. Acknowledgements the
/// broker refuses (the record's lock had expired, the session ended) are counted in
/// `kafka_dlq_share_locks_lost_total` and logged: the broker delivers those records again.
async fn join(
    kafka: &krafka::Kafka,
    config: &ConsumerConfig,
    topics: &[String],
    metrics: &Metrics,
) -> Result<Arc<KrafkaClient>, String> {
    let lost = metrics.clone();
    let consumer = kafka
        .share_consumer(config.group_id.clone())
        .acknowledgement_commit_callback(move |commit| {
            if let Err(error) = &commit.result {
                let records: i64 = commit.offsets.iter().map(|r| r.end() - r.start() + 1).sum();
                lost.share_lock_lost
                    .with_label_values(&[commit.topic.as_str()])
                    .inc_by(records.max(0) as u64);
                tracing::warn!(event = "share_acknowledgement_refused", topic = %commit.topic,
                    partition = commit.partition, offsets = ?commit.offsets, %error,
                    "the broker delivers these records again");
            }
        })
        .acknowledgement_mode(krafka::share_consumer::AcknowledgementMode::Explicit)
        // A hard limit on the records per fetch (KIP-1206's record_limit, Kafka 4.2+): with
        // the broker's batch-aligned default one member would take a whole producer batch. On
        // Kafka 4.4 a fetch from krafka 0.28 with a minimum of 1 byte waits its whole max wait
        // even when records are there, so fetches ask for no minimum and the client paces the
        // idle ones itself (`KrafkaClient::acquire`).
        .max_poll_records(i32::try_from(config.share_fetch_records()).unwrap_or(i32::MAX))
        .batch_size(i32::try_from(config.share_fetch_records()).unwrap_or(i32::MAX))
        .acquire_mode(krafka::share_consumer::AcquireMode::RecordLimit)
        .fetch_min_bytes(0)
        // A fetch that meets another member's on the share partition is parked by the broker
        // until its max wait, even with records there: at krafka's 500 ms a second member got
        // a batch twice a second (2 members handled 1.1× what one did, one record at a time).
        .fetch_max_wait(FETCH_MAX_WAIT)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    consumer
        .subscribe(topics)
        .await
        .map_err(|e| format!("subscribing to {topics:?}: {e}"))?;
    Ok(Arc::new(KrafkaClient::new(
        consumer,
        config.id_header.clone(),
    )))
}

/// How many records a fetch acquires when the group's RENEW setting says `renew` (`None`:
/// unknown — a broker before KIP-1222, or group settings the principal may not describe):
/// `acquire` (`share_acquire_records`) when locks are renewed, else no more than are handled at
/// once (`max_in_flight`), since a record acquired while it waits for a permit would outlive
/// its lock unrenewed, be delivered again elsewhere and count a delivery. (A group that says
/// `false` is refused before this.)
fn records_to_acquire(renew: Option<bool>, acquire: usize, max_in_flight: usize) -> usize {
    match renew {
        Some(true) => acquire,
        _ => acquire.min(max_in_flight),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_known_renewal_no_more_records_are_acquired_than_are_handled_at_once() {
        assert_eq!(records_to_acquire(Some(true), 500, 1), 500);
        assert_eq!(records_to_acquire(None, 500, 1), 1);
        assert_eq!(records_to_acquire(None, 16, 64), 16);
    }

    #[tokio::test]
    async fn a_member_loop_that_panics_makes_the_member_unhealthy_at_once() {
        crate::consumer::simulation::quiet();
        let metrics = Metrics::new();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let member_loop = tokio::spawn(async move {
            let _ = released.await;
            panic!("simulated: a member loop's bug");
        });
        let watched = supervise(
            "share group g (source topics)".into(),
            member_loop,
            metrics.clone(),
        );
        assert!(metrics.health().is_ok());
        let _ = release.send(());
        watched.await.unwrap();
        let unhealthy = metrics.health().unwrap_err().to_string();
        assert!(
            unhealthy.contains("share group g (source topics)") && unhealthy.contains("simulated"),
            "{unhealthy}"
        );
    }
}
