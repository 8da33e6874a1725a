//! Where a partition's records come from, one at a time: the partition's own librdkafka queue
//! (and the rare records that arrived on the consumer's main queue), or, in tests, a simulated
//! partition.

use std::task::{Context, Poll};

use futures_util::StreamExt;
use rdkafka::consumer::stream_consumer::MessageStream;
use tokio::sync::mpsc;

use crate::consumer::context::RebalanceContext;
use crate::record::Record;

/// Where a partition's records come from, one at a time, as the partition's queue hands them
/// out: the real queue ([`QueueSource`]) or, in tests, a simulated partition. Once a record
/// is handed out it is the reader's: the source's position has moved past it.
pub(crate) trait RecordSource: Send {
    /// The next record, as delivered (before a retry topic's record is restored); `Pending`,
    /// with `cx`'s waker registered, while none is ready. Never ends.
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record>;
}

impl<T: RecordSource + ?Sized> RecordSource for &mut T {
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        (**self).poll_record(cx)
    }
}

/// The partition's own librdkafka queue, and the rare records that arrived on the main queue.
pub(super) struct QueueSource<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    pub(super) stream: Option<MessageStream<'a, RebalanceContext>>,
    pub(super) strays: &'a mut mpsc::Receiver<Record>,
    pub(super) id_header: Option<&'a str>,
}

impl RecordSource for QueueSource<'_> {
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        if let Ok(record) = self.strays.try_recv() {
            return Poll::Ready(record);
        }
        if let Some(stream) = self.stream.as_mut() {
            loop {
                match stream.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(message))) => {
                        return Poll::Ready(Record::from_message(&message, self.id_header))
                    }
                    Poll::Ready(Some(Err(e))) => crate::kafka::warn_gated(
                        "partition_poll_failed",
                        &e,
                        &format!("{}-{}", self.topic, self.partition),
                    ),
                    Poll::Ready(None) | Poll::Pending => break,
                }
            }
        }
        // Only when nothing else is ready: the channel takes from tokio's budget.
        match self.strays.poll_recv(cx) {
            Poll::Ready(Some(record)) => Poll::Ready(record),
            _ => Poll::Pending,
        }
    }
}
