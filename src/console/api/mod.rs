//! The console's HTTP routes: the page and its assets, the JSON API, `/healthz`, `/readyz` and
//! `/metrics`. The API is documented in `docs/console.md`. Every answer carries a
//! Content-Security-Policy that allows only the console's own script and styles, so that even
//! markup that slipped into the page could not run.
//!
//! The API checks before it works: who calls, and whether their role may call the route at
//! all, from the headers alone ([`authenticate`]), before a byte of the body is read; a body
//! larger than [`MAX_BODY`] is refused (413); a request that takes longer than
//! [`REQUEST_TIMEOUT`] is answered 503 (its body read included); reads of the cluster are
//! bounded per caller and in all ([`crate::console::limits`], 429); and every error, whoever
//! produced it, is `{"error": …}` ([`json_errors`]). A handler says why it refuses or fails
//! as an [`error::ApiError`], which picks the status.
//!
//! - [`error`]: why a request is refused or failed, and its answer;
//! - [`page`]: the page, its assets, the probes and the metrics;
//! - [`session`]: signing in and out;
//! - [`selection`]: which dead letters a request means (a filter, or ticked ones);
//! - [`dead_letters`]: the inbox, the list, one dead letter in full, the export;
//! - [`redrive`]: starting, watching and steering redrives;
//! - [`discards`]: discard and restore;
//! - [`requests`]: requests that wait for a second operator, approved or rejected;
//! - [`transforms`]: the dry run of a bulk fix, before and after;
//! - [`views`]: saved views, named filters shared by their links;
//! - [`history`]: the audit.

mod dead_letters;
mod discards;
mod error;
mod history;
mod page;
mod redrive;
mod requests;
mod selection;
mod session;
mod sign_on;
mod transforms;
mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::access::{Access, Caller, Refusal, Role};
use super::limits::{Limits, Permit};
use super::redrives::Redrives;
use super::single_sign_on::SingleSignOn;
use super::ConsoleConfig;
use crate::dlq_reader::{Filter, Scope};
use crate::outstanding::watch::Watch;
use crate::replay::audit::{self, Action, ReplayRun};
use dead_letters::{dead_letter, dead_letters, export, inbox, status};
use discards::{discard, restore};
use error::{error, ApiError};
use history::history;
use page::{healthz, index, metrics, not_found, readyz, script, style};
use redrive::{control_redrive, redrive, redrives, start_redrive};
pub use selection::{Coordinates, Selection};
use session::{session, sign_in, sign_out};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kafka_dlq_session";
/// Dead letters `GET /api/dead-letters` answers at most.
pub const MAX_LIMIT: usize = 1_000;
/// Dead letters an export holds at most; one cut there ends with a line saying so.
pub const MAX_EXPORT: usize = 1_000_000;
/// The largest request body the API reads (an edited payload, as base64, fits); a larger one
/// is refused with 413.
pub const MAX_BODY: usize = 4 * 1024 * 1024;
/// How long the API works on one request (reading its body included) before it answers 503.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'";

