//! The operational HTTP endpoint of a running consumer: Prometheus metrics and health probes.
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | 200, every [`Metrics`] family in the Prometheus text format |
//! | `GET /healthz` | 200 `ok` while the process serves (liveness); 503 naming the partition when a partition's worker died (restart the process) |
//! | `GET /readyz` | 200 `ready` when partitions are assigned and a broker is reachable, else 503 with the reason |

use std::future::Future;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
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

/// How long a client may take to send a request's head — its first, or the next on a
/// connection kept alive; then its connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more wait in the listen backlog until one closes, so that a
/// flood of idle connections cannot take the process's file descriptors.
pub const MAX_CONNECTIONS: usize = 512;

/// Serves [`router`] on `listener` (HTTP/1.1) until `shutdown` completes, then stops accepting,
/// closes idle connections at once and lets requests in progress finish for at most `drain`;
/// then it returns whatever its clients do (connections left over are dropped with the
/// runtime). A client that sends no complete request head within [`HEADER_READ_TIMEOUT`] is
/// disconnected, so a half-sent request never holds the process.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    serve_router(listener, router(metrics), shutdown, drain).await
}

/// Serves `routes` as [`serve`] serves the metrics: HTTP/1.1, a client that sends no complete
/// request head within [`HEADER_READ_TIMEOUT`] disconnected, and on `shutdown` at most `drain`
/// for the requests in progress.
pub async fn serve_router(
    listener: TcpListener,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    let service = TowerToHyperService::new(routes);
    let connections = GracefulShutdown::new();
    let room = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            permit = room.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: the listener stays usable.
                        tracing::warn!(event = "http_accept_failed", error = %e,
                            "the HTTP endpoint could not accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service.clone());
                let connection = connections.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            event = "http_server_drain_timeout",
            drain_ms = drain.as_millis() as u64,
            "a client still holds a request; the endpoint stops without it"
        );
    }
    Ok(())
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
    let reasons = metrics.not_ready();
    if reasons.is_empty() {
        (StatusCode::OK, "ready".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", reasons.join("; ")),
        )
    }
}
