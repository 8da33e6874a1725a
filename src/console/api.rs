//! The console's HTTP routes: the page and its assets, the JSON API, `/healthz`, `/readyz` and
//! `/metrics`. The API is documented in `docs/console.md`. Every answer carries a
//! Content-Security-Policy that allows only the console's own script and styles, so that even
//! markup that slipped into the page could not run.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;

use super::access::{Access, Caller, Refusal, Role};
use super::dead_letter;
use super::redrives::{Control, RedriveError, Redrives, Request};
use super::ConsoleConfig;
use crate::dlq_reader::{ErrorText, Filter};
use crate::failure::DeadLetterKind;
use crate::outstanding::inbox::{parse_age, InboxFilter};
use crate::outstanding::watch::Watch;
use crate::replay::audit::{self, Action, ReplayRun};
use crate::replay::Destination;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kafka_dlq_session";
/// Dead letters `GET /api/dead-letters` answers at most.
pub const MAX_LIMIT: usize = 1_000;
/// Dead letters an export holds at most.
pub const MAX_EXPORT: usize = 1_000_000;

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/console.js");
const STYLE: &str = include_str!("page/console.css");
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

    /// Stops the redrives running (each commits its position first).
    pub fn stop_redrives(&self) {
        self.redrives.stop_all();
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

async fn index(State(c): State<Console>) -> Response {
    let base = format!("<base href=\"{}\">", c.cookie_path());
    let page = INDEX.replacen("<base href=\"/\">", &base, 1);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such page or API")
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(c): State<Console>) -> Response {
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

async fn metrics(State(c): State<Console>) -> Response {
    let s = c.watch.status();
    let mut running = 0;
    let mut paused = 0;
    for p in c.redrives.all() {
        match p.state {
            super::redrives::State::Running => running += 1,
            super::redrives::State::Paused => paused += 1,
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
         # TYPE kafka_dlq_console_redrives gauge\nkafka_dlq_console_redrives{{state=\"running\"}} {running}\nkafka_dlq_console_redrives{{state=\"paused\"}} {paused}\n",
        s.outstanding,
        s.causes,
        s.builds,
        age.unwrap_or(-1.0),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

async fn sign_in(State(c): State<Console>, Json(body): Json<SignIn>) -> Response {
    let Some(session) = c.access.sign_in(&body.token) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "this token is not a viewer's or an operator's",
        );
    };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}",
        session.id,
        c.cookie_path(),
        super::access::SESSION_LIFETIME.as_secs()
    );
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({ "role": session.caller.role, "name": session.caller.name, "csrf_token": session.csrf })),
    )
        .into_response()
}

async fn session(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Some((caller, csrf)) =
        cookie(&headers, SESSION_COOKIE).and_then(|id| c.access.session(&id))
    {
        return Json(json!({ "role": caller.role, "name": caller.name, "csrf_token": csrf, "show_payloads": c.payloads(&caller) })).into_response();
    }
    match c.caller(&headers, &Method::GET, Role::Viewer) {
        // Anonymous access: no session, no CSRF token needed for what the role allows.
        Ok(caller) => Json(json!({ "role": caller.role, "name": caller.name, "csrf_token": null, "show_payloads": c.payloads(&caller) })).into_response(),
        Err(response) => response,
    }
}

async fn sign_out(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        c.access.sign_out(&id);
    }
    let expired = format!(
        "{SESSION_COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
        c.cookie_path()
    );
    (
        [(header::SET_COOKIE, expired)],
        Json(json!({ "signed_out": true })),
    )
        .into_response()
}

async fn status(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    Json(c.watch.status()).into_response()
}

async fn inbox(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(filter): Query<InboxFilter>,
) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    match c.watch.inbox(&filter) {
        Ok(rows) => Json(json!({ "status": c.watch.status(), "rows": rows })).into_response(),
        Err(why) => error(StatusCode::BAD_REQUEST, why),
    }
}

