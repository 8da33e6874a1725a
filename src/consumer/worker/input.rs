//! Where a partition's worker takes its records from.

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rdkafka::consumer::stream_consumer::MessageStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::local_metrics::TopicHandles;
use super::Assigned;
use crate::consumer::context::{RebalanceContext, SharedQueue};
use crate::metrics::Metrics;
use crate::record::Record;

/// Where a partition's worker takes its records from: the partition's own librdkafka queue,
/// which librdkafka keeps bounded (it stops fetching the partition while
/// `max_buffered_records` records or 1.5 MB wait there), and the rare records that arrived on
/// the main queue.
pub(crate) struct PartitionInput {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(super) queue: Option<SharedQueue>,
    strays: mpsc::Receiver<Record>,
    id_header: Option<String>,
    /// `Some(n)` when the partition is of retry tier `n`'s topic: its records are restored to
    /// the originals they carry ([`crate::retry_tier::restore`]).
    pub(super) tier: Option<u32>,
    consumed: prometheus::IntCounter,
    pub(super) metrics: TopicHandles,
}

impl PartitionInput {
    /// The input of a newly assigned partition: of retry tier `tier`'s topic, or (`None`) of a
    /// source topic with `tiers` retry tiers.
    pub(crate) fn new(
        assigned: Assigned,
        id_header: Option<String>,
        metrics: &Metrics,
        tier: Option<u32>,
        tiers: usize,
    ) -> Self {
        let tiers = if tier.is_some() { 0 } else { tiers };
        Self {
            consumed: metrics.consumed.with_label_values(&[&assigned.topic]),
            metrics: TopicHandles::new(metrics, &assigned.topic, tiers),
            topic: assigned.topic,
            partition: assigned.partition,
            queue: assigned.queue,
            strays: assigned.stray_records,
            id_header,
            tier,
        }
    }

    /// Reads the partition's records, through one message stream for the worker's life (a
    /// stream per read would register and unregister a waker for every record).
    pub(super) fn records(&mut self) -> Records<'_> {
        Records {
            peeked: None,
            topic: &self.topic,
            partition: self.partition,
            stream: self.queue.as_ref().map(|shared| shared.queue.stream()),
            strays: &mut self.strays,
            id_header: self.id_header.as_deref(),
            tier: self.tier,
            consumed: &self.consumed,
        }
    }
}

/// A worker's reader of its partition's records; see [`PartitionInput::records`].
pub(super) struct Records<'a> {
    /// A record taken while waiting for something else; the next to hand out.
    pub(super) peeked: Option<Record>,
    topic: &'a str,
    partition: i32,
    stream: Option<MessageStream<'a, RebalanceContext>>,
    strays: &'a mut mpsc::Receiver<Record>,
    id_header: Option<&'a str>,
    tier: Option<u32>,
    consumed: &'a prometheus::IntCounter,
}

