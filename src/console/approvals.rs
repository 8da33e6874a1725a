//! A second pair of eyes: redrives and discards that another operator must approve. Deciding
//! only; the routes in `api/requests.rs` do.
//!
//! An action becomes a request when its selection holds more dead letters than
//! `four_eyes_above`, or when any of them is covered only by grants marked `four-eyes`. The
//! request is a run on the audit topic ([`Action::Request`]) holding the selection frozen
//! (its filter with the end of each DLQ partition when it was asked: `before`), what it asks
//! for ([`Asked`]) and who asked; an [`Action::Approve`] or [`Action::Reject`] run decides it.
//! So every replica sees the same requests, and a restart loses none.

use serde_json::{json, Value};

use crate::replay::audit::{Action, ReplayRun};

/// Whether an action that selects `selected` dead letters, `outside_direct` of them outside
/// the caller's grants that need no approval, waits for one: more than `above` (when set), or
/// any outside.
pub fn needs_approval(selected: u64, above: Option<u64>, outside_direct: u64) -> bool {
    above.is_some_and(|n| selected > n) || outside_direct > 0
}

/// A request and its decision, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Requested {
    /// The request's run.
    pub asked: ReplayRun,
    /// The approval or rejection.
    pub decision: Option<ReplayRun>,
}

impl Requested {
    /// Not decided yet.
    pub fn is_pending(&self) -> bool {
        self.decision.is_none()
    }

    /// `pending`, `approved` or `rejected`.
    pub fn state(&self) -> &'static str {
        match self.decision.as_ref().map(|d| d.action) {
            None => "pending",
            Some(Action::Approve) => "approved",
            Some(_) => "rejected",
        }
    }

    /// As the API shows it.
    pub fn to_json(&self) -> Value {
        let a = &self.asked;
        let asked = a.asked.as_ref();
        let what = match asked.map(|x| x.action) {
            Some(Action::Discard) => "discard",
            _ => "redrive",
        };
        let d = self.decision.as_ref();
        json!({
            "id": a.run,
            "state": self.state(),
            "action": what,
            "dlq_topic": a.dlq_topic,
            "filter": a.filter,
            "destination": (what == "redrive").then_some(&a.to),
            "rate": asked.and_then(|x| x.rate),
            "count": asked.map(|x| x.count),
            "edited": a.edit.is_some(),
            "transform": asked.and_then(|x| x.transform.as_ref()),
            "reason": a.reason,
            "requested_by": a.operator,
            "requested_at": a.started,
            "decided_by": d.map(|d| &d.operator),
            "decided_at": d.map(|d| d.started),
            "decision_reason": d.and_then(|d| d.reason.as_ref()),
        })
    }
}

/// Every request in `runs` (the audit, oldest first) with its decision, the newest first. A
/// second decision of the same request (two replicas deciding at once) is not the decision:
/// the first one on the audit topic is.
pub fn requests(runs: &[ReplayRun]) -> Vec<Requested> {
    let mut all: Vec<Requested> = runs
        .iter()
        .filter(|r| r.action == Action::Request)
        .map(|r| Requested {
            asked: r.clone(),
            decision: runs
                .iter()
                .find(|d| {
                    matches!(d.action, Action::Approve | Action::Reject)
                        && d.request.as_deref() == Some(r.run.as_str())
                })
                .cloned(),
        })
        .collect();
    all.reverse();
    all
}

/// Why a decision is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotYours {
    /// The requester decides: 403.
    #[error("`{0}` asked for this: another operator approves or rejects it")]
    OwnRequest(String),
    /// Decided already: 409.
    #[error("this request was {0} already")]
    Decided(&'static str),
}

/// Whether `decider` (`console:<name>`) may decide `request`.
pub fn may_decide(request: &Requested, decider: &str) -> Result<(), NotYours> {
    if !request.is_pending() {
        return Err(NotYours::Decided(request.state()));
    }
    if request.asked.operator == decider {
        return Err(NotYours::OwnRequest(request.asked.operator.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::audit::Asked;

    fn run(action: Action, id: &str, by: &str, request: Option<&str>) -> ReplayRun {
        let mut r = ReplayRun::record(action, by, "orders-dlt");
        r.run = id.into();
        r.request = request.map(str::to_string);
        r
    }

    #[test]
    fn actions_above_the_size_or_outside_direct_grants_wait() {
        assert!(!needs_approval(100, None, 0));
        assert!(!needs_approval(100, Some(100), 0));
        assert!(needs_approval(101, Some(100), 0));
        assert!(needs_approval(1, None, 1), "a four-eyes grant");
    }

    #[test]
    fn the_first_decision_decides_and_the_requester_never_does() {
        let mut ask = run(Action::Request, "q1", "console:alice", None);
        ask.asked = Some(Asked {
            action: Action::Replay,
            rate: Some(50),
            count: 20_000,
            transform: None,
        });
        let other = run(Action::Request, "q2", "console:alice", None);
        let runs = vec![
            ask,
            other,
            run(Action::Approve, "a1", "console:bob", Some("q1")),
            run(Action::Reject, "a2", "console:carol", Some("q1")),
        ];
        let all = requests(&runs);
        assert_eq!(all[0].asked.run, "q2", "newest first");
        assert_eq!(all[1].state(), "approved");
        assert_eq!(all[1].to_json()["decided_by"], "console:bob");
        assert_eq!(all[1].to_json()["count"], 20_000);
        assert_eq!(
            may_decide(&all[1], "console:carol"),
            Err(NotYours::Decided("approved"))
        );
        assert_eq!(
            may_decide(&all[0], "console:alice"),
            Err(NotYours::OwnRequest("console:alice".into()))
        );
        assert_eq!(may_decide(&all[0], "console:bob"), Ok(()));
    }
}
