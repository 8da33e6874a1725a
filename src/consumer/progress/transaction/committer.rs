//! What runs the transaction beside the workers: the commit when it is due (the poll loop's
//! rewind of partitions after an abort is `poll/rewind.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Committed, Transaction};

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
