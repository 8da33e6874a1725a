//! The simulated transaction coordinator's state, in the world: each producer's open
//! transaction and its writes, the fenced producers, the partitions the group moved away from
//! a member that does not know yet, the faults a schedule asks for, and the effects committed
//! so far (each delivered record's count), with what the schedule reports. The producers that
//! act on it are [`super::producer`]'s.

use std::collections::{BTreeMap, BTreeSet};

use crate::consumer::client::TopicPartition;
use crate::record::Record;

/// What a transaction wrote, for the record delivered at `of`.
#[derive(Debug)]
pub(super) enum Write {
    Output {
        of: (TopicPartition, i64),
    },
    DeadLetter {
        of: (TopicPartition, i64),
    },
    /// The retry record as written, and where it goes.
    Retry {
        of: (TopicPartition, i64),
        to: TopicPartition,
        record: Record,
    },
    /// A write the broker refused for good (an output too large or invalid, a dead letter
    /// too large), with its error: the commit fails.
    Refused(rdkafka::types::RDKafkaErrorCode),
}

impl Write {
    pub(super) fn of(&self) -> Option<&(TopicPartition, i64)> {
        match self {
            Write::Output { of } | Write::DeadLetter { of } | Write::Retry { of, .. } => Some(of),
            Write::Refused(_) => None,
        }
    }
}

/// The coordinator's state, in the world; see the module docs.
#[derive(Default)]
pub(super) struct Coordinator {
    /// Each producer's open transaction: its member and its writes.
    pub open: BTreeMap<u64, (usize, Vec<Write>)>,
    pub fenced: BTreeSet<u64>,
    pub next_id: u64,
    /// Partitions the group gave another member while this one still works on them (a
    /// zombie): its offsets for them are refused.
    pub lost: BTreeSet<(usize, TopicPartition)>,
    /// The schedule's faults: the next commit with records is refused (abortable), and
    /// the next producer to commit records is fenced.
    pub abort_next: bool,
    pub fence_next: bool,
    /// The next commit with records loses its answers: committed or not (the seed says),
    /// the producer cannot tell.
    pub unknown_next: bool,
    /// Committed effects of each delivered record.
    pub effects: BTreeMap<(TopicPartition, i64), u32>,
    pub tally: Tally,
}

/// What the transactions of schedules did, summed.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tally {
    pub outputs: u64,
    pub dead_letters: u64,
    pub retries: u64,
    pub commits: u64,
    pub aborts: u64,
    pub fences: u64,
    /// Commits refused for a partition the group had moved away.
    pub zombie_refusals: u64,
    /// Writes that existed in a transaction that then aborted.
    pub aborted_writes: u64,
    /// Commits whose answers were lost (committed or not).
    pub unknowns: u64,
    /// Dead letters and retry records that committed in a transaction whose answers were
    /// lost: its producer never learned it committed them, so never counted them.
    pub unknown_dead_letters: u64,
    pub unknown_retries: u64,
}

impl Tally {
    /// Adds `other`'s counts.
    pub(super) fn add(&mut self, other: &Tally) {
        self.outputs += other.outputs;
        self.dead_letters += other.dead_letters;
        self.retries += other.retries;
        self.commits += other.commits;
        self.aborts += other.aborts;
        self.fences += other.fences;
        self.zombie_refusals += other.zombie_refusals;
        self.aborted_writes += other.aborted_writes;
        self.unknowns += other.unknowns;
        self.unknown_dead_letters += other.unknown_dead_letters;
        self.unknown_retries += other.unknown_retries;
    }
}

impl Coordinator {
    /// Registers a new producer of `member`.
    pub(super) fn register(&mut self, member: usize) -> u64 {
        self.next_id += 1;
        self.open.insert(self.next_id, (member, Vec::new()));
        self.next_id
    }
}