/// What every handler shares.
#[derive(Clone)]
pub struct Console {
    config: Arc<ConsoleConfig>,
    access: Arc<Access>,
    watch: Arc<Watch>,
    redrives: Arc<Redrives>,
    limits: Arc<Limits>,
    sso: Option<Arc<SingleSignOn>>,
    notifier: Option<Arc<crate::monitor::Notifier>>,
    /// Held while a request is decided.
    deciding: Arc<tokio::sync::Mutex<()>>,
    /// The audit runs whose sign-outs [`Access`] knows: the watch replaces them when it reads
    /// more (held, so that a new list is never taken for this one at its old address).
    sign_outs_seen: Arc<std::sync::Mutex<Option<Arc<Vec<ReplayRun>>>>>,
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
            limits: Arc::new(Limits::default()),
            sso: None,
            notifier: None,
            deciding: Arc::new(tokio::sync::Mutex::new(())),
            sign_outs_seen: Arc::new(std::sync::Mutex::new(None)),
        }
    }

    /// The same console, posting requests for approval and their decisions with `notifier`
    /// (without one they go to the log).
    pub fn with_slack(mut self, notifier: crate::monitor::Notifier) -> Console {
        self.notifier = Some(Arc::new(notifier));
        self
    }

    /// The same console, signing people in with `sso` too.
    pub fn with_single_sign_on(mut self, sso: SingleSignOn) -> Console {
        self.sso = Some(Arc::new(sso));
        self
    }

    /// Stops the redrives running and waits, at most `within`, until each has committed its
    /// position.
    pub async fn stop_redrives(&self, within: std::time::Duration) {
        self.redrives.stop_all(within).await;
    }

    /// Follows the redrives every replica keeps in Kafka until `shutdown`
    /// ([`Redrives::follow`]): run it beside the server.
    pub async fn follow_redrives(&self, shutdown: tokio_util::sync::CancellationToken) {
        self.redrives.clone().follow(shutdown).await;
    }

    /// The routes, under the configured path prefix.
    pub fn router(self) -> Router {
        let prefix = self.config.path_prefix.trim_end_matches('/').to_string();
        let at = |path: &str| format!("{prefix}{path}");
        let mut page = Router::new().route(&at("/"), get(index));
        if !prefix.is_empty() {
            // `/dlq` serves the page too; its `<base>` makes its links resolve under `/dlq/`.
            page = page.route(&prefix, get(index));
        }
        let page = page
            .route(&at("/assets/console.js"), get(script))
            .route(&at("/assets/console.css"), get(style))
            .route(&at("/healthz"), get(healthz))
            .route(&at("/readyz"), get(readyz))
            .route(&at("/metrics"), get(metrics))
            .route(&at("/auth/sign-in"), get(sign_on::start))
            .route(&at("/auth/callback"), get(sign_on::callback));
        let api = Router::new()
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
            .route(&at("/api/requests"), get(requests::list))
            .route(&at("/api/transforms/preview"), post(transforms::preview))
            .route(&at("/api/views"), get(views::list).post(views::save))
            .route(
                &at("/api/views/{name}"),
                axum::routing::delete(views::delete),
            )
            .route(&at("/api/requests/{id}/{decision}"), post(requests::decide))
            .route(&at("/api/history"), get(history))
            // Innermost first: the role from the headers, then the body's limit, the time
            // limit around both, and every error as JSON.
            .route_layer(axum::middleware::from_fn_with_state(
                self.clone(),
                authenticate,
            ))
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(axum::middleware::from_fn(within_time))
            .layer(axum::middleware::map_response(json_errors));
        page.merge(api)
            .fallback(not_found)
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(self)
    }
}

/// The least role a route (a request's path, under the prefix) needs whatever its body says:
/// `None` for the routes anyone may call (signing in and out). A redrive's start needs an operator unless it is a dry run, which
/// only its body tells: its handler checks that once the body is read.
fn least_role(method: &Method, route: &str) -> Option<Role> {
    match (method.as_str(), route) {
        (_, "/api/session") => None,
        ("POST", "/api/redrives") => Some(Role::Viewer),
        ("POST", "/api/transforms/preview") => Some(Role::Viewer),
        // Saved views change no dead letter: a viewer may save one, and delete their own.
        ("POST", "/api/views") => Some(Role::Viewer),
        ("DELETE", r) if r.starts_with("/api/views/") => Some(Role::Viewer),
        ("GET", _) | ("HEAD", _) => Some(Role::Viewer),
        _ => Some(Role::Operator),
    }
}

