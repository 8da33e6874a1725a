//! The audit: every action on the console's DLTs, newest first.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::Console;
use crate::console::access::Role;
use crate::replay::audit::ReplayRun;

pub(super) fn history_json(r: &ReplayRun) -> serde_json::Value {
    json!({
        "run": r.run, "action": r.action.as_str(), "operator": r.operator, "host": r.host,
        "dlq_topic": r.dlq_topic, "filter": r.filter, "to": r.to, "started": r.started,
        "ended": r.ended, "scanned": r.scanned, "replayed": r.replayed, "refused": r.refused,
        "passed_over": r.passed_over, "interrupted": r.interrupted, "error": r.error,
        "reason": r.reason, "restores": r.restores, "edited": r.edit.is_some(),
        "request": r.request, "asked": r.asked, "transform": r.transform,
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct HistoryQuery {
    dlq_topic: Option<String>,
}

pub(super) async fn history(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let all = c.audit_runs_for(&caller).await?;
    let topics = c.watch.topics();
    let runs: Vec<_> = all
        .iter()
        .rev()
        .filter(|r| topics.contains(&r.dlq_topic))
        .filter(|r| c.holds(&caller, Role::Viewer, &r.dlq_topic, r.selection.as_ref()))
        .filter(|r| q.dlq_topic.as_ref().is_none_or(|t| *t == r.dlq_topic))
        .map(history_json)
        .collect();
    Ok(Json(json!({ "runs": runs })))
}
