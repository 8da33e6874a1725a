//! Record batches krafka cannot decode in a share fetch: never released in silence.
//!
//! krafka 0.28 RELEASEs the acquired offsets of a share fetch from the first batch it cannot
//! decode (corrupt bytes, a codec it lacks) and says so only in a `debug` line of its own
//! (`undecodable record batch in {topic}-{partition}: {error}`), with no hook a member could
//! use. The broker delivers those records again, their delivery count one higher each time,
//! and archives them at `share.delivery.count.limit`: they would be gone without a word.
//!
//! [`layer`] is a `tracing` layer that watches for that line, whatever the subscriber's own
//! filter. Each share member running in the process registers the topics it reads
//! ([`watch`]); on a failure in one of them every such member counts it in
//! `kafka_dlq_undecodable_batches_total{topic,partition}`, logs an error naming the partition
//! and krafka's words (at most every 30 s per partition), and `/readyz` names the partition
//! until the member restarts: the records are archived by the broker after their last delivery
//! and must be produced again by whoever can (docs/share-groups.md, "A batch that cannot be
//! decoded").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::metrics::Metrics;

/// The module of krafka that writes the line.
const TARGET: &str = "krafka::share_consumer";
/// How the line begins.
const PREFIX: &str = "undecodable record batch in ";
/// The least time between two error lines of one partition.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// A batch krafka could not decode: where, and its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub topic: String,
    pub partition: i32,
    pub error: String,
}

impl Failure {
    /// The failure krafka's `message` describes, if it is that line. Topic names hold no `:`,
    /// so the first `": "` ends the partition; the partition follows the topic's last `-`.
    pub(crate) fn of(message: &str) -> Option<Failure> {
        let rest = message.strip_prefix(PREFIX)?;
        let (place, error) = rest.split_once(": ")?;
        let (topic, partition) = place.rsplit_once('-')?;
        Some(Failure {
            topic: topic.to_string(),
            partition: partition.parse().ok()?,
            error: error.to_string(),
        })
    }
}

/// A member's registration: the topics it reads and where it reports.
pub(crate) struct Watch {
    topics: Vec<String>,
    metrics: Metrics,
    logged: Mutex<HashMap<(String, i32), Instant>>,
}

impl Watch {
    fn report(&self, failure: &Failure) {
        if !self.topics.contains(&failure.topic) {
            return;
        }
        let partition = failure.partition.to_string();
        self.metrics
            .undecodable_batches
            .with_label_values(&[failure.topic.as_str(), partition.as_str()])
            .inc();
        let place = format!("{}-{}", failure.topic, failure.partition);
        self.metrics.set_not_ready(
            &format!("undecodable share batch {place}"),
            format!(
                "share partition {place} holds a record batch that cannot be decoded ({}): its records are released unread and the broker archives them after share.delivery.count.limit deliveries; produce them again from their source, then restart this member",
                failure.error
            ),
        );
        let now = Instant::now();
        let mut logged = self.logged.lock().expect("undecodable log lock");
        let key = (failure.topic.clone(), failure.partition);
        if logged
            .get(&key)
            .is_none_or(|last| now.duration_since(*last) >= LOG_EVERY)
        {
            logged.insert(key, now);
            tracing::error!(event = "share_batch_undecodable", topic = %failure.topic,
                partition = failure.partition, error = %failure.error,
                "a record batch cannot be decoded: its records are released unread, and the broker archives them after their last delivery");
        }
    }
}

/// Every registered member; a member's entry goes when its [`Watch`] is dropped.
static WATCHES: Mutex<Vec<Weak<Watch>>> = Mutex::new(Vec::new());

/// Registers a member reading `topics` that reports to `metrics`, for as long as the returned
/// handle lives.
pub(crate) fn watch(topics: Vec<String>, metrics: Metrics) -> Arc<Watch> {
    let watch = Arc::new(Watch {
        topics,
        metrics,
        logged: Mutex::default(),
    });
    let mut watches = WATCHES.lock().expect("watches lock");
    watches.retain(|w| w.strong_count() > 0);
    watches.push(Arc::downgrade(&watch));
    watch
}

fn report(failure: &Failure) {
    let watches: Vec<Arc<Watch>> = WATCHES
        .lock()
        .expect("watches lock")
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for watch in watches {
        watch.report(failure);
    }
}

/// The layer that reports krafka's undecodable share batches to the members of the process
/// (see the module docs). `kafka-dlq run` installs it; a service that runs a
/// [`ShareConsumer`](super::ShareConsumer) itself adds it to its subscriber, beside its own
/// layers: it enables krafka's debug events of that module for itself only, and writes
/// nothing.
pub fn layer<S>() -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    Watcher.with_filter(tracing_subscriber::filter::filter_fn(|meta| {
        meta.is_event() && meta.target().starts_with(TARGET)
    }))
}

struct Watcher;

impl<S: Subscriber> Layer<S> for Watcher {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut message = Message(None);
        event.record(&mut message);
        if let Some(failure) = message.0.as_deref().and_then(Failure::of) {
            report(&failure);
        }
    }
}

/// An event's `message` field.
struct Message(Option<String>);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn krafkas_line_names_the_partition_and_the_error() {
        assert_eq!(
            Failure::of("undecodable record batch in order-events-3: CRC mismatch: 1 != 2"),
            Some(Failure {
                topic: "order-events".into(),
                partition: 3,
                error: "CRC mismatch: 1 != 2".into(),
            })
        );
        assert_eq!(Failure::of("undecodable record batch in orders: x"), None);
        assert_eq!(Failure::of("something else in orders-1: x"), None);
    }

    #[test]
    fn a_failure_reaches_the_members_reading_its_topic_only() {
        let reading = Metrics::new();
        let elsewhere = Metrics::new();
        let _a = watch(vec!["parcels-layer-test".into()], reading.clone());
        let _b = watch(vec!["other-layer-test".into()], elsewhere.clone());
        let subscriber = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(
                target: "krafka::share_consumer::completed_fetch",
                "undecodable record batch in {}-{}: {}",
                "parcels-layer-test",
                0,
                "bad gzip"
            );
        });
        assert_eq!(reading.total("kafka_dlq_undecodable_batches_total"), 1.0);
        let reasons = reading.not_ready();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("parcels-layer-test-0") && r.contains("bad gzip")),
            "{reasons:?}"
        );
        assert_eq!(elsewhere.total("kafka_dlq_undecodable_batches_total"), 0.0);
        assert!(elsewhere
            .not_ready()
            .iter()
            .all(|r| !r.contains("parcels-layer-test")));
    }

    #[test]
    fn a_dropped_member_is_told_nothing() {
        let metrics = Metrics::new();
        drop(watch(vec!["gone-layer-test".into()], metrics.clone()));
        report(&Failure {
            topic: "gone-layer-test".into(),
            partition: 0,
            error: "x".into(),
        });
        assert_eq!(metrics.total("kafka_dlq_undecodable_batches_total"), 0.0);
    }
}