/// Lets through only a caller whose headers (a token, or a session and its CSRF token for an
/// action) give the route's least role ([`least_role`]); everyone else is answered 401 or 403
/// before their body is read.
async fn authenticate(State(c): State<Console>, request: Request, next: Next) -> Response {
    let prefix = c.config.path_prefix.trim_end_matches('/');
    let path = request.uri().path();
    let route = path.strip_prefix(prefix).unwrap_or(path).to_string();
    let Some(needs) = least_role(request.method(), &route) else {
        return next.run(request).await;
    };
    match c.caller(request.headers(), request.method(), needs) {
        Ok(_) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// Answers 503 when the API has not answered within [`REQUEST_TIMEOUT`]: a client that sends
/// its body slowly, or a cluster that does not answer, holds nothing longer.
async fn within_time(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Unavailable(format!(
                "no answer within {} s (a body sent too slowly, or the cluster did not answer); an action may have been done: look at the history",
                REQUEST_TIMEOUT.as_secs()
            ))
        .into_response(),
    }
}

/// Every error answer of the API as `{"error": …}`: those axum's extractors give (a body
/// that is not JSON or names an unknown field, a body too large, a query that does not
/// parse, a method the route does not take) come as text; a body that does not fit the
/// request's shape (422) is a bad request (400), as the API says.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let message = match text.is_empty() {
        true => status.canonical_reason().unwrap_or("error").to_string(),
        false => text,
    };
    let status = match status {
        StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
        other => other,
    };
    let mut answer = error(status, message);
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, v.clone());
        }
    }
    answer
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
    fn caller(
        &self,
        headers: &HeaderMap,
        method: &Method,
        needs: Role,
    ) -> Result<Caller, ApiError> {
        self.learn_sign_outs();
        let csrf = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        self.access
            .check(
                bearer(headers).as_deref(),
                cookie(headers, SESSION_COOKIE).as_deref(),
                csrf,
                method != Method::GET,
                needs,
            )
            .map_err(ApiError::Refused)
    }

    /// Sessions signed out on any replica (the audit's `sign_out` runs) are refused here too.
    pub(super) fn learn_sign_outs(&self) {
        let runs = self.watch.runs();
        let mut seen = self.sign_outs_seen.lock().expect("seen");
        if seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &runs)) {
            return;
        }
        for r in runs.iter().filter(|r| r.action == Action::SignOut) {
            if let Some(id) = &r.request {
                self.access.revoke(id, r.ended);
            }
        }
        *seen = Some(runs);
    }

    /// Who the audit says acted: `console:<token name>`.
    fn operator(caller: &Caller) -> String {
        format!("console:{}", caller.name)
    }

    /// A read of the cluster for `caller`, if one may start now ([`crate::console::limits`]);
    /// else the 429 that says why.
    fn scan(&self, caller: &Caller) -> Result<Permit, ApiError> {
        Ok(self.limits.start(&caller.name)?)
    }

    /// Whether `caller` sees the payload of a dead letter on `dlq_topic` from `group`.
    fn payloads(&self, caller: &Caller, dlq_topic: &str, group: Option<&str>) -> bool {
        let p = &caller.permissions;
        p.payloads(dlq_topic, group)
            || (self.config.show_payloads && p.may(Role::Viewer, dlq_topic, group))
    }

    /// Whether `caller` sees some payloads.
    fn shows_payloads(&self, caller: &Caller) -> bool {
        self.payload_scope(caller)
            .is_none_or(|s| !s.areas.is_empty())
    }

    /// Where `caller` sees payloads: `None` everywhere.
    fn payload_scope(&self, caller: &Caller) -> Option<Scope> {
        match self.config.show_payloads {
            true => caller.permissions.scope(Role::Viewer),
            false => caller.permissions.payload_scope(),
        }
    }

    /// Whether `topic` is a DLT this console shows and some of it is `caller`'s to see.
    fn is_topic(&self, caller: &Caller, topic: &str) -> bool {
        self.watch.topics().iter().any(|t| t == topic)
            && caller
                .permissions
                .scope(Role::Viewer)
                .is_none_or(|s| s.reaches_topic(topic))
    }

    /// The DLTs shown that some of is `caller`'s to see.
    fn topics(&self, caller: &Caller) -> Vec<String> {
        let scope = caller.permissions.scope(Role::Viewer);
        let mut topics = self.watch.topics();
        topics.retain(|t| scope.as_ref().is_none_or(|s| s.reaches_topic(t)));
        topics
    }

    /// Whether an action on `dlq_topic` that selected by `selection` is within what `caller`
    /// holds `needs` for: all of the DLT, the group it named, or a scope no wider than theirs.
    fn holds(
        &self,
        caller: &Caller,
        needs: Role,
        dlq_topic: &str,
        selection: Option<&Filter>,
    ) -> bool {
        let Some(scope) = caller.permissions.scope(needs) else {
            return true;
        };
        scope.covers_topic(dlq_topic)
            || selection.is_some_and(|f| {
                f.group
                    .as_deref()
                    .is_some_and(|g| scope.covers(dlq_topic, Some(g)))
                    || f.within.as_ref().is_some_and(|w| {
                        !w.areas.is_empty()
                            && w.areas.iter().all(|a| a.reaches_topic(dlq_topic))
                            && scope.contains(w)
                    })
            })
    }

    /// `filter` kept within where `caller` holds `needs`, for an action on `dlq_topic`: the
    /// filter with the caller's scope added, or the 403 that says how many dead letters it
    /// selects outside it (then nothing is done: an action is refused as a whole).
    async fn within(
        &self,
        caller: &Caller,
        needs: Role,
        dlq_topic: &str,
        mut filter: Filter,
    ) -> Result<Filter, ApiError> {
        let Some(scope) = caller.permissions.scope(needs) else {
            return Ok(filter);
        };
        if !scope.covers_topic(dlq_topic) {
            let mut outside = 0u64;
            let read = self
                .watch
                .scan(&filter, Some(dlq_topic), false, |entry, _| {
                    let group = entry.content.envelope().map(|e| e.source.group.as_str());
                    if !scope.covers(&entry.topic, group) {
                        outside += 1;
                    }
                    true
                })
                .await;
            if let Err(e) = read {
                return Err(ApiError::Upstream(format!(
                    "cannot read the dead-letter topic: {e}"
                )));
            }
            if outside > 0 {
                return Err(ApiError::Refused(Refusal::OutOfScope(format!(
                    "the selection holds {outside} dead letter(s) on `{dlq_topic}` outside your grants as {}: narrow it (a group your grants name), nothing was done",
                    needs.as_str()
                ))));
            }
        }
        filter.within = Some(scope);
        Ok(filter)
    }

    /// Appends `run` to the audit topic and has the inbox look again; the answer when the
    /// audit topic refuses it (then nothing was done).
    async fn record(&self, run: &ReplayRun) -> Result<(), ApiError> {
        let c = &self.config;
        match audit::append(&c.brokers, &c.librdkafka, &c.state, run).await {
            Ok(()) => {
                self.watch.poke();
                Ok(())
            }
            Err(e) => Err(ApiError::Upstream(format!(
                "cannot write the {} to the audit topic `{}`: {e}; nothing was done",
                run.action.as_str(),
                c.state.audit
            ))),
        }
    }

    /// Every run on the audit topic, read afresh for `caller` within the read limits.
    async fn audit_runs_for(&self, caller: &Caller) -> Result<Vec<ReplayRun>, ApiError> {
        let _permit = self.scan(caller)?;
        self.audit_runs().await
    }

    /// Every run on the audit topic, read afresh (an action just taken is in it).
    async fn audit_runs(&self) -> Result<Vec<ReplayRun>, ApiError> {
        let c = &self.config;
        let (brokers, options, state) = (c.brokers.clone(), c.librdkafka.clone(), c.state.clone());
        tokio::task::spawn_blocking(move || audit::history(&brokers, &options, &state, None))
            .await
            .expect("history task")
            .map(|audit| audit.runs)
            .map_err(|e| {
                ApiError::Upstream(format!(
                    "cannot read the audit topic `{}`: {e}",
                    c.state.audit
                ))
            })
    }

    fn cookie_path(&self) -> String {
        format!("{}/", self.config.path_prefix.trim_end_matches('/'))
    }

    /// `; Secure` when the browser reaches the console over HTTPS: its public URL says so,
    /// or the proxy that terminates TLS does (`X-Forwarded-Proto`).
    fn secure_suffix(&self, headers: Option<&HeaderMap>) -> &'static str {
        let public = self
            .sso
            .as_ref()
            .is_some_and(|s| s.callback_url().starts_with("https://"));
        let forwarded = headers
            .and_then(|h| h.get("x-forwarded-proto"))
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"));
        match public || forwarded {
            true => "; Secure",
            false => "",
        }
    }
}