impl Records<'_> {
    /// A message as the record the worker settles: from a retry topic, the original it
    /// carries.
    fn record(&self, message: &rdkafka::message::BorrowedMessage<'_>) -> Record {
        self.restored(Record::from_message(message, self.id_header))
    }

    /// `record` as the worker settles it: from a retry topic, the original it carries.
    fn restored(&self, record: Record) -> Record {
        match self.tier {
            None => record,
            Some(_) if record.retry.is_some() => record,
            Some(tier) => {
                let (record, error) = crate::retry_tier::restore(record, tier);
                if let Some(error) = error {
                    tracing::warn!(event = "retry_record_unreadable", topic = %self.topic,
                        partition = self.partition, offset = record.delivered_offset(),
                        %error, "handled as it is, at once");
                }
                record
            }
        }
    }

    /// The next record: waits for it. `None` once `cancel` fires: from then on nothing more
    /// is taken from the partition's queue, which the next assignment's worker reads.
    pub(super) async fn next(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if let Some(record) = self.peeked.take() {
            return Some(record);
        }
        if cancel.is_cancelled() {
            return None;
        }
        if let Ok(record) = self.strays.try_recv() {
            return Some(self.restored(record));
        }
        loop {
            let polled = tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                Some(record) = self.strays.recv() => return Some(self.restored(record)),
                Some(polled) = next_message(&mut self.stream) => polled,
            };
            match polled {
                Ok(message) => return Some(self.record(&message)),
                Err(e) => crate::kafka::warn_gated(
                    "partition_poll_failed",
                    &e,
                    &format!("{}-{}", self.topic, self.partition),
                ),
            }
        }
    }

    /// The next record if one is ready, without waiting; `None` once `cancel` fired.
    pub(super) fn ready(&mut self, cancel: &CancellationToken) -> Option<Record> {
        if cancel.is_cancelled() {
            return None;
        }
        if let Ok(record) = self.strays.try_recv() {
            return Some(self.restored(record));
        }
        match next_message(&mut self.stream).now_or_never()?? {
            Ok(message) => Some(self.record(&message)),
            Err(_) => None,
        }
    }

    /// Takes up to `max` records in offset order, with the time they were taken: waits for
    /// the first, takes what else is ready, and waits up to `linger` for more. `None` once
    /// `cancel` fires while none was taken.
    pub(super) async fn take(
        &mut self,
        max: usize,
        linger: Duration,
        cancel: &CancellationToken,
    ) -> Option<(Vec<Record>, Instant)> {
        let first = self.next(cancel).await?;
        let taken = Instant::now();
        let mut records = Vec::with_capacity(max.min(256));
        records.push(first);
        while records.len() < max {
            // librdkafka's queue is not part of tokio's cooperative scheduling: without this, a
            // worker whose records are always ready would not let other tasks run.
            tokio::task::coop::consume_budget().await;
            match self.ready(cancel) {
                Some(record) => records.push(record),
                None => break,
            }
        }
        if records.len() < max && !linger.is_zero() {
            let until = tokio::time::Instant::now() + linger;
            while records.len() < max {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(until) => break,
                    next = self.next(cancel) => match next {
                        Some(record) => records.push(record),
                        None => break,
                    },
                }
            }
        }
        self.consumed.inc_by(records.len() as u64);
        Some((records, taken))
    }
}

/// The next message of the partition's stream; never ready when it has none.
async fn next_message<'a>(
    stream: &mut Option<MessageStream<'a, RebalanceContext>>,
) -> Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'a>>> {
    use futures_util::StreamExt;
    match stream {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64) -> Record {
        Record {
            id: format!("t-0-{offset}"),
            topic: "t".into(),
            partition: 0,
            offset,
            key: None,
            payload: None,
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
            retry: None,
        }
    }

    #[tokio::test]
    async fn a_cancelled_reader_takes_no_more_records_from_its_partition() {
        let (tx, mut strays) = mpsc::channel(4);
        let consumed = prometheus::IntCounter::new("c", "c").unwrap();
        let mut records = Records {
            peeked: None,
            topic: "t",
            partition: 0,
            stream: None,
            strays: &mut strays,
            id_header: None,
            tier: None,
            consumed: &consumed,
        };
        let cancel = CancellationToken::new();
        tx.send(record(7)).await.unwrap();
        assert_eq!(records.ready(&cancel).map(|r| r.offset), Some(7));

        // After the revocation the records waiting belong to the partition's next reader.
        tx.send(record(8)).await.unwrap();
        cancel.cancel();
        assert!(records.ready(&cancel).is_none(), "ready takes nothing");
        assert!(records.next(&cancel).await.is_none(), "next takes nothing");
        assert!(
            records.take(10, Duration::ZERO, &cancel).await.is_none(),
            "take takes nothing"
        );
        drop(records);
        assert_eq!(
            strays.try_recv().map(|r| r.offset).ok(),
            Some(8),
            "the record is still there for the next reader"
        );
    }
}
