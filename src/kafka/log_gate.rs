//! Keeps a broker outage from flooding the log.
//!
//! While the broker is down, librdkafka reports the same trouble many times a second (every
//! connection attempt, every client, every partition's fetch), and so did our poll loops:
//! about twenty identical warnings a second from `kafka-dlq run`. A [`LogGate`] lets the first
//! line of a kind of trouble through (the state change), holds back the repeats, and lets one
//! summary through every [`SUMMARY_EVERY`] while the trouble lasts, with the count held back.
//! Lines are of one kind when their [`fingerprint`](crate::fingerprint::fingerprint) is the
//! same (numbers, addresses and ids do not count). Trouble not seen for [`QUIET_AFTER`] is
//! over: its next line is a state change again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a summary of held-back repeats is let through while the trouble lasts.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// A kind of trouble not seen for this long is over.
pub const QUIET_AFTER: Duration = Duration::from_secs(60);

/// What to do with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first line of this kind (or the first after [`QUIET_AFTER`]): log it.
    First,
    /// A repeat: hold it back.
    Repeat,
    /// A repeat due for the periodic summary: log it with the count of repeats held back since
    /// the last line of this kind that was let through.
    Summary {
        /// Repeats held back.
        held_back: u64,
    },
}

#[derive(Debug)]
struct Kind {
    last_seen: Instant,
    last_logged: Instant,
    held_back: u64,
}

/// The gate; see the [module docs](self).
#[derive(Debug, Default)]
pub struct LogGate {
    kinds: Mutex<HashMap<String, Kind>>,
}

impl LogGate {
    /// Judges a line whose kind is `key`, seen at `now`.
    pub fn judge(&self, key: &str, now: Instant) -> Verdict {
        let mut kinds = self.kinds.lock().expect("log gate lock");
        if kinds.len() > 1_000 {
            kinds.retain(|_, k| now.duration_since(k.last_seen) < QUIET_AFTER);
        }
        match kinds.get_mut(key) {
            Some(kind) if now.duration_since(kind.last_seen) < QUIET_AFTER => {
                kind.last_seen = now;
                if now.duration_since(kind.last_logged) >= SUMMARY_EVERY {
                    let held_back = std::mem::take(&mut kind.held_back);
                    kind.last_logged = now;
                    Verdict::Summary { held_back }
                } else {
                    kind.held_back += 1;
                    Verdict::Repeat
                }
            }
            _ => {
                kinds.insert(
                    key.to_string(),
                    Kind {
                        last_seen: now,
                        last_logged: now,
                        held_back: 0,
                    },
                );
                Verdict::First
            }
        }
    }
}

/// The process's gate for Kafka client trouble.
pub fn global() -> &'static LogGate {
    static GATE: std::sync::OnceLock<LogGate> = std::sync::OnceLock::new();
    GATE.get_or_init(LogGate::default)
}

/// Judges a line of `event` with `message` by the process's gate, now.
pub fn judge(event: &str, message: &str) -> Verdict {
    global().judge(
        &crate::fingerprint::fingerprint(event, message),
        Instant::now(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_passes_repeats_wait_for_the_summary_and_quiet_ends_the_trouble() {
        let gate = LogGate::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(gate.judge("down", t0), Verdict::First);
        for i in 1..=20 {
            assert_eq!(
                gate.judge("down", t0 + Duration::from_millis(50 * i)),
                Verdict::Repeat
            );
        }
        assert_eq!(
            gate.judge("other", t0 + s(1)),
            Verdict::First,
            "another kind"
        );
        assert_eq!(
            gate.judge("down", t0 + s(30)),
            Verdict::Summary { held_back: 20 }
        );
        assert_eq!(gate.judge("down", t0 + s(31)), Verdict::Repeat);
        assert_eq!(
            gate.judge("down", t0 + s(31) + QUIET_AFTER),
            Verdict::First,
            "quiet for a minute: over, then back"
        );
    }
}
