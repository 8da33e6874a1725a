//! The poll side of a consumer: what librdkafka's queue serves and where it goes before a
//! worker takes it.
//!
//! | file | what |
//! |---|---|
//! | [`fetcher`] | what the poll loop asks of librdkafka's queue (the simulation answers from its world) |
//! | [`context`] | the librdkafka context: rebalances, errors, statistics |
//! | [`rebalance`] | what a rebalance decides: revoked partitions end, then the commit; assigned ones get inboxes |
//! | [`assignments`] | the partitions assigned here: each one's inbox and the token that stops its worker |
//! | [`dispatch`] | the poll loop's hand-off: each record copied into its partition's inbox |
//! | [`inbox`] | a partition's inbox, its share of `max_buffered_bytes`, pausing and resuming the partition |
//! | [`spare_records`] | settled records given back by the workers, reused for the next copies |
//! | [`rewind`] | exactly once: an aborted transaction's partitions started again at their first records in it |
//! | [`undecodable`] | record batches librdkafka cannot decode: which partition, which offset, why |

pub(in crate::consumer) mod assignments;
pub(in crate::consumer) mod context;
pub(in crate::consumer) mod dispatch;
pub(in crate::consumer) mod fetcher;
pub(in crate::consumer) mod inbox;
pub(in crate::consumer) mod rebalance;
pub(in crate::consumer) mod rewind;
pub(in crate::consumer) mod spare_records;
pub(in crate::consumer) mod undecodable;
