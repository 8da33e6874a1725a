//! Where a partition's records come from: the partition's inbox (filled from the consumer's
//! queue, see `consumer::inbox`), read with tokio's cooperative budget. Once a record is
//! handed out it is the reader's.

use std::task::{Context, Poll};

use super::client::Client;
use crate::consumer::inbox::Inbox;
use crate::consumer::spare_records::SpareRecords;
use crate::record::Record;

/// The partition's inbox, filled by the consumer's poll loop; resumes the partition's fetches
/// when a take brings a paused inbox down to half its share.
pub(super) struct InboxSource<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    pub(super) inbox: &'a Inbox,
    pub(super) client: &'a dyn Client,
    /// The bytes every inbox of the consumer holds.
    pub(super) buffered: &'a prometheus::IntGauge,
    /// Where settled records go back to, for the poll loop to reuse.
    pub(super) spares: &'a SpareRecords,
}

impl InboxSource<'_> {
    /// Resumes the partition's fetches.
    fn resume(&self) {
        let (topic, partition) = (self.topic, self.partition);
        if let Err(error) = self.client.resume(&[(topic.to_string(), partition)]) {
            tracing::warn!(event = "partition_resume_failed", %topic, partition, %error);
        }
    }

    /// Holds the partition's fetches paused until [`InboxSource::release`] (see
    /// [`Inbox::hold`]).
    pub(super) fn hold(&self) {
        self.inbox.hold(|| {
            let (topic, partition) = (self.topic, self.partition);
            if let Err(error) = self.client.pause(&[(topic.to_string(), partition)]) {
                tracing::debug!(event = "retry_partition_pause_failed", %topic, partition, %error);
            }
        });
    }

    /// Ends [`InboxSource::hold`]; the fetches resume unless the inbox holds its share.
    pub(super) fn release(&self) {
        self.inbox.release(|| self.resume());
    }
}

/// Records [`InboxSource::ready_records`] takes per unit of tokio's cooperative budget (one
/// lock of the inbox for many records; a worker whose inbox is never empty still yields to
/// its thread's other tasks every 128 units).
const READY_PER_BUDGET_UNIT: usize = 32;

impl InboxSource<'_> {
    /// The next record; `Pending`, with `cx`'s waker registered, while none is ready (and
    /// for ever once the inbox is closed). Counts against tokio's cooperative budget.
    pub(super) fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        // A worker whose inbox is never empty still yields to its thread's other tasks.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let (record, size) = std::task::ready!(self.inbox.poll_pop(cx, || self.resume()));
        coop.made_progress();
        self.buffered.sub(size as i64);
        Poll::Ready(record)
    }

    /// Up to `max` records that are ready now, into `into`, without waiting, stopping once
    /// they come to `max_bytes` or more; returns their footprint. Takes them in runs of up to
    /// 32 a unit of tokio's cooperative budget, and none once the budget is spent.
    pub(super) fn ready_records(
        &mut self,
        max: usize,
        max_bytes: usize,
        into: &mut Vec<Record>,
    ) -> usize {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut taken, mut bytes) = (0, 0);
        while taken < max && bytes < max_bytes {
            let Poll::Ready(coop) = tokio::task::coop::poll_proceed(&mut cx) else {
                break;
            };
            let before = into.len();
            let want = (max - taken).min(READY_PER_BUDGET_UNIT);
            let size = self
                .inbox
                .pop_ready(want, max_bytes - bytes, into, || self.resume());
            let got = into.len() - before;
            if got == 0 {
                break;
            }
            coop.made_progress();
            self.buffered.sub(size as i64);
            taken += got;
            bytes += size;
            if got < want && bytes < max_bytes {
                break;
            }
        }
        bytes
    }

    /// Gives settled records back to the consumer's spares (`records` keeps its capacity).
    pub(super) fn give_back(&self, records: &mut Vec<Record>) {
        self.spares.give_back(records);
    }

    /// The partition's share of the inboxes' budget now.
    pub(super) fn share(&self) -> usize {
        self.inbox.share()
    }
}
