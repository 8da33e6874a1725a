//! The operational HTTP endpoint of a running consumer: Prometheus metrics and health probes.
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | 200, every [`Metrics`] family in the Prometheus text format |
//! | `GET /healthz` | 200 `ok` while the process serves (liveness); 503 naming the partition when a partition's worker died (restart the process) |
//! | `GET /readyz` | 200 `ready` when partitions are assigned and a broker is reachable, else 503 with the reason |

use std::future::Future;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// The routes, for embedding in another axum server.
pub fn router(metrics: Metrics) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .with_state(metrics)
}

/// Serves [`router`] on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render_metrics(State(metrics): State<Metrics>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

async fn health(State(metrics): State<Metrics>) -> impl IntoResponse {
    match metrics.health() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
    }
}

async fn ready(State(metrics): State<Metrics>) -> impl IntoResponse {
    if metrics.is_ready() {
        (StatusCode::OK, "ready".to_string())
    } else {
        let mut reasons = Vec::new();
        if metrics.partitions_assigned.get() == 0 {
            reasons.push("no partitions assigned");
        }
        if metrics.broker_up.get() != 1 {
            reasons.push("no broker reachable");
        }
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", reasons.join(", ")),
        )
    }
}
