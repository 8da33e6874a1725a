//! A share-group member's loop: acquire records, settle every one of them at once, acquire
//! the next; at shutdown, give the calls in progress the shutdown timeout and RELEASE what is
//! left.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::acknowledgement::{ack_linger, Ack, DEFAULT_LOCK};
use super::client::{Acquired, ShareClient};
use super::delivery::{acknowledge, settle, Member};
use crate::handler::BatchHandler;
use crate::record::retry::redrive_topic;
use crate::record::Record;

/// How long one fetch waits for records before the loop looks at `stop` again.
pub(crate) const FETCH_WAIT: Duration = Duration::from_millis(500);

/// How long the loop waits after a failed fetch (the client reconnects meanwhile).
const FETCH_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Runs `member` until `stop` fires: acquires up to `share_acquire_records` records (or
/// `max_in_flight`, when that is more), settles them concurrently, at most `max_in_flight` at
/// once, the locks of those waiting renewed, and acquires again once all are — the share
/// consumer acquires nothing more while it holds records, which is how the outage breaker
/// stops acquisition: the records in hand wait for its permit, locks renewed.
///
/// A handled record's ACCEPT waits for the next fetch to carry it, one request for the whole
/// batch, unless the batch takes longer than [`ack_linger`]: then the ACCEPTs waiting that
/// long go alone. A RELEASE or REJECT is sent as soon as it is decided.
///
/// When `stop` fires, waits (backoff, the breaker, dead-letter writes) end at once and their
/// records are RELEASEd; calls in progress get `shutdown_timeout` to end, after which they
/// are dropped and their records RELEASEd. Returns once every acquired record has been
/// acknowledged and the acknowledgements sent.
pub(crate) async fn run<H: BatchHandler>(
    member: Arc<Member<H>>,
    client: Arc<dyn ShareClient>,
    stop: CancellationToken,
    shutdown_timeout: Duration,
) {
    loop {
        let fetched = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            fetched = client.acquire(FETCH_WAIT) => fetched,
        };
        let mut acquired = match fetched {
            Ok(acquired) => {
                member.metrics.broker_up.set(1);
                acquired
            }
            Err(error) => {
                member.metrics.broker_up.set(0);
                crate::kafka::warn_gated("share_fetch_failed", &error, "fetching again in 1 s");
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(FETCH_ERROR_PAUSE) => continue,
                }
            }
        };
        if acquired.is_empty() {
            continue;
        }
        for a in &mut acquired {
            restore_redriven(&member, &mut a.record);
            member
                .metrics
                .share_acquired
                .with_label_values(&[a.record.topic.as_str()])
                .inc();
        }
        let lock = client.lock_duration().unwrap_or(DEFAULT_LOCK);
        let mut unsettled: HashSet<u64> = acquired.iter().map(|a| a.token).collect();
        // Handled records whose ACCEPTs wait for the next fetch to carry them.
        let mut waiting: Vec<&Acquired> = Vec::new();
        {
            let member = member.as_ref();
            let client = client.as_ref();
            let stop = &stop;
            let mut settling: FuturesUnordered<_> = acquired
                .iter()
                .map(|a| async move { (a, settle(member, client, a, stop).await) })
                .collect();
            let mut deadline: Option<tokio::time::Instant> = None;
            let mut send_by: Option<tokio::time::Instant> = None;
            loop {
                let until = |at: Option<tokio::time::Instant>| async move {
                    match at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    settled = settling.next() => match settled {
                        // Only an ACCEPT waits: a RELEASE or REJECT goes as it was decided
                        // (rare, and the breaker may open meanwhile).
                        Some((a, Ack::Accept)) => {
                            unsettled.remove(&a.token);
                            waiting.push(a);
                            send_by.get_or_insert_with(|| tokio::time::Instant::now() + ack_linger(lock));
                        }
                        Some((a, ack)) => {
                            unsettled.remove(&a.token);
                            acknowledge(client, &member.metrics, a, ack);
                        }
                        None => break,
                    },
                    // The others take long: these go alone, before their locks run out.
                    _ = until(send_by) => {
                        for a in waiting.drain(..) {
                            acknowledge(client, &member.metrics, a, Ack::Accept);
                        }
                        send_by = None;
                    }
                    _ = stop.cancelled(), if deadline.is_none() => {
                        deadline = Some(tokio::time::Instant::now() + shutdown_timeout);
                    }
                    _ = until(deadline) => {
                        tracing::warn!(event = "shutdown_deadline_exceeded",
                            records = unsettled.len(),
                            deadline_ms = shutdown_timeout.as_millis() as u64,
                            "handler calls still running were dropped; their records are released for another delivery");
                        break;
                    }
                }
            }
        }
        // The fetch that follows carries these (the client sends what it was given with its
        // next fetch), or, when this member stops, the flush below.
        for a in waiting {
            acknowledge(client.as_ref(), &member.metrics, a, Ack::Accept);
        }
        for a in acquired.iter().filter(|a| unsettled.contains(&a.token)) {
            acknowledge(client.as_ref(), &member.metrics, a, Ack::Release);
        }
        if stop.is_cancelled() {
            break;
        }
    }
    client.flush().await;
}

/// A record of one of the group's redrive topics (`dlq replay` put it there) as the original
/// it carries, counted as a record of the source topic that redrive topic belongs to.
fn restore_redriven<H>(member: &Member<H>, record: &mut Record) {
    let Some(source) = member
        .sources
        .iter()
        .find(|s| redrive_topic(s, &member.group) == record.topic)
    else {
        return;
    };
    let delivered = std::mem::replace(record, Record::new(String::new(), 0, 0));
    let (mut restored, error) = crate::retry_tier::restore(delivered, None);
    if let Some(error) = error {
        tracing::warn!(event = "retry_record_unreadable", topic = %restored.topic,
            offset = restored.delivered_offset(), %error, "handled as it is");
    }
    restored.topic = source.clone();
    *record = restored;
}
