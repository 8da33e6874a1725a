//! [`ShareConsumer`]: a share-group member with the consumer's configuration, on krafka.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::delivery::Member;
use super::kafka::{group_settings, KrafkaClient};
use crate::config::{Consumption, ConsumerConfig, ShareDlq};
use crate::consumer::{dlq_topics, retry_topics, ConsumerError};
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
    breaker: crate::breaker::Breaker,
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
        let metrics = Metrics::for_group(&config.group_id);
        let dlq = DeadLetterPublisher::new(
            &config.producer_client_config(),
            config.dlq_topic()?,
            &config.group_id,
            config.dlq_format,
            metrics.clone(),
        )
        .map_err(ConsumerError::CreateProducer)?;
        Ok(Self {
            breaker: crate::breaker::Breaker::new(config.breaker()),
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
        let config = self.config;
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
        let mut topics = config.topics.clone();
        topics.extend(
            retry_topics::follow_up_topics(&config)
                .into_iter()
                .map(|(topic, _)| topic),
        );
        let kafka = krafka::Kafka::builder(config.brokers.clone())
            .client_id("kafka-dlq")
            .connect()
            .await
            .map_err(|e| refused(format!("cannot connect to {}: {e}", config.brokers)))?;
        let settings = group_settings(&kafka, &group, &config.auto_offset_reset).await;
        let consumer = kafka
            .share_consumer(group.clone())
            .acknowledgement_mode(krafka::share_consumer::AcknowledgementMode::Explicit)
            .max_poll_records(i32::try_from(config.max_in_flight).unwrap_or(i32::MAX))
            .build()
            .await
            .map_err(|e| refused(e.to_string()))?;
        consumer
            .subscribe(&topics)
            .await
            .map_err(|e| refused(format!("subscribing to {topics:?}: {e}")))?;
        tracing::info!(event = "share_consumer_started", topics = ?topics, %group,
            delivery_limit = ?settings.delivery_limit, share_dlq = %config.share_dlq);
        let client = Arc::new(KrafkaClient::new(consumer, config.id_header.clone()));
        let member = Arc::new(Member {
            handler: self.handler,
            client: client.clone(),
            exits: Arc::new(self.dlq),
            backoff: config.backoff()?,
            breaker: self.breaker,
            metrics: self.metrics,
            share_dlq: config.share_dlq,
            delivery_limit: settings.delivery_limit,
            trace_records: config.trace_records,
            sources: config.topics.clone(),
            group: group.clone(),
        });
        let running = tokio::spawn(super::member::run(
            member.clone(),
            stop.clone(),
            config.shutdown_timeout,
        ));
        shutdown.await;
        tracing::info!(event = "shutdown_started");
        stop.cancel();
        if let Err(e) = running.await {
            if e.is_panic() {
                let panic = crate::failure::panic_message(&e.into_panic());
                tracing::error!(event = "worker_died", error = %panic);
            }
        }
        client.close().await;
        member.metrics.partitions_assigned.set(0);
        tracing::info!(event = "shutdown_complete");
        Ok(())
    }
}
