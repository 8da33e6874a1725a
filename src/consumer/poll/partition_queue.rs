//! A partition's own librdkafka queue as its worker's [`Feed`].
//!
//! Split before librdkafka starts fetching the partition: librdkafka forwards a partition's
//! queue to the consumer's when it starts fetching it only if the application has not
//! forwarded it itself (`rd_kafka_toppar_op_fetch_start`), so no record of a split partition
//! ever reaches the consumer's queue.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use rdkafka::client::ClientContext as _;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::context::RebalanceContext;
use super::feed::{footprint, Feed};
use crate::kafka::native_queue::NativeQueue;
use crate::record::Record;

/// A partition's own librdkafka queue.
pub(in crate::consumer) struct KafkaFeed {
    /// The queue as its records are popped and its length read (a second reference,
    /// dropped before rust-rdkafka's, as it is declared first).
    native: NativeQueue,
    /// rust-rdkafka's reference, which split the queue from the consumer's and calls
    /// `waker` when it gets a record while empty.
    _queue: PartitionQueue<RebalanceContext>,
    /// Woken by librdkafka when the queue gets a record while empty.
    waker: Arc<AtomicWaker>,
    /// The consumer, whose context hears the partition's errors.
    consumer: Arc<BaseConsumer<RebalanceContext>>,
    /// The header whose value is a record's id (`id_header`).
    id_header: Option<Arc<str>>,
    /// The partition's share of the consumer's buffer ([`Feed::share`]).
    share: usize,
    /// [`Feed::bound`].
    bound: usize,
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
    ) -> Option<Self> {
        let native = NativeQueue::of(
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
            native,
            _queue: queue,
            consumer: consumer.clone(),
            waker,
            id_header,
            share,
            bound,
        })
    }

    /// Copies up to `max` messages that are ready into `into`, returning how many and their
    /// footprint, and the first partition error among them (the messages after it are
    /// copied too).
    fn ready(
        &self,
        max: usize,
        into: &mut Vec<Record>,
        spares: &mut Vec<Record>,
    ) -> (usize, usize, Option<KafkaError>) {
        let (mut bytes, mut failed) = (0, None);
        let popped = self.native.pop(max, |message| match message {
            Ok(message) => {
                let mut record = spares.pop().unwrap_or_else(Record::blank);
                record.copy_from_message(&message, self.id_header.as_deref());
                bytes += footprint(&record);
                into.push(record);
            }
            Err(error) => {
                // What rust-rdkafka does with the error event it makes of it: the context
                // hears it (an undecodable batch is placed and reported there).
                if error.code != RDKafkaErrorCode::PartitionEOF {
                    let code = KafkaError::Global(error.code);
                    self.consumer.context().error(code, &error.reason);
                }
                failed.get_or_insert(error.to_kafka_error());
            }
        });
        (popped, bytes, failed)
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
        let (mut taken, mut bytes, mut registered) = (0, 0, false);
        while taken < max && bytes < max_bytes {
            // As many as are likely to fit in `max_bytes` at the sizes taken so far: records
            // of even size overshoot it by about one, as popping one at a time does; large
            // records after small ones by at most one pop (64).
            let fit = match taken {
                0 => 1,
                _ => ((max_bytes - bytes) / (bytes / taken).max(1)).max(1),
            };
            let (popped, size, failed) = self.ready((max - taken).min(fit), into, spares);
            taken += popped;
            bytes += size;
            if let Some(error) = failed {
                return Poll::Ready(Err(error));
            }
            match popped {
                0 if taken > 0 => break,
                0 if registered => return Poll::Pending,
                // Registered before looking again: a record queued in between wakes us.
                0 => {
                    self.waker.register(cx.waker());
                    registered = true;
                }
                _ => {}
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
        self.native.length()
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
        let mut failed = None;
        loop {
            let (popped, _, error) = self.ready(usize::MAX, into, spares);
            failed = failed.or(error);
            if popped == 0 {
                return failed.map_or(Ok(()), Err);
            }
        }
    }

    fn release(&self, resume: &dyn Fn()) {
        resume();
    }
}
