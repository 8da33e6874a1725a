//! A partition's own librdkafka queue as its worker's [`Feed`].
//!
//! Split before librdkafka starts fetching the partition: librdkafka forwards a partition's
//! queue to the consumer's when it starts fetching it only if the application has not
//! forwarded it itself (`rd_kafka_toppar_op_fetch_start`), so no record of a split partition
//! ever reaches the consumer's queue.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;

use super::context::RebalanceContext;
use super::feed::{footprint, Feed};
use super::queue_budget::QueuePart;
use crate::kafka::queue_length::QueueLength;
use crate::record::Record;

/// A partition's own librdkafka queue.
pub(in crate::consumer) struct KafkaFeed {
    /// The queue's length (dropped before the queue, as it is declared first).
    length: QueueLength,
    queue: PartitionQueue<RebalanceContext>,
    /// Woken by librdkafka when the queue gets a record while empty.
    waker: Arc<AtomicWaker>,
    /// The header whose value is a record's id (`id_header`).
    id_header: Option<Arc<str>>,
    /// The partition's share of the consumer's buffer ([`Feed::share`]).
    share: usize,
    /// [`Feed::bound`].
    bound: usize,
    /// The queue's part of the consumer's budget ([`Feed::over_budget`]).
    part: QueuePart,
}

impl KafkaFeed {
    /// Splits `topic`/`partition`'s queue from `consumer`'s; `None` when librdkafka does not
    /// know the partition (or the topic's name is not a C string).
    pub(in crate::consumer) fn split(
        consumer: &Arc<BaseConsumer<RebalanceContext>>,
        topic: &str,
        partition: i32,
        id_header: Option<Arc<str>>,
        share: usize,
        bound: usize,
        part: QueuePart,
    ) -> Option<Self> {
        let length = QueueLength::of(
            consumer.clone(),
            consumer.client().native_ptr(),
            topic,
            partition,
        )?;
        let mut queue = consumer.split_partition_queue(topic, partition)?;
        let waker = Arc::new(AtomicWaker::new());
        let wake = waker.clone();
        queue.set_nonempty_callback(move || wake.wake());
        Some(Self {
            length,
            queue,
            waker,
            id_header,
            share,
            bound,
            part,
        })
    }

    /// Copies the next message that is ready into `into`, returning its footprint; `None`
    /// when none is.
    fn ready(
        &self,
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Option<Result<usize, KafkaError>> {
        match self.queue.poll(Duration::ZERO)? {
            Ok(message) => {
                let mut record = spares.pop().unwrap_or_else(Record::blank);
                record.copy_from_message(&message, self.id_header.as_deref());
                let size = footprint(&record);
                into.push(record);
                Some(Ok(size))
            }
            Err(error) => Some(Err(error)),
        }
    }
}

impl Feed for KafkaFeed {
    fn poll_take(
        &self,
        cx: &mut Context<'_>,
        max: usize,
        max_bytes: usize,
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Poll<Result<usize, KafkaError>> {
        let (mut taken, mut bytes) = (0, 0);
        while taken < max && bytes < max_bytes {
            let ready = match self.ready(into, spares) {
                None if taken > 0 => break,
                None => {
                    // Registered before looking again: a record queued in between wakes us.
                    self.waker.register(cx.waker());
                    match self.ready(into, spares) {
                        None => return Poll::Pending,
                        some => some,
                    }
                }
                some => some,
            };
            match ready {
                Some(Ok(size)) => {
                    taken += 1;
                    bytes += size;
                }
                Some(Err(error)) => return Poll::Ready(Err(error)),
                None => unreachable!("matched above"),
            }
        }
        Poll::Ready(Ok(bytes))
    }

    fn share(&self) -> usize {
        self.share
    }

    fn bound(&self) -> usize {
        self.bound
    }

    fn waiting(&self) -> usize {
        self.length.get()
    }

    fn over_budget(&self, queued: usize) -> bool {
        self.part.count(queued)
    }

    fn hold(&self, pause: &dyn Fn()) {
        pause();
    }

    fn trim(
        &self,
        pause: &dyn Fn(),
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> Result<(), KafkaError> {
        pause();
        self.part.count(0);
        while let Some(read) = self.ready(into, spares) {
            read?;
        }
        Ok(())
    }

    fn release(&self, resume: &dyn Fn()) {
        resume();
    }
}
