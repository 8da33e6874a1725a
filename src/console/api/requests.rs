//! Requests for a second pair of eyes ([`crate::console::approvals`]): asking instead of
//! acting, the list, and approving (which carries the request out, on exactly its frozen
//! selection) or rejecting.

use std::collections::{BTreeSet, HashMap};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::Console;
use crate::console::access::{Caller, Role};
use crate::console::approvals::{self, Requested};
use crate::console::redrives::Request;
use crate::dlq_reader::Filter;
use crate::park::resolve::{HeadRef, WaitingBehind};
use crate::park::How;
use crate::replay::audit::{Action, Asked, Edit, ReplayRun};
use crate::replay::transform::Transform;
use crate::replay::Destination;

/// A redrive or discard as asked, before it is done or waits for approval.
pub(super) struct Ask {
    /// [`Action::Replay`] or [`Action::Discard`].
    pub action: Action,
    pub dlq_topic: String,
    /// Its selection, the caller's scope in it.
    pub filter: Filter,
    /// A redrive's destination as the audit names it (`group`, `source` or the topic).
    pub to: String,
    pub rate: Option<u32>,
    pub edit: Option<Edit>,
    pub transform: Option<Transform>,
    pub reason: Option<String>,
}

/// A selection read once: how many dead letters it holds, the end of each DLQ partition read,
/// and how many of them the caller may not act on without approval.
pub(super) struct Frozen {
    pub count: u64,
    pub ends: HashMap<i32, i64>,
    pub outside_direct: u64,
    /// The source records of those dead letters that may be parked keys' heads: those of
    /// groups that have a park log ([`crate::park::resolve::find`] says which are).
    pub heads: BTreeSet<HeadRef>,
}

impl Console {
    /// Whether any action of `caller`'s could wait for approval.
    pub(super) fn may_need_approval(&self, caller: &Caller) -> bool {
        self.config.four_eyes_above.is_some() || caller.permissions.has_four_eyes()
    }

    /// Reads the outstanding dead letters `filter` selects on `dlq_topic` once.
    pub(super) async fn freeze(
        &self,
        caller: &Caller,
        dlq_topic: &str,
        filter: &Filter,
    ) -> Result<Frozen, ApiError> {
        let direct = caller.permissions.direct_scope();
        let (mut count, mut outside_direct) = (0u64, 0u64);
        let park_logs = self.park_logs().await?;
        let mut heads = BTreeSet::new();
        let ends = self
            .watch
            .scan(filter, Some(dlq_topic), false, |entry, _| {
                count += 1;
                let head = entry
                    .content
                    .envelope()
                    .filter(|_| !park_logs.is_empty())
                    .and_then(|e| crate::outstanding::parked::head_of(&e.source))
                    .filter(|h| park_logs.contains(&crate::park::park_topic(&h.source, &h.group)));
                heads.extend(head);
                let group = entry.content.envelope().map(|e| e.source.group.as_str());
                if direct
                    .as_ref()
                    .is_some_and(|d| !d.covers(&entry.topic, group))
                {
                    outside_direct += 1;
                }
                true
            })
            .await
            .map_err(|e| ApiError::Upstream(format!("cannot read the dead-letter topic: {e}")))?;
        Ok(Frozen {
            count,
            ends,
            outside_direct,
            heads,
        })
    }

    /// The cluster's park logs' names (and any other topic named `…-park-…`).
    async fn park_logs(&self) -> Result<BTreeSet<String>, ApiError> {
        let config = self.kafka();
        tokio::task::spawn_blocking(move || crate::park::resolve::park_logs(&config))
            .await
            .map_err(|e| ApiError::Upstream(format!("cannot list the park logs: {e}")))?
            .map_err(|e| ApiError::Upstream(format!("cannot list the park logs: {e}")))
    }

    /// Resolves, as discarded by `operator`, the parked keys' heads among `heads`: their
    /// partitions' owners release the records parked behind them, in order.
    pub(super) async fn release_discarded(
        &self,
        heads: BTreeSet<HeadRef>,
        operator: &str,
    ) -> Result<WaitingBehind, ApiError> {
        if heads.is_empty() {
            return Ok(WaitingBehind::default());
        }
        let config = self.kafka();
        let read = config.clone();
        let found = tokio::task::spawn_blocking(move || crate::park::resolve::find(&read, &heads))
            .await
            .map_err(|e| ApiError::Upstream(format!("cannot read the park logs: {e}")))?
            .map_err(|e| ApiError::Upstream(format!("cannot read the park logs: {e}")))?;
        crate::park::resolve::resolve(&config, &found, How::Discarded, operator)
            .await
            .map_err(|e| ApiError::Upstream(e.to_string()))
    }

    /// A client configuration of the console's cluster (its connection and security).
    fn kafka(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", &self.config.brokers);
        self.config.librdkafka.apply(&mut config);
        config
    }

