//! What runs the transaction beside the workers: the commit when it is due, and the poll
//! loop's rewind of partitions after an abort.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::{Committed, Transaction};
use crate::consumer::assignments::Assignments;

/// How long a rewind's seek may take.
const SEEK_TIMEOUT: Duration = Duration::from_secs(10);

/// Commits `transaction` each time it is due (its records, or its interval since its first),
/// as the member `consumer` is now, until `stop` or a fatal error.
pub(crate) async fn commit_when_due<C: ConsumerContext + 'static>(
    transaction: Arc<Transaction>,
    consumer: Arc<StreamConsumer<C>>,
    stop: CancellationToken,
) {
    loop {
        let wait = transaction.due_in();
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = transaction.full.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        if !transaction.is_due() {
            continue;
        }
        let (t, c) = (transaction.clone(), consumer.clone());
        let committed = tokio::task::spawn_blocking(move || t.commit(c.group_metadata())).await;
        if let Ok(Committed::Fatal(_)) = committed {
            return;
        }
    }
}

/// Restarts each partition of an aborted transaction still assigned here at its first record
/// in it: seeks there (which drops what librdkafka fetched beyond), then gives it a fresh
/// inbox and worker (ending the old one, whose records the transaction refuses). `Err` when
/// the producer failed for good or a seek failed (its records would be skipped): the consumer
/// stops.
pub(crate) async fn rewind<C: ConsumerContext + 'static>(
    transaction: &Arc<Transaction>,
    consumer: &Arc<StreamConsumer<C>>,
    assignments: &Assignments,
) -> Result<(), String> {
    for (partition, position) in transaction.take_rewinds()? {
        if assignments.is_assigned(&partition) {
            let (c, (topic, p)) = (consumer.clone(), partition.clone());
            let sought = tokio::task::spawn_blocking(move || {
                c.seek(&topic, p, Offset::Offset(position), SEEK_TIMEOUT)
            })
            .await
            .expect("seek does not panic");
            if let Err(e) = sought {
                return Err(format!(
                    "could not rewind {}-{} to offset {position} after an aborted transaction: {e}",
                    partition.0, partition.1
                ));
            }
            assignments.rebalancing();
            assignments.assign(std::slice::from_ref(&partition));
            let mut list = TopicPartitionList::with_capacity(1);
            list.add_partition(&partition.0, partition.1);
            if let Err(error) = consumer.resume(&list) {
                tracing::warn!(event = "partition_resume_failed", topic = %partition.0,
                    partition = partition.1, %error, "the rewound partition may stay paused");
            }
            tracing::info!(event = "partition_rewound", topic = %partition.0,
                partition = partition.1, position);
        }
        transaction.restarted(&partition);
    }
    Ok(())
}
