//! Key order after a failure (`key_order_after_failure = "park"`), as a consumer group's
//! workers do it: a source partition's worker reads its park log into its table before its
//! first record, parks the records of parked keys, writes a head when a record leaves, and
//! releases a key's records in order once its head is resolved; a retry or redrive worker
//! writes the resolution when it handles a head. The events and the table are
//! [`crate::park`]'s. One idea per file:
//!
//! | file | what |
//! |---|---|
//! | [`log`] | the park log's seam: events written and a partition's events read; the Kafka one |
//! | [`partition`] | a source partition's parking: its table, read to the log's end and kept current |

pub(crate) mod log;
pub(crate) mod partition;

pub(crate) use log::{KafkaParkLog, ParkLog};
pub(crate) use partition::PartitionPark;
