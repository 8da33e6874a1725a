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
//! not a dry run then appends one [`ReplayRun`], a JSON summary keyed by the DLQ topic, to an
//! audit topic (default [`DEFAULT_AUDIT_TOPIC`], created with one partition when missing),
//! whether it ended, was interrupted or failed; [`history`] reads them back for
//! `kafka-dlq dlq history`.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::ReplayReport;
use crate::kafka::{ClientOptions, LogContext};

/// Header: the id of the replay run that sent the record.
pub const HEADER_REPLAY_RUN: &str = "kafka_dlq-replay-run";
/// Header: who replayed the record, `operator@host`.
pub const HEADER_REPLAYED_BY: &str = "kafka_dlq-replayed-by";
/// Header: when the record was replayed (RFC 3339 UTC).
pub const HEADER_REPLAYED_AT: &str = "kafka_dlq-replayed-at";
/// Header: the dead letter the record was replayed from, `<dlq topic>/<partition>@<offset>`.
pub const HEADER_REPLAYED_FROM: &str = "kafka_dlq-replayed-from";
/// The audit topic replays append their summaries to unless told otherwise.
pub const DEFAULT_AUDIT_TOPIC: &str = "kafka-dlq-audit";

/// One action on a DLQ, as its summary on the audit topic says: a replay run (`dlq replay`,
/// or the console's redrive and edit then redrive), or the console's discard or restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRun {
    /// The run's id, as in each record's `kafka_dlq-replay-run`.
    pub run: String,
    /// Who ran it (`--operator`, by default the login name).
    pub operator: String,
    /// Where it ran.
    pub host: String,
    /// The DLQ it read.
    pub dlq_topic: String,
    /// Its filter (`name=value&…`, empty for none).
    pub filter: String,
    /// Where it sent records: a topic; `group` for the redrive topic of each dead letter's group, `source` for each one's source topic.
    pub to: String,
    /// When it started.
    pub started: DateTime<Utc>,
    /// When it ended.
    pub ended: DateTime<Utc>,
    /// DLQ records read.
    pub scanned: u64,
    /// Records sent and acknowledged.
    pub replayed: u64,
    /// Records the filter passed over.
    pub filtered_out: u64,
    /// Records refused by the loop guard.
    pub refused: u64,
    /// Records passed over: not envelopes, undecodable, or lost references.
    pub passed_over: u64,
    /// Stopped before the end (Ctrl-C, SIGTERM); the next run resumes.
    pub interrupted: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it did (`replay` for summaries written before actions were named).
    #[serde(default)]
    pub action: Action,
    /// Its filter as a structure, so that what it selected can be told again (the console's
    /// outstanding dead letters); `None` in summaries written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<crate::dlq_reader::Filter>,
    /// A replay: the consumer group holding its position
    /// ([`super::ReplayOptions::position_group`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_group: Option<String>,
    /// A discard: the end of each DLQ partition when it was made; it discards the dead
    /// letters its selection matches before those ends, not those written later.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub ends: std::collections::BTreeMap<i32, i64>,
    /// A discard or restore: the operator's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A restore: the run id of the discard it undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<String>,
    /// An edit then redrive: the payload as it was and as it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<Edit>,
}

/// What an audited action did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Sent dead letters back (`dlq replay`, the console's redrive).
    #[default]
    Replay,
    /// Marked dead letters as handled without sending them: no longer outstanding.
    Discard,
    /// Undid a discard: its dead letters are outstanding again.
    Restore,
}

impl Action {
    /// `replay`, `discard` or `restore`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Discard => "discard",
            Action::Restore => "restore",
        }
    }
}

/// The payload of a dead letter edited before its redrive, both as base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    /// The payload as the dead letter holds it.
    pub original: String,
    /// The payload sent.
    pub edited: String,
}

impl Edit {
    /// The edit of `original` into `edited`.
    pub fn new(original: &[u8], edited: &[u8]) -> Edit {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        Edit {
            original: b64.encode(original),
            edited: b64.encode(edited),
        }
    }

    /// The payload to send.
    pub fn edited_bytes(&self) -> Vec<u8> {
        use base64::Engine as _;
        // Built by [`Edit::new`]: always base64.
        base64::engine::general_purpose::STANDARD
            .decode(&self.edited)
            .unwrap_or_default()
    }
}

