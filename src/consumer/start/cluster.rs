//! The cluster at start: a consumer whose connection is refused (a wrong password, an
//! untrusted CA, an expired certificate) says so at once and waits, not ready, instead of
//! starting into librdkafka's silent reconnect loop.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rdkafka::ClientConfig;

use crate::kafka::connect::{self, ConnectFailure};
use crate::metrics::Metrics;

/// How long one attempt waits for the cluster.
const ATTEMPT: Duration = Duration::from_secs(10);
/// How long it waits before asking again after a refusal.
const AGAIN: Duration = Duration::from_secs(10);

/// Connects with `config` until the cluster lets it in. A refusal that retrying cannot mend
/// is logged (one error line: broker, protocol and mechanism, what was refused) and kept on
/// `/readyz` ([`Metrics::not_ready`]), and the attempt is made again every 10 s; a cluster
/// that does not answer at all is left to librdkafka, as a broker outage later would be.
/// Returns false when `shutdown` completes first.
pub(in crate::consumer) async fn wait_until_admitted(
    config: &ClientConfig,
    metrics: &Metrics,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
) -> bool {
    loop {
        let attempt = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || connect::check(&config, ATTEMPT))
        };
        let refused = tokio::select! {
            biased;
            _ = &mut shutdown => return false,
            checked = attempt => checked.expect("the connection check does not panic").err(),
        };
        match refused {
            None => {
                metrics.clear_not_ready("connection");
                return true;
            }
            Some(ConnectFailure {
                refusal: Some(r), ..
            }) if r.is_lasting() => {
                let failure = refused.expect("matched");
                let line = failure.to_string();
                use crate::kafka::log_gate::{judge, Verdict};
                // The gate of every client's refusal of this kind: one line for them all.
                match judge("kafka_connection_refused", r.advice()) {
                    Verdict::First => tracing::error!(
                        event = "kafka_connection_refused",
                        "{line}; waiting to be let in (asking again every 10 s)"
                    ),
                    Verdict::Repeat => {}
                    Verdict::Summary { held_back } => tracing::error!(
                        event = "kafka_connection_refused",
                        held_back,
                        "{line}; still refused ({held_back} more times in the last 30 s)"
                    ),
                }
                metrics.set_not_ready("connection", line);
            }
            Some(failure) => {
                tracing::warn!(event = "cluster_not_reached", error = %failure,
                    "starting anyway: librdkafka connects when the cluster answers");
                return true;
            }
        }
        tokio::select! {
            biased;
            _ = &mut shutdown => return false,
            _ = tokio::time::sleep(AGAIN) => {}
        }
    }
}
