//! One acquired record, from its first call to its acknowledgement: the breaker's permit,
//! the call with its panic guard, retries with backoff while its acquisition lock is renewed,
//! then what [`ending`] decides — ACCEPT, RELEASE, REJECT, or our dead letter and then
//! ACCEPT.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::acknowledgement::{ending, renewal_interval, Ack, Ending, DEFAULT_LOCK};
use super::client::{Acquired, ShareClient};
use crate::config::ShareDlq;
use crate::consumer::progress::writer::ExitWrite;
use crate::consumer::progress::writer::{exited, ExitWriter};
use crate::consumer::settle::record_span;
use crate::consumer::settle::{Caller, Settled, TopicHandles, Tried};
use crate::failure::DeadLetterKind;
use crate::handler::BatchHandler;
use crate::metrics::Metrics;
use crate::record::Record;
use crate::stopped::Stopped;

/// What settling every record of a share-group member takes.
pub(crate) struct Member<H> {
    /// The handler, the outage breaker and the backoff of a record's calls.
    pub caller: Caller<H>,
    /// Where dead letters are written (`share_dlq = "ours"`).
    pub exits: Arc<dyn ExitWriter>,
    pub metrics: Metrics,
    pub share_dlq: ShareDlq,
    /// The group's `share.delivery.count.limit`, read again before each release.
    pub delivery_limit: super::delivery_limit::DeliveryLimit,
    /// `max_in_flight` permits: a record holds one from its first call to its last (its
    /// backoff included). A fetch acquires `share_acquire_records`, often more than that;
    /// the others wait, their locks renewed.
    pub in_flight: tokio::sync::Semaphore,
    /// The source topics, whose redrive topics the member reads too.
    pub sources: Vec<String>,
    /// The share group.
    pub group: String,
}

/// Settles `acquired`: calls the handler (retrying transient failures with backoff) while its
/// lock is renewed every half lock — from the moment it is acquired, so also while it waits
/// for one of the `max_in_flight` permits — and returns the acknowledgement it ends with, for
/// the member loop to send. `stop` (shutdown) ends a wait — for a permit, backoff, the
/// breaker's permit, a dead-letter write being retried — with RELEASE: the record is
/// delivered again, to this member's successor or another member. A call in progress is
/// never cut short here (the member's shutdown deadline drops it, and releases the record).
pub(crate) async fn settle<H: BatchHandler>(
    member: &Member<H>,
    client: &dyn ShareClient,
    acquired: &Acquired,
    stop: &CancellationToken,
) -> Ack {
    let record = &acquired.record;
    let delivery = acquired.delivery();
    let work = async {
        let mut tried = Tried::default();
        let calls = match calls(member, record, stop, &mut tried).await {
            Ok(calls) => calls,
            Err(Stopped) if last_delivery(member, delivery) => {
                // A release now would have the broker archive the record, without a dead
                // letter: write one (the write is not cut short by the stop; the shutdown
                // deadline still is).
                let message = format!(
                    "not handled before this member stopped, on its last delivery ({delivery} of {}): {}",
                    member.delivery_limit.known().unwrap_or(delivery),
                    tried.last_error.as_deref().unwrap_or("not called yet")
                );
                return dead_letter(
                    member,
                    record,
                    DeadLetterKind::RetriesExhausted,
                    &message,
                    tried.attempts,
                    &CancellationToken::new(),
                )
                .await;
            }
            Err(Stopped) => return Ack::Release,
        };
        let (kind, message, attempts) = match calls {
            Settled::Handled => return Ack::Accept,
            Settled::Exit {
                kind,
                message,
                attempts,
            } => (kind, message, attempts),
        };
        // A release is decided on the limit as the broker says it now: one lowered since the
        // last read would have the broker archive this delivery.
        let limit = match (kind, member.share_dlq) {
            (DeadLetterKind::Permanent | DeadLetterKind::Deserialization, _)
            | (_, ShareDlq::Broker) => member.delivery_limit.known(),
            _ => member.delivery_limit.fresh().await,
        };
        match ending(kind, delivery, limit, member.share_dlq) {
            Ending::Release => {
                tracing::warn!(event = "record_released", id = %record.id, delivery, attempts,
                    error = %message, "retries of this delivery used up; released for another delivery");
                Ack::Release
            }
            Ending::Reject => {
                tracing::warn!(event = "record_rejected", id = %record.id, delivery, attempts,
                    kind = kind.as_str(), error = %message,
                    "rejected for the broker's dead-letter queue (share_dlq = broker)");
                Ack::Reject
            }
            Ending::DeadLetter(kind) => {
                // On the last delivery a release would be archived by the broker: the write
                // goes on through a stop (the shutdown deadline still cuts it).
                let never = CancellationToken::new();
                let cancel = if last_delivery(member, delivery) {
                    &never
                } else {
                    stop
                };
                dead_letter(member, record, kind, &message, attempts, cancel).await
            }
        }
    }
    // Every line about the record, its retries and its dead letter, carries its topic,
    // partition, offset, id, key and delivery.
    .instrument(record_span(record, member.caller.spans.as_ref()));
    tokio::select! {
        biased;
        ack = work => ack,
        never = keep_lock(client, &member.metrics, acquired) => match never {},
    }
}