/// Which dead letters an API call means: the same names as the inbox's filter, and a
/// selection of DLQ records.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Selection {
    /// The DLT (required for actions when the console shows several).
    pub dlq_topic: Option<String>,
    /// The consumer group.
    pub group: Option<String>,
    /// The source topic.
    #[serde(alias = "topic")]
    pub source_topic: Option<String>,
    /// The fingerprint.
    pub fingerprint: Option<String>,
    /// `permanent`, `retries_exhausted` or `unclassified`.
    pub kind: Option<String>,
    /// Text the error message contains.
    pub text: Option<String>,
    /// Dead-lettered longer ago than this (`30m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// Dead-lettered more recently than this.
    pub newer_than: Option<String>,
    /// The record id.
    pub id: Option<String>,
    /// These DLQ records only.
    pub records: Option<Vec<Coordinates>>,
}

/// One DLQ record.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Coordinates {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

impl Selection {
    fn filter(&self) -> Result<Filter, String> {
        let kind = match self.kind.as_deref().filter(|k| !k.is_empty()) {
            None => None,
            Some("permanent") => Some(DeadLetterKind::Permanent),
            Some("retries_exhausted") => Some(DeadLetterKind::RetriesExhausted),
            Some("unclassified") => Some(DeadLetterKind::Unclassified),
            Some(other) => {
                return Err(format!(
                    "kind `{other}`: expected permanent, retries_exhausted or unclassified"
                ))
            }
        };
        let now = Utc::now();
        let age = |a: &Option<String>| {
            a.as_deref()
                .filter(|a| !a.is_empty())
                .map(parse_age)
                .transpose()
                .map(|d| d.map(|d| now - d))
        };
        let set = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        Ok(Filter {
            source_topic: set(&self.source_topic),
            kind,
            since: age(&self.newer_than)?,
            until: age(&self.older_than)?,
            id: set(&self.id),
            group: set(&self.group),
            error: set(&self.text).map(ErrorText::Contains),
            fingerprint: set(&self.fingerprint),
            dlq_records: self.records.as_ref().map(|r| {
                r.iter()
                    .map(|c| (c.partition, c.offset))
                    .collect::<BTreeSet<_>>()
            }),
            ..Filter::default()
        })
    }

    /// The DLT an action is on: the one named, or the console's only one.
    #[allow(clippy::result_large_err)] // the refusal is answered at once
    fn topic(&self, c: &Console) -> Result<String, Response> {
        match &self.dlq_topic {
            Some(t) if c.is_topic(t) => Ok(t.clone()),
            Some(t) => Err(error(
                StatusCode::NOT_FOUND,
                format!("`{t}` is not a dead-letter topic this console shows"),
            )),
            None => match c.watch.topics().as_slice() {
                [one] => Ok(one.clone()),
                _ => Err(error(
                    StatusCode::BAD_REQUEST,
                    "name the dlq_topic: this console shows several",
                )),
            },
        }
    }
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(flatten)]
    selection: SelectionQuery,
    limit: Option<usize>,
    state: Option<String>,
}

/// [`Selection`] from a query string (no record list).
#[derive(Deserialize, Default)]
#[serde(default)]
struct SelectionQuery {
    dlq_topic: Option<String>,
    group: Option<String>,
    #[serde(alias = "topic")]
    source_topic: Option<String>,
    fingerprint: Option<String>,
    kind: Option<String>,
    text: Option<String>,
    older_than: Option<String>,
    newer_than: Option<String>,
    id: Option<String>,
}

impl From<SelectionQuery> for Selection {
    fn from(q: SelectionQuery) -> Selection {
        Selection {
            dlq_topic: q.dlq_topic,
            group: q.group,
            source_topic: q.source_topic,
            fingerprint: q.fingerprint,
            kind: q.kind,
            text: q.text,
            older_than: q.older_than,
            newer_than: q.newer_than,
            id: q.id,
            records: None,
        }
    }
}

