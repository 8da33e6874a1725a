//! A record's calls after its first: transient failures retried with backoff, calls that fail
//! while the downstream is down made again once the breaker permits (without using up a
//! retry), until the record is handled or must exit.

use tokio_util::sync::CancellationToken;

use super::call::permit;
use super::metrics::TopicMetrics;
use super::Caller;
use crate::backoff::{retry, Delays, Next};
use crate::failure::{decide, narrow, DeadLetterKind, Decision, HandlerError};
use crate::handler::BatchHandler;
use crate::metrics::GaugeGuard;
use crate::record::Record;
use crate::stopped::Stopped;

/// How a record's calls ended.
pub(crate) enum Settled {
    Handled,
    /// A permanent failure, or its retries used up: the record exits — to its next retry
    /// topic or the dead-letter topic, or, in a share group, as its delivery decides.
    Exit {
        kind: DeadLetterKind,
        message: String,
        attempts: u32,
    },
}

/// The calls a record has had so far and the last one's error: what is known of a record
/// whose calls stopped before they settled it.
#[derive(Debug, Default)]
pub(crate) struct Tried {
    pub attempts: u32,
    pub last_error: Option<String>,
}

impl Tried {
    fn failed(&mut self, error: &HandlerError) {
        self.last_error = Some(error.message().to_string());
    }
}

impl<H: BatchHandler> Caller<H> {
    /// Calls the handler with `record` until it settles: after `first` (a call already made,
    /// which failed so), or from a first call of its own. A transient failure is called again
    /// after the backoff's delay, one while the breaker is open once the breaker permits;
    /// see [`decide`]. `tried` counts the calls as they are made. [`Stopped`] when `cancel`
    /// fires during a wait (backoff, the breaker); a call is never cut short.
    pub(crate) async fn retries(
        &self,
        metrics: &mut TopicMetrics<'_>,
        record: &Record,
        first: Option<HandlerError>,
        tried: &mut Tried,
        cancel: &CancellationToken,
    ) -> Result<Settled, Stopped> {
        // Its error is noted when the loop decides on it, as every call's is.
        tried.attempts += u32::from(first.is_some());
        let state = Retries {
            result: first.map(Err),
            delays: self.backoff.delays(),
            metrics,
            tried,
            in_backoff: None,
        };
        retry(cancel, state, |mut state| async move {
            state.in_backoff = None;
            let result = match state.result.take() {
                Some(result) => result,
                None => {
                    let granted = match permit(&self.breaker, cancel).await {
                        Ok(granted) => granted,
                        Err(Stopped) => return (state, Next::Done(Err(Stopped))),
                    };
                    state.tried.attempts += 1;
                    let records = std::slice::from_ref(record);
                    let called = self.call(state.metrics, records, granted, None).await.0;
                    // A partial batch response names offsets: for one record, its own
                    // failure or none.
                    narrow(called, record.offset)
                }
            };
            let attempts = state.tried.attempts;
            let error = match result {
                Ok(()) => {
                    tracing::debug!(event = "record_handled", id = %record.id, attempts);
                    return (state, Next::Done(Ok(Settled::Handled)));
                }
                Err(error) => error,
            };
            state.tried.failed(&error);
            let next = match decide(&error, self.breaker.is_open(), &mut state.delays) {
                Decision::WaitForDownstream => {
                    tracing::info!(event = "record_waiting_for_breaker", id = %record.id,
                        attempts, error = %error,
                        "the downstream is down; this record waits without using up its retries");
                    Next::RetryNow
                }
                Decision::Retry { delay } => {
                    tracing::warn!(event = "record_retry_scheduled", id = %record.id, attempts,
                        retry_in_ms = delay.as_millis() as u64, error = %error);
                    self.metrics
                        .retried
                        .with_label_values(&[record.topic.as_str()])
                        .inc();
                    state.in_backoff = Some(GaugeGuard::inc(&self.metrics.partitions_in_backoff));
                    Next::RetryIn(delay)
                }
                Decision::DeadLetter(kind) => Next::Done(Ok(Settled::Exit {
                    kind,
                    message: error.message().to_string(),
                    attempts,
                })),
            };
            (state, next)
        })
        .await?
    }
}

/// What one record's retries carry from one call to the next.
struct Retries<'m, 'b, 't> {
    /// The last call's result, when it is still to be decided on (the first's to begin with).
    result: Option<Result<(), HandlerError>>,
    delays: Delays,
    metrics: &'m mut TopicMetrics<'b>,
    tried: &'t mut Tried,
    /// Held while the record waits out a delay.
    in_backoff: Option<GaugeGuard>,
}
