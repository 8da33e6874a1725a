//! How long to wait before the next try.
//!
//! A backoff is pure data: [`ExponentialBackoff`] is a validated policy, and
//! [`ExponentialBackoff::delays`] yields the delays one after another as an iterator of
//! [`Duration`]s. `None` means "give up". The caller does the sleeping (with
//! `tokio::time::sleep`, inside a `select!` on shutdown), so paused-clock tests are exact and
//! every wait can be cancelled.
//!
//! Deciding *whether* to retry lives in [`crate::failure`]; this module computes *how long*,
//! and [`retry`] is the one loop that waits between tries.
//!
//! # The schedule
//! The n-th delay (n = 1, 2, …) is `min(max, initial × multiplier^(n-1))`, then multiplied by a
//! random factor drawn uniformly from `[1 − jitter, 1 + jitter]`, then capped at `max` again.
//! With the defaults (1 s, ×2, 30 s, jitter 0.2, 10 retries) the nominal schedule is
//! 1 s, 2 s, 4 s, 8 s, 16 s, 30 s, 30 s, 30 s, 30 s, 30 s — 181 s in all — and then the
//! iterator ends.

mod retry;
pub use retry::{retry, Next};

use std::time::Duration;

use thiserror::Error;

/// An invalid backoff setting; the message names the setting and the bad value.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum BackoffError {
    /// `initial` was zero.
    #[error("backoff initial delay must be greater than 0 ms, got {0:?}")]
    ZeroInitial(Duration),
    /// `max` was below `initial`.
    #[error("backoff max delay ({max:?}) must be at least the initial delay ({initial:?})")]
    MaxBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// `multiplier` was below 1 or not finite.
    #[error("backoff multiplier must be a finite number >= 1.0, got {0}")]
    BadMultiplier(f64),
    /// `jitter` was outside `[0, 1]`.
    #[error("backoff jitter must be between 0.0 and 1.0, got {0}")]
    BadJitter(f64),
}

/// An exponential backoff policy with a cap on each delay, a cap on the number of delays and
/// seedable jitter.
///
/// # Default
/// `initial` 1 s, `multiplier` 2.0, `max` 30 s, `jitter` 0.2, `max_retries` 10.
#[derive(Debug, Clone, PartialEq)]
pub struct ExponentialBackoff {
    initial: Duration,
    multiplier: f64,
    max: Duration,
    jitter: f64,
    max_retries: Option<u32>,
}

impl Default for ExponentialBackoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            multiplier: 2.0,
            max: Duration::from_secs(30),
            jitter: 0.2,
            max_retries: Some(10),
        }
    }
}

impl ExponentialBackoff {
    /// Builds a policy, checking every value.
    ///
    /// `max_retries` is the number of delays the iterator yields before it ends; `None`
    /// yields forever (for retrying infrastructure, such as a dead-letter write, that must
    /// never give up).
    pub fn new(
        initial: Duration,
        multiplier: f64,
        max: Duration,
        jitter: f64,
        max_retries: Option<u32>,
    ) -> Result<Self, BackoffError> {
        if initial.is_zero() {
            return Err(BackoffError::ZeroInitial(initial));
        }
        if max < initial {
            return Err(BackoffError::MaxBelowInitial { initial, max });
        }
        if !multiplier.is_finite() || multiplier < 1.0 {
            return Err(BackoffError::BadMultiplier(multiplier));
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(BackoffError::BadJitter(jitter));
        }
        Ok(Self {
            initial,
            multiplier,
            max,
            jitter,
            max_retries,
        })
    }

    /// The policy used for broker trouble and dead-letter writes: 1 s doubling to 30 s,
    /// jitter 0.2, never giving up.
    pub fn infrastructure() -> Self {
        Self {
            max_retries: None,
            ..Self::default()
        }
    }

    /// The delays with jitter drawn from a random seed.
    pub fn delays(&self) -> Delays {
        self.delays_seeded(fastrand::u64(..))
    }

    /// The delays with jitter drawn from `seed`: the same seed gives the same delays.
    pub fn delays_seeded(&self, seed: u64) -> Delays {
        Delays {
            policy: self.clone(),
            rng: fastrand::Rng::with_seed(seed),
            given: 0,
        }
    }