impl ReplayRun {
    /// A summary of an action that sends nothing (a discard or a restore), started now, by
    /// `operator`, on `dlq_topic`.
    pub fn record(action: Action, operator: &str, dlq_topic: &str) -> ReplayRun {
        let started = Started::now();
        ReplayRun {
            run: started.run,
            operator: operator.to_string(),
            host: started.host,
            dlq_topic: dlq_topic.to_string(),
            filter: String::new(),
            to: String::new(),
            started: started.at,
            ended: started.at,
            scanned: 0,
            replayed: 0,
            filtered_out: 0,
            refused: 0,
            passed_over: 0,
            interrupted: false,
            error: None,
            action,
            selection: None,
            position_group: None,
            ends: Default::default(),
            reason: None,
            restores: None,
            edit: None,
        }
    }
}

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
            passed_over: r.not_envelopes + r.undecodable + r.lost,
            interrupted: r.interrupted,
            error,
            action: Action::Replay,
            selection: Some(options.filter.clone()),
            position_group: Some(options.position_group()),
            ends: Default::default(),
            reason: None,
            restores: None,
            edit: options.edit.clone(),
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
            run: format!(
                "{}-{:08x}",
                at.format("%Y%m%dT%H%M%S%.3fZ"),
                fastrand::u32(..)
            ),
            host: host_name(),
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

/// This machine's host name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn client(brokers: &str, options: &ClientOptions) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    options.apply(&mut config);
    config
}

/// Appends `run` to `topic` (keyed by its DLQ topic), creating the topic with one partition
/// when it does not exist; returns once the broker acknowledged it (`acks=all`).
pub async fn append(
    brokers: &str,
    options: &ClientOptions,
    topic: &str,
    run: &ReplayRun,
) -> Result<(), KafkaError> {
    let producer: FutureProducer<LogContext> = crate::kafka::create_logged(
        client(brokers, options)
            .set("acks", "all")
            .set("message.timeout.ms", "30000"),
    )?;
    let exists = {
        let (producer, topic) = (producer.clone(), topic.to_string());
        tokio::task::spawn_blocking(move || {
            let metadata = producer
                .client()
                .fetch_metadata(Some(&topic), Duration::from_secs(10))?;
            Ok::<_, KafkaError>(
                metadata
                    .topics()
                    .first()
                    .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty()),
            )
        })
        .await
        .expect("metadata task")?
    };
    if !exists {
        let admin: AdminClient<LogContext> =
            crate::kafka::create_logged(&client(brokers, options))?;
        let created = admin
            .create_topics(
                &[NewTopic::new(topic, 1, TopicReplication::Fixed(-1))],
                &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
            )
            .await?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(KafkaError::AdminOp(code)),
            }
        }
    }
    let value = serde_json::to_vec(run).expect("a run serialises");
    producer
        .send(
            FutureRecord::to(topic).key(&run.dlq_topic).payload(&value),
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
        .map_err(|(e, _)| e)
}

/// Every run on the audit `topic`, oldest first, of `dlq_topic` when given; an empty list when
/// the topic does not exist yet. Records that are not run summaries are skipped.
pub fn history(
    brokers: &str,
    options: &ClientOptions,
    topic: &str,
    dlq_topic: Option<&str>,
) -> Result<Vec<ReplayRun>, KafkaError> {
    let consumer: BaseConsumer<LogContext> = crate::kafka::create_logged(
        client(brokers, options)
            .set("group.id", "kafka-dlq-history")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false"),
    )?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let Some(found) = metadata.topics().first() else {
        return Ok(Vec::new());
    };
    if found.error().is_some() || found.partitions().is_empty() {
        return Ok(Vec::new());
    }
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in found.partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), timeout)?;
        if high > low {
            assignment.add_partition_offset(topic, p.id(), Offset::Offset(low))?;
            ends.push((p.id(), high));
        }
    }
    let mut runs = Vec::new();
    if ends.is_empty() {
        return Ok(runs);
    }
    consumer.assign(&assignment)?;
    let mut remaining = ends.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() && std::time::Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let message = message?;
        let (partition, offset) = (message.partition(), message.offset());
        if let Some(run) = message
            .payload()
            .and_then(|v| serde_json::from_slice::<ReplayRun>(v).ok())
        {
            if dlq_topic.is_none_or(|t| t == run.dlq_topic) {
                runs.push(run);
            }
        }
        remaining.retain(|(p, end)| !(*p == partition && offset + 1 >= *end));
    }
    runs.sort_by_key(|r| r.started);
    Ok(runs)
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
