//! Starting a redrive (or a dry run, or an edit then redrive), its progress, and pausing,
//! resuming or cancelling it.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::selection::Selection;
use super::Console;
use crate::console::access::Role;
use crate::console::redrives::{Control, RedriveError, Request};
use crate::replay::audit;
use crate::replay::transform::Transform;
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
    /// Edit then redrive: the new payload, as text, of the one dead letter `filter.records`
    /// names (its schema prefix, if it has one, is kept in front).
    #[serde(default)]
    payload: Option<String>,
    /// The same, as base64: for a payload that is not UTF-8.
    #[serde(default)]
    payload_base64: Option<String>,
    /// The same, as the decoded JSON of a Schema Registry payload: encoded again with the
    /// schema the original was written with (console `--schema-registry-url`).
    #[serde(default)]
    payload_json: Option<serde_json::Value>,
    /// Why: kept with a request that waits for approval (and shown to the approver).
    #[serde(default)]
    reason: Option<String>,
    /// A bulk fix applied to each payload before it is sent: `{"merge_patch": …}` or
    /// `{"expression": "…"}` (docs/console.md, "Bulk fix then redrive").
    #[serde(default)]
    transform: Option<Transform>,
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
) -> Result<Response, ApiError> {
    let editing =
        body.payload.is_some() || body.payload_base64.is_some() || body.payload_json.is_some();
    if editing && body.transform.is_some() {
        return Err(ApiError::BadRequest(
            "transform: give an edited payload or a transformation, not both".into(),
        ));
    }
    // A dry run sends nothing: a viewer may ask what a redrive would do.
    let needs = match body.dry_run && !editing {
        true => Role::Viewer,
        false => Role::Operator,
    };
    let caller = c.caller(&headers, &method, needs)?;
    let dlq_topic = body.filter.topic(&c, &caller)?;
    let filter = body.filter.filter().map_err(ApiError::BadRequest)?;
    let destination = match body.destination {
        None => Destination::Group,
        Some(DestinationBody::Named(n)) if n == "group" => Destination::Group,
        Some(DestinationBody::Named(n)) if n == "source" => Destination::Source,
        Some(DestinationBody::Named(n)) => {
            return Err(ApiError::BadRequest(format!(
                "destination `{n}`: expected \"group\", \"source\" or {{\"topic\": \"…\"}}"
            )))
        }
        Some(DestinationBody::Topic { topic }) => {
            if let Err(why) = crate::dlq::check_topic_name(&topic) {
                return Err(ApiError::BadRequest(format!(
                    "destination topic `{topic}`: {why}"
                )));
            }
            let refused = crate::replay::destination::refusal(
                &topic,
                &dlq_topic,
                &c.config.dlq_template,
                &c.config.state,
            );
            if let Some(why) = refused {
                return Err(ApiError::BadRequest(format!(
                    "destination topic `{topic}`: {why}"
                )));
            }
            let allowed = &c.config.redrive_topics;
            if !allowed.is_empty() && !allowed.contains(&topic) {
                return Err(ApiError::BadRequest(format!(
                        "destination topic `{topic}`: not one of the topics this console may redrive to (redrive_topics: {})",
                        allowed.join(", ")
                    )));
            }
            Destination::Topic(topic)
        }
    };
    if body.rate == Some(0) {
        return Err(ApiError::BadRequest(
            "rate: at least 1 record per second (leave it out for no limit)".into(),
        ));
    }
    // A dry run, an edit's read of its dead letter and a scoped caller's check read the
    // cluster: bounded.
    let scoped = caller.permissions.scope(needs).is_some();
    let permit = match body.dry_run || editing || scoped || c.may_need_approval(&caller) {
        false => None,
        true => Some(c.scan(&caller)?),
    };
    let filter = c.within(&caller, needs, &dlq_topic, filter).await?;
    let edit = match editing {
        false => None,
        true => {
            let one = body
                .filter
                .records
                .as_ref()
                .filter(|r| r.len() == 1)
                .map(|r| r[0]);
            let Some(at) = one else {
                return Err(ApiError::BadRequest(
                    "an edited payload goes with exactly one dead letter in filter.records".into(),
                ));
            };
            let (original, record_headers) =
                match c.watch.fetch(&dlq_topic, at.partition, at.offset).await {
                    Ok(Some((entry, _))) => match entry
                        .content
                        .envelope()
                        .map(|e| (e.payload_bytes(), e.headers()))
                    {
                        Some((Ok(payload), Ok(headers))) => (payload, headers),
                        Some((Ok(_), Err(why))) => {
                            return Err(ApiError::BadRequest(format!(
                                "payload: the dead letter's headers do not decode: {why}"
                            )))
                        }
                        Some((Err(why), _)) => {
                            return Err(ApiError::BadRequest(format!(
                                "payload: the dead letter's payload does not decode: {why}"
                            )))
                        }
                        None => return Err(ApiError::BadRequest(
                            "payload: the record is not a dead letter; there is nothing to edit"
                                .into(),
                        )),
                    },
                    Ok(None) => return Err(ApiError::NotFound("no such dead letter".into())),
                    Err(e) => {
                        return Err(ApiError::Upstream(format!(
                            "cannot read the dead letter: {e}"
                        )))
                    }
                };
            let sent = match &body.payload_json {
                Some(json) => {
                    if body.payload.is_some() || body.payload_base64.is_some() {
                        return Err(ApiError::BadRequest(
                            "payload_json: give one of payload, payload_base64 and payload_json"
                                .into(),
                        ));
                    }
                    let Some(codec) = &c.config.schemas else {
                        return Err(ApiError::BadRequest("payload_json: this console decodes no schema registry payloads (--schema-registry-url)".into()));
                    };
                    let Some(original) = original.as_deref() else {
                        return Err(ApiError::BadRequest(
                            "payload_json: a tombstone has nothing to edit".into(),
                        ));
                    };
                    match codec.reencode(original, &record_headers, json).await {
                        Ok(bytes) => bytes,
                        Err(crate::schema::EncodeError::Refused(why)) => {
                            return Err(ApiError::BadRequest(format!("payload_json: {why}")))
                        }
                        Err(crate::schema::EncodeError::Unavailable(e)) => {
                            return Err(ApiError::Upstream(format!("payload_json: {e}")))
                        }
                    }
                }
                None => crate::console::payload::edited(
                    original.as_deref(),
                    body.payload.as_deref(),
                    body.payload_base64.as_deref(),
                )
                .map_err(ApiError::BadRequest)?,
            };
            Some(audit::Edit::new(
                original.as_deref().unwrap_or_default(),
                &sent,
            ))
        }
    };
    let request = Request {
        dlq_topic,
        filter,
        destination,
        rate: body.rate,
        dry_run: body.dry_run,
        edit,
        operator: Console::operator(&caller),
        request: None,
        transform: body.transform,
    };
    if let Destination::Topic(to) = &request.destination {
        let options = c.redrives.options(&request);
        if let Err(e) = crate::replay::destination::check_named(&options, to).await {
            return Err(ApiError::BadRequest(format!("destination: {e}")));
        }
    }
    // Large, or under a four-eyes grant: asked for, not done.
    if !request.dry_run && c.may_need_approval(&caller) {
        let frozen = c
            .freeze(&caller, &request.dlq_topic, &request.filter)
            .await?;
        if c.waits(&frozen) {
            let to = match &request.destination {
                Destination::Group => "group".to_string(),
                Destination::Source => "source".to_string(),
                Destination::Topic(t) => t.clone(),
            };
            let ask = super::requests::Ask {
                action: crate::replay::audit::Action::Replay,
                dlq_topic: request.dlq_topic,
                filter: request.filter,
                to,
                rate: request.rate,
                edit: request.edit,
                transform: request.transform,
                reason: body.reason,
            };
            return c.ask_for(&caller, ask, frozen).await;
        }
    }
    // A dry run holds its permit until it ends; a redrive is one per DLT already.
    let permit = permit.filter(|_| request.dry_run);
    let id = c.redrives.start(request, permit).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "id": id }))).into_response())
}

