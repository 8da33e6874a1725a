//! The consumer's librdkafka context: rebalance callbacks and logs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::stream_consumer::StreamPartitionQueue;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// A topic and partition.
pub(super) type PartitionKey = (String, i32);

/// The token that stops a partition's worker.
pub(super) struct PartitionSlot {
    pub cancel: CancellationToken,
    /// Records of this partition that arrived on the consumer's main queue instead of the
    /// partition's own (only when splitting its queue failed), for its worker.
    pub strays: mpsc::Sender<crate::record::Record>,
}

/// The partitions that have a worker, shared by the rebalance callback (which adds, removes
/// and stops them) and the poll loop.
pub(super) type Partitions = Arc<Mutex<HashMap<PartitionKey, PartitionSlot>>>;

/// On assignment: gives each partition its own librdkafka queue (split from the consumer's
/// main queue before fetching starts) and sends it to the poll loop, which starts the
/// partition's worker. On revocation (or loss): stops their workers, abandoning records in
/// backoff so that the new owner consumes them again, and commits the offsets stored so far.
pub(super) struct RebalanceContext {
    pub partitions: Partitions,
    pub metrics: Metrics,
    /// The consumer itself, set once it exists, to split partition queues.
    pub consumer: OnceLock<Weak<StreamConsumer<RebalanceContext>>>,
    /// Where newly assigned partitions go.
    pub assigned: mpsc::UnboundedSender<Assigned>,
    /// Parent of every worker's token; cancelled at shutdown.
    pub stop: CancellationToken,
    /// Records a partition may buffer before fetching stops (see the config).
    pub max_buffered_records: usize,
    /// Each partition's queue, split once and kept for the consumer's life: a revoked
    /// partition's worker may still hold its queue when the partition is assigned again, and
    /// dropping a queue turns off the wake-ups of the partition's queue for every holder, so a
    /// fresh split would leave the new worker waiting forever. Held by the [`Consumer`]
    /// (queues hold the Kafka consumer, so the context holding them would keep it alive).
    ///
    /// [`Consumer`]: super::Consumer
    pub queues: Weak<Mutex<Queues>>,
}

/// The partitions' queues; see [`RebalanceContext::queues`].
pub(super) type Queues = HashMap<PartitionKey, SharedQueue>;

/// A partition's queue and the lease of its reader. The workers of successive assignments of
/// one partition share the queue, so a worker reads it only while it holds the lease: the
/// worker of a new assignment starts once the revoked one has ended (its handler call in
/// progress finished), and a revoked worker takes nothing more from the queue after its
/// cancellation (a record it took then would belong to the new assignment and be dropped).
#[derive(Clone)]
pub(super) struct SharedQueue {
    pub queue: Arc<PartitionQueue>,
    pub reader: Arc<tokio::sync::Mutex<()>>,
}

/// A newly assigned partition, for the poll loop to start its worker.
pub(super) struct Assigned {
    pub topic: String,
    pub partition: i32,
    /// The partition's own librdkafka queue and its reader's lease; `None` when splitting it
    /// failed, and its records come through `stray_records`.
    pub queue: Option<SharedQueue>,
    pub stray_records: mpsc::Receiver<crate::record::Record>,
    pub cancel: CancellationToken,
}

/// A partition's own queue.
pub(super) type PartitionQueue = StreamPartitionQueue<RebalanceContext>;

impl ClientContext for RebalanceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::log_rdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::kafka::log_client_error(&error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        self.metrics.observe_statistics(&statistics);
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let revoked: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}-{}", e.topic(), e.partition()))
                    .collect();
                {
                    let mut partitions = self.partitions.lock().expect("partitions lock");
                    for e in tpl.elements() {
                        if let Some(slot) =
                            partitions.remove(&(e.topic().to_string(), e.partition()))
                        {
                            slot.cancel.cancel();
                        }
                    }
                }
                tracing::info!(event = "partitions_revoked", partitions = ?revoked);
                commit_stored(consumer, "rebalance");
            }
            Rebalance::Assign(tpl) => {
                let assigned: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}-{}", e.topic(), e.partition()))
                    .collect();
                tracing::info!(event = "partitions_assigned", partitions = ?assigned);
                // Split before librdkafka starts fetching (right after this callback), so
                // every record of the partition arrives on its own queue.
                let consumer = self.consumer.get().and_then(Weak::upgrade);
                let mut partitions = self.partitions.lock().expect("partitions lock");
                let queues = self.queues.upgrade();
                let mut queues = queues.as_ref().map(|q| q.lock().expect("queues lock"));
                for e in tpl.elements() {
                    let (topic, partition) = (e.topic().to_string(), e.partition());
                    let key = (topic.clone(), partition);
                    let queue = match queues.as_ref().and_then(|q| q.get(&key)) {
                        Some(queue) => Some(queue.clone()),
                        None => consumer
                            .as_ref()
                            .and_then(|c| c.split_partition_queue(&topic, partition))
                            .map(|queue| SharedQueue {
                                queue: Arc::new(queue),
                                reader: Arc::default(),
                            }),
                    };
                    if let (Some(queue), Some(queues)) = (&queue, queues.as_mut()) {
                        queues.insert(key, queue.clone());
                    }
                    if queue.is_none() {
                        tracing::warn!(event = "partition_queue_split_failed", %topic, partition,
                            "its records come through the consumer's main queue instead");
                    }
                    let cancel = self.stop.child_token();
                    let (strays, stray_records) = mpsc::channel(self.max_buffered_records);
                    if let Some(old) = partitions.insert(
                        (topic.clone(), partition),
                        PartitionSlot {
                            cancel: cancel.clone(),
                            strays,
                        },
                    ) {
                        old.cancel.cancel();
                    }
                    let _ = self.assigned.send(Assigned {
                        topic,
                        partition,
                        queue,
                        stray_records,
                        cancel,
                    });
                }
            }
            Rebalance::Error(e) => {
                tracing::warn!(event = "rebalance_failed", error = %e);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        let assigned = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        self.metrics.partitions_assigned.set(assigned as i64);
    }
}

/// Commits the offsets stored so far, synchronously. "No offset to commit" is not an error.
pub(super) fn commit_stored<C: Consumer<X>, X: ConsumerContext>(consumer: &C, when: &str) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!(event = "offsets_committed", when),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => tracing::error!(event = "offset_commit_failed", when, error = %e,
            "settled records after the last commit will be consumed again"),
    }
}