    /// The n-th delay (1-based) before jitter: `min(max, initial × multiplier^(n-1))`.
    pub fn nominal(&self, n: u32) -> Duration {
        let exp = n.saturating_sub(1).min(1_000) as i32;
        let secs = self.initial.as_secs_f64() * self.multiplier.powi(exp);
        if !secs.is_finite() || secs >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

/// The delays of an [`ExponentialBackoff`], in order; `None` once `max_retries` were given.
#[derive(Debug, Clone)]
pub struct Delays {
    policy: ExponentialBackoff,
    rng: fastrand::Rng,
    given: u32,
}

impl Delays {
    /// Starts the schedule again from the first delay.
    pub fn reset(&mut self) {
        self.given = 0;
    }

    /// `delay` brought within the policy's bounds: at least `initial`, at most `max`. A
    /// downstream's `Retry-After` goes through this, so `Retry-After: 0` cannot burn every
    /// retry at once and a huge value cannot park the partition for longer than `max`.
    pub fn bound(&self, delay: Duration) -> Duration {
        delay.clamp(self.policy.initial, self.policy.max)
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if let Some(max) = self.policy.max_retries {
            if self.given >= max {
                return None;
            }
        }
        self.given = self.given.saturating_add(1);
        let nominal = self.policy.nominal(self.given);
        let factor = 1.0 + self.policy.jitter * (2.0 * self.rng.f64() - 1.0);
        let jittered = Duration::from_secs_f64(nominal.as_secs_f64() * factor);
        Some(jittered.min(self.policy.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_keeps_a_delay_between_initial_and_max() {
        let delays = ExponentialBackoff::new(
            Duration::from_millis(100),
            2.0,
            Duration::from_secs(30),
            0.0,
            Some(3),
        )
        .unwrap()
        .delays();
        assert_eq!(delays.bound(Duration::ZERO), Duration::from_millis(100));
        assert_eq!(delays.bound(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(
            delays.bound(Duration::from_secs(86_400)),
            Duration::from_secs(30)
        );
    }

    fn no_jitter(max_retries: Option<u32>) -> ExponentialBackoff {
        ExponentialBackoff::new(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(30),
            0.0,
            max_retries,
        )
        .unwrap()
    }

    #[test]
    fn default_schedule_doubles_to_thirty_seconds_then_gives_up_after_ten() {
        let delays: Vec<u64> = no_jitter(Some(10))
            .delays_seeded(1)
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 30, 30, 30, 30, 30]);
    }

    #[test]
    fn jitter_stays_within_bounds_and_under_the_cap() {
        let policy = ExponentialBackoff::default();
        for seed in 0..200 {
            for (i, d) in policy.delays_seeded(seed).enumerate() {
                let nominal = policy.nominal(i as u32 + 1).as_secs_f64();
                let secs = d.as_secs_f64();
                assert!(secs >= nominal * 0.8 - 1e-9, "{secs} < 0.8 x {nominal}");
                assert!(secs <= (nominal * 1.2).min(30.0) + 1e-9, "{secs} too long");
            }
        }
    }

    #[test]
    fn same_seed_gives_same_delays() {
        let policy = ExponentialBackoff::default();
        let a: Vec<_> = policy.delays_seeded(42).collect();
        let b: Vec<_> = policy.delays_seeded(42).collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 10);
    }

    #[test]
    fn infrastructure_backoff_never_gives_up() {
        let mut delays = ExponentialBackoff::infrastructure().delays_seeded(7);
        assert!(delays.nth(10_000).is_some());
    }

    #[test]
    fn reset_starts_from_the_initial_delay() {
        let mut delays = no_jitter(None).delays_seeded(0);
        delays.next();
        delays.next();
        delays.reset();
        assert_eq!(delays.next(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn zero_retries_gives_up_at_once() {
        assert_eq!(no_jitter(Some(0)).delays().next(), None);
    }

    #[test]
    fn constructor_rejects_bad_values() {
        let s = Duration::from_secs(1);
        assert_eq!(
            ExponentialBackoff::new(Duration::ZERO, 2.0, s, 0.0, None),
            Err(BackoffError::ZeroInitial(Duration::ZERO))
        );
        assert!(matches!(
            ExponentialBackoff::new(s * 2, 2.0, s, 0.0, None),
            Err(BackoffError::MaxBelowInitial { .. })
        ));
        assert_eq!(
            ExponentialBackoff::new(s, 0.5, s, 0.0, None),
            Err(BackoffError::BadMultiplier(0.5))
        );
        assert_eq!(
            ExponentialBackoff::new(s, 2.0, s, 1.5, None),
            Err(BackoffError::BadJitter(1.5))
        );
    }
}
