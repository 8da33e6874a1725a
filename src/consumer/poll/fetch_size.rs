//! How much one fetch brings of a partition (`max.partition.fetch.bytes`): sized to the
//! partition queue's share of the consumer's buffer, so that one fetch brings several
//! partitions; and, in key order, how much it brings in all (`fetch.max.bytes`), so that the
//! first fetch brings every partition.

use crate::kafka::ClientOptions;

/// The most one fetch brings of a partition (`max.partition.fetch.bytes`), but for a record
/// batch larger than it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::consumer) enum Fetch {
    /// Set in the raw `librdkafka` options (or its alias `fetch.message.max.bytes`).
    Raw(usize),
    /// kafka-dlq's choice: the partition's share, within [`FETCH_FLOOR`] and [`FETCH_CEILING`].
    Share(usize),
}

impl Fetch {
    /// The bytes, whoever chose them.
    pub(in crate::consumer) fn bytes(self) -> usize {
        match self {
            Fetch::Raw(bytes) | Fetch::Share(bytes) => bytes,
        }
    }
}

/// The least a fetch brings of a partition: smaller, every record batch larger than it comes
/// in parts (a fetch of 8 kB at 1,000 partitions cost 96 % of the memory table's rate).
const FETCH_FLOOR: usize = 64 << 10;

/// The most a fetch brings of a partition: Kafka's default.
const FETCH_CEILING: usize = 1 << 20;

/// How much one fetch brings of a partition whose queue's share is `share` bytes: the raw
/// option when set, else the share itself within 64 kB and 1 MB. A broker returns a record
/// batch larger than the fetch only for the first partition of a fetch that has records, so
/// a fetch smaller than the batches it meets brings one partition's batch a fetch, and
/// librdkafka, which starts each fetch one partition further round the broker's list, gives
/// the first partition after a run of empty ones (retry tiers, the redrive topic) that run's
/// turns too: a no-op consumer of 12 partitions written in 343 kB batches, fetching 64 kB,
/// handled them about one at a time. Sized to its share, a fetch brings several partitions,
/// and a queue still holds at most its share and a fetch: two shares, or a share and 64 kB.
pub(in crate::consumer) fn partition_fetch_bytes(raw: &ClientOptions, share: usize) -> Fetch {
    let set = raw
        .get("max.partition.fetch.bytes")
        .or_else(|| raw.get("fetch.message.max.bytes"));
    match set {
        // One librdkafka cannot parse fails the consumer's creation, naming it.
        Some(value) => Fetch::Raw(value.parse().unwrap_or(FETCH_CEILING)),
        None => Fetch::Share(share.clamp(FETCH_FLOOR, FETCH_CEILING)),
    }
}

/// The least one fetch brings in all: [`crate::config::FETCH_SETTINGS`]'s 2 MB.
const WHOLE_FETCH_FLOOR: usize = 2 << 20;

/// How much one fetch of a key-ordered consumer brings in all (`fetch.max.bytes`), for
/// `partitions` partitions (source, retry and redrive topics) each fetched `fetch` bytes at a
/// time: `None` when the raw options set it (it stands), else enough for every partition's
/// fetch, within 2 MB and a quarter of `max_buffered_bytes` (8 MB by default).
///
/// A broker fills a fetch partition by partition, so at 2 MB a fetch brings three of the
/// benchmark's 682 kB shares, and the partitions of a consumer that starts (or is given
/// partitions in a rebalance) start three by three, a fetch apart. A partition-ordered worker
/// handles one record at a time, and its queue lasts it long past the next fetch; a key-ordered
/// one runs up to `max_in_flight` calls and empties its share within milliseconds, so a
/// partition fetched late starts late: `slow-keyed` ran at 343-413 k records/s at 2 MB and
/// 441-517 k at 8 MB, taking turns. The records of a fetch are the queues' records (librdkafka
/// keeps them in the fetch's buffer), so the queues' bound still bounds them; in partition
/// order a larger fetch raised `noop`'s peak memory and nothing else.
pub(in crate::consumer) fn key_ordered_fetch_bytes(
    raw: &ClientOptions,
    partitions: usize,
    fetch: usize,
    max_buffered_bytes: usize,
) -> Option<usize> {
    if raw.contains_key("fetch.max.bytes") {
        return None;
    }
    let ceiling = (max_buffered_bytes / 4).max(WHOLE_FETCH_FLOOR);
    Some(
        partitions
            .saturating_mul(fetch)
            .clamp(WHOLE_FETCH_FLOOR, ceiling),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_is_the_partitions_share_within_64_kb_and_1_mb() {
        let none = ClientOptions::new();
        assert_eq!(partition_fetch_bytes(&none, 699_050), Fetch::Share(699_050));
        assert_eq!(partition_fetch_bytes(&none, 8_388), Fetch::Share(64 << 10));
        assert_eq!(
            partition_fetch_bytes(&none, 16 << 20),
            Fetch::Share(1 << 20)
        );
    }

    #[test]
    fn a_fetch_set_in_the_raw_options_or_by_its_alias_stands() {
        let mut raw = ClientOptions::new();
        raw.insert("fetch.message.max.bytes", "32768");
        assert_eq!(partition_fetch_bytes(&raw, 699_050), Fetch::Raw(32_768));
        raw.insert("max.partition.fetch.bytes", "2097152");
        assert_eq!(partition_fetch_bytes(&raw, 699_050), Fetch::Raw(2 << 20));
        assert_eq!(Fetch::Raw(7).bytes(), 7);
    }

    #[test]
    fn a_key_ordered_fetch_brings_every_partition_within_2_mb_and_a_quarter_of_the_buffer() {
        let none = ClientOptions::new();
        let buffer = 32 << 20;
        // 12 partitions of 300 kB: all of them.
        assert_eq!(
            key_ordered_fetch_bytes(&none, 12, 300_000, buffer),
            Some(3_600_000)
        );
        // 24 partitions of 682 kB: a quarter of the buffer.
        assert_eq!(
            key_ordered_fetch_bytes(&none, 24, 699_050, buffer),
            Some(8 << 20)
        );
        // Few or small partitions, or a small buffer: never below 2 MB.
        assert_eq!(
            key_ordered_fetch_bytes(&none, 1, 65_536, buffer),
            Some(2 << 20)
        );
        assert_eq!(
            key_ordered_fetch_bytes(&none, 100, 65_536, 1 << 20),
            Some(2 << 20)
        );
        let mut raw = ClientOptions::new();
        raw.insert("fetch.max.bytes", "1048576");
        assert_eq!(key_ordered_fetch_bytes(&raw, 24, 699_050, buffer), None);
    }
}
