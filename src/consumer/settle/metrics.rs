//! The metrics of a worker's or member's calls, counted locally and added to the shared ones
//! in bulk, and the calls the downstream answered, told to the outage breaker in bulk.

use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerState, CallOutcome, Permit};
use crate::metrics::Metrics;

/// One topic's metric handles, looked up once per partition rather than once per record.
#[derive(Clone)]
pub(crate) struct TopicHandles {
    succeeded: prometheus::IntCounter,
    handler_duration: prometheus::Histogram,
    process_duration: prometheus::Histogram,
    settle_seconds: prometheus::Histogram,
}

impl TopicHandles {
    /// The handles of `topic`.
    pub(crate) fn new(metrics: &Metrics, topic: &str) -> Self {
        Self {
            succeeded: metrics.succeeded.with_label_values(&[topic]),
            handler_duration: metrics.handler_duration.with_label_values(&[topic]),
            process_duration: metrics.process_duration.with_label_values(&[topic, ""]),
            settle_seconds: metrics.settle_seconds.clone(),
        }
    }

    /// Metrics kept by one worker and added to the shared ones on [`TopicMetrics::flush`]:
    /// a worker settles hundreds of thousands of records a second, and shared atomics
    /// touched by every worker for every record would cost more than the records. The
    /// calls the downstream answered are counted the same way for `breaker`.
    pub(crate) fn local<'a>(&self, breaker: &'a Breaker) -> TopicMetrics<'a> {
        TopicMetrics {
            succeeded: self.succeeded.local(),
            handler_duration: self.handler_duration.local(),
            process_duration: self.process_duration.local(),
            settle_seconds: self.settle_seconds.local(),
            breaker,
            answered: None,
            follows: None,
        }
    }
}

/// A worker's own metrics; see [`TopicHandles::local`]. Flushed after each chunk of records
/// and before any wait, and when dropped.
pub(crate) struct TopicMetrics<'a> {
    pub(crate) succeeded: prometheus::local::LocalIntCounter,
    pub(crate) handler_duration: prometheus::local::LocalHistogram,
    /// `messaging.process.duration` of the calls that succeeded (a failed one is observed at
    /// once, under its `error_type`).
    pub(crate) process_duration: prometheus::local::LocalHistogram,
    pub(crate) settle_seconds: prometheus::local::LocalHistogram,
    breaker: &'a Breaker,
    /// Calls made with [`Permit::Normal`] and answered, not yet told to the breaker, and when
    /// the last of them ended.
    answered: Option<(u32, Instant)>,
    /// When the last record handled ended its call, while the worker goes straight on from
    /// there to the next record's call: that call's start, without reading the clock again.
    /// Cleared by [`TopicMetrics::flush`], which comes before every wait.
    pub(crate) follows: Option<Instant>,
}

impl TopicMetrics<'_> {
    /// Counts a call for the breaker; tells it at once unless it was a normal call that the
    /// downstream answered. Returns the breaker's new state when it changed.
    pub(crate) fn record_call(
        &mut self,
        permit: Permit,
        outcome: CallOutcome,
        who: u64,
        ended: Instant,
    ) -> Option<BreakerState> {
        if permit == Permit::Normal && outcome == CallOutcome::Answered {
            let calls = self.answered.map_or(0, |(calls, _)| calls);
            self.answered = Some((calls + 1, ended));
            return None;
        }
        // The answered calls before this one first, so the window sees them in order.
        self.flush_answered();
        self.breaker.record_at(permit, outcome, who, ended)
    }

    /// Tells the breaker of the answered calls counted so far.
    pub(crate) fn flush_answered(&mut self) {
        if let Some((calls, at)) = self.answered.take() {
            self.breaker.record_answered(calls, at);
        }
    }

    pub(crate) fn flush(&mut self) {
        self.follows = None;
        self.succeeded.flush();
        self.handler_duration.flush();
        self.process_duration.flush();
        self.settle_seconds.flush();
        self.flush_answered();
    }
}

impl Drop for TopicMetrics<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
