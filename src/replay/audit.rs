//! Who replayed what, when: the audit of replays.
//!
//! Every record a replay sends carries, besides `kafka_dlq-replay-count`:
//!
//! | header | value |
//! |---|---|
//! | `kafka_dlq-replay-run` | the run's id (also in its summary) |
//! | `kafka_dlq-replayed-by` | the operator and host, `alice@ops-1` |
//! | `kafka_dlq-replayed-at` | when it was sent, RFC 3339 UTC, milliseconds |
//! | `kafka_dlq-replayed-from` | the dead letter it came from, `<dlq topic>/<partition>@<offset>` |
//!
//! (earlier values of these headers, from an earlier replay, are replaced). Each run that is
//! not a dry run then appends one [`ReplayRun`] to the audit topic
//! ([`crate::state::audit`], default [`DEFAULT_AUDIT_TOPIC`], kept for ever), whether it
//! ended, was interrupted or failed; [`history`] reads them back for `kafka-dlq dlq history`.

use chrono::{DateTime, SubsecRound, Utc};

use super::ReplayReport;
pub use crate::state::audit::{
    append, history, sha256_hex, Action, Asked, Audit, Edit, ReplayRun, SavedView,
};
pub use crate::state::DEFAULT_AUDIT_TOPIC;

/// Header: the id of the replay run that sent the record.
pub const HEADER_REPLAY_RUN: &str = "kafka_dlq-replay-run";
/// Header: who replayed the record, `operator@host`.
pub const HEADER_REPLAYED_BY: &str = "kafka_dlq-replayed-by";
/// Header: when the record was replayed (RFC 3339 UTC).
pub const HEADER_REPLAYED_AT: &str = "kafka_dlq-replayed-at";
/// Header: the dead letter the record was replayed from, `<dlq topic>/<partition>@<offset>`.
pub const HEADER_REPLAYED_FROM: &str = "kafka_dlq-replayed-from";

impl ReplayRun {
    /// The summary of a run from its report (or its error).
    pub(super) fn of(
        started: &Started,
        options: &super::ReplayOptions,
        report: Result<&ReplayReport, String>,
    ) -> ReplayRun {
        let empty = ReplayReport::default();
        let (r, error) = match report {
            Ok(r) => (r, None),
            Err(e) => (&empty, Some(e)),
        };
        ReplayRun {
            run: started.run.clone(),
            operator: options.operator.clone(),
            host: started.host.clone(),
            dlq_topic: options.dlq_topic.clone(),
            filter: options.filter.key(),
            to: match &options.destination {
                super::Destination::Group => "group".to_string(),
                super::Destination::Source => "source".to_string(),
                super::Destination::Topic(topic) => topic.clone(),
            },
            started: started.at,
            ended: Utc::now().trunc_subsecs(3),
            scanned: r.scanned,
            replayed: r.replayed,
            filtered_out: r.filtered_out,
            refused: r.refused,
            passed_over: r.not_envelopes + r.undecodable + r.lost + r.not_here,
            already_resolved: r.already_resolved,
            interrupted: r.interrupted,
            error,
            action: Action::Replay,
            selection: Some(options.filter.clone()),
            position_group: Some(options.position_group()),
            ends: Default::default(),
            reason: None,
            restores: None,
            edit: options.edit.clone(),
            request: options.request.clone(),
            asked: None,
            transform: r.transform.clone(),
            view: None,
        }
    }
}

/// A run as it starts: its id, host and start time.
#[derive(Debug, Clone)]
pub(super) struct Started {
    pub run: String,
    pub host: String,
    pub at: DateTime<Utc>,
}

impl Started {
    pub(super) fn now() -> Started {
        let at = Utc::now().trunc_subsecs(3);
        Started {
            run: crate::state::audit::run_id(at),
            host: crate::state::audit::host_name(),
            at,
        }
    }

    /// The audit headers of one record sent from `dlq_topic`/`partition`@`offset`.
    pub(super) fn headers(
        &self,
        operator: &str,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
    ) -> [(&'static str, String); 4] {
        [
            (HEADER_REPLAY_RUN, self.run.clone()),
            (HEADER_REPLAYED_BY, format!("{operator}@{}", self.host)),
            (
                HEADER_REPLAYED_AT,
                Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
            (
                HEADER_REPLAYED_FROM,
                format!("{dlq_topic}/{partition}@{offset}"),
            ),
        ]
    }
}

/// Whether a header is one of the audit's (replaced at each replay).
pub(super) fn is_audit_header(key: &[u8]) -> bool {
    [
        HEADER_REPLAY_RUN,
        HEADER_REPLAYED_BY,
        HEADER_REPLAYED_AT,
        HEADER_REPLAYED_FROM,
    ]
    .iter()
    .any(|h| h.as_bytes() == key)
}

/// The login name of whoever runs this: `USER`, else `LOGNAME`, else `unknown`.
pub fn operator_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_says_who_what_and_how_it_ended() {
        let started = Started {
            run: "r-1".into(),
            host: "ops-1".into(),
            at: Utc::now(),
        };
        let options = super::super::ReplayOptions {
            operator: "alice".into(),
            filter: crate::dlq_reader::Filter {
                group: Some("billing".into()),
                ..Default::default()
            },
            ..super::super::ReplayOptions::new("b:1", "orders-dlt")
        };
        let report = ReplayReport {
            scanned: 10,
            replayed: 7,
            filtered_out: 2,
            lost: 1,
            interrupted: true,
            ..ReplayReport::default()
        };
        let run = ReplayRun::of(&started, &options, Ok(&report));
        assert_eq!(
            (
                run.operator.as_str(),
                run.host.as_str(),
                run.dlq_topic.as_str()
            ),
            ("alice", "ops-1", "orders-dlt")
        );
        assert_eq!(
            (run.filter.as_str(), run.to.as_str()),
            ("group=billing", "group")
        );
        assert_eq!((run.scanned, run.replayed, run.passed_over), (10, 7, 1));
        assert!(run.interrupted && run.error.is_none());
        let back: ReplayRun = serde_json::from_slice(&serde_json::to_vec(&run).unwrap()).unwrap();
        assert_eq!(back, run);

        let failed = ReplayRun::of(&started, &options, Err("broker down".into()));
        assert_eq!(failed.error.as_deref(), Some("broker down"));

        let headers = started.headers("alice", "orders-dlt", 2, 41);
        assert_eq!(headers[1], (HEADER_REPLAYED_BY, "alice@ops-1".to_string()));
        assert_eq!(
            headers[3],
            (HEADER_REPLAYED_FROM, "orders-dlt/2@41".to_string())
        );
        assert!(headers.iter().all(|(k, _)| is_audit_header(k.as_bytes())));
        assert!(!is_audit_header(b"kafka_dlq-replay-count"));
    }
}
