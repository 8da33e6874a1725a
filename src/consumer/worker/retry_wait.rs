//! A retry topic's partition waiting until its next record is due: its fetches paused (that
//! partition alone), its progress stored, and its dead letters acknowledged meanwhile
//! settled as they come.

use rdkafka::consumer::Consumer as _;
use rdkafka::TopicPartitionList;
use tokio_util::sync::CancellationToken;

use super::progress::Progress;
use super::{Abandoned, Shared};
use crate::handler::BatchHandler;
use crate::metrics::GaugeGuard;
use crate::record::Record;

/// Waits until `record`, delivered from a retry topic, is due; at once for a record of a
/// source topic or one already due. [`Abandoned`] when `cancel` fires first: the record is
/// consumed again by the partition's next owner.
pub(super) async fn wait_until_due<H: BatchHandler>(
    shared: &Shared<H>,
    record: &Record,
    settled: &mut Progress,
    cancel: &CancellationToken,
) -> Result<(), Abandoned> {
    let Some(retry) = &record.retry else {
        return Ok(());
    };
    let Ok(wait) = (retry.due - chrono::Utc::now()).to_std() else {
        return Ok(());
    };
    settled.store(shared);
    tracing::info!(event = "retry_record_waiting", tier = retry.tier, retry_topic = %retry.topic,
        retry_partition = retry.partition, retry_offset = retry.offset, id = %record.id,
        due = %retry.due.to_rfc3339(), wait_ms = wait.as_millis() as u64,
        "the retry partition is paused until its next record is due");
    let _waiting = GaugeGuard::inc(&shared.metrics.retry_partitions_waiting);
    let mut partition = TopicPartitionList::new();
    partition.add_partition(&retry.topic, retry.partition);
    // Paused so that librdkafka does not fetch records that would only wait; the records
    // already fetched stay in the partition's queue.
    if let Err(e) = shared.consumer.pause(&partition) {
        tracing::debug!(event = "retry_partition_pause_failed", error = %e);
    }
    let until = tokio::time::Instant::now() + wait;
    let waited = loop {
        let writes = settled.writes.as_mut().filter(|w| !w.is_empty());
        let pending = writes.is_some();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break Err(Abandoned),
            _ = tokio::time::sleep_until(until) => break Ok(()),
            _ = async { writes.expect("checked").wait_first().await }, if pending => {
                settled.store(shared);
            }
        }
    };
    if let Err(e) = shared.consumer.resume(&partition) {
        tracing::debug!(event = "retry_partition_resume_failed", error = %e);
    }
    waited
}
