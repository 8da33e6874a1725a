//! The poll side of a consumer: what librdkafka's queue serves and where it goes before a
//! worker takes it.
//!
//! | file | what |
//! |---|---|
//! | [`fetcher`] | what the poll loop asks of the consumer's own queue: rebalances, errors (the simulation answers from its world) |
//! | [`feed`] | where a partition's worker reads its records (a trait: the simulation's seam) |
//! | [`partition_queue`] | a partition's own librdkafka queue, split from the consumer's, as its feed |
//! | [`fetch_size`] | how much one fetch brings of a partition (its queue's share, within 64 kB and 1 MB) and, in key order, in all (every partition's, within 2 MB and a quarter of the buffer) |
//! | [`fetch_wait`] | how long a broker holds a fetch that finds nothing new: 25 to 100 ms, growing with the partitions |
//! | [`queue_budget`] | what the partition queues hold together, against the consumer's budget for them |
//! | [`context`] | the librdkafka context: rebalances, errors, statistics |
//! | [`rebalance`] | what a rebalance decides: revoked partitions end, then the commit; assigned ones get their queues |
//! | [`assignments`] | the partitions assigned here: each one's queue and the token that stops its worker |
//! | [`rewind`] | exactly once: an aborted transaction's partitions started again at their first records in it |
//! | [`undecodable`] | record batches librdkafka cannot decode: which partition, which offset, why |

pub(in crate::consumer) mod assignments;
pub(in crate::consumer) mod context;
pub(in crate::consumer) mod feed;
pub(in crate::consumer) mod fetch_size;
pub(in crate::consumer) mod fetch_wait;
pub(in crate::consumer) mod fetcher;
pub(in crate::consumer) mod partition_queue;
pub(in crate::consumer) mod queue_budget;
pub(in crate::consumer) mod rebalance;
pub(in crate::consumer) mod rewind;
pub(in crate::consumer) mod undecodable;
