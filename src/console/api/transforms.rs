//! The dry run of a bulk fix: a transformation applied to every outstanding dead letter a
//! selection holds, without sending anything — how many it would change, leave as they are,
//! or fail on, and the first ones side by side, before and after.

use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::selection::Selection;
use super::Console;
use crate::console::access::{Refusal, Role};
use crate::replay::transform::{Transform, Transformed};

/// Records a preview shows side by side by default, and at most.
const SHOWN: usize = 20;
const MAX_SHOWN: usize = 100;
/// Characters of a payload a preview shows.
const TEXT: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewBody {
    #[serde(default)]
    filter: Selection,
    transform: Transform,
    #[serde(default)]
    limit: Option<usize>,
}

pub(super) async fn preview(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Json(body): Json<PreviewBody>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Viewer)?;
    // It shows payloads: only where the caller sees them.
    let within = c.payload_scope(&caller);
    if within.as_ref().is_some_and(|s| s.areas.is_empty()) {
        return Err(Refusal::Forbidden("viewer").into());
    }
    let topic = body.filter.topic(&c, &caller)?;
    let mut filter = body.filter.filter().map_err(ApiError::BadRequest)?;
    filter.within = within;
    let _permit = c.scan(&caller)?;
    let shown = body.limit.unwrap_or(SHOWN).clamp(1, MAX_SHOWN);
    let started = Instant::now();
    let (mut count, mut changed, mut unchanged, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut records: Vec<Value> = Vec::new();
    let read = c
        .watch
        .scan(&filter, Some(&topic), false, |entry, _| {
            let Some(envelope) = entry.content.envelope() else {
                return true;
            };
            count += 1;
            let payload = envelope.payload_bytes();
            let result = match &payload {
                Ok(p) => body.transform.apply(entry, p.as_deref()),
                Err(e) => Err(format!("the payload does not decode: {e}")),
            };
            let before = payload.ok().flatten().unwrap_or_default();
            let (state, after, why) = match result {
                Ok(Transformed::Changed(after)) => {
                    changed += 1;
                    ("changed", Some(after), None)
                }
                Ok(Transformed::Unchanged) => {
                    unchanged += 1;
                    ("unchanged", None, None)
                }
                Err(why) => {
                    failed += 1;
                    ("failed", None, Some(why))
                }
            };
            if records.len() < shown {
                records.push(json!({
                    "id": envelope.id,
                    "partition": entry.partition,
                    "offset": entry.offset,
                    "state": state,
                    "before": shown_text(&before),
                    "after": after.as_deref().map(shown_text),
                    "why": why,
                }));
            }
            true
        })
        .await;
    if let Err(e) = read {
        return Err(ApiError::Upstream(format!(
            "cannot read the dead-letter topic: {e}"
        )));
    }
    Ok(Json(json!({
        "dlq_topic": topic,
        "count": count,
        "changed": changed,
        "unchanged": unchanged,
        "failed": failed,
        "records": records,
        "elapsed_ms": started.elapsed().as_millis() as u64,
    }))
    .into_response())
}

/// A payload as the preview shows it: indented JSON when it is JSON, else its text (cut).
fn shown_text(bytes: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    };
    match text.char_indices().nth(TEXT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
