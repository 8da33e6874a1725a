//! The one retry loop: try, and while the try says so, wait and try again; a cancellation
//! ends a wait. The dead-letter write, Slack delivery and the handler's retries all run on it;
//! each says in its own try what a failure means and how long to wait (the next delay of its
//! backoff, or a server's `Retry-After`).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::stopped::Stopped;

/// What one try came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next<T> {
    /// Done, with this (a success or a failure not worth another try).
    Done(T),
    /// Try again after this long.
    RetryIn(Duration),
    /// Try again at once (the wait happened inside the try, or there is none to make).
    RetryNow,
}

/// Runs `attempt` until it is [`Next::Done`], sleeping as each try says; returns what the last
/// try was done with, or [`Stopped`] when `cancel` fires during a wait. A try that is
/// running when `cancel` fires is not cut short: only waits are.
///
/// What a try changes for the next (its backoff schedule, a counter, which form to send)
/// travels in `state`: each try takes it and hands it back with its [`Next`].
pub async fn retry<S, T, F, Fut>(
    cancel: &CancellationToken,
    mut state: S,
    mut attempt: F,
) -> Result<T, Stopped>
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Next<T>)>,
{
    loop {
        let (next_state, next) = attempt(state).await;
        state = next_state;
        match next {
            Next::Done(value) => return Ok(value),
            Next::RetryNow => {}
            Next::RetryIn(wait) => {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(Stopped),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_as_each_try_says_until_one_is_done() {
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let result = retry(&cancel, 0, |tries| async move {
            let tries = tries + 1;
            let next = match tries {
                1 => Next::RetryIn(Duration::from_secs(2)),
                2 => Next::RetryNow,
                _ => Next::Done(tries),
            };
            (tries, next)
        })
        .await;
        assert_eq!(result, Ok(3));
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_ends_the_wait() {
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop.cancel();
        });
        let start = tokio::time::Instant::now();
        let result: Result<(), _> = retry(&cancel, (), |()| async {
            ((), Next::RetryIn(Duration::from_secs(60)))
        })
        .await;
        assert_eq!(result, Err(Stopped));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