async fn dead_letters(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Response {
    let caller = match c.caller(&headers, &Method::GET, Role::Viewer) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    let all = match q.state.as_deref() {
        None | Some("outstanding") => false,
        Some("all") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("state `{other}`: expected outstanding or all"),
            )
        }
    };
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_LIMIT);
    let selection: Selection = q.selection.into();
    let filter = match selection.filter() {
        Ok(f) => f,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if let Some(t) = &selection.dlq_topic {
        if !c.is_topic(t) {
            return error(
                StatusCode::NOT_FOUND,
                format!("`{t}` is not a dead-letter topic this console shows"),
            );
        }
    }
    match c
        .watch
        .list(&filter, selection.dlq_topic.as_deref(), all, limit)
        .await
    {
        Ok(found) => {
            let payloads = c.payloads(&caller);
            let items: Vec<_> = found
                .iter()
                .map(|(e, r)| dead_letter::to_json(e, r.as_ref(), payloads, false))
                .collect();
            Json(json!({ "dead_letters": items, "limit": limit, "more": items.len() >= limit }))
                .into_response()
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            format!("cannot read the dead-letter topic: {e}"),
        ),
    }
}

async fn dead_letter(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((topic, partition, offset)): Path<(String, String, String)>,
) -> Response {
    let caller = match c.caller(&headers, &Method::GET, Role::Viewer) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    let (Ok(partition), Ok(offset)) = (partition.parse::<i32>(), offset.parse::<i64>()) else {
        return error(StatusCode::BAD_REQUEST, "partition and offset are numbers");
    };
    if !c.is_topic(&topic) || partition < 0 || offset < 0 {
        return error(StatusCode::NOT_FOUND, "no such dead letter");
    }
    match c.watch.fetch(&topic, partition, offset).await {
        Ok(Some((entry, resolution))) => {
            let mut v =
                dead_letter::to_json(&entry, resolution.as_ref(), c.payloads(&caller), true);
            v["actions"] = json!(c
                .watch
                .runs()
                .iter()
                .filter(|r| touches(r, &entry))
                .map(history_json)
                .collect::<Vec<_>>());
            Json(v).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such dead letter"),
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            format!("cannot read the dead-letter topic: {e}"),
        ),
    }
}

/// Whether audited action `r` selected `entry`.
fn touches(r: &ReplayRun, entry: &crate::dlq_reader::DlqEntry) -> bool {
    r.dlq_topic == entry.topic
        && r.selection
            .as_ref()
            .is_some_and(|s| !s.is_empty() && s.matches(entry))
}