pub(super) async fn redrives(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let mut all = c.redrives.all();
    all.retain(|p| {
        c.redrives.held_by(&p.id, |topic, filter| {
            c.holds(&caller, Role::Viewer, topic, Some(filter))
        })
    });
    Ok(Json(json!({ "redrives": all })).into_response())
}

pub(super) async fn redrive(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    c.redrives.learn_of(&id).await;
    let seen = c.redrives.held_by(&id, |topic, filter| {
        c.holds(&caller, Role::Viewer, topic, Some(filter))
    });
    match c.redrives.progress(&id).filter(|_| seen) {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(RedriveError::Unknown.into()),
    }
}

pub(super) async fn control_redrive(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path((id, control)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Operator)?;
    c.redrives.learn_of(&id).await;
    if !c.redrives.held_by(&id, |topic, filter| {
        c.holds(&caller, Role::Operator, topic, Some(filter))
    }) {
        return Err(RedriveError::Unknown.into());
    }
    let control = match control.as_str() {
        "cancel" => Control::Cancel,
        "pause" => Control::Pause,
        "resume" => Control::Resume,
        _ => return Err(ApiError::NotFound("no such page or API".into())),
    };
    let p = c
        .redrives
        .control(&id, control, &Console::operator(&caller))
        .await?;
    Ok(Json(p).into_response())
}
