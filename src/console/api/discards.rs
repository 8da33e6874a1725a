//! Discarding dead letters with a reason, and restoring a discard.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::selection::Selection;
use super::Console;
use crate::console::access::Role;
use crate::replay::audit::{Action, ReplayRun};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiscardBody {
    #[serde(default)]
    filter: Selection,
    reason: String,
}

pub(super) async fn discard(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Json(body): Json<DiscardBody>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Operator)?;
    let reason = body.reason.trim();
    if reason.is_empty() {
        return Err(ApiError::BadRequest(
            "reason: say why these dead letters need no redrive".into(),
        ));
    }
    let topic = body.filter.topic(&c, &caller)?;
    let filter = body.filter.filter().map_err(ApiError::BadRequest)?;
    if filter.is_empty() {
        return Err(ApiError::BadRequest("filter: a discard needs at least one field (or records); to discard everything, say so with newer_than or older_than".into()));
    }
    let _permit = c.scan(&caller)?;
    let filter = c.within(&caller, Role::Operator, &topic, filter).await?;
    // Counted as read: the ends read to bound what it discards, so later dead letters of the
    // same cause stay outstanding.
    let frozen = c.freeze(&caller, &topic, &filter).await?;
    if c.waits(&frozen) {
        let ask = super::requests::Ask {
            action: Action::Discard,
            dlq_topic: topic,
            filter,
            to: String::new(),
            rate: None,
            edit: None,
            transform: None,
            reason: Some(reason.chars().take(1000).collect()),
        };
        return c.ask_for(&caller, ask, frozen).await;
    }
    let (count, ends) = (frozen.count, frozen.ends);
    // Released before the discard is recorded: if the release fails, nothing is recorded and
    // discarding again does it all (a head resolved twice is harmless).
    let released = c
        .release_discarded(frozen.heads, &Console::operator(&caller))
        .await?;
    let mut run = ReplayRun::record(Action::Discard, &Console::operator(&caller), &topic);
    run.filter = filter.key();
    run.selection = Some(filter);
    run.ends = ends.into_iter().collect();
    run.reason = Some(reason.chars().take(1000).collect());
    run.scanned = count;
    run.passed_over = count;
    c.record(&run).await?;
    Ok(Json(json!({
        "run": run.run,
        "discarded": count,
        "released": super::requests::released_json(released),
    }))
    .into_response())
}

#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RestoreBody {
    reason: Option<String>,
}

pub(super) async fn restore(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path(run_id): Path<String>,
    body: Option<Json<RestoreBody>>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Operator)?;
    let runs = c.audit_runs_for(&caller).await?;
    let Some(discarded) = runs
        .iter()
        .find(|r| r.run == run_id && r.action == Action::Discard)
    else {
        return Err(ApiError::NotFound("no discard with this run id".into()));
    };
    if !c.holds(
        &caller,
        Role::Operator,
        &discarded.dlq_topic,
        discarded.selection.as_ref(),
    ) {
        return Err(ApiError::NotFound("no discard with this run id".into()));
    }
    if runs
        .iter()
        .any(|r| r.action == Action::Restore && r.restores.as_deref() == Some(run_id.as_str()))
    {
        return Err(ApiError::Conflict(
            "this discard was restored already".into(),
        ));
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
    c.record(&run).await?;
    Ok(Json(json!({ "run": run.run })).into_response())
}
