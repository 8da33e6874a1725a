//! How long the topics kafka-dlq creates must keep their records, and whether a topic found on
//! the cluster does: a retry record deleted before it is due is a record lost, since its source
//! offset was committed when it was written. Pure: the consumer reads the topics' retention
//! (`DescribeConfigs`) and acts on what this says.

use std::time::Duration;

/// What a retry or redrive topic must keep its records for, at least: its delay, plus the
/// delay again (a record waits behind earlier ones of its tier, and the group may be down for a
/// while), and never less than a minute more than the delay. A redrive topic counts as a tier
/// of delay 0.
pub fn needed(delay: Duration) -> Duration {
    delay + delay.max(Duration::from_secs(60))
}

/// The retention a retry topic is created with, in ms (`retention.ms`): [`needed`], and at
/// least a week, the usual broker default.
pub fn created_ms(delay: Duration) -> i64 {
    const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
    needed(delay).max(WEEK).as_millis().min(i64::MAX as u128) as i64
}

/// Whether a topic whose `retention.ms` is `retention_ms` (`-1`: for ever) keeps the records of
/// a tier with `delay` long enough; when it does not, the retention [`needed`], in ms.
pub fn too_short(retention_ms: i64, delay: Duration) -> Option<i64> {
    let needed = needed(delay).as_millis().min(i64::MAX as u128) as i64;
    (retention_ms >= 0 && retention_ms < needed).then_some(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_retry_topic_must_keep_records_twice_its_delay_and_a_minute_past_it() {
        assert_eq!(needed(HOUR * 24), HOUR * 48);
        assert_eq!(needed(Duration::from_secs(2)), Duration::from_secs(62));
        assert_eq!(needed(Duration::ZERO), Duration::from_secs(60));
    }

    #[test]
    fn created_retry_topics_keep_records_at_least_a_week() {
        assert_eq!(created_ms(Duration::from_secs(2)), 7 * 24 * 3600 * 1000);
        // A 30-day tier: 60 days.
        assert_eq!(created_ms(HOUR * 24 * 30), 60 * 24 * 3600 * 1000);
    }

    #[test]
    fn a_retention_shorter_than_needed_is_found_and_for_ever_never_is() {
        let week = 7 * 24 * 3600 * 1000;
        // The review's case: a 30-day tier on a broker that keeps records a week.
        assert_eq!(too_short(week, HOUR * 24 * 30), Some(60 * 24 * 3600 * 1000));
        assert_eq!(too_short(30_000, Duration::from_secs(120)), Some(240_000));
        assert_eq!(too_short(-1, HOUR * 24 * 30), None);
        assert_eq!(too_short(week, HOUR), None);
    }
}