    /// Whether an action on `frozen` waits for approval.
    pub(super) fn waits(&self, frozen: &Frozen) -> bool {
        approvals::needs_approval(
            frozen.count,
            self.config.four_eyes_above,
            frozen.outside_direct,
        )
    }

    /// Records `ask` as a request on the audit topic, its selection frozen at `frozen`'s
    /// ends, tells Slack, and answers 202 with the request.
    pub(super) async fn ask_for(
        &self,
        caller: &Caller,
        ask: Ask,
        frozen: Frozen,
    ) -> Result<Response, ApiError> {
        let mut filter = ask.filter;
        filter.before = Some(frozen.ends.into_iter().collect());
        let mut run =
            ReplayRun::record(Action::Request, &Console::operator(caller), &ask.dlq_topic);
        run.filter = filter.key();
        run.selection = Some(filter);
        run.to = ask.to;
        run.edit = ask.edit;
        run.reason = ask.reason;
        run.scanned = frozen.count;
        run.asked = Some(Asked {
            action: ask.action,
            rate: ask.rate,
            count: frozen.count,
            transform: ask
                .transform
                .map(|t| serde_json::to_value(t).expect("a transformation serializes")),
        });
        self.record(&run).await?;
        let requested = Requested {
            asked: run,
            decision: None,
        };
        self.tell(&requested);
        // What waits behind the heads among them (`key_order_after_failure = "park"`).
        let parked = self.watch.parked().behind(&frozen.heads);
        let answer = Json(json!({ "request": requested.to_json(), "parked": parked }));
        Ok((StatusCode::ACCEPTED, answer).into_response())
    }

    /// Posts `r` as it is now to Slack (or the log), without waiting.
    fn tell(&self, r: &Requested) {
        let a = &r.asked;
        let what = match a.asked.as_ref().map(|x| x.action) {
            Some(Action::Discard) => "discard",
            _ => "redrive",
        };
        let count = a.asked.as_ref().map_or(0, |x| x.count);
        let headline = match &r.decision {
            None => {
                format!(":eyes: *A {what} of {count} dead letter(s) waits for a second operator*")
            }
            Some(d) if d.action == Action::Approve => {
                format!(":white_check_mark: *The {what} of {count} dead letter(s) was approved and carried out*")
            }
            Some(_) => format!(":no_entry: *The {what} of {count} dead letter(s) was rejected*"),
        };
        let mut facts = vec![
            ("Requested by", a.operator.clone()),
            ("DLT", a.dlq_topic.clone()),
            ("Selection", a.filter.clone()),
        ];
        if what == "redrive" {
            facts.push(("To", a.to.clone()));
        }
        if let Some(reason) = &a.reason {
            facts.push(("Reason", reason.clone()));
        }
        if let Some(d) = &r.decision {
            facts.push(("Decided by", d.operator.clone()));
            if let Some(why) = &d.reason {
                facts.push(("Why", why.clone()));
            }
        }
        let link = self
            .config
            .public_url
            .as_ref()
            .map(|base| format!("{base}?request={}", a.run));
        let shown: Vec<(&str, &str)> = facts.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let message = crate::monitor::SlackMessage::notice(
            &headline,
            &shown,
            link.as_deref().map(|l| ("Open the request", l)),
        );
        let Some(notifier) = self.notifier.clone() else {
            tracing::info!(event = "console_request", request = %a.run, state = r.state(), "{}", message.text);
            return;
        };
        tokio::spawn(async move {
            let stop = tokio_util::sync::CancellationToken::new();
            let sent = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                notifier.deliver(&message, None, &stop),
            )
            .await;
            if !matches!(sent, Ok(Ok(_))) {
                tracing::warn!(event = "console_request_not_posted", text = %message.text,
                    "a request's Slack message was not delivered");
            }
        });
    }

    /// Every request, read afresh for `caller`.
    async fn requests(&self, caller: &Caller) -> Result<Vec<Requested>, ApiError> {
        Ok(approvals::requests(&self.audit_runs_for(caller).await?))
    }
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RequestsQuery {
    state: Option<String>,
}

