//! The parked keys of one source partition, as its park log tells them: which key a record
//! must wait behind, which keys may be released, and how far back the log is still needed.
//! Pure: the owner of the partition applies each event of the log (its own as it writes
//! them, others' as it reads them) and asks the table before each record.

use std::collections::{BTreeMap, VecDeque};

use super::event::{How, ParkEvent};
pub use super::heads::{Head, Heads};

/// A record waiting behind its key's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// The park-log offset of its `parked` event, which holds it.
    pub event: i64,
    /// Its source offset.
    pub offset: i64,
}

/// One parked key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedKey {
    /// Its records that left and are not resolved yet, by source offset: usually one. More
    /// when a record of the key delivered again (a rebalance before its offset was committed)
    /// fails again, or a head whose exit was given up comes again.
    pub heads: Heads,
    /// How its last head was resolved; `None` until one is.
    pub resolved: Option<How>,
    /// The last head resolved.
    pub resolved_head: Option<Head>,
    /// Its records waiting, in source order.
    pub waiting: VecDeque<Waiting>,
}

impl ParkedKey {
    fn new() -> Self {
        Self {
            heads: Heads::default(),
            resolved: None,
            resolved_head: None,
            waiting: VecDeque::new(),
        }
    }

    /// Whether its waiting records may go: records wait, and every head is resolved or is
    /// itself one of them. A head that is still waiting is a parked record that left again on
    /// its release and whose exit is not known to have landed (no `released` event passed
    /// it): it is released again, as a source record whose exit was given up is consumed
    /// again, so that it is never lost between its head and its dead letter.
    pub fn releasable(&self) -> bool {
        !self.waiting.is_empty()
            && self.heads.keys().all(|head| {
                self.waiting
                    .binary_search_by_key(head, |w| w.offset)
                    .is_ok()
            })
    }

    /// The first of its heads not resolved.
    pub fn head(&self) -> Option<&Head> {
        self.heads.values().next()
    }

    /// Whether nothing of it is left: no head unresolved, no record waiting.
    fn is_done(&self) -> bool {
        self.heads.is_empty() && self.waiting.is_empty()
    }
}

/// What to do with a record, by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// To the handler: its key is not parked, or it is one of the key's heads (or before
    /// them) come again.
    Pass,
    /// To the park log: its key is parked.
    Park,
    /// Parked already (it came again before its offset was committed): settled as it is.
    AlreadyParked,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct ParkTable {
    // Ordered: which key a worker releases first, and so a simulated schedule, must not
    // depend on a hasher's random seed.
    keys: BTreeMap<Vec<u8>, ParkedKey>,
    /// The park-log offset after the last event applied.
    next: i64,
    /// The records waiting, over every key.
    waiting: usize,
    /// The keys that may be released now, kept as events come: no walk of the table.
    releasable: std::collections::BTreeSet<Vec<u8>>,
}

