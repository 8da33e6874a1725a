//! Starting a redrive (or a dry run, or an edit then redrive), its progress, and pausing,
//! resuming or cancelling it.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::selection::Selection;
use super::{error, Console};
use crate::console::access::Role;
use crate::console::redrives::{Control, RedriveError, Request};
use crate::replay::audit;
use crate::replay::Destination;

/// `POST /api/redrives`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RedriveBody {
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
pub(super) enum DestinationBody {
    Named(String),
    Topic { topic: String },
}

pub(super) async fn start_redrive(
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

pub(super) async fn redrives(State(c): State<Console>, headers: HeaderMap) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    Json(json!({ "redrives": c.redrives.all() })).into_response()
}

pub(super) async fn redrive(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = c.caller(&headers, &Method::GET, Role::Viewer) {
        return r;
    }
    match c.redrives.progress(&id) {
        Some(p) => Json(p).into_response(),
        None => redrive_error(RedriveError::Unknown),
    }
}

pub(super) async fn control_redrive(
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
        _ => return error(StatusCode::NOT_FOUND, "no such page or API"),
    };
    match c.redrives.control(&id, control) {
        Ok(p) => Json(p).into_response(),
        Err(e) => redrive_error(e),
    }
}
