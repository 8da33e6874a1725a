//! Where a partition's records come from, one at a time: the partition's inbox (filled from
//! the consumer's queue, see `consumer::inbox`), or, in tests, a simulated partition.

use std::task::{Context, Poll};

use super::client::Client;
use crate::consumer::inbox::Inbox;
use crate::record::Record;

/// Where a partition's records come from, one at a time: the partition's inbox ([`InboxSource`]) or, in tests, a simulated partition. Once a record
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

/// The partition's inbox, filled by the consumer's poll loop; resumes the partition's fetches
/// when a take brings a paused inbox down to half its share.
pub(super) struct InboxSource<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    pub(super) inbox: &'a Inbox,
    pub(super) client: &'a dyn Client,
    /// The bytes every inbox of the consumer holds.
    pub(super) buffered: &'a prometheus::IntGauge,
}

impl RecordSource for InboxSource<'_> {
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        // A worker whose inbox is never empty still yields to its thread's other tasks.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let (client, topic, partition) = (self.client, self.topic, self.partition);
        let (record, _, size) = std::task::ready!(self.inbox.poll_pop(cx, |_| {
            if let Err(error) = client.resume(&[(topic.to_string(), partition)]) {
                tracing::warn!(event = "partition_resume_failed", %topic, partition, %error);
            }
        }));
        coop.made_progress();
        self.buffered.sub(size as i64);
        Poll::Ready(record)
    }
}