impl ParkTable {
    /// Whether no key is parked: the hot path's one question.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The parked keys.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], &ParkedKey)> {
        self.keys.iter().map(|(k, v)| (k.as_slice(), v))
    }

    /// How many keys are parked.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Key `key`'s entry, if it is parked.
    pub fn get(&self, key: &[u8]) -> Option<&ParkedKey> {
        self.keys.get(key)
    }

    /// What to do with the record at source `offset` with `key`.
    pub fn decide(&self, key: Option<&[u8]>, offset: i64) -> Decision {
        let Some(parked) = key.and_then(|k| self.keys.get(k)) else {
            return Decision::Pass;
        };
        if parked.waiting.iter().any(|w| w.offset == offset) {
            return Decision::AlreadyParked;
        }
        match parked.heads.keys().next() {
            // A head come again, or a record before the first head: to the handler, as at
            // least once allows.
            Some(&first) if offset <= first || parked.heads.contains_key(&offset) => Decision::Pass,
            _ => Decision::Park,
        }
    }

    /// Applies the event read at park-log offset `at`. Returns whether its key may be
    /// released now ([`ParkedKey::releasable`]). Reading an event again changes nothing.
    pub fn apply(&mut self, at: i64, event: &ParkEvent) -> bool {
        self.next = self.next.max(at + 1);
        self.fold_and_note(at, event)
    }

    /// Applies `event` as the partition's owner writes it, before it is read back: at the
    /// offset after the last event read, which is no later than where it lands (read back,
    /// its real offset replaces that).
    pub fn apply_written(&mut self, event: &ParkEvent) -> bool {
        self.fold_and_note(self.next, event)
    }

    /// The keys whose records may be released now ([`ParkedKey::releasable`]), in key order.
    pub fn releasable(&self) -> impl Iterator<Item = &[u8]> {
        self.releasable.iter().map(Vec::as_slice)
    }

    fn fold_and_note(&mut self, at: i64, event: &ParkEvent) -> bool {
        let releasable = self.fold(at, event);
        if releasable {
            self.releasable.insert(event.key().to_vec());
        } else {
            self.releasable.remove(event.key());
        }
        releasable
    }

    /// The log was read up to `next` (the events before it that are not applied were not
    /// the consumer's to read: unreadable, or deleted).
    pub fn read_to(&mut self, next: i64) {
        self.next = self.next.max(next);
    }

    /// The park-log offset after the last event read.
    pub fn next(&self) -> i64 {
        self.next
    }

    fn fold(&mut self, at: i64, event: &ParkEvent) -> bool {
        let key = event.key();
        match event {
            ParkEvent::Head {
                offset,
                id,
                cause,
                at: when,
                ..
            } => {
                let parked = self.keys.entry(key.to_vec()).or_insert_with(ParkedKey::new);
                let since = parked.heads.get(offset).map_or(*when, |h| h.since);
                parked.heads.insert(
                    *offset,
                    Head {
                        offset: *offset,
                        id: id.clone(),
                        cause: *cause,
                        since,
                        event: at,
                    },
                );
                // A waiting record that failed on its release stays waiting as well, until the
                // `released` event written once its exit landed passes it.
                parked.releasable()
            }
            ParkEvent::Parked { offset, .. } => {
                let parked = self.keys.entry(key.to_vec()).or_insert_with(ParkedKey::new);
                match parked.waiting.iter_mut().find(|w| w.offset == *offset) {
                    // Its owner's own write read back (or a copy of it): where it landed.
                    Some(waiting) => waiting.event = waiting.event.max(at),
                    None => {
                        let place = parked.waiting.partition_point(|w| w.offset < *offset);
                        parked.waiting.insert(
                            place,
                            Waiting {
                                event: at,
                                offset: *offset,
                            },
                        );
                        self.waiting += 1;
                    }
                }
                parked.releasable()
            }
            ParkEvent::Resolved { head, how, .. } => {
                let Some(parked) = self.keys.get_mut(key) else {
                    return false;
                };
                let Some(head) = parked.heads.remove(head) else {
                    // A resolution read again (written twice: a discard and a redrive, a write
                    // retried): the key stays as it is.
                    return parked.releasable();
                };
                parked.resolved = Some(*how);
                parked.resolved_head = Some(head);
                if parked.is_done() {
                    self.keys.remove(key);
                    return false;
                }
                parked.releasable()
            }
            ParkEvent::Released { offset, .. } => {
                let Some(parked) = self.keys.get_mut(key) else {
                    return false;
                };
                // By source offset: a waiting record's park-log offset may still be its
                // owner's estimate.
                let before = parked.waiting.len();
                parked.waiting.retain(|w| w.offset > *offset);
                self.waiting -= before - parked.waiting.len();
                if parked.is_done() {
                    self.keys.remove(key);
                    return false;
                }
                parked.releasable()
            }
        }
    }

    /// The first park-log offset still needed: the oldest `head` or `parked` event of a key
    /// still parked, else the offset after the last event applied. Everything before it may
    /// be deleted.
    pub fn low_water(&self) -> i64 {
        self.keys
            .values()
            .flat_map(|k| {
                k.heads
                    .values()
                    .map(|h| h.event)
                    .chain(k.waiting.iter().map(|w| w.event))
            })
            .min()
            .unwrap_or(self.next)
    }

    /// How many records wait, over every key.
    pub fn waiting(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::park::Cause;

    pub(crate) fn at(second: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_765_000_000 + i64::from(second), 0).unwrap()
    }

    /// Key `key`'s record at `offset` left for the DLT, at second `offset`.
    pub(crate) fn head(key: &str, offset: i64) -> ParkEvent {
        ParkEvent::Head {
            key: key.into(),
            offset,
            id: format!("orders-0-{offset}"),
            cause: Cause::DeadLetter,
            at: at(offset as u32),
        }
    }

    /// Key `key`'s record at `offset` parked.
    pub(crate) fn parked(key: &str, offset: i64) -> ParkEvent {
        ParkEvent::Parked {
            key: key.into(),
            offset,
            id: format!("orders-0-{offset}"),
            timestamp: None,
            headers: Vec::new(),
            value: None,
        }
    }

    fn resolved(key: &str, head: i64) -> ParkEvent {
        ParkEvent::Resolved {
            key: key.into(),
            head,
            how: How::Handled,
            by: "redrive".into(),
            at: at(99),
        }
    }

    fn released(key: &str, offset: i64, through: i64) -> ParkEvent {
        ParkEvent::Released {
            key: key.into(),
            offset,
            through,
        }
    }

    /// Applies `events` at park-log offsets 0, 1, ….
    fn table(events: &[ParkEvent]) -> ParkTable {
        let mut table = ParkTable::default();
        for (at, event) in events.iter().enumerate() {
            table.apply(at as i64, event);
        }
        table
    }

    #[test]
    fn a_heads_later_records_park_and_other_keys_pass() {
        let table = table(&[head("order-42", 10)]);
        assert_eq!(table.decide(Some(b"order-42"), 11), Decision::Park);
        assert_eq!(table.decide(Some(b"order-7"), 11), Decision::Pass);
        assert_eq!(table.decide(None, 11), Decision::Pass);
        // The head itself (and what came before it) come again after a rebalance: to the
        // handler, as at least once allows.
        assert_eq!(table.decide(Some(b"order-42"), 10), Decision::Pass);
        assert_eq!(table.decide(Some(b"order-42"), 3), Decision::Pass);
    }

    #[test]
    fn a_parked_record_that_comes_again_is_parked_already() {
        let table = table(&[head("k", 10), parked("k", 12)]);
        assert_eq!(table.decide(Some(b"k"), 12), Decision::AlreadyParked);
        assert_eq!(table.decide(Some(b"k"), 13), Decision::Park);
    }

    #[test]
    fn a_record_of_the_key_that_fails_again_after_a_rebalance_is_a_head_too() {
        // 10 left, 12 parked; delivered again, 4 fails and leaves, and 11 (whose exit was
        // given up when the partition was revoked) comes again.
        let mut table = table(&[head("k", 10), parked("k", 12), head("k", 4)]);
        assert_eq!(
            table.decide(Some(b"k"), 10),
            Decision::Pass,
            "a head comes again"
        );
        assert_eq!(table.decide(Some(b"k"), 11), Decision::Park);
        assert_eq!(table.decide(Some(b"k"), 3), Decision::Pass);
        assert!(!table.apply(3, &resolved("k", 4)), "10 is not resolved");
        assert_eq!(table.decide(Some(b"k"), 12), Decision::AlreadyParked);
        assert!(table.apply(4, &resolved("k", 10)));
    }

    #[test]
    fn a_resolved_head_releases_its_records_in_order_and_then_the_key() {
        let mut table = table(&[head("k", 10), parked("k", 12), parked("k", 15)]);
        assert!(table.apply(3, &resolved("k", 10)));
        assert_eq!(table.releasable().collect::<Vec<_>>(), [b"k"]);
        let waiting: Vec<i64> = table
            .get(b"k")
            .unwrap()
            .waiting
            .iter()
            .map(|w| w.offset)
            .collect();
        assert_eq!(waiting, [12, 15]);
        assert_eq!(table.waiting(), 2);
        // Newer records keep parking until the release ends, behind the ones waiting.
        assert_eq!(table.decide(Some(b"k"), 16), Decision::Park);
        assert!(table.apply(4, &parked("k", 16)));
        assert!(table.apply(5, &released("k", 12, 1)));
        assert_eq!(table.waiting(), 2);
        assert!(!table.apply(6, &released("k", 16, 4)));
        assert!(table.is_empty());
        assert_eq!(table.releasable().count(), 0);
        assert_eq!(table.waiting(), 0);
        assert_eq!(table.decide(Some(b"k"), 17), Decision::Pass);
    }

    #[test]
    fn a_head_resolved_with_nothing_waiting_frees_its_key_at_once() {
        let mut table = table(&[head("k", 10)]);
        assert!(!table.apply(1, &resolved("k", 10)));
        assert!(table.is_empty());
    }

    #[test]
    fn a_stale_resolution_changes_nothing() {
        // Another head's resolution (an older dead letter of the key redriven), and a second
        // resolution of the same head.
        let mut table = table(&[head("k", 10), parked("k", 12)]);
        assert!(!table.apply(2, &resolved("k", 4)));
        assert_eq!(table.get(b"k").unwrap().heads.len(), 1);
        assert!(table.apply(3, &resolved("k", 10)));
        // Still releasable: read twice, a resolution must not hide the key from the release.
        assert!(table.apply(4, &resolved("k", 10)));
        assert_eq!(table.releasable().collect::<Vec<_>>(), [b"k".as_slice()]);
        assert!(!table.apply(5, &resolved("other", 10)));
    }

    #[test]
    fn a_released_record_that_fails_again_is_the_new_head() {
        let mut table = table(&[
            head("k", 10),
            parked("k", 12),
            parked("k", 15),
            resolved("k", 10),
        ]);
        // k/12 fails on its release: the new head. Until the `released` event written once
        // its exit landed passes it, it is waiting too, so that an owner that reads the log
        // after its release stopped half-way releases it again rather than lose it.
        assert!(
            table.apply(4, &head("k", 12)),
            "released again if stopped here"
        );
        assert!(!table.apply(5, &released("k", 12, 1)));
        let parked = table.get(b"k").unwrap();
        assert_eq!(parked.head().map(|h| h.offset), Some(12));
        assert_eq!(table.waiting(), 1);
        assert_eq!(
            parked.waiting.iter().map(|w| w.offset).collect::<Vec<_>>(),
            [15]
        );
        assert_eq!(table.decide(Some(b"k"), 15), Decision::AlreadyParked);
        assert_eq!(table.decide(Some(b"k"), 16), Decision::Park);
        assert_eq!(table.releasable().count(), 0);
    }

    #[test]
    fn a_head_that_leaves_again_keeps_when_it_first_left() {
        let mut table = table(&[head("k", 10)]);
        table.apply(1, &head("k", 10));
        assert_eq!(table.get(b"k").unwrap().head().unwrap().since, at(10));
        assert_eq!(table.get(b"k").unwrap().head().unwrap().event, 1);
    }

    #[test]
    fn a_record_parked_after_its_heads_resolution_was_written_is_released() {
        // The owner parked it before it read the resolution; a new owner reading the log
        // sees the resolution first.
        let mut table = table(&[head("k", 10), resolved("k", 10)]);
        assert!(table.is_empty());
        assert!(table.apply(2, &parked("k", 12)));
        assert_eq!(table.decide(Some(b"k"), 13), Decision::Park);
        assert!(!table.apply(3, &released("k", 12, 2)));
        assert!(table.is_empty());
    }

    #[test]
    fn the_owners_own_events_count_at_once_and_land_where_they_are_read() {
        let mut table = table(&[head("other", 1)]);
        assert!(!table.apply_written(&head("k", 10)));
        assert!(!table.apply_written(&parked("k", 12)));
        assert_eq!(table.decide(Some(b"k"), 13), Decision::Park);
        assert_eq!(table.low_water(), 0);
        let waiting = |t: &ParkTable| t.get(b"k").unwrap().waiting[0].event;
        assert_eq!(waiting(&table), 1, "no later than where it lands");
        table.apply(5, &head("k", 10));
        table.apply(6, &parked("k", 12));
        assert_eq!(waiting(&table), 6);
        assert_eq!(table.get(b"k").unwrap().head().unwrap().event, 5);
        assert_eq!(table.next(), 7);
    }

    #[test]
    fn a_log_read_from_its_low_water_gives_the_same_keys() {
        // a: resolved, two records waiting; b: parked behind its head; c: released and gone.
        let events = [
            head("c", 0),
            head("a", 1),
            parked("c", 4),
            parked("a", 5),
            head("b", 6),
            resolved("c", 0),
            parked("b", 7),
            released("c", 4, 2),
            resolved("a", 1),
            parked("a", 8),
        ];
        let whole = table(&events);
        let low = whole.low_water();
        assert_eq!(low, 3, "a's first parked record");
        let mut trimmed = ParkTable::default();
        for (at, event) in events.iter().enumerate().skip(low as usize) {
            trimmed.apply(at as i64, event);
        }
        let keys = |t: &ParkTable| -> Vec<(Vec<u8>, Vec<i64>, Vec<i64>)> {
            t.keys()
                .map(|(k, p)| {
                    (
                        k.to_vec(),
                        p.heads.keys().copied().collect(),
                        p.waiting.iter().map(|w| w.offset).collect(),
                    )
                })
                .collect()
        };
        assert_eq!(keys(&trimmed), keys(&whole));
        assert_eq!(
            trimmed.releasable().collect::<Vec<_>>(),
            whole.releasable().collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_log_is_needed_from_the_oldest_unreleased_event() {
        let mut table = table(&[head("a", 1), head("b", 2), parked("b", 5), parked("a", 6)]);
        assert_eq!(table.low_water(), 0);
        table.apply(4, &resolved("a", 1));
        // a's head is resolved: its waiting record (event 3) is what is needed of it.
        assert_eq!(table.low_water(), 1);
        table.apply(5, &released("a", 6, 3));
        assert_eq!(table.low_water(), 1);
        table.apply(6, &resolved("b", 2));
        assert_eq!(table.low_water(), 2);
        table.apply(7, &released("b", 5, 2));
        assert!(table.is_empty());
        assert_eq!(table.low_water(), 8);
    }
}
