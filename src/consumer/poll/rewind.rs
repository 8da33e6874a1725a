//! The poll loop's part in exactly once: after a transaction aborted, each of its partitions
//! starts again at its first record in it, with a fresh worker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rdkafka::consumer::{Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::Offset;

use super::assignments::Assignments;
use crate::consumer::client::{Client as _, KafkaClient};
use crate::consumer::progress::transaction::{Rewind, TopicPartition, Transaction};
use crate::consumer::TransactionError;

/// What a rewind asks of the consumer (librdkafka's, or the simulation's world).
pub(in crate::consumer) trait Seek: Send + Sync {
    /// Starts fetching `partition` at `position`, dropping what was fetched beyond.
    fn seek<'a>(
        &'a self,
        partition: &'a TopicPartition,
        position: i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), KafkaError>> + Send + 'a>>;

    /// Fetches `partition` again (a retry wait or the breaker may have paused it).
    fn resume_partition(&self, partition: &TopicPartition);

    /// The group's committed offset of `partition` (`None`: none), asked so that a
    /// transaction still open on the broker is resolved first (`read_committed`: the broker
    /// answers once it committed or aborted it).
    fn committed<'a>(
        &'a self,
        partition: &'a TopicPartition,
    ) -> Pin<Box<dyn Future<Output = Result<Option<i64>, KafkaError>> + Send + 'a>>;
}

/// Restarts each partition of an aborted transaction at its first record in it (or, when the
/// transaction's outcome is unknown, where the broker says the group's offset is committed),
/// unless the assignment whose records those were has ended (a later assignment started from
/// the committed position itself): seeks there (which drops what was fetched beyond), then gives
/// it a fresh worker (ending the old one, whose records the transaction refuses).
/// `Err` when the producer failed for good or a seek failed (its records would be skipped):
/// the consumer stops.
pub(in crate::consumer) async fn rewind(
    transaction: &Arc<Transaction>,
    consumer: &dyn Seek,
    assignments: &Assignments,
) -> Result<(), TransactionError> {
    for Rewind {
        partition,
        position,
        ask_broker,
        assignment,
    } in transaction.take_rewinds()?
    {
        if !assignment.is_cancelled() {
            // The transaction's outcome unknown: where the broker says it is committed.
            let position = match ask_broker {
                false => position,
                true => match consumer.committed(&partition).await {
                    Ok(committed) => committed.unwrap_or(position),
                    Err(error) => {
                        return Err(TransactionError::CommittedUnknown {
                            topic: partition.0,
                            partition: partition.1,
                            error: Box::new(error),
                        })
                    }
                },
            };
            if let Err(error) = consumer.seek(&partition, position).await {
                return Err(TransactionError::Rewind {
                    topic: partition.0,
                    partition: partition.1,
                    position,
                    error: Box::new(error),
                });
            }
            assignments.assign(std::slice::from_ref(&partition));
            // The new assignment ended the old one (its token is cancelled); said again so
            // the rewind is forgotten below whatever token it was noted with.
            assignment.cancel();
            consumer.resume_partition(&partition);
            tracing::info!(event = "partition_rewound", topic = %partition.0,
                partition = partition.1, position);
        }
    }
    transaction.restarted();
    Ok(())
}
/// How long a rewind's seek may take.
const SEEK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl<C: ConsumerContext + 'static> Seek for KafkaClient<C> {
    fn seek<'a>(
        &'a self,
        partition: &'a TopicPartition,
        position: i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), rdkafka::error::KafkaError>> + Send + 'a>> {
        let (consumer, (topic, p)) = (self.consumer().cloned(), partition.clone());
        Box::pin(async move {
            let consumer = consumer.map_err(KafkaError::Seek)?;
            // Waits for librdkafka: off the async threads.
            tokio::task::spawn_blocking(move || {
                consumer.seek(&topic, p, Offset::Offset(position), SEEK_TIMEOUT)
            })
            .await
            .expect("seek does not panic")
        })
    }

    fn resume_partition(&self, partition: &TopicPartition) {
        if let Err(error) = self.resume(std::slice::from_ref(partition)) {
            tracing::warn!(event = "partition_resume_failed", topic = %partition.0,
                partition = partition.1, %error, "the rewound partition may stay paused");
        }
    }

    fn committed<'a>(
        &'a self,
        partition: &'a TopicPartition,
    ) -> Pin<Box<dyn Future<Output = Result<Option<i64>, rdkafka::error::KafkaError>> + Send + 'a>>
    {
        let (consumer, (topic, p)) = (self.consumer().cloned(), partition.clone());
        Box::pin(async move {
            let consumer = consumer.map_err(|_| KafkaError::NoMessageReceived)?;
            // The consumer reads `read_committed` (exactly once requires it), so librdkafka
            // asks with RequireStable and waits out a transaction still open on the broker.
            tokio::task::spawn_blocking(move || {
                let mut tpl = rdkafka::TopicPartitionList::new();
                tpl.add_partition(&topic, p);
                let committed = consumer.committed_offsets(tpl, COMMITTED_TIMEOUT)?;
                Ok::<_, rdkafka::error::KafkaError>(committed.elements().first().and_then(|e| {
                    match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    }
                }))
            })
            .await
            .expect("a committed offsets request does not panic")
        })
    }
}

/// How long the broker may take to say a partition's committed offset after a transaction
/// whose outcome is unknown: beyond the longest transaction timeout kafka-dlq sets.
const COMMITTED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(960);
