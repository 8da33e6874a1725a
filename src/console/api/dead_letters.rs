//! What the console shows: its status, the inbox, the dead letters a filter selects, one in
//! full, and the export of a selection as JSON lines.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde_json::json;

use super::error::ApiError;
use super::selection::{ListQuery, Selection};
use super::{Console, MAX_EXPORT, MAX_LIMIT};
use crate::console::access::{Caller, Refusal, Role};
use crate::console::dead_letter;
use crate::dlq_reader::DlqEntry;
use crate::outstanding::inbox::{InboxFilter, InboxRow};
use crate::outstanding::parked::Heads;
use crate::replay::audit::ReplayRun;

pub(super) async fn status(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let mut status = c.watch.status();
    if caller.permissions.scope(Role::Viewer).is_some() {
        // Counted from what the caller sees.
        let rows = c.watch.inbox(&InboxFilter::default()).unwrap_or_default();
        let rows: Vec<_> = rows.iter().filter(|r| sees(&caller, r)).collect();
        status.dlq_topics = c.topics(&caller);
        status.outstanding = rows.iter().map(|r| r.count).sum();
        status.causes = rows.len();
    }
    Ok(Json(status).into_response())
}

/// Whether an inbox row is the caller's to see.
fn sees(caller: &Caller, row: &InboxRow) -> bool {
    let group = Some(row.group.as_str()).filter(|g| !g.is_empty());
    caller.permissions.may(Role::Viewer, &row.dlq_topic, group)
}

pub(super) async fn inbox(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(filter): Query<InboxFilter>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let mut rows = c.watch.inbox(&filter).map_err(ApiError::BadRequest)?;
    rows.retain(|r| sees(&caller, r));
    let mut status = c.watch.status();
    if caller.permissions.scope(Role::Viewer).is_some() {
        status.dlq_topics = c.topics(&caller);
    }
    Ok(Json(json!({ "status": status, "rows": rows })).into_response())
}

/// Whether the query asks for every dead letter (`state=all`) rather than the outstanding
/// ones (`state=outstanding`, the default); another word is refused, never read as the default.
fn all_states(q: &ListQuery) -> Result<bool, String> {
    match q.state.as_deref() {
        None | Some("outstanding") => Ok(false),
        Some("all") => Ok(true),
        Some(other) => Err(format!("state `{other}`: expected outstanding or all")),
    }
}

pub(super) async fn dead_letters(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let all = all_states(&q).map_err(ApiError::BadRequest)?;
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_LIMIT);
    let _permit = c.scan(&caller)?;
    let selection: Selection = q.selection.selection().map_err(ApiError::BadRequest)?;
    let mut filter = selection.filter().map_err(ApiError::BadRequest)?;
    filter.within = caller.permissions.scope(Role::Viewer);
    if let Some(t) = &selection.dlq_topic {
        if !c.is_topic(&caller, t) {
            return Err(ApiError::NotFound(format!(
                "`{t}` is not a dead-letter topic this console shows"
            )));
        }
    }
    let found = c
        .watch
        .list(&filter, selection.dlq_topic.as_deref(), all, limit)
        .await
        .map_err(|e| ApiError::Upstream(format!("cannot read the dead-letter topic: {e}")))?;
    let heads = c.watch.parked();
    let items: Vec<_> = found
        .iter()
        .map(|(e, r)| {
            let payloads = c.payloads(&caller, &e.topic, group(e));
            let mut v = dead_letter::to_json(e, r.as_ref(), payloads, false);
            v["parked"] = parked(&heads, e);
            v
        })
        .collect();
    let more = items.len() >= limit;
    Ok(Json(json!({ "dead_letters": items, "limit": limit, "more": more })).into_response())
}