async fn export(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Response {
    let caller = match c.caller(&headers, &Method::GET, Role::Viewer) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    if !c.payloads(&caller) {
        return refused(Refusal::Forbidden("viewer"));
    }
    let all = q.state.as_deref() == Some("all");
    let selection: Selection = q.selection.into();
    let filter = match selection.filter() {
        Ok(f) => f,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    let watch = c.watch.clone();
    let topic = selection.dlq_topic.clone();
    let limit = q.limit.unwrap_or(MAX_EXPORT).clamp(1, MAX_EXPORT);
    tokio::spawn(async move {
        let mut sent = 0;
        let topics: Vec<String> = watch
            .topics()
            .into_iter()
            .filter(|t| topic.as_ref().is_none_or(|d| d == t))
            .collect();
        for topic in topics {
            let (mut reader, ledger) = match watch.open(&topic, all, true).await {
                Ok(Some(opened)) => opened,
                Ok(None) => continue,
                Err(e) => {
                    let _ = sender.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
            };
            while let Some(entry) = reader.next_entry().await {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        let _ = sender.send(Err(std::io::Error::other(e.to_string()))).await;
                        return;
                    }
                };
                if !(all || ledger.resolution(&entry).is_none()) || !filter.matches(&entry) {
                    continue;
                }
                // The client gone: stop reading.
                if sender
                    .send(Ok(dead_letter::export_line(&entry) + "\n"))
                    .await
                    .is_err()
                {
                    return;
                }
                sent += 1;
                if sent >= limit {
                    return;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut r| async move {
        r.recv().await.map(|item| (item, r))
    });
    let name = format!(
        "attachment; filename=\"dead-letters-{}.jsonl\"",
        Utc::now().format("%Y%m%dT%H%M%SZ")
    );
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `POST /api/redrives`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedriveBody {
    #[serde(default)]
    filter: Selection,
    #[serde(default)]
    destination: Option<DestinationBody>,
    #[serde(default)]
    rate: Option<u32>,
    #[serde(default)]
    dry_run: bool,
    /// Edit then redrive: the new payload (text) of the one dead letter `filter.records`
    /// names.
    #[serde(default)]
    payload: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DestinationBody {
    Named(String),
    Topic { topic: String },
}

async fn start_redrive(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Json(body): Json<RedriveBody>,
) -> Response {
    // A dry run sends nothing: a viewer may ask what a redrive would do.
    let needs = match body.dry_run && body.payload.is_none() {
        true => Role::Viewer,
        false => Role::Operator,
    };
    let caller = match c.caller(&headers, &method, needs) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    let topic = match body.filter.topic(&c) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let filter = match body.filter.filter() {
        Ok(f) => f,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let destination = match body.destination {
        None => Destination::Group,
        Some(DestinationBody::Named(n)) if n == "group" => Destination::Group,
        Some(DestinationBody::Named(n)) if n == "source" => Destination::Source,
        Some(DestinationBody::Named(n)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "destination `{n}`: expected \"group\", \"source\" or {{\"topic\": \"…\"}}"
                ),
            )
        }
        Some(DestinationBody::Topic { topic }) => match crate::dlq::check_topic_name(&topic) {
            Ok(()) => Destination::Topic(topic),
            Err(why) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("destination topic `{topic}`: {why}"),
                )
            }
        },
    };
    if body.rate == Some(0) {
        return error(
            StatusCode::BAD_REQUEST,
            "rate: at least 1 record per second (leave it out for no limit)",
        );
    }
    let edit = match &body.payload {
        None => None,
        Some(payload) => {
            let one = body
                .filter
                .records
                .as_ref()
                .filter(|r| r.len() == 1)
                .map(|r| r[0]);
            let Some(at) = one else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "an edited payload goes with exactly one dead letter in filter.records",
                );
            };
            let original = match c.watch.fetch(&topic, at.partition, at.offset).await {
                Ok(Some((entry, _))) => entry
                    .content
                    .envelope()
                    .and_then(|e| e.payload_bytes().ok())
                    .flatten(),
                Ok(None) => return error(StatusCode::NOT_FOUND, "no such dead letter"),
                Err(e) => {
                    return error(
                        StatusCode::BAD_GATEWAY,
                        format!("cannot read the dead letter: {e}"),
                    )
                }
            };
            Some(audit::Edit::new(
                original.as_deref().unwrap_or_default(),
                payload.as_bytes(),
            ))
        }
    };
    let request = Request {
        dlq_topic: topic,
        filter,
        destination,
        rate: body.rate,
        dry_run: body.dry_run,
        edit,
        operator: Console::operator(&caller),
    };
    match c.redrives.start(request) {
        Ok(id) => (StatusCode::ACCEPTED, Json(json!({ "id": id }))).into_response(),
        Err(e) => redrive_error(e),
    }
}

fn redrive_error(e: RedriveError) -> Response {
    let status = match e {
        RedriveError::Unknown => StatusCode::NOT_FOUND,
        RedriveError::Busy(_) | RedriveError::Finished(_) => StatusCode::CONFLICT,
    };
    error(status, e)
}

async fn redrives(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    Json(json!({ "redrives": c.redrives.all() })).into_response()
}

async fn redrive(State(c): State<Console>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    match c.redrives.progress(&id) {
        Some(p) => Json(p).into_response(),
        None => redrive_error(RedriveError::Unknown),
    }
}

async fn control_redrive(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path((id, control)): Path<(String, String)>,
) -> Response {
    if let Err(r) = c.caller(&headers, &method, Role::Operator) {
        return r;
    }
    let control = match control.as_str() {
        "cancel" => Control::Cancel,
        "pause" => Control::Pause,
        "resume" => Control::Resume,
        _ => return not_found().await,
    };
    match c.redrives.control(&id, control) {
        Ok(p) => Json(p).into_response(),
        Err(e) => redrive_error(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardBody {
    #[serde(default)]
    filter: Selection,
    reason: String,
}

async fn discard(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Json(body): Json<DiscardBody>,
) -> Response {
    let caller = match c.caller(&headers, &method, Role::Operator) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    let reason = body.reason.trim();
    if reason.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "reason: say why these dead letters need no redrive",
        );
    }
    let topic = match body.filter.topic(&c) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let filter = match body.filter.filter() {
        Ok(f) => f,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if filter.is_empty() {
        return error(StatusCode::BAD_REQUEST, "filter: a discard needs at least one field (or records); to discard everything, say so with newer_than or older_than");
    }
    // Counted as read: the ends read to bound what it discards, so later dead letters of the
    // same cause stay outstanding.
    let mut count = 0u64;
    let ends = match c
        .watch
        .scan(&filter, Some(&topic), false, |_, _| {
            count += 1;
            true
        })
        .await
    {
        Ok(ends) => ends,
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                format!("cannot read the dead-letter topic: {e}"),
            )
        }
    };
    let mut run = ReplayRun::record(Action::Discard, &Console::operator(&caller), &topic);
    run.filter = filter.key();
    run.selection = Some(filter);
    run.ends = ends.into_iter().collect();
    run.reason = Some(reason.chars().take(1000).collect());
    run.scanned = count;
    run.passed_over = count;
    match c.record(&run).await {
        Ok(()) => Json(json!({ "run": run.run, "discarded": count })).into_response(),
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct RestoreBody {
    reason: Option<String>,
}

async fn restore(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path(run_id): Path<String>,
    body: Option<Json<RestoreBody>>,
) -> Response {
    let caller = match c.caller(&headers, &method, Role::Operator) {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    let runs = match c.audit_runs().await {
        Ok(runs) => runs,
        Err(r) => return r,
    };
    let Some(discarded) = runs
        .iter()
        .find(|r| r.run == run_id && r.action == Action::Discard)
    else {
        return error(StatusCode::NOT_FOUND, "no discard with this run id");
    };
    if runs
        .iter()
        .any(|r| r.action == Action::Restore && r.restores.as_deref() == Some(run_id.as_str()))
    {
        return error(StatusCode::CONFLICT, "this discard was restored already");
    }
    let mut run = ReplayRun::record(
        Action::Restore,
        &Console::operator(&caller),
        &discarded.dlq_topic,
    );
    run.restores = Some(run_id);
    run.filter = discarded.filter.clone();
    run.reason = body
        .and_then(|Json(b)| b.reason)
        .map(|r| r.chars().take(1000).collect());
    match c.record(&run).await {
        Ok(()) => Json(json!({ "run": run.run })).into_response(),
        Err(r) => r,
    }
}

fn history_json(r: &ReplayRun) -> serde_json::Value {
    json!({
        "run": r.run, "action": r.action.as_str(), "operator": r.operator, "host": r.host,
        "dlq_topic": r.dlq_topic, "filter": r.filter, "to": r.to, "started": r.started,
        "ended": r.ended, "scanned": r.scanned, "replayed": r.replayed, "refused": r.refused,
        "passed_over": r.passed_over, "interrupted": r.interrupted, "error": r.error,
        "reason": r.reason, "restores": r.restores, "edited": r.edit.is_some(),
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HistoryQuery {
    dlq_topic: Option<String>,
}

async fn history(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HistoryQuery>,
) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    let all = match c.audit_runs().await {
        Ok(all) => all,
        Err(r) => return r,
    };
    let topics = c.watch.topics();
    let runs: Vec<_> = all
        .iter()
        .rev()
        .filter(|r| topics.contains(&r.dlq_topic))
        .filter(|r| q.dlq_topic.as_ref().is_none_or(|t| *t == r.dlq_topic))
        .map(history_json)
        .collect();
    Json(json!({ "runs": runs })).into_response()
}
