//! The page and its assets (embedded in the binary), the probes and the metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use super::error::error;
use super::Console;
use crate::console::redrives::State as RedriveState;

const INDEX: &str = include_str!("../page/index.html");
const SCRIPT: &str = include_str!("../page/console.js");
const STYLE: &str = include_str!("../page/console.css");

pub(super) async fn index(State(c): State<Console>) -> Response {
    let base = format!("<base href=\"{}\">", c.cookie_path());
    let page = INDEX.replacen("<base href=\"/\">", &base, 1);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

pub(super) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

pub(super) async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such page or API")
}

pub(super) async fn healthz() -> &'static str {
    "ok"
}

pub(super) async fn readyz(State(c): State<Console>) -> Response {
    let redrives = c.redrives.readiness();
    if redrives != crate::console::redrives::Readiness::Read {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {redrives}"),
        )
            .into_response();
    }
    let s = c.watch.status();
    match (&s.current_at, &s.error) {
        (_, Some(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: cannot read the cluster: {e}"),
        )
            .into_response(),
        (None, None) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the inbox is being built",
        )
            .into_response(),
        (Some(_), None) => "ready".into_response(),
    }
}

pub(super) async fn metrics(State(c): State<Console>) -> Response {
    let s = c.watch.status();
    let mut running = 0;
    let mut paused = 0;
    for p in c.redrives.all() {
        match p.state {
            RedriveState::Running => running += 1,
            RedriveState::Paused => paused += 1,
            _ => {}
        }
    }
    let age = s
        .current_at
        .map(|t| (Utc::now() - t).num_milliseconds() as f64 / 1000.0);
    let text = format!(
        "# HELP kafka_dlq_console_outstanding Outstanding dead letters in the console's inbox.\n\
         # TYPE kafka_dlq_console_outstanding gauge\nkafka_dlq_console_outstanding {}\n\
         # HELP kafka_dlq_console_causes Causes (group, source topic, DLT, fingerprint) in the inbox.\n\
         # TYPE kafka_dlq_console_causes gauge\nkafka_dlq_console_causes {}\n\
         # HELP kafka_dlq_console_inbox_builds_total Times the inbox was built from the DLTs.\n\
         # TYPE kafka_dlq_console_inbox_builds_total counter\nkafka_dlq_console_inbox_builds_total {}\n\
         # HELP kafka_dlq_console_inbox_age_seconds Seconds since the inbox was last current (-1 before the first build).\n\
         # TYPE kafka_dlq_console_inbox_age_seconds gauge\nkafka_dlq_console_inbox_age_seconds {}\n\
         # HELP kafka_dlq_console_redrives Redrives by state.\n\
         # TYPE kafka_dlq_console_redrives gauge\nkafka_dlq_console_redrives{{state=\"running\"}} {running}\nkafka_dlq_console_redrives{{state=\"paused\"}} {paused}\n\
         # HELP kafka_dlq_console_reads Reads of the cluster (lists, exports, dry runs, discards, history) running.\n\
         # TYPE kafka_dlq_console_reads gauge\nkafka_dlq_console_reads {}\n\
         # HELP kafka_dlq_state_unverified_records Records of the audit and positions topics passed over: not sealed with the audit key.\n\
         # TYPE kafka_dlq_state_unverified_records gauge\nkafka_dlq_state_unverified_records {}\n",
        s.outstanding,
        s.causes,
        s.builds,
        age.unwrap_or(-1.0),
        c.limits.running(),
        s.unverified,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
