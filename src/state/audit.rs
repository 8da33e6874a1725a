//! The audit topic: one [`ReplayRun`] summary per action on a DLQ — a replay (`dlq replay`, the
//! console's redrive and edit then redrive), a discard or a restore — as JSON, keyed by the DLQ
//! topic, kept for ever ([`super::topics::AUDIT_CONFIG`]). [`append`] writes one (sealed when a
//! key is configured), [`history`] reads them all back (only sealed ones when a key is
//! configured). The headers a replay stamps on each record it sends are
//! [`crate::replay::audit`]'s.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::{seal, StateError, StateTopics};
use crate::kafka::{ClientOptions, LogContext};

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
    /// Dead letters the filter selected that an earlier action had resolved (discarded, or
    /// sent by another replay): not sent again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub already_resolved: u64,
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
    /// A replay: the group its position is kept under in the positions topic
    /// ([`crate::replay::ReplayOptions::position_group`]).
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
    /// An approval or rejection: the request it decides; a redrive or discard carried out on
    /// approval: the request it carries out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// A request: what it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<Asked>,
    /// A bulk fix: the transformation, and what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<TransformSummary>,
    /// A saved view, or the one deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<SavedView>,
}

/// A named filter the console's people share: its name and the query string of the console's
/// filter (`dlq_topic=…&kind=…&where=…`), which is also its link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedView {
    /// Its name.
    pub name: String,
    /// The filter, as the page's query string.
    pub query: String,
}

/// What a bulk transformation did over a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformSummary {
    /// The transformation as given (`{"merge_patch": …}` or `{"expression": …}`).
    pub transform: serde_json::Value,
    /// Dead letters whose payload it changed.
    pub changed: u64,
    /// Dead letters it left as they were (sent byte for byte).
    pub unchanged: u64,
    /// Dead letters it failed on: reported, not sent.
    pub failed: u64,
    /// SHA-256 (hex) over every payload it was given, in the order read (each as its length,
    /// 8 bytes big-endian, then its bytes).
    pub before_sha256: String,
    /// The same over every payload it gave.
    pub after_sha256: String,
}

/// What a request asks another operator to approve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// `replay` (a redrive, to the run's `to`) or `discard`.
    pub action: Action,
    /// A redrive's rate, records per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    /// The dead letters its selection held when it was asked.
    pub count: u64,
    /// A redrive's bulk transformation (`{"merge_patch": …}` or `{"expression": …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<serde_json::Value>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// Asked for a redrive or a discard that another operator must approve (`asked` says
    /// which, `selection` holds the dead letters, frozen); changes nothing by itself.
    Request,
    /// Approved the request `request`, which was then carried out.
    Approve,
    /// Rejected the request `request`: nothing was done.
    Reject,
    /// Saved a named filter (`view`) for everyone to open; changes no dead letter.
    SaveView,
    /// Deleted the saved view `view.name`.
    DeleteView,
    /// Ended the console session `request` (an id) before its end, `ended`: every replica
    /// refuses it from then on.
    SignOut,
}

impl Action {
    /// `replay`, `discard` or `restore`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Discard => "discard",
            Action::Restore => "restore",
            Action::Request => "request",
            Action::Approve => "approve",
            Action::Reject => "reject",
            Action::SaveView => "save_view",
            Action::DeleteView => "delete_view",
            Action::SignOut => "sign_out",
        }
    }
}

/// The payload of a dead letter edited before its redrive: both as base64, and their SHA-256
/// digests (hex), so that what was sent can be matched against the records downstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    /// The payload as the dead letter holds it.
    pub original: String,
    /// The payload sent.
    pub edited: String,
    /// SHA-256 of the original payload's bytes.
    #[serde(default)]
    pub original_sha256: String,
    /// SHA-256 of the bytes sent.
    #[serde(default)]
    pub edited_sha256: String,
}

