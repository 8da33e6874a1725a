//! Record batches librdkafka cannot decode: which partition, which offset, and what the
//! consumer does about it.
//!
//! A batch whose bytes are corrupt (a CRC or a compressed block that does not check out), or
//! in a codec this build lacks, fails in librdkafka's fetcher: it reports a consumer error and
//! fetches the same batch again, half a second later, for ever. Its error names the batch's
//! first offset but not its partition, so the partition is found from librdkafka's statistics:
//! the partitions whose fetch position is at or past that offset with records left behind it,
//! the nearest first ([`suspects`]).
//!
//! **The decision: the partition stops there.** Nothing past the batch is handled or
//! committed, so nothing is lost or skipped unseen: `kafka_dlq_undecodable_batches_total`
//! counts the failed fetches, `/readyz` names the partition and the offset, and an error line
//! says the same every 30 s. The other partitions go on; the poll loop never pauses for it. An
//! operator decides: repair or re-produce the batch, or move the group's offset past it
//! (docs/operating.md, "A batch that cannot be decoded"). A partition that moves past the
//! offset (its batch could be read after all, or the offset was moved) is ready again.

use std::collections::HashMap;
use std::sync::Mutex;

use rdkafka::statistics::Statistics;

use crate::metrics::Metrics;

/// A batch librdkafka could not decode, as its error event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeFailure {
    /// The offset the error names: the batch's first.
    pub offset: i64,
    /// librdkafka's words.
    pub reason: String,
}

impl DecodeFailure {
    /// The failure librdkafka's consumer error text `reason` describes, if it is one: a
    /// decompression or a CRC check that failed, at an offset.
    pub(crate) fn of(reason: &str) -> Option<DecodeFailure> {
        let lower = reason.to_ascii_lowercase();
        let kind = [
            "decompression",
            "crc32",
            "corrupt",
            "unsupported compression",
            "codec",
        ]
        .iter()
        .any(|k| lower.contains(k));
        if !kind {
            return None;
        }
        let offset = ["at offset ", "message at ", " at "]
            .iter()
            .find_map(|marker| {
                let at = lower.find(marker)? + marker.len();
                let digits: String = lower[at..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })?;
        Some(DecodeFailure {
            offset,
            reason: reason.to_string(),
        })
    }
}

/// Where a partition is, per librdkafka's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The next offset librdkafka fetches.
    pub fetch: i64,
    /// The partition's high watermark.
    pub high: i64,
    /// Whether `fetch` is where the statistics before said: the partition is not moving.
    pub still: bool,
}

/// The partitions a batch failing at `offset` may belong to: those that are not moving,
/// fetching at or past it (the batch may begin before the position the fetch asked for)
/// with records behind it, the nearest ones. Empty when none: the statistics may not show the
/// stuck position yet.
pub(crate) fn suspects(
    positions: &HashMap<(String, i32), Position>,
    offset: i64,
) -> Vec<(String, i32, i64)> {
    let candidates: Vec<(&(String, i32), &Position)> = positions
        .iter()
        .filter(|(_, p)| p.still && p.fetch >= offset && p.high > p.fetch)
        .collect();
    let Some(nearest) = candidates.iter().map(|(_, p)| p.fetch - offset).min() else {
        return Vec::new();
    };
    let mut out: Vec<(String, i32, i64)> = candidates
        .into_iter()
        .filter(|(_, p)| p.fetch - offset == nearest)
        .map(|((topic, partition), p)| (topic.clone(), *partition, p.fetch))
        .collect();
    out.sort();
    out
}

/// The consumer's undecodable batches: recorded from error events, placed with statistics,
/// reported in the metrics and on `/readyz`, forgotten once their partition moves on.
#[derive(Default)]
pub(crate) struct Undecodable {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each assigned partition's position, from the last statistics.
    positions: HashMap<(String, i32), Position>,
    /// Failures not placed yet (their partition's position not seen at them yet).
    pending: Vec<DecodeFailure>,
    /// Partitions stopped at a batch: where they fetch.
    stuck: HashMap<(String, i32), i64>,
}

impl Undecodable {
    /// Takes a consumer error event's text; a decode failure is placed (now, or at the next
    /// statistics) and reported. Says whether it was one.
    pub(crate) fn error(&self, reason: &str, metrics: &Metrics) -> bool {
        let Some(failure) = DecodeFailure::of(reason) else {
            return false;
        };
        let mut state = self.state.lock().expect("undecodable lock");
        if !state.place(&failure, metrics) && state.pending.len() < 64 {
            state.pending.push(failure);
        }
        true
    }

    /// Takes librdkafka's statistics: the partitions' positions, against which pending
    /// failures are placed; a stuck partition that has moved on is ready again.
    pub(crate) fn statistics(&self, statistics: &Statistics, metrics: &Metrics) {
        let positions = statistics
            .topics
            .iter()
            .flat_map(|(topic, t)| {
                t.partitions
                    .iter()
                    .filter(|(p, _)| **p >= 0)
                    .map(move |(p, s)| ((topic.clone(), *p), (s.next_offset, s.hi_offset)))
            })
            .collect();
        self.positions(positions, metrics);
    }