pub(super) async fn list(
    State(c): State<Console>,
    headers: HeaderMap,
    Query(q): Query<RequestsQuery>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &Method::GET, Role::Viewer)?;
    let all = c.requests(&caller).await?;
    let me = Console::operator(&caller);
    let shown: Vec<_> = all
        .iter()
        .filter(|r| q.state.as_deref().is_none_or(|s| s == r.state()))
        .filter(|r| {
            c.holds(
                &caller,
                Role::Viewer,
                &r.asked.dlq_topic,
                r.asked.selection.as_ref(),
            )
        })
        .map(|r| {
            let mut v = r.to_json();
            // Whether this caller may decide it: an operator of its scope, not its requester.
            v["yours_to_decide"] = json!(
                caller.role() == Role::Operator
                    && approvals::may_decide(r, &me).is_ok()
                    && c.holds(
                        &caller,
                        Role::Operator,
                        &r.asked.dlq_topic,
                        r.asked.selection.as_ref()
                    )
            );
            v
        })
        .collect();
    Ok(Json(json!({ "requests": shown })).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub(super) struct DecisionBody {
    reason: Option<String>,
}

pub(super) async fn decide(
    State(c): State<Console>,
    headers: HeaderMap,
    method: Method,
    Path((id, decision)): Path<(String, String)>,
    body: Option<Json<DecisionBody>>,
) -> Result<Response, ApiError> {
    let caller = c.caller(&headers, &method, Role::Operator)?;
    let approve = match decision.as_str() {
        "approve" => true,
        "reject" => false,
        _ => return Err(ApiError::NotFound("no such page or API".into())),
    };
    let reason = body
        .and_then(|Json(b)| b.reason)
        .map(|r| r.trim().chars().take(1000).collect::<String>())
        .filter(|r| !r.is_empty());
    // One decision at a time in this console: two clicks never carry a request out twice.
    let _deciding = c.deciding.lock().await;
    let all = c.requests(&caller).await?;
    let Some(request) = all.into_iter().find(|r| r.asked.run == id).filter(|r| {
        c.holds(
            &caller,
            Role::Operator,
            &r.asked.dlq_topic,
            r.asked.selection.as_ref(),
        )
    }) else {
        return Err(ApiError::NotFound("no request with this id".into()));
    };
    let me = Console::operator(&caller);
    approvals::may_decide(&request, &me)?;
    let action = match approve {
        true => Action::Approve,
        false => Action::Reject,
    };
    let mut decided = ReplayRun::record(action, &me, &request.asked.dlq_topic);
    decided.request = Some(request.asked.run.clone());
    decided.reason = reason;
    decided.filter = request.asked.filter.clone();
    let carried = match approve {
        false => json!(null),
        true => carry_out(&c, &caller, &request).await?,
    };
    c.record(&decided).await?;
    let decided = Requested {
        asked: request.asked,
        decision: Some(decided),
    };
    c.tell(&decided);
    let mut v = decided.to_json();
    v["carried_out"] = carried;
    Ok(Json(v).into_response())
}

/// Does what `r` asked, on exactly its frozen selection: the redrive started (its id), or the
/// discard recorded (how many).
async fn carry_out(
    c: &Console,
    caller: &Caller,
    r: &Requested,
) -> Result<serde_json::Value, ApiError> {
    let a = &r.asked;
    let Some(filter) = a.selection.clone() else {
        return Err(ApiError::Conflict(
            "this request holds no selection; ask again".into(),
        ));
    };
    match a.asked.as_ref().map(|x| x.action) {
        Some(Action::Discard) => {
            // Counted again: those resolved since it was asked are not discarded twice.
            let Frozen {
                count, ends, heads, ..
            } = c.freeze(caller, &a.dlq_topic, &filter).await?;
            // Released before the discard is recorded: if the release fails, nothing is
            // recorded and approving again does it all (a head resolved twice is harmless).
            let released = c.release_discarded(heads, &a.operator).await?;
            let mut run = ReplayRun::record(Action::Discard, &a.operator, &a.dlq_topic);
            run.filter = filter.key();
            run.ends = filter
                .before
                .clone()
                .unwrap_or_else(|| ends.into_iter().collect());
            run.selection = Some(filter);
            run.reason = a.reason.clone();
            run.scanned = count;
            run.passed_over = count;
            run.request = Some(a.run.clone());
            c.record(&run).await?;
            Ok(json!({ "run": run.run, "discarded": count, "released": released_json(released) }))
        }
        _ => {
            let destination = match a.to.as_str() {
                "group" => Destination::Group,
                "source" => Destination::Source,
                topic => Destination::Topic(topic.to_string()),
            };
            let request = Request {
                dlq_topic: a.dlq_topic.clone(),
                filter,
                destination,
                rate: a.asked.as_ref().and_then(|x| x.rate),
                dry_run: false,
                edit: a.edit.clone(),
                operator: a.operator.clone(),
                request: Some(a.run.clone()),
                transform: match a.asked.as_ref().and_then(|x| x.transform.clone()) {
                    None => None,
                    Some(t) => Some(serde_json::from_value(t).map_err(|e| {
                        ApiError::Conflict(format!(
                            "this request's transformation no longer reads: {e}; ask again"
                        ))
                    })?),
                },
            };
            let id = c.redrives.start(request, None).await?;
            Ok(json!({ "redrive": id }))
        }
    }
}

/// What a discard released, as its answer says it: the parked keys whose head it discarded
/// and the records that waited behind them.
pub(super) fn released_json(released: WaitingBehind) -> serde_json::Value {
    json!({ "keys": released.keys, "records": released.records })
}
