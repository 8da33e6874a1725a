//! One record's calls, shared by the consumer group's workers and the share group's members:
//! the breaker's permit, the handler call with its panic guard, and the retries with backoff
//! that follow a transient failure, until the record is handled or must exit. It decides and
//! never writes: where an exiting record goes, and when progress is stored, are its caller's
//! (the partition's progress, `consumer::progress`; the share member's acknowledgement).
//!
//! | file | what |
//! |---|---|
//! | [`call`] | the breaker's permit and one handler call, its panic caught, its outcome told to the breaker |
//! | [`exit`] | where a record goes when its calls end unhandled |
//! | [`retries`] | a record's calls after its first: backoff, the downstream-down wait, and how they ended ([`Settled`]) |
//! | [`metrics`] | the call metrics a worker counts locally and flushes, and the breaker's answered calls |
//!
//! The breaker pauses nothing itself. While it is open a group worker waits for its permit
//! with the record it took; the partition's queue fills to its share and librdkafka stops
//! fetching it, as for any slow handler, so memory stays bounded. A share member acquires nothing more while
//! its records wait, their locks renewed.

mod call;
mod exit;
mod metrics;
mod retries;
mod spans;

use std::sync::Arc;

pub(crate) use call::permit;
pub(crate) use exit::Exit;
pub(crate) use metrics::{TopicHandles, TopicMetrics};
pub(crate) use retries::{Settled, Tried};
pub(crate) use spans::{failed, record_span, Spans};

use crate::backoff::ExponentialBackoff;
use crate::breaker::Breaker;
use crate::metrics::Metrics;

/// What calling the handler takes: the handler, the outage breaker, the backoff of a transient
/// failure, and the metrics the calls count in.
pub(crate) struct Caller<H> {
    pub handler: H,
    pub breaker: Arc<Breaker>,
    pub backoff: ExponentialBackoff,
    pub metrics: Metrics,
    /// The spans of records in OpenTelemetry's conventions, when `trace_records` is on.
    pub spans: Option<Spans>,
    /// What the consumer does while the breaker is open, for the log line when it opens.
    pub while_open: &'static str,
}
