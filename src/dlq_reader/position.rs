//! A replay's position on one DLQ partition, as committed for its group: the next offset to
//! read, and, in the commit's metadata, the offsets before it that the replay passed over
//! without sending: a reference whose source record is gone for good (retention, compaction, a
//! deleted or recreated topic), a dead letter the loop guard refused, one whose envelope does
//! not decode, a record that is no envelope. Those dead letters were never resolved, so
//! whoever counts outstanding dead letters from the position ([`Position::outstanding`]) still
//! counts them.
//!
//! The metadata is `kafka-dlq lost:` and the offsets, comma-separated; Kafka bounds commit
//! metadata (`offset.metadata.max.bytes`, 4096 by default), so a position holds at most
//! [`MAX_LOST`] of them.

/// The group under which `kafka-dlq dlq replay` commits its position in a DLQ (a filtered
/// replay commits under a group of its own, derived from this name), and from which the
/// monitor counts what is outstanding.
pub const REPLAY_GROUP: &str = "kafka-dlq-replay";

/// At most this many lost dead letters per partition a position can hold.
pub const MAX_LOST: usize = 200;

const PREFIX: &str = "kafka-dlq lost:";

/// A replay position on one DLQ partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The next offset to read.
    pub next: i64,
    /// Offsets before `next` of dead letters passed over unsent because their source record
    /// is gone, ascending.
    pub lost: Vec<i64>,
}

/// A position cannot hold one more lost dead letter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("more than {MAX_LOST} dead letters on this partition were passed over unsent (source record gone, refused by the loop guard, undecodable or not an envelope); their offsets no longer fit in the replay position, so it stops before this one: replay the rest with --to TOPIC, or move them away, then run it again")]
pub struct TooManyLost;

impl Position {
    /// The position committed as `next` with `metadata` (any text not written by
    /// [`Position::metadata`] holds no lost offsets).
    pub fn from_commit(next: i64, metadata: &str) -> Self {
        let lost = metadata
            .strip_prefix(PREFIX)
            .map(|list| {
                list.split(',')
                    .filter_map(|o| o.trim().parse::<i64>().ok())
                    .filter(|o| *o < next)
                    .collect()
            })
            .unwrap_or_default();
        Self { next, lost }
    }

    /// The commit metadata that carries `lost` (empty when there are none).
    pub fn metadata(&self) -> String {
        if self.lost.is_empty() {
            return String::new();
        }
        let list: Vec<String> = self.lost.iter().map(i64::to_string).collect();
        format!("{PREFIX}{}", list.join(","))
    }

    /// Notes the dead letter at `offset` as passed over unsent, its source record gone.
    pub fn lose(&mut self, offset: i64) -> Result<(), TooManyLost> {
        if self.lost.contains(&offset) {
            return Ok(());
        }
        if self.lost.len() >= MAX_LOST {
            return Err(TooManyLost);
        }
        self.lost.push(offset);
        self.lost.sort_unstable();
        Ok(())
    }

    /// The dead letters still outstanding on a partition whose log runs from `low` to `high`:
    /// those at or after both `low` and `next`, and the lost ones the log still holds.
    pub fn outstanding(&self, low: i64, high: i64) -> u64 {
        let after = (high - low.max(self.next)).max(0) as u64;
        let lost = self
            .lost
            .iter()
            .filter(|o| **o >= low && **o < high && **o < self.next)
            .count() as u64;
        after + lost
    }
}

impl Position {
    /// The dead letters of a partition whose log now starts at `low` that retention (or a
    /// deletion) removed before a replay passed them: those between the position and `low`,
    /// and the lost ones below `low`. They are gone, never replayed: not resolved.
    pub fn expired(&self, low: i64) -> u64 {
        let unreplayed = (low - self.next).max(0) as u64;
        let lost = self.lost.iter().filter(|o| **o < low).count() as u64;
        unreplayed + lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_offsets_round_trip_through_the_commit_metadata() {
        let mut p = Position {
            next: 50,
            lost: vec![],
        };
        assert_eq!(p.metadata(), "");
        p.lose(17).unwrap();
        p.lose(3).unwrap();
        p.lose(17).unwrap();
        assert_eq!(p.metadata(), "kafka-dlq lost:3,17");
        assert_eq!(Position::from_commit(50, &p.metadata()), p);
    }

    #[test]
    fn foreign_metadata_holds_no_lost_offsets() {
        assert_eq!(Position::from_commit(9, "").lost, Vec::<i64>::new());
        assert_eq!(
            Position::from_commit(9, "some tool's note").lost,
            Vec::<i64>::new()
        );
        assert_eq!(
            Position::from_commit(9, "kafka-dlq lost:1,x,12").lost,
            vec![1]
        );
    }

    #[test]
    fn lost_dead_letters_stay_outstanding_until_the_log_drops_them() {
        let p = Position {
            next: 10,
            lost: vec![2, 7],
        };
        // 10..15 not replayed yet, 2 and 7 lost.
        assert_eq!(p.outstanding(0, 15), 5 + 2);
        // Retention dropped offset 2 from the DLQ.
        assert_eq!(p.outstanding(5, 15), 5 + 1);
        // Everything replayed and retained: only the lost ones.
        assert_eq!(
            Position {
                next: 15,
                ..p.clone()
            }
            .outstanding(0, 15),
            2
        );
        assert_eq!(Position::default().outstanding(3, 3), 0);
    }

    #[test]
    fn dead_letters_deleted_before_a_replay_passed_them_are_expired_not_resolved() {
        let p = Position {
            next: 10,
            lost: vec![2, 7],
        };
        assert_eq!(p.expired(0), 0);
        // Retention removed 0..5: the lost one at 2 with them; 0..10 were replayed.
        assert_eq!(p.expired(5), 1);
        // And 10..14, never replayed.
        assert_eq!(p.expired(14), 4 + 2);
        assert_eq!(Position::default().expired(3), 3);
    }

    #[test]
    fn a_position_holds_a_bounded_number_of_lost_offsets_that_fits_kafkas_metadata_limit() {
        let mut p = Position {
            next: i64::MAX,
            lost: vec![],
        };
        for o in 0..MAX_LOST as i64 {
            p.lose(i64::MAX - 1 - o).unwrap();
        }
        assert_eq!(p.lose(5), Err(TooManyLost));
        assert!(p.metadata().len() <= 4096, "{}", p.metadata().len());
    }
}
