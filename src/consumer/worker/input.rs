//! What a partition's worker is given when the partition is assigned: the partition, its
//! retry tier, its metrics, and where its records come from.

use std::sync::Arc;

use super::client::Client;
use super::local_metrics::TopicHandles;
use super::records::Records;
use super::source::{InboxSource, RecordSource};
use crate::consumer::context::Assigned;
use crate::consumer::inbox::Inbox;
use crate::metrics::Metrics;
use crate::record::retry::Stage;

/// Where a partition's worker takes its records from: the partition's inbox, which the
/// consumer's poll loop fills and keeps within the partition's share of `max_buffered_bytes`
/// (see `consumer::inbox`); or, in tests, a simulated partition.
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
    /// The partition's inbox, its reader lease, and the consumer to resume fetches with.
    Inbox {
        inbox: Arc<Inbox>,
        reader: Arc<tokio::sync::Mutex<()>>,
        client: Arc<dyn Client>,
        buffered: prometheus::IntGauge,
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
        client: Arc<dyn Client>,
        metrics: &Metrics,
        stage: Stage,
        tiers: usize,
    ) -> Self {
        let feed = Feed::Inbox {
            inbox: assigned.inbox,
            reader: assigned.reader,
            client,
            buffered: metrics.buffered_bytes.clone(),
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
    /// partition run one at a time.
    pub(super) fn reader(&self) -> Arc<tokio::sync::Mutex<()>> {
        match &self.feed {
            Feed::Inbox { reader, .. } => reader.clone(),
            #[cfg(test)]
            Feed::Other { reader, .. } => reader.clone(),
        }
    }

    /// Reads the partition's records.
    pub(super) fn records(&mut self) -> Records<'_> {
        let source: Box<dyn RecordSource + '_> = match &mut self.feed {
            Feed::Inbox {
                inbox,
                client,
                buffered,
                ..
            } => {
                let (inbox, client, buffered): (&Arc<Inbox>, &Arc<dyn Client>, &_) =
                    (inbox, client, buffered);
                Box::new(InboxSource {
                    topic: &self.topic,
                    partition: self.partition,
                    inbox,
                    client: client.as_ref(),
                    buffered,
                })
            }
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
