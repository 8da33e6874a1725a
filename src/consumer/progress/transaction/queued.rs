//! Records settled while a commit talks to the broker: librdkafka takes no writes then, so
//! their effects wait here, in the order they settled, and go into the next transaction as
//! soon as it begins — the workers go on handling instead of waiting for the commit.
//!
//! A record that writes nothing (handled, no outputs) needs only its position: those of a
//! partition are kept as one [`Run`] (its first and last offsets and how many), so at full
//! speed the queue does not fill with them and handing them over costs one step a partition,
//! not one a record, while every worker waits on the transaction's lock.
//!
//! Bounded by [`MAX_QUEUED_BYTES`]: past it a settling record waits for the commit, as every
//! record did before this queue.

use std::collections::{HashMap, VecDeque};

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
    /// The record itself: its dead letter or retry record, or its dead letter instead of
    /// outputs the producer may refuse, is written from it.
    pub record: Box<Record>,
    pub effect: Owned,
}

/// The records of one partition and assignment that wrote nothing, queued: settled in order,
/// so their offsets run from `first` to `last` (not every offset between need be one of
/// them: a compacted topic, a transaction marker).
#[derive(Debug)]
pub(crate) struct Run {
    /// The offset the first was delivered at.
    pub first: i64,
    /// The offset the last was delivered at.
    pub last: i64,
    /// How many records.
    pub records: usize,
    /// Their assignment: refused when that ended before the transaction began.
    pub revoked: CancellationToken,
}

impl Queued {
    /// What it is estimated to hold in memory.
    fn bytes(&self) -> usize {
        let outputs = match &self.effect {
            Owned::Handled(outputs) => outputs.iter().map(output_bytes).sum(),
            Owned::Exit(_) => 0,
        };
        OVERHEAD + outputs + record_bytes(&self.record)
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
    /// The records that write something, in the order they settled.
    queued: VecDeque<Queued>,
    /// The records that write nothing, a run a partition.
    runs: HashMap<TopicPartition, Run>,
    bytes: usize,
}

impl Queue {
    /// Whether `record` fits: always when the queue is empty (one record never waits for
    /// want of room), else while under [`MAX_QUEUED_BYTES`].
    pub(crate) fn has_room(&self) -> bool {
        self.is_empty() || self.bytes < MAX_QUEUED_BYTES
    }

    fn is_empty(&self) -> bool {
        self.queued.is_empty() && self.runs.is_empty()
    }

    /// Queues the record at `offset` of `partition`, of the assignment `revoked`, which
    /// wrote nothing: into its partition's run. A run whose assignment ended is replaced (its
    /// records would be refused at the hand-over anyway, and the partition's next assignment
    /// begins only after the last one ended).
    pub(crate) fn push_nothing(
        &mut self,
        partition: &TopicPartition,
        offset: i64,
        revoked: &CancellationToken,
    ) {
        // Looked up by reference: no key is made for a record of a partition that has a run.
        if let Some(run) = self.runs.get_mut(partition) {
            if !run.revoked.is_cancelled() {
                run.first = run.first.min(offset);
                run.last = run.last.max(offset);
                run.records += 1;
                return;
            }
        } else {
            self.bytes += OVERHEAD;
        }
        self.runs.insert(
            partition.clone(),
            Run {
                first: offset,
                last: offset,
                records: 1,
                revoked: revoked.clone(),
            },
        );
    }

    /// Queues `queued` behind the records settled before it.
    pub(crate) fn push(&mut self, queued: Queued) {
        self.bytes += queued.bytes();
        self.queued.push_back(queued);
    }

    /// Every queued record that writes something, oldest first, and every run of those that
    /// write nothing, leaving the queue empty. Give the drained buffers back with
    /// [`Queue::reuse`].
    pub(crate) fn take(&mut self) -> (VecDeque<Queued>, HashMap<TopicPartition, Run>) {
        self.bytes = 0;
        (
            std::mem::take(&mut self.queued),
            std::mem::take(&mut self.runs),
        )
    }

    /// Keeps `drained`, a buffer [`Queue::take`] gave, for the records of the next commit:
    /// grown anew at every commit, a queue of thousands of records reallocated its way up
    /// each time, into fresh pages the kernel zeroed (a third of exactly once's CPU with
    /// dead letters, in one of the benchmark's profiles). Its capacity stays within what
    /// [`MAX_QUEUED_BYTES`] lets the queue hold.
    pub(crate) fn reuse(
        &mut self,
        (mut drained, mut runs): (VecDeque<Queued>, HashMap<TopicPartition, Run>),
    ) {
        // Called under the commit's lock right after `take`: nothing was queued since.
        debug_assert!(self.is_empty(), "records queued between take and reuse");
        drained.clear();
        if self.queued.capacity() < drained.capacity() {
            self.queued = drained;
        }
        runs.clear();
        self.runs = runs;
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
            record: Box::new(Record::new("orders", 0, 0).with_payload(vec![0u8; payload])),
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
        assert_eq!(queue.take().0.len(), 1);
        assert!(queue.has_room(), "taken: empty again");
        queue.push(queued(1_000));
        queue.push(queued(1_000));
        assert!(queue.has_room());
        let drained = queue.take();
        assert_eq!(drained.0.len(), 2);
        queue.reuse(drained);
        assert!(queue.has_room(), "given back empty");
        assert!(queue.queued.capacity() >= 2, "with its room kept");
    }

    #[test]
    fn records_that_write_nothing_are_one_run_a_partition() {
        let mut queue = Queue::default();
        let assignment = CancellationToken::new();
        let (orders, audit) = (("orders".to_string(), 0), ("audit".to_string(), 3));
        for offset in 10..100_010 {
            queue.push_nothing(&orders, offset, &assignment);
        }
        queue.push_nothing(&audit, 4, &assignment);
        assert_eq!(
            queue.bytes,
            2 * OVERHEAD,
            "a run costs its bookkeeping once"
        );
        assert!(queue.has_room());
        let (queued, runs) = queue.take();
        assert!(queued.is_empty());
        let run = &runs[&orders];
        assert_eq!((run.first, run.last, run.records), (10, 100_009, 100_000));
        let run = &runs[&audit];
        assert_eq!((run.first, run.last, run.records), (4, 4, 1));
    }

    #[test]
    fn a_run_of_an_ended_assignment_gives_way_to_the_next() {
        let mut queue = Queue::default();
        let (ended, next) = (CancellationToken::new(), CancellationToken::new());
        let orders = ("orders".to_string(), 0);
        queue.push_nothing(&orders, 5, &ended);
        queue.push_nothing(&orders, 6, &ended);
        ended.cancel();
        // The next assignment starts from the committed position, behind the ended run.
        queue.push_nothing(&orders, 2, &next);
        queue.push_nothing(&orders, 3, &next);
        let (_, runs) = queue.take();
        let run = &runs[&orders];
        assert_eq!((run.first, run.last, run.records), (2, 3, 2));
        assert!(!run.revoked.is_cancelled(), "the next assignment's");
    }
}
