//! The console's HTTP routes: the page and its assets, the JSON API, `/healthz`, `/readyz` and
//! `/metrics`. The API is documented in `docs/console.md`. Every answer carries a
//! Content-Security-Policy that allows only the console's own script and styles, so that even
//! markup that slipped into the page could not run.
//!
//! - [`page`]: the page, its assets, the probes and the metrics;
//! - [`session`]: signing in and out;
//! - [`selection`]: which dead letters a request means (a filter, or ticked ones);
//! - [`dead_letters`]: the inbox, the list, one dead letter in full, the export;
//! - [`redrive`]: starting, watching and steering redrives;
//! - [`discards`]: discard and restore;
//! - [`history`]: the audit.

mod dead_letters;
mod discards;
mod history;
mod page;
mod redrive;
mod selection;
mod session;

use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use super::access::{Access, Caller, Refusal, Role};
use super::redrives::Redrives;
use super::ConsoleConfig;
use crate::outstanding::watch::Watch;
use crate::replay::audit::{self, ReplayRun};
use dead_letters::{dead_letter, dead_letters, export, inbox, status};
use discards::{discard, restore};
use history::history;
use page::{healthz, index, metrics, not_found, readyz, script, style};
use redrive::{control_redrive, redrive, redrives, start_redrive};
pub use selection::{Coordinates, Selection};
use session::{session, sign_in, sign_out};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kafka_dlq_session";
/// Dead letters `GET /api/dead-letters` answers at most.
pub const MAX_LIMIT: usize = 1_000;
/// Dead letters an export holds at most.
pub const MAX_EXPORT: usize = 1_000_000;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'";

/// What every handler shares.
#[derive(Clone)]
pub struct Console {
    config: Arc<ConsoleConfig>,
    access: Arc<Access>,
    watch: Arc<Watch>,
    redrives: Arc<Redrives>,
}

impl Console {
    /// The console of `config`, letting in whom `access` says, showing what `watch` reads.
    pub fn new(config: Arc<ConsoleConfig>, access: Arc<Access>, watch: Arc<Watch>) -> Console {
        let redrives = Redrives::new(config.clone(), watch.clone());
        Console {
            config,
            access,
            watch,
            redrives,
        }
    }

    /// Stops the redrives running and waits, at most `within`, until each has committed its
    /// position.
    pub async fn stop_redrives(&self, within: std::time::Duration) {
        self.redrives.stop_all(within).await;
    }

    /// The routes, under the configured path prefix.
    pub fn router(self) -> Router {
        let prefix = self.config.path_prefix.trim_end_matches('/').to_string();
        let at = |path: &str| format!("{prefix}{path}");
        let mut routes = Router::new().route(&at("/"), get(index));
        if !prefix.is_empty() {
            // `/dlq` serves the page too; its `<base>` makes its links resolve under `/dlq/`.
            routes = routes.route(&prefix, get(index));
        }
        routes
            .route(&at("/assets/console.js"), get(script))
            .route(&at("/assets/console.css"), get(style))
            .route(&at("/healthz"), get(healthz))
            .route(&at("/readyz"), get(readyz))
            .route(&at("/metrics"), get(metrics))
            .route(
                &at("/api/session"),
                get(session).post(sign_in).delete(sign_out),
            )
            .route(&at("/api/status"), get(status))
            .route(&at("/api/inbox"), get(inbox))
            .route(&at("/api/dead-letters"), get(dead_letters))
            .route(
                &at("/api/dead-letters/{dlq_topic}/{partition}/{offset}"),
                get(dead_letter),
            )
            .route(&at("/api/export"), get(export))
            .route(&at("/api/redrives"), get(redrives).post(start_redrive))
            .route(&at("/api/redrives/{id}"), get(redrive))
            .route(&at("/api/redrives/{id}/{control}"), post(control_redrive))
            .route(&at("/api/discards"), post(discard))
            .route(&at("/api/discards/{run}/restore"), post(restore))
            .route(&at("/api/history"), get(history))
            .fallback(not_found)
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(self)
    }
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// An error answer: `{"error": …}`.
fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

fn refused(refusal: Refusal) -> Response {
    let status = match refusal {
        Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
        Refusal::Forbidden(_) | Refusal::Csrf => StatusCode::FORBIDDEN,
    };
    error(status, refusal)
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

impl Console {
    /// Who calls, if they may (else the answer that refuses them): `needs` the role; an
    /// action (`method` not GET) from a session needs its CSRF token.
    #[allow(clippy::result_large_err)] // the refusal is answered at once: its size costs nothing
    fn caller(
        &self,
        headers: &HeaderMap,
        method: &Method,
        needs: Role,
    ) -> Result<Caller, Response> {
        let csrf = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        self.access
            .check(
                bearer(headers).as_deref(),
                cookie(headers, SESSION_COOKIE).as_deref(),
                csrf,
                method != Method::GET,
                needs,
            )
            .map_err(refused)
    }

    /// Who the audit says acted: `console:<token name>`.
    fn operator(caller: &Caller) -> String {
        format!("console:{}", caller.name)
    }

    fn payloads(&self, caller: &Caller) -> bool {
        caller.role == Role::Operator || self.config.show_payloads
    }

    fn is_topic(&self, topic: &str) -> bool {
        self.watch.topics().iter().any(|t| t == topic)
    }

    /// Appends `run` to the audit topic and has the inbox look again; the answer when the
    /// audit topic refuses it (then nothing was done).
    #[allow(clippy::result_large_err)] // the refusal is answered at once
    async fn record(&self, run: &ReplayRun) -> Result<(), Response> {
        let c = &self.config;
        match audit::append(&c.brokers, &c.librdkafka, &c.audit_topic, run).await {
            Ok(()) => {
                self.watch.poke();
                Ok(())
            }
            Err(e) => Err(error(
                StatusCode::BAD_GATEWAY,
                format!(
                    "cannot write the {} to the audit topic `{}`: {e}; nothing was done",
                    run.action.as_str(),
                    c.audit_topic
                ),
            )),
        }
    }

    /// Every run on the audit topic, read afresh (an action just taken is in it).
    #[allow(clippy::result_large_err)] // the refusal is answered at once
    async fn audit_runs(&self) -> Result<Vec<ReplayRun>, Response> {
        let c = &self.config;
        let (brokers, options, topic) = (
            c.brokers.clone(),
            c.librdkafka.clone(),
            c.audit_topic.clone(),
        );
        tokio::task::spawn_blocking(move || audit::history(&brokers, &options, &topic, None))
            .await
            .expect("history task")
            .map_err(|e| {
                error(
                    StatusCode::BAD_GATEWAY,
                    format!("cannot read the audit topic `{}`: {e}", c.audit_topic),
                )
            })
    }

    fn cookie_path(&self) -> String {
        format!("{}/", self.config.path_prefix.trim_end_matches('/'))
    }
}
