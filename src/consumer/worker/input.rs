//! What a partition's worker is given when the partition is assigned: the partition, its
//! retry tier, its metrics, and where its records come from.

use tokio::sync::mpsc;

use super::local_metrics::TopicHandles;
use super::records::Records;
use super::source::{QueueSource, RecordSource};
use crate::consumer::context::Assigned;
use crate::consumer::context::SharedQueue;
use crate::metrics::Metrics;
use crate::record::retry::Stage;
use crate::record::Record;

/// Where a partition's worker takes its records from: the partition's own librdkafka queue,
/// which librdkafka keeps bounded (it stops fetching the partition while
/// `max_buffered_records` records or 1.5 MB wait there), and the rare records that arrived on
/// the main queue; or, in tests, a simulated partition.
pub(crate) struct PartitionInput {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    feed: Feed,
    /// Of a source, a retry tier's or the redrive topic: the records of the last two are
    /// restored to the originals they carry ([`crate::retry_tier::restore`]).
    pub(super) stage: Stage,
    consumed: prometheus::IntCounter,
    pub(super) metrics: TopicHandles,
}

/// The records' source behind a [`PartitionInput`].
enum Feed {
    /// The partition's own librdkafka queue (`None` when splitting it failed) and the records
    /// that arrived on the main queue.
    Queue {
        queue: Option<SharedQueue>,
        strays: mpsc::Receiver<Record>,
        id_header: Option<String>,
    },
    /// Any other source, read by one worker at a time under `reader`.
    #[cfg(test)]
    Other {
        source: Box<dyn RecordSource>,
        reader: std::sync::Arc<tokio::sync::Mutex<()>>,
    },
}

impl PartitionInput {
    /// The input of a newly assigned partition at `stage` (`tiers`: how many retry tiers a
    /// source topic has).
    pub(crate) fn new(
        assigned: Assigned,
        id_header: Option<String>,
        metrics: &Metrics,
        stage: Stage,
        tiers: usize,
    ) -> Self {
        let feed = Feed::Queue {
            queue: assigned.queue,
            strays: assigned.stray_records,
            id_header,
        };
        Self::with_feed(
            assigned.topic,
            assigned.partition,
            feed,
            metrics,
            stage,
            tiers,
        )
    }

    /// The input of a partition whose records come from `source`, read under the lease
    /// `reader` (shared by the workers of the partition's successive assignments).
    #[cfg(test)]
    pub(crate) fn from_source(
        topic: String,
        partition: i32,
        source: Box<dyn RecordSource>,
        reader: std::sync::Arc<tokio::sync::Mutex<()>>,
        metrics: &Metrics,
        stage: Stage,
        tiers: usize,
    ) -> Self {
        let feed = Feed::Other { source, reader };
        Self::with_feed(topic, partition, feed, metrics, stage, tiers)
    }

    fn with_feed(
        topic: String,
        partition: i32,
        feed: Feed,
        metrics: &Metrics,
        stage: Stage,
        tiers: usize,
    ) -> Self {
        let tiers = if stage.is_retry() { 0 } else { tiers };
        Self {
            consumed: metrics.consumed.with_label_values(&[&topic]),
            metrics: TopicHandles::new(metrics, &topic, tiers),
            topic,
            partition,
            feed,
            stage,
        }
    }

    /// The lease of the partition's reader: the workers of successive assignments of one
    /// partition read it one at a time. `None` when nothing is shared (no split queue).
    pub(super) fn reader(&self) -> Option<std::sync::Arc<tokio::sync::Mutex<()>>> {
        match &self.feed {
            Feed::Queue { queue, .. } => queue.as_ref().map(|shared| shared.reader.clone()),
            #[cfg(test)]
            Feed::Other { reader, .. } => Some(reader.clone()),
        }
    }

    /// Reads the partition's records, through one message stream for the worker's life (a
    /// stream per read would register and unregister a waker for every record).
    pub(super) fn records(&mut self) -> Records<'_> {
        let source: Box<dyn RecordSource + '_> = match &mut self.feed {
            Feed::Queue {
                queue,
                strays,
                id_header,
            } => Box::new(QueueSource {
                topic: &self.topic,
                partition: self.partition,
                stream: queue.as_ref().map(|shared| shared.queue.stream()),
                strays,
                id_header: id_header.as_deref(),
            }),
            #[cfg(test)]
            Feed::Other { source, .. } => Box::new(source.as_mut()),
        };
        Records::new(
            source,
            &self.topic,
            self.partition,
            &self.stage,
            &self.consumed,
        )
    }
}
