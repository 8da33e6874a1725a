//! The error fingerprints a monitor has announced, bounded: it remembers at least the last
//! [`Seen::HALF`] distinct fingerprints and never more than twice that, so a DLQ full of
//! ever-new messages cannot grow the monitor's memory. A fingerprint not seen among the last
//! [`Seen::HALF`] others may be announced as *first seen* again.

use std::collections::HashSet;

/// Fingerprints announced, in two generations: the current one fills up to [`Seen::HALF`],
/// then becomes the previous one and the one before is dropped.
#[derive(Debug, Default)]
pub(super) struct Seen {
    current: HashSet<String>,
    previous: HashSet<String>,
}

impl Seen {
    /// How many distinct fingerprints a generation holds.
    pub(super) const HALF: usize = 5_000;

    /// Notes `fingerprint`; `true` when it is new (in neither generation).
    pub(super) fn insert(&mut self, fingerprint: &str) -> bool {
        if self.current.contains(fingerprint) {
            return false;
        }
        let new = !self.previous.contains(fingerprint);
        if self.current.len() >= Self::HALF {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(fingerprint.to_string());
        new
    }

    #[cfg(test)]
    /// How many fingerprints are remembered.
    pub(super) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_is_new_once() {
        let mut seen = Seen::default();
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.insert("b"));
    }

    #[test]
    fn memory_stays_bounded_and_the_recent_ones_are_remembered() {
        let mut seen = Seen::default();
        for i in 0..10 * Seen::HALF {
            assert!(seen.insert(&format!("fp-{i}")));
            assert!(seen.len() <= 2 * Seen::HALF);
        }
        // The last HALF are all still known.
        for i in 9 * Seen::HALF..10 * Seen::HALF {
            assert!(!seen.insert(&format!("fp-{i}")), "fp-{i}");
        }
        // One from long ago is new again.
        assert!(seen.insert("fp-0"));
    }

    #[test]
    fn a_fingerprint_seen_again_stays_known_across_a_generation() {
        let mut seen = Seen::default();
        seen.insert("steady");
        for i in 0..3 * Seen::HALF {
            seen.insert(&format!("fp-{i}"));
            if i % 1_000 == 0 {
                assert!(!seen.insert("steady"), "at {i}");
            }
        }
    }
}
