//! What a partition's worker asks of its Kafka consumer: storing a position for the next
//! commit, pausing and resuming fetches, where a retry partition starts, and the wall clock. A trait so that
//! the whole worker runs against simulated partitions in tests (`consumer/simulation/group`), with no
//! broker; the real consumer implements it with librdkafka's calls.

use std::future::Future;
use std::pin::Pin;

use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

/// A topic and partition.
pub(crate) type TopicPartition = (String, i32);

/// What a partition's worker asks of its Kafka consumer; see the module docs. Every call but
/// [`Client::start_at_beginning_unless_committed`] returns at once.
pub(crate) trait Client: Send + Sync + 'static {
    /// Stores `position` (the next offset to consume) of `topic`/`partition` for the next
    /// commit. Fails when the partition is no longer assigned here.
    fn store_position(&self, topic: &str, partition: i32, position: i64) -> Result<(), String>;

    /// Stops fetching `partitions`; the records already fetched stay in their queues.
    fn pause(&self, partitions: &[TopicPartition]) -> Result<(), String>;

    /// Fetches `partitions` again.
    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String>;

    /// Makes a newly assigned partition without a committed offset, or with one the log no
    /// longer holds, start at its first record (whatever `auto.offset.reset` says); one with a
    /// committed offset in the log keeps it.
    fn start_at_beginning_unless_committed(
        &self,
        topic: &str,
        partition: i32,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// The wall clock: when retry records are due.
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A consumer for unit tests that records the positions stored and the partitions resumed.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct RecordingClient {
    /// Every position stored, in order.
    pub stored: std::sync::Mutex<Vec<i64>>,
    /// Every partition asked to resume, in order.
    pub resumed: std::sync::Mutex<Vec<TopicPartition>>,
}

#[cfg(test)]
impl Client for RecordingClient {
    fn store_position(&self, _: &str, _: i32, position: i64) -> Result<(), String> {
        self.stored.lock().unwrap().push(position);
        Ok(())
    }
    fn pause(&self, _: &[TopicPartition]) -> Result<(), String> {
        Ok(())
    }
    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        self.resumed.lock().unwrap().extend_from_slice(partitions);
        Ok(())
    }
    fn start_at_beginning_unless_committed(
        &self,
        _: &str,
        _: i32,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

fn list(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut list = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    list
}

/// How long the committed-offset look-up and the seek of
/// [`Client::start_at_beginning_unless_committed`] may take.
const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The real consumer, as its workers use it (and the poll loop's rewinds, `poll::rewind`):
/// created when the consumer runs ([`crate::consumer::Consumer::run`]), and no worker runs
/// before.
pub(crate) struct KafkaClient<C: ConsumerContext + 'static>(
    pub(crate) Arc<OnceLock<Arc<BaseConsumer<C>>>>,
);

impl<C: ConsumerContext + 'static> KafkaClient<C> {
    /// The consumer; an error before it was created.
    pub(crate) fn consumer(&self) -> Result<&Arc<BaseConsumer<C>>, String> {
        self.0
            .get()
            .ok_or_else(|| "the consumer is not running".to_string())
    }
}

impl<C: ConsumerContext + 'static> Client for KafkaClient<C> {
    fn store_position(&self, topic: &str, partition: i32, position: i64) -> Result<(), String> {
        // rdkafka's store_offset takes the last handled offset and stores the one after it.
        self.consumer()?
            .store_offset(topic, partition, position - 1)
            .map_err(|e| e.to_string())
    }

    fn pause(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        rdkafka::consumer::Consumer::pause(self.consumer()?.as_ref(), &list(partitions))
            .map_err(|e| e.to_string())
    }

    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        rdkafka::consumer::Consumer::resume(self.consumer()?.as_ref(), &list(partitions))
            .map_err(|e| e.to_string())
    }

    fn start_at_beginning_unless_committed(
        &self,
        topic: &str,
        partition: i32,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let topic = topic.to_string();
        let Ok(consumer) = self.consumer().cloned() else {
            return Box::pin(async {});
        };
        Box::pin(async move {
            // Both calls wait for the broker: off the async threads.
            let committed = {
                let (consumer, partition) = (consumer.clone(), list(&[(topic.clone(), partition)]));
                tokio::task::spawn_blocking(move || {
                    consumer.committed_offsets(partition, START_TIMEOUT)
                })
                .await
                .expect("committed_offsets does not panic")
            };
            let committed = match committed {
                Ok(list) => list
                    .find_partition(&topic, partition)
                    .map(|e| e.offset())
                    .filter(|offset| matches!(offset, Offset::Offset(_))),
                Err(e) => {
                    tracing::warn!(event = "committed_offset_unknown", %topic, partition,
                        error = %e, "starting the retry partition at its beginning (records may be handled again, none skipped)");
                    None
                }
            };
            if let Some(Offset::Offset(committed)) = committed {
                // A committed offset the log no longer holds (the group was away longer than
                // the retention) would be reset to the end, past every retained retry record.
                let low = {
                    let (consumer, topic) = (consumer.clone(), topic.clone());
                    tokio::task::spawn_blocking(move || {
                        consumer.fetch_watermarks(&topic, partition, START_TIMEOUT)
                    })
                    .await
                    .expect("fetch_watermarks does not panic")
                    .map(|(low, _)| low)
                };
                match low {
                    Ok(low) if committed < low => {
                        tracing::warn!(event = "retry_partition_committed_before_log_start",
                            %topic, partition, committed, log_start = low,
                            "the committed offset is gone: starting at the first record there");
                        seek_to_beginning(consumer, &topic, partition).await;
                    }
                    _ => {}
                }
                return;
            }
            seek_to_beginning(consumer, &topic, partition).await;
        })
    }
}

/// Starts the retry or redrive partition `topic`/`partition` at its first record.
///
/// librdkafka refuses a seek (`Erroneous state`) until the partition's fetcher has started,
/// which happens after the assignment once its committed offset is known; a refused seek is
/// tried again every 50 ms for up to [`SEEK_PATIENCE`]. Giving up early would let
/// `auto.offset.reset = latest` skip the partition's retained retry records.
async fn seek_to_beginning<C: ConsumerContext + 'static>(
    consumer: Arc<BaseConsumer<C>>,
    topic: &str,
    partition: i32,
) {
    let deadline = tokio::time::Instant::now() + SEEK_PATIENCE;
    loop {
        let sought = {
            let (consumer, topic) = (consumer.clone(), topic.to_string());
            tokio::task::spawn_blocking(move || {
                consumer.seek(&topic, partition, Offset::Beginning, START_TIMEOUT)
            })
            .await
            .expect("seek does not panic")
        };
        match sought {
            Ok(()) => {
                tracing::info!(event = "retry_partition_from_beginning", %topic,
                    partition, "starting at the first record");
                return;
            }
            // rdkafka passes the seek's error code on as librdkafka's text only.
            Err(rdkafka::error::KafkaError::Seek(e))
                if e == rdkafka::types::RDKafkaErrorCode::State.to_string()
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => {
                tracing::error!(event = "retry_partition_seek_failed", %topic,
                    partition, error = %e,
                    "could not start the retry partition at its beginning; auto.offset.reset applies");
                return;
            }
        }
    }
}

/// How long [`seek_to_beginning`] waits for the partition's fetcher to start.
const SEEK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);
