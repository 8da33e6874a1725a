//! Key order after a failure: a key parked behind its record that left for the dead-letter
//! topic or a retry tier, and released in order once that record is resolved: the events,
//! the table and the reads and writes the tools share (the consumer's side is
//! `consumer::park`).
//!
//! Each source topic has a park log per consumer group ([`park_topic`]), with as many
//! partitions as the source topic: its partition `p` is the story of source partition `p`'s
//! parked keys, one [`event`] after another, written by the partition's owner (a head, a
//! parked record, a release) and by whoever resolves a head (a redrive or retry worker whose
//! call of it succeeded, an operator who discarded it). The owner keeps a [`table`] of it.

pub mod event;
pub mod heads;
pub mod read;
pub mod resolve;
pub mod table;
pub(crate) mod write;

pub use event::{Cause, How, ParkEvent, ParkEventError};
pub use table::{Decision, ParkTable, ParkedKey};

/// The park log of consumer group `group` for its source topic `source`:
/// `<source>-park-<group>` when that is a name Kafka accepts, else made to fit as
/// [`redrive_topic`](crate::record::retry::redrive_topic) does.
pub fn park_topic(source: &str, group: &str) -> String {
    crate::record::retry::group_topic(source, "park", group)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_groups_park_log_is_named_after_its_source_topic() {
        assert_eq!(
            super::park_topic("orders", "billing"),
            "orders-park-billing"
        );
        let odd = super::park_topic("orders", "team a/β");
        assert!(odd.starts_with("orders-park-team_a__-"), "{odd}");
        assert_ne!(odd, super::park_topic("orders", "team a/γ"));
    }
}
