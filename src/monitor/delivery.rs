//! Delivering the monitor's alerts in order, committing the DLQ positions each covers, and
//! keeping the incident's Slack thread.

use std::future::Future;
use std::sync::Arc;

use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{thread, Alert, DeliveryError, Links, Notifier, Pending};
use crate::kafka::LogContext;

/// Hands `pending` to the delivery task; `false` when shutdown came first (the delivery task
/// may be stuck retrying an alert while Slack is down, and the channel full) or the delivery
/// task is gone. An increase alert given up so is sent by the next run: the DLQ positions it
/// covers are committed only after its delivery.
pub(super) async fn send_or_stop(
    tx: &mpsc::Sender<Pending>,
    pending: Pending,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> bool {
    tokio::select! {
        biased;
        sent = tx.send(pending) => sent.is_ok(),
        _ = shutdown.as_mut() => false,
    }
}

/// Delivers alerts in order; after each one, commits the DLQ positions it covers. With the
/// Web API, an increase alert that finds no incident open starts one: its message's thread
/// takes the incident's follow-ups (more dead letters, the breaker, "went down"), and
/// "resolved" is posted there and updates the first message, which ends the incident. The
/// thread is kept with the commits ([`thread`]), so it survives a restart.
pub(super) async fn deliver_all(
    mut rx: mpsc::Receiver<Pending>,
    notifier: Arc<Notifier>,
    consumer: Arc<StreamConsumer<LogContext>>,
    brokers: String,
    links: Links,
    restored: (
        Option<String>,
        std::collections::BTreeMap<(String, i32), i64>,
    ),
    stop: CancellationToken,
) {
    let (mut incident, mut positions) = restored;
    while let Some(pending) = tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        p = rx.recv() => p,
    } {
        let message = pending.alert.message(&brokers, &links);
        let reply_to = incident.as_deref().filter(|_| notifier.has_threads());
        let posted = match notifier.deliver(&message, reply_to, &stop).await {
            Ok(ts) => ts,
            Err(DeliveryError::Rejected(_)) => None,
            Err(DeliveryError::Stopped) => return,
        };
        let mut incident_changed = false;
        match &pending.alert {
            Alert::Increase(_) if incident.is_none() && posted.is_some() => {
                incident = posted;
                incident_changed = true;
            }
            Alert::Resolved { previous } => {
                if let Some(first) = incident.take() {
                    let resolved = Alert::resolved_original(*previous);
                    if let Err(DeliveryError::Stopped) =
                        notifier.update(&first, &resolved, &stop).await
                    {
                        return;
                    }
                    incident_changed = true;
                }
            }
            _ => {}
        }
        if pending.positions.is_empty() && !incident_changed {
            continue;
        }
        for (topic, partition, offset) in &pending.positions {
            positions.insert((topic.clone(), *partition), *offset);
        }
        let tpl = thread::commit_list(&positions, incident.as_deref());
        let consumer = consumer.clone();
        let committed =
            tokio::task::spawn_blocking(move || consumer.commit(&tpl, CommitMode::Sync)).await;
        if let Ok(Err(e)) = committed {
            tracing::warn!(event = "monitor_commit_failed", error = %e,
                "the alert may be repeated after a restart");
        }
    }
}