impl Edit {
    /// The edit of `original` into `edited`.
    pub fn new(original: &[u8], edited: &[u8]) -> Edit {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        Edit {
            original: b64.encode(original),
            edited: b64.encode(edited),
            original_sha256: sha256_hex(original),
            edited_sha256: sha256_hex(edited),
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

/// The SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    openssl::sha::sha256(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl ReplayRun {
    /// A summary of an action that sends nothing (a discard or a restore), started now, by
    /// `operator`, on `dlq_topic`.
    pub fn record(action: Action, operator: &str, dlq_topic: &str) -> ReplayRun {
        let at = Utc::now().trunc_subsecs(3);
        ReplayRun {
            run: run_id(at),
            operator: operator.to_string(),
            host: host_name(),
            dlq_topic: dlq_topic.to_string(),
            filter: String::new(),
            to: String::new(),
            started: at,
            ended: at,
            scanned: 0,
            replayed: 0,
            filtered_out: 0,
            refused: 0,
            passed_over: 0,
            already_resolved: 0,
            interrupted: false,
            error: None,
            action,
            selection: None,
            position_group: None,
            ends: Default::default(),
            reason: None,
            restores: None,
            edit: None,
            request: None,
            asked: None,
            transform: None,
            view: None,
        }
    }
}

/// A new run id, started `at`: its time and 32 random bits.
pub fn run_id(at: DateTime<Utc>) -> String {
    format!(
        "{}-{:08x}",
        at.format("%Y%m%dT%H%M%S%.3fZ"),
        fastrand::u32(..)
    )
}

/// This machine's host name.
pub fn host_name() -> String {
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

/// Appends `run` to the audit topic of `state` (keyed by its DLQ topic, sealed with its key
/// when it has one), creating the topic when it does not exist ([`super::topics::ensure_one`]:
/// kept for ever); returns once the broker acknowledged it (`acks=all`).
pub async fn append(
    brokers: &str,
    options: &ClientOptions,
    state: &StateTopics,
    run: &ReplayRun,
) -> Result<(), StateError> {
    let topic = &state.audit;
    let config = client(brokers, options);
    let producer: FutureProducer<LogContext> = crate::kafka::create_logged(
        config
            .clone()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("allow.auto.create.topics", "false")
            .set("message.timeout.ms", "30000"),
    )
    .map_err(|source| StateError::Client {
        topic: topic.clone(),
        source,
    })?;
    // Made here as it must be (kept for ever), never by a producer's metadata request with
    // the broker's defaults.
    super::topics::ensure_one(&config, state, topic).await?;
    let value = serde_json::to_vec(run).expect("a run serialises");
    let mut headers = OwnedHeaders::new();
    if let Some(key) = &state.key {
        let seal = key.seal(run.dlq_topic.as_bytes(), &value);
        headers = headers.insert(Header {
            key: seal::HEADER_SEAL,
            value: Some(seal.as_bytes()),
        });
    }
    producer
        .send(
            FutureRecord::to(topic)
                .key(&run.dlq_topic)
                .payload(&value)
                .headers(headers),
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
        .map_err(|(source, _)| StateError::Write {
            topic: topic.clone(),
            source,
        })
}

/// The audit topic's runs, as [`history`] read them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audit {
    /// Every run believed, oldest first, each once (by its run id).
    pub runs: Vec<ReplayRun>,
    /// Records passed over: not sealed with the configured key, or not a run summary.
    pub unverified: u64,
}

/// Every run on `state`'s audit topic, oldest first, of `dlq_topic` when given; none when the
/// topic does not exist yet. With a key, records not sealed with it are passed over and
/// counted ([`Audit::unverified`]), as are records that are not run summaries. Fails when the
/// topic cannot be read to its end (no record for 30 s): a partial history would make dead
/// letters an action resolved look outstanding. Blocks.
pub fn history(
    brokers: &str,
    options: &ClientOptions,
    state: &StateTopics,
    dlq_topic: Option<&str>,
) -> Result<Audit, KafkaError> {
    let topic = state.audit.as_str();
    let consumer: BaseConsumer<LogContext> = crate::kafka::create_logged(
        client(brokers, options)
            .set("group.id", "kafka-dlq-history")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false"),
    )?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let Some(found) = metadata.topics().first() else {
        return Ok(Audit::default());
    };
    if found.error().is_some() || found.partitions().is_empty() {
        return Ok(Audit::default());
    }
    let mut assignment = TopicPartitionList::new();
    let mut ends = std::collections::HashMap::new();
    for p in found.partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), timeout)?;
        if high > low {
            assignment.add_partition_offset(topic, p.id(), Offset::Offset(low))?;
            ends.insert(p.id(), high);
        }
    }
    let mut audit = Audit::default();
    if ends.is_empty() {
        return Ok(audit);
    }
    consumer.assign(&assignment)?;
    let mut seen = HashSet::new();
    let mut last = std::time::Instant::now();
    while !ends.is_empty() {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            if last.elapsed() > Duration::from_secs(30) {
                return Err(KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                ));
            }
            continue;
        };
        last = std::time::Instant::now();
        let message = message?;
        let (partition, offset) = (message.partition(), message.offset());
        if ends.get(&partition).is_none_or(|end| offset + 1 >= *end) {
            ends.remove(&partition);
        }
        let (key, value) = (message.key().unwrap_or_default(), message.payload());
        let sealed = message.headers().and_then(|h| {
            h.iter()
                .filter(|h| h.key == seal::HEADER_SEAL)
                .last()
                .and_then(|h| h.value)
        });
        let run = value
            .filter(|v| seal::trusted(state.key.as_ref(), key, v, sealed))
            .and_then(|v| serde_json::from_slice::<ReplayRun>(v).ok())
            // A run is keyed by its DLT: a sealed run cannot be moved to another.
            .filter(|r| state.key.is_none() || r.dlq_topic.as_bytes() == key);
        let Some(run) = run else {
            audit.unverified += 1;
            tracing::debug!(event = "state_record_unverified", %topic, partition, offset,
                "passed over: not a run summary sealed with the configured audit key");
            continue;
        };
        if dlq_topic.is_none_or(|t| t == run.dlq_topic) && seen.insert(run.run.clone()) {
            audit.runs.push(run);
        }
    }
    audit.runs.sort_by_key(|r| r.started);
    Ok(audit)
}
