//! Where a record goes when its calls in its stage (its source topic or a retry topic) end
//! unhandled: [`Exit::after`] decides. What is written there, and writing it, are the
//! partition's progress's (`consumer::progress::writer`).

use crate::failure::DeadLetterKind;
use crate::record::Record;
use crate::retry_tier::RetryTiers;

/// Where a record goes when it leaves its stage (its source topic or a retry topic)
/// unhandled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// To the dead-letter topic, after `attempts` handler calls in all its stages.
    DeadLetter { kind: DeadLetterKind, attempts: u32 },
    /// To retry tier `tier`, after `attempts` handler calls in this stage.
    RetryTier { tier: u32, attempts: u32 },
}

impl Exit {
    /// Where `record` goes whose calls in this stage ended in `kind` after `attempts` calls:
    /// its next retry tier when its retries are used up and a tier follows this stage, else
    /// the dead-letter topic.
    pub(crate) fn after(
        tiers: &RetryTiers,
        record: &Record,
        kind: DeadLetterKind,
        attempts: u32,
    ) -> Exit {
        let retry = record.retry.as_ref();
        match (kind, tiers.next(retry.and_then(|r| r.tier))) {
            (DeadLetterKind::RetriesExhausted, Some(tier)) => Exit::RetryTier { tier, attempts },
            _ => Exit::DeadLetter {
                kind,
                attempts: retry.map_or(0, |r| r.attempts).saturating_add(attempts),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::retry::RetryDelivery;

    fn record(tier: Option<u32>) -> Record {
        Record {
            id: "t-0-1".into(),
            topic: "t".into(),
            partition: 0,
            offset: 1,
            key: None,
            payload: None,
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
            retry: tier.map(|tier| {
                Box::new(RetryDelivery {
                    group: None,
                    tier: Some(tier),
                    topic: format!("t-retry-{tier}"),
                    partition: 0,
                    offset: 0,
                    due: chrono::Utc::now(),
                    attempts: 4,
                    history: vec![],
                })
            }),
            delivery_count: None,
        }
    }

    #[test]
    fn exhausted_retries_go_to_the_next_tier_then_the_dead_letter_topic() {
        let tiers = RetryTiers::new([1_000, 2_000]);
        let exhausted = DeadLetterKind::RetriesExhausted;
        assert_eq!(
            Exit::after(&tiers, &record(None), exhausted, 3),
            Exit::RetryTier {
                tier: 0,
                attempts: 3
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(0)), exhausted, 3),
            Exit::RetryTier {
                tier: 1,
                attempts: 3
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(1)), exhausted, 3),
            Exit::DeadLetter {
                kind: exhausted,
                attempts: 7
            },
            "after the last tier, with every stage's calls"
        );
        assert_eq!(
            Exit::after(&RetryTiers::default(), &record(None), exhausted, 11),
            Exit::DeadLetter {
                kind: exhausted,
                attempts: 11
            }
        );
    }

    #[test]
    fn a_forged_call_count_saturates_instead_of_overflowing() {
        let mut forged = record(Some(1));
        forged.retry.as_mut().unwrap().attempts = u32::MAX;
        assert_eq!(
            Exit::after(
                &RetryTiers::new([1_000, 2_000]),
                &forged,
                DeadLetterKind::RetriesExhausted,
                3
            ),
            Exit::DeadLetter {
                kind: DeadLetterKind::RetriesExhausted,
                attempts: u32::MAX
            }
        );
    }

    #[test]
    fn a_redriven_record_starts_its_stages_again() {
        let tiers = RetryTiers::new([1_000]);
        let mut redriven = record(Some(0));
        redriven.retry.as_mut().unwrap().tier = None;
        assert_eq!(
            Exit::after(&tiers, &redriven, DeadLetterKind::RetriesExhausted, 2),
            Exit::RetryTier {
                tier: 0,
                attempts: 2
            }
        );
        assert_eq!(
            Exit::after(
                &RetryTiers::default(),
                &redriven,
                DeadLetterKind::Permanent,
                1
            ),
            Exit::DeadLetter {
                kind: DeadLetterKind::Permanent,
                attempts: 5
            },
            "with the calls before the replay"
        );
    }

    #[test]
    fn a_permanent_failure_skips_the_tiers() {
        let tiers = RetryTiers::new([1_000]);
        let permanent = DeadLetterKind::Permanent;
        assert_eq!(
            Exit::after(&tiers, &record(None), permanent, 1),
            Exit::DeadLetter {
                kind: permanent,
                attempts: 1
            }
        );
        assert_eq!(
            Exit::after(&tiers, &record(Some(0)), permanent, 1),
            Exit::DeadLetter {
                kind: permanent,
                attempts: 5
            }
        );
    }
}
