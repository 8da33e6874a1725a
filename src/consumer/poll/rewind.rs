//! The poll loop's part in exactly once: after a transaction aborted, each of its partitions
//! starts again at its first record in it, with a fresh inbox and worker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rdkafka::error::KafkaError;

use super::assignments::Assignments;
use crate::consumer::transaction::{Rewind, TopicPartition, Transaction};
use crate::consumer::TransactionError;

/// What a rewind asks of the consumer (librdkafka's, or the simulation's world).
pub(in crate::consumer) trait Seek: Send + Sync {
    /// Starts fetching `partition` at `position`, dropping what was fetched beyond.
    fn seek<'a>(
        &'a self,
        partition: &'a TopicPartition,
        position: i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), KafkaError>> + Send + 'a>>;

    /// Fetches `partition` again (its inbox may have paused it).
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
/// it a fresh inbox and worker (ending the old one, whose records the transaction refuses).
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
                            error,
                        })
                    }
                },
            };
            if let Err(error) = consumer.seek(&partition, position).await {
                return Err(TransactionError::Rewind {
                    topic: partition.0,
                    partition: partition.1,
                    position,
                    error,
                });
            }
            assignments.rebalancing();
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
