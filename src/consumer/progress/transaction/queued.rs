//! Records settled while a commit talks to the broker: librdkafka takes no writes then, so
//! their effects wait here, in the order they settled, and go into the next transaction as
//! soon as it begins — the workers go on handling instead of waiting for the commit.
//!
//! Bounded by [`MAX_QUEUED_BYTES`]: past it a settling record waits for the commit, as every
//! record did before this queue.

use std::collections::VecDeque;

use tokio_util::sync::CancellationToken;

use super::TopicPartition;
use crate::consumer::progress::writer::ExitWrite;
use crate::handler::Output;
use crate::record::{Record, RecordHeader};

/// The most bytes (payloads, keys, headers and outputs, estimated) the queue holds; about a
/// commit's worth of records at full speed with 1 KiB records.
pub(crate) const MAX_QUEUED_BYTES: usize = 16 << 20;

/// What a queued record's bookkeeping costs besides its bytes.
const OVERHEAD: usize = 128;

/// A settled record's effect, owned: it outlives the worker's turn.
pub(crate) enum Owned {
    /// Handled: the records its call produced.
    Handled(Vec<Output>),
    /// It exits its stage: its dead letter or retry record.
    Exit(ExitWrite),
}

/// One record waiting for the next transaction.
pub(crate) struct Queued {
    pub partition: TopicPartition,
    /// The offset it was delivered at (its position is one past it).
    pub offset: i64,
    /// Its assignment: refused when that ended before the transaction began.
    pub revoked: CancellationToken,
    /// The record itself, kept only when its effect needs it (a dead letter, a retry record,
    /// outputs the producer may refuse so that it is dead-lettered instead); a handled record
    /// with no outputs needs only its position.
    pub record: Option<Box<Record>>,
    pub effect: Owned,
}

impl Queued {
    /// What it is estimated to hold in memory.
    fn bytes(&self) -> usize {
        let outputs = match &self.effect {
            Owned::Handled(outputs) => outputs.iter().map(output_bytes).sum(),
            Owned::Exit(_) => 0,
        };
        let record = self.record.as_deref().map_or(0, record_bytes);
        OVERHEAD + outputs + record
    }
}

fn output_bytes(output: &Output) -> usize {
    output.topic.len()
        + output.key.as_ref().map_or(0, Vec::len)
        + output.value.as_ref().map_or(0, Vec::len)
        + headers_bytes(&output.headers)
}

fn record_bytes(record: &Record) -> usize {
    record.id.len()
        + record.key.as_ref().map_or(0, Vec::len)
        + record.payload.as_ref().map_or(0, Vec::len)
        + headers_bytes(&record.headers)
}

fn headers_bytes(headers: &[RecordHeader]) -> usize {
    headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
        .sum()
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Queue {
    queued: VecDeque<Queued>,
    bytes: usize,
}

impl Queue {
    /// Whether `record` fits: always when the queue is empty (one record never waits for
    /// want of room), else while under [`MAX_QUEUED_BYTES`].
    pub(crate) fn has_room(&self) -> bool {
        self.queued.is_empty() || self.bytes < MAX_QUEUED_BYTES
    }

    /// Queues `queued` behind the records settled before it.
    pub(crate) fn push(&mut self, queued: Queued) {
        self.bytes += queued.bytes();
        self.queued.push_back(queued);
    }

    /// Every queued record, oldest first, leaving the queue empty. Give the drained buffer
    /// back with [`Queue::reuse`].
    pub(crate) fn take(&mut self) -> VecDeque<Queued> {
        self.bytes = 0;
        std::mem::take(&mut self.queued)
    }

    /// Keeps `drained`, a buffer [`Queue::take`] gave, for the records of the next commit:
    /// grown anew at every commit, a queue of thousands of records reallocated its way up
    /// each time, into fresh pages the kernel zeroed (a third of exactly once's CPU with
    /// dead letters, in one of the benchmark's profiles). Its capacity stays within what
    /// [`MAX_QUEUED_BYTES`] lets the queue hold.
    pub(crate) fn reuse(&mut self, mut drained: VecDeque<Queued>) {
        // Called under the commit's lock right after `take`: nothing was queued since.
        debug_assert!(
            self.queued.is_empty(),
            "records queued between take and reuse"
        );
        drained.clear();
        if self.queued.capacity() < drained.capacity() {
            self.queued = drained;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(payload: usize) -> Queued {
        Queued {
            partition: ("orders".to_string(), 0),
            offset: 0,
            revoked: CancellationToken::new(),
            record: Some(Box::new(
                Record::new("orders", 0, 0).with_payload(vec![0u8; payload]),
            )),
            effect: Owned::Exit(ExitWrite::DeadLetter {
                kind: crate::failure::DeadLetterKind::Permanent,
                message: "bad".into(),
                attempts: 1,
            }),
        }
    }

    #[test]
    fn the_queue_is_full_past_its_bytes_but_always_takes_one_record() {
        let mut queue = Queue::default();
        assert!(queue.has_room(), "empty");
        queue.push(queued(MAX_QUEUED_BYTES * 2));
        assert!(
            !queue.has_room(),
            "one record larger than the bound fills it"
        );
        assert_eq!(queue.take().len(), 1);
        assert!(queue.has_room(), "taken: empty again");
        queue.push(queued(1_000));
        queue.push(queued(1_000));
        assert!(queue.has_room());
        let drained = queue.take();
        assert_eq!(drained.len(), 2);
        queue.reuse(drained);
        assert!(queue.has_room(), "given back empty");
        assert!(queue.queued.capacity() >= 2, "with its room kept");
    }

    #[test]
    fn a_handled_record_without_outputs_costs_only_its_bookkeeping() {
        let mut queue = Queue::default();
        for offset in 0..1_000 {
            queue.push(Queued {
                partition: ("orders".to_string(), 0),
                offset,
                revoked: CancellationToken::new(),
                record: None,
                effect: Owned::Handled(vec![]),
            });
        }
        assert_eq!(queue.bytes, 1_000 * OVERHEAD);
        let offsets: Vec<i64> = queue.take().into_iter().map(|q| q.offset).collect();
        assert_eq!(offsets, (0..1_000).collect::<Vec<_>>(), "oldest first");
    }
}
