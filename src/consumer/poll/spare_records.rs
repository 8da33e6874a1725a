//! Settled records given back by the workers, for the poll loop to copy the next messages
//! into: a record's buffers (its id, topic, key, value and headers) are reused instead of
//! allocated for every message and freed on another thread. Fresh memory for every record
//! cost more than the copy itself: the allocator, and the kernel zeroing the pages the
//! allocator kept asking for.
//!
//! A cache, not a queue: it keeps at most [`SPARE_BYTES`] of records whose buffers hold at
//! most [`SPARE_RECORD_BYTES`] each, and drops (frees) the rest; a retry record's account is
//! dropped on the way in. The poll loop holds at most as much again, taken out to copy into
//! while the workers give back the next ones: 4 MiB in all. Nothing in it is a record anyone
//! waits for.

use std::sync::Mutex;

use crate::record::Record;

/// What the spare records may hold together, counted as [`held_bytes`]: 2 MiB, a few
/// thousand records of a few hundred bytes.
pub(crate) const SPARE_BYTES: usize = 2 << 20;

/// A record whose buffers hold more than this ([`held_bytes`]) is freed, not kept: copying a
/// record that large costs more than allocating it.
pub(crate) const SPARE_RECORD_BYTES: usize = 4 << 10;

/// The bytes a record's buffers hold (their capacity, not their length), plus the record
/// itself.
pub(crate) fn held_bytes(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|h| {
            std::mem::size_of_val(h) + h.key.capacity() + h.value.as_ref().map_or(0, Vec::capacity)
        })
        .sum();
    std::mem::size_of::<Record>()
        + record.id.capacity()
        + record.topic.capacity()
        + record.key.as_ref().map_or(0, Vec::capacity)
        + record.payload.as_ref().map_or(0, Vec::capacity)
        + headers
}

/// The consumer's spare records; see the module docs.
#[derive(Default)]
pub(crate) struct SpareRecords {
    state: Mutex<Spares>,
}

#[derive(Default)]
struct Spares {
    records: Vec<Record>,
    /// What `records` hold, as [`held_bytes`].
    bytes: usize,
}

impl SpareRecords {
    /// Takes the records out of `records` (which keeps its capacity, for the next records):
    /// keeps those of at most [`SPARE_RECORD_BYTES`] while the spares hold less than
    /// [`SPARE_BYTES`], and drops the others once the spares' lock is released (the poll loop
    /// does not wait for them to be freed).
    pub(crate) fn give_back(&self, records: &mut Vec<Record>) {
        if records.is_empty() {
            return;
        }
        // A retry record's account (its history: up to a message's size, written by whoever
        // can write the retry topic) is not a buffer the next message is copied into: freed
        // here, before the lock, so it never counts against nor escapes the bound.
        for record in records.iter_mut() {
            record.retry = None;
        }
        let mut state = self.state.lock().expect("spare records lock");
        let mut at = 0;
        while at < records.len() {
            let bytes = held_bytes(&records[at]);
            if bytes <= SPARE_RECORD_BYTES && state.bytes + bytes <= SPARE_BYTES {
                state.bytes += bytes;
                state.records.push(records.swap_remove(at));
            } else {
                at += 1;
            }
        }
        drop(state);
        records.clear();
    }

    /// Swaps every spare record into `into`, which must be empty (its capacity comes back as
    /// the spares' own, for the next records given back).
    pub(crate) fn take_all(&self, into: &mut Vec<Record>) {
        debug_assert!(into.is_empty());
        let mut state = self.state.lock().expect("spare records lock");
        std::mem::swap(&mut state.records, into);
        state.bytes = 0;
    }

    /// The bytes the spares hold now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.state.lock().expect("spare records lock").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, bytes: usize) -> Record {
        Record::new("t", 0, offset).with_payload(vec![7; bytes])
    }

    #[test]
    fn records_given_back_are_taken_again_with_their_buffers() {
        let spares = SpareRecords::default();
        let mut settled = vec![record(0, 100), record(1, 100)];
        let capacity = settled.capacity();
        spares.give_back(&mut settled);
        assert!(settled.is_empty());
        assert_eq!(settled.capacity(), capacity, "the caller keeps its vector");
        let mut taken = Vec::new();
        spares.take_all(&mut taken);
        let mut offsets: Vec<i64> = taken.iter().map(|r| r.offset).collect();
        offsets.sort();
        assert_eq!(offsets, [0, 1], "in any order");
        assert!(taken[0].payload.as_ref().unwrap().capacity() >= 100);
        assert_eq!(spares.bytes(), 0);
        let mut again = Vec::new();
        spares.take_all(&mut again);
        assert!(again.is_empty());
    }

    #[test]
    fn a_retry_records_history_is_freed_not_kept() {
        let spares = SpareRecords::default();
        let stage = crate::record::retry::RetryStage {
            topic: "t".into(),
            attempts: 1,
            error: "e".repeat(1000),
            at: chrono::Utc::now(),
        };
        let mut retried = record(0, 10);
        retried.retry = Some(Box::new(crate::record::retry::RetryDelivery {
            tier: Some(0),
            topic: "t-retry-0".into(),
            partition: 0,
            offset: 0,
            due: chrono::Utc::now(),
            attempts: 1,
            history: vec![stage; 100],
            group: None,
        }));
        spares.give_back(&mut vec![retried]);
        let mut taken = Vec::new();
        spares.take_all(&mut taken);
        assert_eq!(taken.len(), 1);
        assert!(taken[0].retry.is_none(), "100 kB of history not held");
    }

    #[test]
    fn large_records_are_freed_not_kept() {
        let spares = SpareRecords::default();
        let mut settled = vec![record(0, SPARE_RECORD_BYTES), record(1, 10)];
        spares.give_back(&mut settled);
        let mut taken = Vec::new();
        spares.take_all(&mut taken);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].offset, 1);
    }

    #[test]
    fn the_spares_hold_at_most_their_bytes() {
        let spares = SpareRecords::default();
        let size = held_bytes(&record(0, 1_000));
        let mut settled: Vec<Record> = (0..10_000).map(|o| record(o, 1_000)).collect();
        spares.give_back(&mut settled);
        assert!(spares.bytes() <= SPARE_BYTES);
        assert!(
            spares.bytes() > SPARE_BYTES - size,
            "filled up to the bound"
        );
    }
}