pub(super) async fn dead_letter(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((topic, partition, offset)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let (Ok(partition), Ok(offset)) = (partition.parse::<i32>(), offset.parse::<i64>()) else {
        return Err(ApiError::BadRequest(
            "partition and offset are numbers".into(),
        ));
    };
    if !c.is_topic(&caller, &topic) || partition < 0 || offset < 0 {
        return Err(ApiError::NotFound("no such dead letter".into()));
    }
    let _permit = c.scan(&caller)?;
    match c.watch.fetch(&topic, partition, offset).await {
        Ok(Some((entry, _)))
            if !caller
                .permissions
                .may(Role::Viewer, &entry.topic, group(&entry)) =>
        {
            // Not told apart from a dead letter that is not there.
            Err(ApiError::NotFound("no such dead letter".into()))
        }
        Ok(Some((entry, resolution))) => {
            let payloads = c.payloads(&caller, &entry.topic, group(&entry));
            let mut v = dead_letter::to_json(&entry, resolution.as_ref(), payloads, true);
            v["parked"] = parked(&c.watch.parked(), &entry);
            if payloads {
                if let (Some(codec), Some(e)) = (&c.config.schemas, entry.content.envelope()) {
                    dead_letter::decode(codec, e, &mut v).await;
                }
            }
            v["actions"] = json!(c
                .watch
                .runs()
                .iter()
                .filter(|r| touches(r, &entry)
                    && c.holds(&caller, Role::Viewer, &r.dlq_topic, r.selection.as_ref()))
                .map(super::history::history_json)
                .collect::<Vec<_>>());
            Ok(Json(v).into_response())
        }
        Ok(None) => Err(ApiError::NotFound("no such dead letter".into())),
        Err(e) => Err(ApiError::Upstream(format!(
            "cannot read the dead-letter topic: {e}"
        ))),
    }
}

/// What waits behind `entry` when its source record is a parked key's head
/// (`key_order_after_failure = "park"`): `{"records": N, "since": …}`, the records of its key
/// parked behind it and when it left; `null` when it is none.
fn parked(heads: &Heads, entry: &DlqEntry) -> serde_json::Value {
    let head = entry
        .content
        .envelope()
        .and_then(|e| crate::outstanding::parked::head_of(&e.source))
        .and_then(|at| heads.head(&at));
    match head {
        Some(h) => json!({ "records": h.waiting, "since": h.since }),
        None => serde_json::Value::Null,
    }
}

/// The group that dead-lettered `entry` (none: not an envelope).
fn group(entry: &DlqEntry) -> Option<&str> {
    entry.content.envelope().map(|e| e.source.group.as_str())
}

/// Whether audited action `r` selected `entry`.
fn touches(r: &ReplayRun, entry: &crate::dlq_reader::DlqEntry) -> bool {
    r.dlq_topic == entry.topic
        && r.selection
            .as_ref()
            .is_some_and(|s| !s.is_empty() && s.matches(entry))
}

pub(super) async fn export(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let within = c.payload_scope(&caller);
    if within.as_ref().is_some_and(|s| s.areas.is_empty()) {
        return Err(Refusal::Forbidden("viewer").into());
    }
    let all = all_states(&q).map_err(ApiError::BadRequest)?;
    let selection: Selection = q.selection.selection().map_err(ApiError::BadRequest)?;
    let mut filter = selection.filter().map_err(ApiError::BadRequest)?;
    // An export holds payloads: only where the caller sees them.
    filter.within = within;
    let permit = c.scan(&caller)?;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(64);
    let watch = c.watch.clone();
    let topic = selection.dlq_topic.clone();
    let shown = c.topics(&caller);
    let limit = q.limit.unwrap_or(MAX_EXPORT).clamp(1, MAX_EXPORT);
    tokio::spawn(async move {
        // Held while the export reads; an export whose client left ends at its next line.
        let _permit = permit;
        let mut sent = 0;
        let topics: Vec<String> = shown
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
                    // Cut here: said, so an archive is never taken for the whole.
                    let cut = json!({ "truncated": true, "limit": limit }).to_string() + "\n";
                    let _ = sender.send(Ok(cut)).await;
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
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}
