//! The group's `share.delivery.count.limit` as a member knows it. An administrator may lower it
//! while members run; a member that decided with the old value would RELEASE a record's real
//! last delivery, and the broker would archive it without a dead letter. So the limit is read
//! again from the broker each time a release is about to be decided (releases are the rare
//! path: a record whose in-process retries are used up), and every 30 s for the other
//! decisions that use it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// Reads the limit from the broker: `Ok(None)` when the group has none that parses.
pub(crate) type ReadLimit = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Option<u16>, String>> + Send>> + Send + Sync,
>;

/// See the module docs.
pub(crate) struct DeliveryLimit {
    known: Mutex<Option<u16>>,
    read: Option<ReadLimit>,
}

impl DeliveryLimit {
    /// A limit never read again (the simulation's, or a test's).
    #[cfg(test)]
    pub(crate) fn fixed(limit: Option<u16>) -> Self {
        Self {
            known: Mutex::new(limit),
            read: None,
        }
    }

    /// A limit read at start as `initial`, read again with `read`.
    pub(crate) fn live(initial: Option<u16>, read: ReadLimit) -> Self {
        Self {
            known: Mutex::new(initial),
            read: Some(read),
        }
    }

    /// The limit last read; `None` when it could not be read.
    pub(crate) fn known(&self) -> Option<u16> {
        *self.known.lock().expect("delivery limit lock")
    }

    /// The limit as the broker says it now (remembered for [`DeliveryLimit::known`]); `None`
    /// when the broker cannot say, so that the caller dead-letters rather than releases past a
    /// limit it cannot see.
    pub(crate) async fn fresh(&self) -> Option<u16> {
        let Some(read) = &self.read else {
            return self.known();
        };
        let limit = match read().await {
            Ok(limit) => limit,
            Err(error) => {
                tracing::warn!(event = "share_delivery_limit_unknown", %error,
                    "share.delivery.count.limit could not be read: dead-lettering instead of releasing");
                None
            }
        };
        let mut known = self.known.lock().expect("delivery limit lock");
        if *known != limit && limit.is_some() {
            tracing::info!(event = "share_delivery_limit_changed", from = ?*known, to = ?limit);
        }
        if limit.is_some() {
            *known = limit;
        }
        limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU16, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_lowered_limit_is_seen_by_the_next_fresh_read_and_an_unreadable_one_is_none() {
        let broker = Arc::new(AtomicU16::new(5));
        let answers = broker.clone();
        let limit = DeliveryLimit::live(
            Some(5),
            Box::new(move || {
                let value = answers.load(Ordering::SeqCst);
                Box::pin(async move {
                    match value {
                        0 => Err("timed out".to_string()),
                        v => Ok(Some(v)),
                    }
                })
            }),
        );
        broker.store(2, Ordering::SeqCst);
        assert_eq!(limit.known(), Some(5), "not read again yet");
        assert_eq!(limit.fresh().await, Some(2));
        assert_eq!(limit.known(), Some(2));
        broker.store(0, Ordering::SeqCst);
        assert_eq!(limit.fresh().await, None, "unknown now: never release");
        assert_eq!(limit.known(), Some(2), "the last one read stays known");
        assert_eq!(DeliveryLimit::fixed(Some(3)).fresh().await, Some(3));
    }
}