/// The session cookie of session `id`.
fn session_cookie(c: &Console, id: &str, headers: &HeaderMap) -> String {
    format!(
        "{SESSION_COOKIE}={id}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{}",
        c.cookie_path(),
        super::access::SESSION_LIFETIME.as_secs(),
        c.secure_suffix(Some(headers))
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use serde_json::{json, Value};
    use tower::ServiceExt;

    use super::*;

    const OPERATOR: &str = "operator-token-0123456789";
    const VIEWER: &str = "viewer-token-0123456789";

    /// The console's routes over a broker no one listens on: every request here is answered
    /// before the cluster would be asked.
    fn router() -> Router {
        let config = Arc::new(ConsoleConfig::new("127.0.0.1:9", vec!["orders-dlt".into()]));
        let tokens = vec![
            ("ops".to_string(), OPERATOR.to_string(), Role::Operator),
            ("support".to_string(), VIEWER.to_string(), Role::Viewer),
        ];
        let access = Arc::new(Access::new(tokens, None));
        let watch = Watch::new(Arc::new(config.source()));
        Console::new(config, access, watch).router()
    }

    /// `method path` with `token` and a JSON `body`: the status and the JSON answered.
    async fn ask(method: &str, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let response = router().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&body).expect("every answer is JSON"),
        )
    }

    #[tokio::test]
    async fn a_caller_without_a_token_is_refused_with_401_as_json() {
        let (status, body) = ask("GET", "/api/dead-letters", None, json!(null)).await;
        assert_eq!(status, 401);
        assert!(
            body["error"].as_str().unwrap().contains("sign in"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_viewer_may_not_discard() {
        let discard = json!({ "filter": { "dlq_topic": "orders-dlt" }, "reason": "fixed" });
        let (status, body) = ask("POST", "/api/discards", Some(VIEWER), discard).await;
        assert_eq!(status, 403);
        assert!(body["error"].as_str().unwrap().contains("viewer"), "{body}");
    }

    #[tokio::test]
    async fn a_discard_without_a_reason_names_the_field() {
        let discard = json!({ "filter": { "dlq_topic": "orders-dlt" }, "reason": " " });
        let (status, body) = ask("POST", "/api/discards", Some(OPERATOR), discard).await;
        assert_eq!(status, 400);
        assert!(
            body["error"].as_str().unwrap().starts_with("reason:"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn an_unknown_field_is_a_bad_request_as_json() {
        let discard = json!({ "reason": "fixed", "everything": true });
        let (status, body) = ask("POST", "/api/discards", Some(OPERATOR), discard).await;
        assert_eq!(status, 400);
        assert!(
            body["error"].as_str().unwrap().contains("everything"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_topic_the_console_does_not_show_is_not_found() {
        let redrive = json!({ "filter": { "dlq_topic": "payments-dlt" }, "rate": 5 });
        let (status, body) = ask("POST", "/api/redrives", Some(OPERATOR), redrive).await;
        assert_eq!(status, 404);
        assert!(
            body["error"].as_str().unwrap().contains("payments-dlt"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn an_unknown_redrive_is_not_found() {
        let (status, body) =
            ask("POST", "/api/redrives/r-1/pause", Some(OPERATOR), json!({})).await;
        assert_eq!(status, 404);
        assert_eq!(body, json!({ "error": "no redrive with this id" }));
    }
}
