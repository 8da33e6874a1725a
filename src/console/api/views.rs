//! Saved views: named filters everyone signed in sees and opens by their link, kept on the
//! audit topic (`save_view`, `delete_view`) so that every replica and every restart shows the
//! same ones.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::selection::SelectionQuery;
use super::Console;
use crate::console::access::Role;
use crate::replay::audit::{Action, ReplayRun, SavedView};

/// A view's name at most, in characters.
const NAME: usize = 100;
/// A view's query string at most, in bytes.
const QUERY: usize = 4096;

/// The views saved and not deleted since, by name (the latest save of a name wins), as
/// (view, who saved it, when).
fn saved(runs: &[ReplayRun]) -> Vec<(SavedView, &ReplayRun)> {
    let mut views: Vec<(SavedView, &ReplayRun)> = Vec::new();
    for r in runs {
        let Some(view) = &r.view else { continue };
        views.retain(|(v, _)| v.name != view.name);
        if r.action == Action::SaveView {
            views.push((view.clone(), r));
        }
    }
    views.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    views
}

/// The DLT a view's query names, if any.
fn topic_of(query: &str) -> Option<String> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "dlq_topic")
        .map(|(_, v)| v.into_owned())
}

pub(super) async fn list(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let runs = c.audit_runs_for(&caller).await?;
    let views: Vec<_> = saved(&runs)
        .into_iter()
        // A view of a DLT the caller does not see is not theirs to open.
        .filter(|(v, _)| topic_of(&v.query).is_none_or(|t| c.is_topic(&caller, &t)))
        .map(|(v, r)| json!({ "name": v.name, "query": v.query, "saved_by": r.operator, "saved_at": r.started }))
        .collect();
    Ok(Json(json!({ "views": views })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ViewBody {
    name: String,
    query: String,
}

pub(super) async fn save(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Json(body): Json<ViewBody>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Viewer)?;
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > NAME || name.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(format!(
            "name: 1 to {NAME} characters, none of them control characters"
        )));
    }
    let query = body.query.trim().trim_start_matches('?');
    if query.len() > QUERY {
        return Err(ApiError::BadRequest(format!(
            "query: at most {QUERY} bytes"
        )));
    }
    // The query must be a filter the console reads, as its links are.
    let parsed: Result<SelectionQuery, _> = serde_urlencoded_query(query);
    let checked = parsed.and_then(|q| {
        q.selection()
            .and_then(|s| s.filter().map(|_| s.dlq_topic))
            .map_err(|e| format!("query: {e}"))
    });
    let topic = checked.map_err(ApiError::BadRequest)?;
    if let Some(t) = topic.filter(|t| !c.is_topic(&caller, t)) {
        return Err(ApiError::NotFound(format!(
            "`{t}` is not a dead-letter topic this console shows"
        )));
    }
    let mut run = ReplayRun::record(Action::SaveView, &Console::operator(&caller), "");
    run.view = Some(SavedView {
        name: name.to_string(),
        query: query.to_string(),
    });
    run.filter = query.to_string();
    c.record(&run).await?;
    Ok(Json(json!({ "name": name, "query": query })).into_response())
}

pub(super) async fn delete(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Viewer)?;
    let runs = c.audit_runs_for(&caller).await?;
    let me = Console::operator(&caller);
    let Some((view, by)) = saved(&runs).into_iter().find(|(v, _)| v.name == name) else {
        return Err(ApiError::NotFound("no saved view of this name".into()));
    };
    // Whoever saved it, or an operator.
    if by.operator != me && caller.role() < Role::Operator {
        return Err(ApiError::NotTheirs(format!(
            "`{}` saved this view: they or an operator may delete it",
            by.operator
        )));
    }
    let mut run = ReplayRun::record(Action::DeleteView, &me, "");
    run.filter = view.query.clone();
    run.view = Some(view);
    c.record(&run).await?;
    Ok(Json(json!({ "deleted": name })).into_response())
}

/// A query string as [`SelectionQuery`], or why not.
fn serde_urlencoded_query(query: &str) -> Result<SelectionQuery, String> {
    let uri: axum::http::Uri = format!("/?{query}")
        .parse()
        .map_err(|e| format!("query: not a query string ({e})"))?;
    axum::extract::Query::<SelectionQuery>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| format!("query: {}", e.body_text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_save_of_a_name_wins_and_a_delete_ends_it() {
        let view = |action, name: &str, query: &str| {
            let mut r = ReplayRun::record(action, "console:alice", "");
            r.view = Some(SavedView {
                name: name.into(),
                query: query.into(),
            });
            r
        };
        let runs = vec![
            view(Action::SaveView, "billing timeouts", "group=billing"),
            view(Action::SaveView, "old", "kind=permanent"),
            view(
                Action::SaveView,
                "billing timeouts",
                "group=billing&text=timeout",
            ),
            view(Action::DeleteView, "old", "kind=permanent"),
        ];
        let views = saved(&runs);
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].0.query, "group=billing&text=timeout");
        assert_eq!(topic_of("dlq_topic=a-dlt&kind=x").as_deref(), Some("a-dlt"));
        assert!(serde_urlencoded_query("where=kind%20%3D%3D%20'permanent'").is_ok());
        assert!(
            serde_urlencoded_query("nonsense=1").is_ok(),
            "unknown names are left out, as links are"
        );
    }
}
