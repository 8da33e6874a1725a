//! What runs the transaction beside the workers: the commit when it is due, and the poll
//! loop's rewind of partitions after an abort.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Committed, Rewind, TopicPartition, Transaction};
use crate::consumer::assignments::Assignments;

/// What a rewind asks of the consumer (librdkafka's, or the simulation's world).
pub(crate) trait Seek: Send + Sync {
    /// Starts fetching `partition` at `position`, dropping what was fetched beyond.
    fn seek<'a>(
        &'a self,
        partition: &'a TopicPartition,
        position: i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

    /// Fetches `partition` again (its inbox may have paused it).
    fn resume_partition(&self, partition: &TopicPartition);

    /// The group's committed offset of `partition` (`None`: none), asked so that a
    /// transaction still open on the broker is resolved first (`read_committed`: the broker
    /// answers once it committed or aborted it).
    fn committed<'a>(
        &'a self,
        partition: &'a TopicPartition,
    ) -> Pin<Box<dyn Future<Output = Result<Option<i64>, String>> + Send + 'a>>;
}

/// Commits `transaction` each time it is due (its records, or its interval since its first),
/// until `stop` or a fatal error; `commit` runs one commit (off the async threads: it waits
/// for the broker) and says how it ended, `None` if it could not run. After an abort it waits
/// [`pause_after_aborts`] before the next commit: a member that lost its partitions without
/// knowing yet (its commits refused until its revocation comes) or a coordinator that refuses
/// every commit would otherwise call the handler again for the same records in a tight loop.
pub(crate) async fn commit_when_due<F>(
    transaction: Arc<Transaction>,
    stop: CancellationToken,
    commit: impl Fn(Arc<Transaction>) -> F,
) where
    F: Future<Output = Option<Committed>>,
{
    let mut aborts_in_a_row = 0;
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
        match commit(transaction.clone()).await {
            Some(Committed::Fatal(_)) => return,
            Some(Committed::Records(_)) => aborts_in_a_row = 0,
            Some(Committed::Aborted(_)) => {
                aborts_in_a_row += 1;
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(pause_after_aborts(aborts_in_a_row)) => {}
                }
            }
            Some(Committed::Nothing) | None => {}
        }
    }
}

/// How long the committer waits after `n` (at least one) transactions aborted in a row: 100 ms,
/// doubling, at most 5 s.
pub(crate) fn pause_after_aborts(n: u32) -> Duration {
    let doubled = 100u64.saturating_mul(1 << n.saturating_sub(1).min(16));
    Duration::from_millis(doubled.min(5_000))
}

/// Restarts each partition of an aborted transaction at its first record in it (or, when the
/// transaction's outcome is unknown, where the broker says the group's offset is committed),
/// unless the assignment whose records those were has ended (a later assignment started from
/// the committed position itself): seeks there (which drops what was fetched beyond), then gives
/// it a fresh inbox and worker (ending the old one, whose records the transaction refuses).
/// `Err` when the producer failed for good or a seek failed (its records would be skipped):
/// the consumer stops.
pub(crate) async fn rewind(
    transaction: &Arc<Transaction>,
    consumer: &dyn Seek,
    assignments: &Assignments,
) -> Result<(), String> {
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
                    Err(e) => {
                        return Err(format!(
                            "could not read the committed offset of {}-{} after a transaction whose outcome is unknown: {e}",
                            partition.0, partition.1
                        ))
                    }
                },
            };
            if let Err(e) = consumer.seek(&partition, position).await {
                return Err(format!(
                    "could not rewind {}-{} to offset {position} after an aborted transaction: {e}",
                    partition.0, partition.1
                ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_after_aborts_doubles_from_100_ms_to_at_most_5_s() {
        let pauses: Vec<u64> = (1..=8)
            .map(|n| pause_after_aborts(n).as_millis() as u64)
            .collect();
        assert_eq!(pauses, vec![100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        assert_eq!(pause_after_aborts(u32::MAX), Duration::from_secs(5));
    }
}
