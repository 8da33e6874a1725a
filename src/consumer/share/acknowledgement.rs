//! What a share-group member answers the broker for a record whose calls are over: pure
//! decisions, unit-tested here; `delivery.rs` does what they say.

use std::time::Duration;

use crate::config::ShareDlq;
use crate::failure::DeadLetterKind;

/// An acknowledgement of one acquired record (KIP-932; RENEW is KIP-1222).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ack {
    /// Done with it: handled, or its dead letter acknowledged.
    Accept,
    /// Deliver it again (to any member), counting one more delivery.
    Release,
    /// Never deliver it again: archived, or the broker's dead-letter queue (KIP-1191).
    Reject,
    /// Keep the acquisition lock for another lock duration; the record stays acquired.
    Renew,
}

impl Ack {
    /// The metric label and log name: `accept`, `release`, `reject`, `renew`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ack::Accept => "accept",
            Ack::Release => "release",
            Ack::Reject => "reject",
            Ack::Renew => "renew",
        }
    }
}

/// How a record whose in-process calls failed ends this delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// RELEASE it: another delivery follows (to this member or another).
    Release,
    /// Write it to our dead-letter topic as `kind`, then ACCEPT it.
    DeadLetter(DeadLetterKind),
    /// REJECT it for the broker's dead-letter queue.
    Reject,
}

/// Where a record goes whose calls of this delivery (number `delivery`, 1 for the first)
/// ended in `kind`, in a group whose deliveries are limited to `limit`
/// (`share.delivery.count.limit`; `None` when it could not be read):
///
/// - permanent: our dead letter at once, or REJECT with `share_dlq = "broker"`;
/// - retries used up, with deliveries left (`delivery < limit`): RELEASE, for a redelivery;
/// - retries used up on the last delivery: our dead letter (the broker would archive a
///   release of it, without an error, or write its own dead letter with `broker`);
/// - with `share_dlq = "broker"`, a record whose retries are used up is always RELEASEd: the
///   broker counts its deliveries and writes its dead letter ("delivery count exceeded") itself;
/// - with the limit unknown, our dead letter after the first delivery's retries: a release
///   past a limit we cannot see would lose the record.
pub(crate) fn ending(
    kind: DeadLetterKind,
    delivery: u16,
    limit: Option<u16>,
    share_dlq: ShareDlq,
) -> Ending {
    match (kind, share_dlq) {
        (DeadLetterKind::Permanent | DeadLetterKind::Deserialization, ShareDlq::Broker) => {
            Ending::Reject
        }
        (DeadLetterKind::Permanent | DeadLetterKind::Deserialization, _) => {
            Ending::DeadLetter(kind)
        }
        (_, ShareDlq::Broker) => Ending::Release,
        (kind, _) => match limit {
            Some(limit) if delivery < limit => Ending::Release,
            _ => Ending::DeadLetter(kind),
        },
    }
}

/// How often a record's acquisition lock of `lock` is renewed while its calls go on: at half
/// the lock, so that one renewal can be late by almost half a lock (a slow broker, a busy
/// thread) and the lock still holds; never more often than every 50 ms.
pub(crate) fn renewal_interval(lock: Duration) -> Duration {
    (lock / 2).max(Duration::from_millis(50))
}

/// The lock duration assumed until the broker has said its own (Kafka's default
/// `share.record.lock.duration.ms`).
pub(crate) const DEFAULT_LOCK: Duration = Duration::from_secs(30);

/// How long a settled record's acknowledgement waits for the next fetch to carry it while
/// other records of its fetch are still being handled: 100 ms, so that a batch of quick calls
/// is acknowledged by one fetch where each would otherwise cost a request of its own; never
/// more than a quarter of the lock `lock`, which is no longer renewed once the record is
/// settled.
pub(crate) fn ack_linger(lock: Duration) -> Duration {
    Duration::from_millis(100).min(lock / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeadLetterKind::{Permanent, RetriesExhausted};

    #[test]
    fn a_permanent_failure_is_dead_lettered_at_once_whatever_the_delivery() {
        for delivery in [1, 4, 5] {
            assert_eq!(
                ending(Permanent, delivery, Some(5), ShareDlq::Ours),
                Ending::DeadLetter(Permanent)
            );
            assert_eq!(
                ending(Permanent, delivery, Some(5), ShareDlq::Broker),
                Ending::Reject
            );
        }
    }

    #[test]
    fn used_up_retries_are_released_until_the_last_delivery_then_dead_lettered() {
        for delivery in 1..5 {
            assert_eq!(
                ending(RetriesExhausted, delivery, Some(5), ShareDlq::Ours),
                Ending::Release
            );
        }
        assert_eq!(
            ending(RetriesExhausted, 5, Some(5), ShareDlq::Ours),
            Ending::DeadLetter(RetriesExhausted)
        );
        // A broker that delivered past its limit (the limit was lowered meanwhile).
        assert_eq!(
            ending(RetriesExhausted, 7, Some(5), ShareDlq::Ours),
            Ending::DeadLetter(RetriesExhausted)
        );
    }

    #[test]
    fn an_unknown_limit_never_releases() {
        assert_eq!(
            ending(RetriesExhausted, 1, None, ShareDlq::Ours),
            Ending::DeadLetter(RetriesExhausted)
        );
    }

    #[test]
    fn the_broker_counts_deliveries_when_it_writes_the_dead_letters() {
        for delivery in [1, 5] {
            assert_eq!(
                ending(RetriesExhausted, delivery, Some(5), ShareDlq::Broker),
                Ending::Release
            );
        }
    }

    #[test]
    fn a_settled_records_acknowledgement_waits_well_within_its_lock() {
        assert_eq!(
            ack_linger(Duration::from_secs(30)),
            Duration::from_millis(100)
        );
        assert_eq!(
            ack_linger(Duration::from_millis(200)),
            Duration::from_millis(50)
        );
    }

    #[test]
    fn a_lock_is_renewed_at_half_its_duration() {
        assert_eq!(
            renewal_interval(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(
            renewal_interval(Duration::from_millis(20)),
            Duration::from_millis(50)
        );
    }
}
