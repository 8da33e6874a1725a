//! How long a broker holds a fetch that finds nothing new (`fetch.wait.max.ms`): short enough
//! that partitions with nothing to fetch do not idle a consumer that has a backlog, long
//! enough that an idle consumer of many partitions does not keep its broker busy.

use crate::kafka::ClientOptions;

/// The shortest hold: 25 ms.
const WAIT_FLOOR_MS: u64 = 25;

/// The longest hold, at 1,000 partitions and more: 100 ms, [`crate::config::FETCH_SETTINGS`]'s.
const WAIT_CEILING_MS: u64 = 100;

/// The hold, in milliseconds, for a consumer of `partitions` partitions in all (source, retry
/// and redrive topics): `None` when the raw options set it (it stands), else a tenth of a
/// millisecond a partition, within 25 and 100 ms.
///
/// librdkafka keeps one fetch in flight per broker, and leaves out of it every partition whose
/// queue is full. A consumer with a backlog has its source partitions' queues full, so its
/// next fetch holds only partitions with nothing new — the retry tiers, the redrive topic —
/// and the broker keeps it for the whole hold while the workers empty the queues and wait: at
/// 100 ms the benchmark's no-op consumer ran at 1.3-1.8 M records/s, without the redrive
/// topic 2.1-2.3 M, at 25 ms 1.8-2.1 M. A broker answers each hold with every partition
/// of the fetch, so an idle consumer costs it in proportion to partitions over the hold: the
/// hold grows with the partitions (an idle consumer of 1,000 partitions cost Apache Kafka
/// 6 % of a core at 100 ms and 17 % at 25 ms; of 24 partitions, 2 % and 4 %).
pub(in crate::consumer) fn fetch_wait_ms(raw: &ClientOptions, partitions: usize) -> Option<u64> {
    if raw.contains_key("fetch.wait.max.ms") {
        return None;
    }
    Some((partitions as u64 / 10).clamp(WAIT_FLOOR_MS, WAIT_CEILING_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_is_a_tenth_of_a_millisecond_a_partition_within_25_and_100_ms() {
        let none = ClientOptions::new();
        assert_eq!(fetch_wait_ms(&none, 0), Some(25));
        assert_eq!(fetch_wait_ms(&none, 24), Some(25));
        assert_eq!(fetch_wait_ms(&none, 500), Some(50));
        assert_eq!(fetch_wait_ms(&none, 1_000), Some(100));
        assert_eq!(fetch_wait_ms(&none, 100_000), Some(100));
    }

    #[test]
    fn a_hold_set_in_the_raw_options_stands() {
        let mut raw = ClientOptions::new();
        raw.insert("fetch.wait.max.ms", "500");
        assert_eq!(fetch_wait_ms(&raw, 24), None);
    }
}
