//! The offset ledger of one partition: the rule that a stored offset never passes a record
//! that is not settled, in one pure type (no rdkafka, no I/O) that every mode uses — in
//! order, by key, batches with bisection, dead letters in flight.
//!
//! A worker [`take`](Offsets::take)s each record's offset when it takes the record from the
//! partition's queue (in offset order), [`settle`](Offsets::settle)s it when the record is
//! handled or its dead letter acknowledged (in any order), and asks
//! [`take_position`](Offsets::take_position) for the position that may be committed: just past the
//! longest prefix of settled records.

use std::collections::VecDeque;

/// The offsets of one partition's records that are taken and not yet passed by the stored
/// position; see the module docs.
#[derive(Debug, Default)]
pub(super) struct Offsets {
    /// Taken offsets from the first unsettled one on, in offset order, each with whether it
    /// is settled.
    open: VecDeque<(i64, bool)>,
    /// The position the settled prefix reached: the last settled offset + 1.
    position: Option<i64>,
    /// Whether `position` moved since [`Offsets::take_position`] last handed it out.
    moved: bool,
}

impl Offsets {
    /// A record at `offset` was taken: no position passes it until it is settled. Offsets
    /// are taken in increasing order (a partition's records come in offset order); an offset
    /// not above the last one taken is ignored.
    pub(super) fn take(&mut self, offset: i64) {
        if self.open.back().is_some_and(|(last, _)| *last >= offset) {
            return;
        }
        if self.open.is_empty() && self.position.is_some_and(|p| p > offset) {
            return;
        }
        self.open.push_back((offset, false));
    }

    /// The record at `offset` is settled (handled, or its dead letter acknowledged). An
    /// offset that was not taken, or is settled already, changes nothing.
    pub(super) fn settle(&mut self, offset: i64) {
        // Offsets are mostly consecutive, so an offset's distance from the first open one
        // is nearly always its place: a search per record cost more than the rest of the
        // ledger behind a dead letter in flight, where thousands of settled records wait.
        let Some(&(first, _)) = self.open.front() else {
            return;
        };
        let guess = offset
            .checked_sub(first)
            .and_then(|d| usize::try_from(d).ok());
        let at = match guess.filter(|&g| self.open.get(g).is_some_and(|(o, _)| *o == offset)) {
            Some(at) => at,
            None => match self.open.binary_search_by_key(&offset, |(o, _)| *o) {
                Ok(at) => at,
                Err(_) => return,
            },
        };
        self.open[at].1 = true;
        while let Some(&(first, true)) = self.open.front() {
            self.open.pop_front();
            self.position = Some(first + 1);
            self.moved = true;
        }
    }

    /// The position that may be stored now (the offset just past the longest prefix of
    /// settled records), if it moved since the last call; `None` when it did not.
    pub(super) fn take_position(&mut self) -> Option<i64> {
        std::mem::take(&mut self.moved)
            .then_some(self.position)
            .flatten()
    }

    /// Records taken and not yet passed by the position: the unsettled ones and the settled
    /// ones after the first unsettled.
    pub(super) fn open(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn in_order_settling_moves_the_position_past_each_record() {
        let mut offsets = Offsets::default();
        offsets.take(5);
        offsets.take(6);
        assert_eq!(offsets.take_position(), None, "nothing settled yet");
        offsets.settle(5);
        assert_eq!(offsets.take_position(), Some(6));
        assert_eq!(offsets.take_position(), None, "handed out once");
        offsets.settle(6);
        assert_eq!(offsets.take_position(), Some(7));
        assert_eq!(offsets.open(), 0);
    }

    #[test]
    fn a_record_in_flight_holds_the_position_back() {
        let mut offsets = Offsets::default();
        for o in [10, 11, 13, 20] {
            offsets.take(o); // gaps: compaction, transaction markers
        }
        offsets.settle(11);
        offsets.settle(13);
        assert_eq!(offsets.take_position(), None, "10 is still in flight");
        offsets.settle(10);
        assert_eq!(offsets.take_position(), Some(14), "past 13, short of 20");
        assert_eq!(offsets.open(), 1, "20 is still in flight");
    }

    #[test]
    fn untaken_and_repeated_offsets_change_nothing() {
        let mut offsets = Offsets::default();
        offsets.take(3);
        offsets.settle(4);
        offsets.take(3);
        offsets.take(2);
        assert_eq!(offsets.open(), 1);
        offsets.settle(3);
        offsets.settle(3);
        assert_eq!(offsets.take_position(), Some(4));
        offsets.take(1);
        assert_eq!(
            offsets.open(),
            0,
            "an offset behind the position is not taken"
        );
    }

    proptest! {
        /// Whatever the order records settle in, the position never passes an unsettled
        /// record, and reaches just past the last one once all are settled.
        #[test]
        fn the_position_never_passes_an_unsettled_record(
            gaps in proptest::collection::vec(1_i64..4, 1..200),
            seed in any::<u64>(),
        ) {
            let mut offset = 0;
            let taken: Vec<i64> = gaps.iter().map(|g| { offset += g; offset }).collect();
            let mut settle_order = taken.clone();
            // A reproducible shuffle from the seed.
            let mut state = seed | 1;
            for i in (1..settle_order.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                settle_order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let mut offsets = Offsets::default();
            let mut settled = std::collections::BTreeSet::new();
            let mut stored = None;
            // Take them all first, then settle in the shuffled order, taking in between too.
            let half = taken.len() / 2;
            for o in &taken[..half] {
                offsets.take(*o);
            }
            let mut next_to_take = half;
            for o in settle_order {
                while next_to_take < taken.len() && taken[next_to_take] <= o {
                    offsets.take(taken[next_to_take]);
                    next_to_take += 1;
                }
                offsets.settle(o);
                settled.insert(o);
                if let Some(position) = offsets.take_position() {
                    prop_assert!(stored.is_none_or(|s| position > s), "moves forward");
                    for t in taken.iter().filter(|t| **t < position) {
                        prop_assert!(settled.contains(t), "{position} passes unsettled {t}");
                    }
                    stored = Some(position);
                }
            }
            prop_assert_eq!(stored, Some(taken.last().unwrap() + 1));
            prop_assert_eq!(offsets.open(), 0);
        }
    }
}