    /// Takes each assigned partition's fetch position and high watermark (see
    /// [`Undecodable::statistics`]).
    fn positions(&self, now: HashMap<(String, i32), (i64, i64)>, metrics: &Metrics) {
        let mut state = self.state.lock().expect("undecodable lock");
        let positions = now
            .into_iter()
            .map(|(key, (fetch, high))| {
                let still = state.positions.get(&key).is_some_and(|p| p.fetch == fetch);
                (key, Position { fetch, high, still })
            })
            .collect();
        state.positions = positions;
        let moved: Vec<(String, i32)> = state
            .stuck
            .iter()
            .filter(|(key, at)| state.positions.get(*key).is_none_or(|p| p.fetch > **at))
            .map(|(key, _)| key.clone())
            .collect();
        for key in moved {
            state.stuck.remove(&key);
            let subject = format!("{}-{}", key.0, key.1);
            if metrics.clear_not_ready(&subject) {
                tracing::info!(event = "undecodable_batch_passed", partition = %subject,
                    "the partition reads again");
            }
        }
        let pending = std::mem::take(&mut state.pending);
        for failure in pending {
            if !state.place(&failure, metrics) {
                state.pending.push(failure);
            }
        }
    }
}

impl State {
    /// Places `failure` on its partition and reports it; false when no partition fits yet.
    fn place(&mut self, failure: &DecodeFailure, metrics: &Metrics) -> bool {
        let suspects = suspects(&self.positions, failure.offset);
        if suspects.is_empty() {
            return false;
        }
        for (topic, partition, fetch) in suspects {
            let subject = format!("{topic}-{partition}");
            metrics
                .undecodable_batches
                .with_label_values(&[topic.as_str(), &partition.to_string()])
                .inc();
            let why = format!(
                "{subject} is stopped at offset {fetch}: the record batch at offset {} cannot \
                 be decoded ({}); nothing past it is handled until it is repaired or the \
                 group's offset is moved past it",
                failure.offset, failure.reason
            );
            crate::kafka::warn_gated("undecodable_batch", &failure.reason, &why);
            metrics.set_not_ready(&subject, why);
            self.stuck.insert((topic, partition), fetch);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_words_for_a_batch_it_cannot_decode() {
        for (text, offset) in [
            ("Decompression (codec 0x4) of message at 123 of 456 bytes failed: Local: Not implemented", 123),
            ("Decompression (codec 0x1) of message at 7 of 80 bytes failed: Local: Invalid compressed data", 7),
            ("Message at offset 42 (120 bytes) failed CRC32 check (original 0x1 calculated 0x2)", 42),
            ("MessageSet at offset 9 (64 bytes) failed CRC32 check (original 0x1 calculated 0x2)", 9),
        ] {
            assert_eq!(DecodeFailure::of(text).map(|f| f.offset), Some(offset), "{text}");
        }
        for text in [
            "Local: Broker transport failure",
            "Broker: Unknown topic or partition",
            "Fetch from offset 5 failed: Broker: Offset out of range",
        ] {
            assert_eq!(DecodeFailure::of(text), None, "{text}");
        }
    }

    fn positions(list: &[(&str, i32, i64, i64)]) -> HashMap<(String, i32), (i64, i64)> {
        list.iter()
            .map(|(t, p, fetch, high)| ((t.to_string(), *p), (*fetch, *high)))
            .collect()
    }

    fn still(list: &[(&str, i32, i64, i64)]) -> HashMap<(String, i32), Position> {
        positions(list)
            .into_iter()
            .map(|(key, (fetch, high))| {
                let still = true;
                (key, Position { fetch, high, still })
            })
            .collect()
    }

    #[test]
    fn the_failing_batch_belongs_to_the_partition_fetching_nearest_past_its_offset() {
        let mut at = still(&[
            ("orders", 0, 120, 400),
            ("orders", 1, 100, 400),
            ("orders", 2, 90, 400),
            ("orders", 3, 100, 100),
            ("orders", 4, 100, 400),
        ]);
        at.get_mut(&("orders".to_string(), 4)).unwrap().still = false;
        assert_eq!(
            suspects(&at, 100),
            vec![("orders".to_string(), 1, 100)],
            "2 fetches before the batch, 3 has nothing behind it, 4 is moving, 0 is further past"
        );
        assert_eq!(
            suspects(&at, 110),
            vec![("orders".to_string(), 0, 120)],
            "a fetch that asked for the middle of the batch"
        );
        assert!(suspects(&at, 500).is_empty());
        let tie = still(&[("a", 0, 100, 200), ("b", 0, 100, 200)]);
        assert_eq!(suspects(&tie, 100).len(), 2, "both are named when both fit");
    }

    #[test]
    fn a_stopped_partition_is_not_ready_until_it_moves_past() {
        let metrics = Metrics::new();
        let undecodable = Undecodable::default();
        undecodable.error(
            "Decompression (codec 0x4) of message at 100 of 456 bytes failed: Local: Bad compression",
            &metrics,
        );
        assert!(
            metrics.not_ready().iter().all(|r| !r.contains("orders-1")),
            "not placed yet"
        );
        undecodable.positions(
            positions(&[("orders", 1, 100, 400), ("orders", 0, 50, 400)]),
            &metrics,
        );
        assert!(
            metrics.not_ready().iter().all(|r| !r.contains("orders-1")),
            "one look at the positions does not tell which partition stands still"
        );
        undecodable.positions(
            positions(&[("orders", 1, 100, 400), ("orders", 0, 120, 400)]),
            &metrics,
        );
        let reasons = metrics.not_ready();
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("orders-1 is stopped at offset 100")),
            "placed once it has stood still: {reasons:?}"
        );
        assert!(
            reasons.iter().all(|r| !r.contains("orders-0")),
            "{reasons:?}"
        );
        assert_eq!(metrics.total("kafka_dlq_undecodable_batches_total"), 1.0);
        undecodable.positions(positions(&[("orders", 1, 100, 400)]), &metrics);
        assert!(
            metrics.not_ready().iter().any(|r| r.contains("orders-1")),
            "still there"
        );
        undecodable.positions(positions(&[("orders", 1, 101, 400)]), &metrics);
        assert!(
            metrics.not_ready().iter().all(|r| !r.contains("orders-1")),
            "moved past: ready again"
        );
    }
}
