//! What a partition's worker is given when the partition is assigned: the partition, its
//! retry tier, its metrics, and its inbox, where its records come from.

use std::sync::Arc;

use super::client::Client;
use super::records::Records;
use super::source::InboxSource;
use crate::consumer::assignments::Assigned;
use crate::consumer::inbox::Inbox;
use crate::consumer::settle::TopicHandles;
use crate::consumer::spare_records::SpareRecords;
use crate::metrics::Metrics;
use crate::record::retry::Stage;

/// What a partition's worker is given: its records come from the partition's inbox, which
/// the consumer's poll loop fills and keeps within the partition's share of
/// `max_buffered_bytes` (see `consumer::inbox`).
pub(crate) struct PartitionInput {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    inbox: Arc<Inbox>,
    /// The partition's reader lease, shared by the workers of its successive assignments.
    reader: Arc<tokio::sync::Mutex<()>>,
    /// The consumer, to resume the partition's fetches with.
    client: Arc<dyn Client>,
    /// The bytes every inbox of the consumer holds.
    buffered: prometheus::IntGauge,
    /// Where settled records go back to, for the poll loop to reuse.
    spares: Arc<SpareRecords>,
    /// Of a source, a retry tier's or the redrive topic: the records of the last two are
    /// restored to the originals they carry ([`crate::retry_tier::restore`]).
    pub(super) stage: Stage,
    consumed: prometheus::IntCounter,
    pub(super) metrics: TopicHandles,
    /// Cancelled once this assignment is revoked ([`Assigned::revoked`]).
    pub(super) revoked: tokio_util::sync::CancellationToken,
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
        let tiers = if stage.is_retry() { 0 } else { tiers };
        let topic = assigned.topic;
        series_at_zero(metrics, &topic, tiers);
        Self {
            consumed: metrics.consumed.with_label_values(&[&topic]),
            metrics: TopicHandles::new(metrics, &topic),
            topic,
            partition: assigned.partition,
            inbox: assigned.inbox,
            reader: assigned.reader,
            client,
            buffered: metrics.buffered_bytes.clone(),
            spares: assigned.spares,
            revoked: assigned.revoked,
            stage,
        }
    }

    /// The lease of the partition's reader: the workers of successive assignments of one
    /// partition run one at a time.
    pub(super) fn reader(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.reader.clone()
    }

    /// Reads the partition's records.
    pub(super) fn records(&mut self) -> Records<'_> {
        let source = InboxSource {
            topic: &self.topic,
            partition: self.partition,
            inbox: &self.inbox,
            client: self.client.as_ref(),
            buffered: &self.buffered,
            spares: &self.spares,
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

/// Makes every per-topic series of `topic` (with `tiers` retry tiers) exist, at 0, from the
/// topic's first assignment: a rate or an alert on a counter that never moved still has a
/// series to read.
fn series_at_zero(metrics: &Metrics, topic: &str, tiers: usize) {
    metrics.consumed.with_label_values(&[topic]);
    metrics.retried.with_label_values(&[topic]);
    metrics.dlq_write_failures.with_label_values(&[topic]);
    metrics.batch_splits.with_label_values(&[topic]);
    for tier in 0..tiers {
        metrics
            .retry_tier_sent
            .with_label_values(&[topic, &tier.to_string()]);
    }
    for kind in [
        crate::failure::DeadLetterKind::Permanent,
        crate::failure::DeadLetterKind::RetriesExhausted,
    ] {
        metrics
            .dead_lettered
            .with_label_values(&[topic, kind.as_str()]);
    }
}