/// Whether delivery `delivery` is the group's last for a record (`share_dlq = "ours"` with a
/// known limit): a release of it would be archived by the broker, not delivered again.
fn last_delivery<H>(member: &Member<H>, delivery: u16) -> bool {
    member.share_dlq == ShareDlq::Ours
        && member.delivery_limit.known().is_some_and(|l| delivery >= l)
}

/// Writes `record`'s dead letter and says ACCEPT once the dead-letter topic acknowledged it;
/// RELEASE when `cancel` stopped the write first.
async fn dead_letter<H>(
    member: &Member<H>,
    record: &Record,
    kind: DeadLetterKind,
    message: &str,
    attempts: u32,
    cancel: &CancellationToken,
) -> Ack {
    let write = ExitWrite::DeadLetter {
        kind,
        message: message.to_string(),
        attempts,
    };
    let written = member.exits.write(record, &write, cancel.clone()).await;
    match exited(&member.metrics, &record.topic, &write, written) {
        Ok(()) => Ack::Accept,
        Err(Stopped) => Ack::Release,
    }
}

/// Sends `ack` for `acquired` and counts it. A failure (the client no longer holds the
/// record: its lock expired, the member lost its session) is logged: the broker delivers the
/// record again, so nothing is lost, and an ACCEPT that fails means the record may be handled
/// twice.
pub(crate) fn acknowledge(
    client: &dyn ShareClient,
    metrics: &Metrics,
    acquired: &Acquired,
    ack: Ack,
) {
    let topic = acquired.record.topic.as_str();
    match client.acknowledge(acquired.token, ack) {
        Ok(()) => metrics
            .share_acknowledged
            .with_label_values(&[topic, ack.as_str()])
            .inc(),
        Err(error) => {
            metrics.share_lock_lost.with_label_values(&[topic]).inc();
            tracing::warn!(event = "acknowledgement_failed", id = %acquired.record.id,
                ack = ack.as_str(), %error,
                "the broker will deliver the record again (its lock expired or the session ended)");
        }
    }
}

/// Renews `acquired`'s lock every half lock, for as long as it is polled.
async fn keep_lock(
    client: &dyn ShareClient,
    metrics: &Metrics,
    acquired: &Acquired,
) -> std::convert::Infallible {
    let topic = acquired.record.topic.as_str();
    let mut failures = 0u32;
    loop {
        let lock = client.lock_duration().unwrap_or(DEFAULT_LOCK);
        tokio::time::sleep(renewal_interval(lock)).await;
        match client.acknowledge(acquired.token, Ack::Renew) {
            Ok(()) => {
                failures = 0;
                metrics
                    .share_acknowledged
                    .with_label_values(&[topic, Ack::Renew.as_str()])
                    .inc();
                tracing::debug!(event = "record_lock_renewed", id = %acquired.record.id);
            }
            Err(error) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(event = "record_lock_renewal_failed", id = %acquired.record.id,
                        %error, "the record may be delivered to another member while it is handled here (Kafka 4.2+ with share.renew.acknowledge.enable renews locks)");
                }
            }
        }
    }
}

/// The record's calls of this delivery, once it holds one of the `max_in_flight` permits:
/// the shared retries ([`Caller::retries`]), from a first call.
async fn calls<H: BatchHandler>(
    member: &Member<H>,
    record: &Record,
    stop: &CancellationToken,
    tried: &mut Tried,
) -> Result<Settled, Stopped> {
    let _in_flight = tokio::select! {
        biased;
        _ = stop.cancelled() => return Err(Stopped),
        permit = member.in_flight.acquire() => permit.expect("the in-flight semaphore is never closed"),
    };
    let caller = &member.caller;
    let mut metrics = TopicHandles::new(&member.metrics, &record.topic).local(&caller.breaker);
    caller
        .retries(&mut metrics, record, None, tried, stop)
        .await
}
