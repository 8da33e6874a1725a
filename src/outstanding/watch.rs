//! The inbox kept current. Once a second the watcher reads the audit topic's end and what was
//! written to the positions topic since (one reader, however many replay groups there are);
//! when either moved (a replay, a redrive, a discard, from this console or another, or
//! `dlq replay`), it builds the inbox again from the first outstanding offset of each
//! partition, else it reads only what was written since the last read. A page view never
//! reads the topic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;
use tokio::sync::Notify;

use super::inbox::{Inbox, InboxFilter, InboxRow, Sighting};
use super::ledger::{Ledger, Resolution};
use super::parked::{Heads, ParkLogs};
use super::Source;
use crate::dlq_reader::{DlqEntry, DlqReader, Filter};
use crate::kafka::LogContext;
use crate::state::audit::ReplayRun;
use crate::state::PositionStore;

const TIMEOUT: Duration = Duration::from_secs(10);
/// How often the watcher looks for what changed.
pub const TICK: Duration = Duration::from_secs(1);
/// Rebuilds at most this often while positions keep moving (a redrive in progress).
const REBUILD_AT_MOST_EVERY: Duration = Duration::from_secs(3);
/// The group name the console's readers carry (they never join it nor commit).
const READER_GROUP: &str = "kafka-dlq-outstanding";

/// How far the inbox is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// The DLTs read.
    pub dlq_topics: Vec<String>,
    /// When the inbox was last complete (built or brought up to date); `None` before the
    /// first build ends.
    pub current_at: Option<DateTime<Utc>>,
    /// Outstanding dead letters counted.
    pub outstanding: u64,
    /// Dead letters past the replay position (or passed over by it) that a discard or a
    /// filtered replay resolved: what a count from the replay position alone (the monitor's
    /// watermarks) must take off to say the same.
    pub resolved_by_actions: u64,
    /// Causes counted.
    pub causes: usize,
    /// Builds since the console started.
    pub builds: u64,
    /// Records of the audit and positions topics passed over because they were not sealed
    /// with the configured audit key (or were not kafka-dlq's state at all): with a key, a
    /// forged discard or position counts here and resolves nothing.
    pub unverified: u64,
    /// The last error reading the cluster, when the last attempt failed.
    pub error: Option<String>,
}

struct State {
    inbox: Inbox,
    topics: Vec<String>,
    current_at: Option<DateTime<Utc>>,
    builds: u64,
    resolved_by_actions: u64,
    unverified_audit: u64,
    unverified_positions: u64,
    error: Option<String>,
    runs: Arc<Vec<ReplayRun>>,
    ledgers: HashMap<String, Arc<Ledger>>,
    ends: HashMap<String, HashMap<i32, i64>>,
    /// The parked keys' heads, as of the last look at the park logs.
    parked: Arc<Heads>,
}

/// The inbox and what it was built from, kept current by [`Watch::run`].
pub struct Watch {
    config: Arc<Source>,
    state: Mutex<State>,
    wake: Notify,
}

impl Watch {
    /// A watcher of `config`'s DLTs; nothing is read until [`Watch::run`].
    pub fn new(config: Arc<Source>) -> Arc<Watch> {
        Arc::new(Watch {
            config,
            state: Mutex::new(State {
                inbox: Inbox::default(),
                topics: Vec::new(),
                current_at: None,
                builds: 0,
                resolved_by_actions: 0,
                unverified_audit: 0,
                unverified_positions: 0,
                error: None,
                runs: Arc::new(Vec::new()),
                ledgers: HashMap::new(),
                ends: HashMap::new(),
                parked: Arc::default(),
            }),
            wake: Notify::new(),
        })
    }

    /// Looks again at once (an action just changed the audit or a position).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// How far the inbox is.
    pub fn status(&self) -> Status {
        let s = self.state.lock().expect("state");
        Status {
            dlq_topics: s.topics.clone(),
            current_at: s.current_at,
            outstanding: s.inbox.total(),
            resolved_by_actions: s.resolved_by_actions,
            causes: s.inbox.len(),
            builds: s.builds,
            unverified: s.unverified_audit + s.unverified_positions,
            error: s.error.clone(),
        }
    }

    /// The inbox rows `filter` selects.
    pub fn inbox(&self, filter: &InboxFilter) -> Result<Vec<InboxRow>, String> {
        let mut s = self.state.lock().expect("state");
        let parked = s.parked.clone();
        s.inbox.rows(filter, Utc::now(), &parked)
    }

    /// The parked keys' heads (`key_order_after_failure = "park"`) of the groups whose dead
    /// letters the inbox counts, as of the watcher's last look (once a second).
    pub fn parked(&self) -> Arc<Heads> {
        self.state.lock().expect("state").parked.clone()
    }

    /// The DLTs shown.
    pub fn topics(&self) -> Vec<String> {
        self.state.lock().expect("state").topics.clone()
    }

    /// The audit's runs, oldest first, as last read.
    pub fn runs(&self) -> Arc<Vec<ReplayRun>> {
        self.state.lock().expect("state").runs.clone()
    }

    fn ledger(&self, topic: &str) -> Option<Arc<Ledger>> {
        self.state
            .lock()
            .expect("state")
            .ledgers
            .get(topic)
            .cloned()
    }

    /// Keeps the inbox current until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut seen: Option<(Vec<String>, i64)> = None;
        let mut last_build = tokio::time::Instant::now() - REBUILD_AT_MOST_EVERY;
        let mut store = PositionStore::new(
            &self.config.brokers,
            &self.config.librdkafka,
            &self.config.state,
        );
        // Positions changed since the inbox was last built.
        let mut moved = true;
        let mut parks = Parks::default();
        loop {
            let step = self
                .step(
                    &mut seen,
                    &mut last_build,
                    &mut store,
                    &mut moved,
                    &mut parks,
                )
                .await;
            {
                let mut s = self.state.lock().expect("state");
                s.error = step.err().map(|e| e.to_string());
                s.unverified_positions = store.unverified();
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    }

    async fn step(
        &self,
        seen: &mut Option<(Vec<String>, i64)>,
        last_build: &mut tokio::time::Instant,
        store: &mut PositionStore,
        moved: &mut bool,
        parks: &mut Parks,
    ) -> Result<(), StepError> {
        let config = self.config.clone();
        // The park logs first: a dead letter read below is a head if its head event (always
        // written before it) is read by now.
        let pairs = self.state.lock().expect("state").inbox.pairs();
        let heads = Arc::new(parks.catch_up(&config, &pairs).await?);
        if parks.unchecked.iter().any(|pair| parks.logs.parks(pair)) {
            // Dead letters of a group that parks were counted before its park log was read:
            // counted again, to know which are heads.
            *moved = true;
        }
        parks.unchecked.clear();
        self.state.lock().expect("state").parked = heads.clone();
        let topics = match config.dlq_topics.is_empty() {
            false => config.dlq_topics.clone(),
            true => {
                blocking({
                    let config = config.clone();
                    move || discover(&config)
                })
                .await?
            }
        };
        let audit_end = blocking({
            let config = config.clone();
            move || audit_end(&config)
        })
        .await?;
        let runs = match seen.as_ref() {
            Some((_, end)) if *end == audit_end => self.runs(),
            _ => {
                let audit = blocking({
                    let config = config.clone();
                    move || {
                        crate::state::audit::history(
                            &config.brokers,
                            &config.librdkafka,
                            &config.state,
                            None,
                        )
                    }
                })
                .await?;
                self.state.lock().expect("state").unverified_audit = audit.unverified;
                Arc::new(audit.runs)
            }
        };
        *moved |= store.catch_up().await?;
        let mut not_migrated = None;
        for topic in &topics {
            for group in Ledger::groups(topic, &runs) {
                match store.migrate(topic, &group, &runs).await {
                    Ok(migrated) => *moved |= migrated,
                    // Read on without it (a principal that may not write the positions
                    // topic); said in the status until it works.
                    Err(e) => not_migrated = Some(e),
                }
            }
        }
        let changed = *moved
            || seen
                .as_ref()
                .is_none_or(|(t, end)| *t != topics || *end != audit_end);
        let known_ends = self.state.lock().expect("state").ends.clone();
        let ledgers: HashMap<String, Arc<Ledger>> = topics
            .iter()
            .map(|topic| {
                let ends = known_ends.get(topic).cloned().unwrap_or_default();
                let ledger = Ledger::new(topic, &ends, &runs, store.table());
                (topic.clone(), Arc::new(ledger))
            })
            .collect();
        if changed && last_build.elapsed() >= REBUILD_AT_MOST_EVERY {
            let mut inbox = Inbox::default();
            let mut resolved = 0;
            let mut ends = HashMap::new();
            for topic in &topics {
                let ledger = &ledgers[topic];
                let from = Start::Outstanding(ledger.clone());
                let end = read(&config, topic, from, |entry| {
                    if !in_scope(&config, entry) {
                        return true;
                    }
                    match ledger.resolution(entry) {
                        None => inbox.add(&Sighting::of(entry), Utc::now(), &heads),
                        Some(Resolution::Replayed) => {}
                        Some(_) => resolved += 1,
                    }
                    true
                })
                .await?;
                ends.insert(topic.clone(), end);
            }
            parks.unchecked = inbox.pairs().difference(&pairs).cloned().collect();
            *last_build = tokio::time::Instant::now();
            *seen = Some((topics.clone(), audit_end));
            *moved = false;
            let mut s = self.state.lock().expect("state");
            s.inbox = inbox;
            s.resolved_by_actions = resolved;
            s.topics = topics;
            s.ends = ends;
            s.runs = runs;
            s.ledgers = ledgers;
            s.builds += 1;
            s.current_at = Some(Utc::now());
            return not_migrated.map_or(Ok(()), |e| Err(e.into()));
        }
        if changed {
            // Built again once the pause since the last build is over.
            return not_migrated.map_or(Ok(()), |e| Err(e.into()));
        }
        // Only what was written since.
        for topic in &topics {
            let (from, ledger) = {
                let s = self.state.lock().expect("state");
                (
                    s.ends.get(topic).cloned().unwrap_or_default(),
                    s.ledgers[topic].clone(),
                )
            };
            let mut added = Vec::new();
            let mut resolved = 0;
            let end = read(&config, topic, Start::At(from), |entry| {
                if !in_scope(&config, entry) {
                    return true;
                }
                match ledger.resolution(entry) {
                    None => added.push(Sighting::of(entry)),
                    Some(Resolution::Replayed) => {}
                    Some(_) => resolved += 1,
                }
                true
            })
            .await?;
            let mut s = self.state.lock().expect("state");
            s.resolved_by_actions += resolved;
            let now = Utc::now();
            for sighting in &added {
                s.inbox.add(sighting, now, &heads);
                if let Some(h) = &sighting.head {
                    let pair = (h.source.clone(), h.group.clone());
                    if !pairs.contains(&pair) {
                        parks.unchecked.insert(pair);
                    }
                }
            }
            s.ends.insert(topic.clone(), end);
        }
        self.state.lock().expect("state").current_at = Some(Utc::now());
        not_migrated.map_or(Ok(()), |e| Err(e.into()))
    }

    /// A reader of `dlq_topic` (one of the console's) from its first outstanding offsets, or
    /// with `all` from the log start, to its ends now (with `payloads`, references read back
    /// from their source records), and the ledger that tells which entries are outstanding;
    /// `None` for a topic the console does not show.
    pub async fn open(
        &self,
        dlq_topic: &str,
        all: bool,
        payloads: bool,
    ) -> Result<Option<(DlqReader, Arc<Ledger>)>, KafkaError> {
        let Some(ledger) = self.ledger(dlq_topic) else {
            return Ok(None);
        };
        let from = match all {
            true => Start::At(HashMap::new()),
            false => Start::Outstanding(ledger.clone()),
        };
        let reader = open_reader(&self.config, dlq_topic, from, payloads).await?;
        Ok(Some((reader, ledger)))
    }

    /// Dead letters `filter` selects, at most `limit`, in partition and offset order per DLT:
    /// the outstanding ones, or with `all` every one the log holds, each with why it is no
    /// longer outstanding. Reads the DLTs (from their first outstanding offsets).
    pub async fn list(
        &self,
        filter: &Filter,
        dlq_topic: Option<&str>,
        all: bool,
        limit: usize,
    ) -> Result<Vec<(DlqEntry, Option<Resolution>)>, KafkaError> {
        let mut found = Vec::new();
        self.scan(filter, dlq_topic, all, |entry, resolution| {
            found.push((entry.clone(), resolution));
            found.len() < limit
        })
        .await?;
        Ok(found)
    }

    /// Calls `each` with the dead letters `filter` selects (outstanding ones, or with `all`
    /// every one), DLT by DLT, until it says no more; the ends read to of the last DLT read.
    pub async fn scan(
        &self,
        filter: &Filter,
        dlq_topic: Option<&str>,
        all: bool,
        mut each: impl FnMut(&DlqEntry, Option<Resolution>) -> bool,
    ) -> Result<HashMap<i32, i64>, KafkaError> {
        let mut ends = HashMap::new();
        for topic in self
            .topics()
            .iter()
            .filter(|t| dlq_topic.is_none_or(|d| d == *t))
        {
            let Some((mut reader, ledger)) = self.open(topic, all, false).await? else {
                continue;
            };
            ends = reader.ends();
            while let Some(entry) = reader.next_entry().await {
                let entry = entry?;
                let resolution = ledger.resolution(&entry);
                if (all || resolution.is_none())
                    && filter.matches(&entry)
                    && !each(&entry, resolution)
                {
                    return Ok(ends);
                }
            }
        }
        Ok(ends)
    }

    /// The dead letter at `offset` of `partition` of `dlq_topic` (one of the console's), with
    /// why it is no longer outstanding; `None` when there is none there.
    pub async fn fetch(
        &self,
        dlq_topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<Option<(DlqEntry, Option<Resolution>)>, KafkaError> {
        let Some(ledger) = self.ledger(dlq_topic) else {
            return Ok(None);
        };
        let mut found = None;
        let only = Start::Only(partition, offset);
        read(&self.config, dlq_topic, only, |entry| {
            if entry.partition == partition && entry.offset == offset {
                found = Some((entry.clone(), ledger.resolution(entry)));
            }
            false
        })
        .await?;
        Ok(found)
    }
}

/// Where a read starts.
enum Start {
    /// Each partition's first offset that may be outstanding.
    Outstanding(Arc<Ledger>),
    /// These offsets (a partition not named: its log start).
    At(HashMap<i32, i64>),
    /// This one record.
    Only(i32, i64),
}

/// Reads `topic` from `from` to its ends now, calling `each` with every entry until it says
/// no more; the ends read to.
async fn read(
    config: &Source,
    topic: &str,
    from: Start,
    mut each: impl FnMut(&DlqEntry) -> bool,
) -> Result<HashMap<i32, i64>, KafkaError> {
    // Only one dead letter in full needs its payload: the others are counted and grouped.
    let payloads = matches!(from, Start::Only(..));
    let mut reader = match open_reader(config, topic, from, payloads).await {
        // Not created yet: nothing in it.
        Err(e) if crate::dlq_reader::is_unknown_topic(&e) => return Ok(HashMap::new()),
        opened => opened?,
    };
    let ends = reader.ends();
    while let Some(entry) = reader.next_entry().await {
        if !each(&entry?) {
            break;
        }
    }
    Ok(ends)
}

/// A reader of `topic` from `from` to its ends now; with `payloads`, references are read back
/// from their source records ([`DlqReader::leaving_references`]).
async fn open_reader(
    config: &Source,
    topic: &str,
    from: Start,
    payloads: bool,
) -> Result<DlqReader, KafkaError> {
    let (brokers, raw, t, template) = (
        config.brokers.clone(),
        config.librdkafka.clone(),
        topic.to_string(),
        config.dlq_template.clone(),
    );
    blocking(move || {
        let mut reader = DlqReader::open(&brokers, &raw, &t)?.with_template(template);
        if !payloads {
            reader = reader.leaving_references();
        }
        let ends = reader.ends();
        let ranges: HashMap<i32, std::ops::Range<i64>> = ends
            .keys()
            .map(|&p| {
                let start = match &from {
                    Start::Outstanding(ledger) => ledger.first_outstanding(p),
                    Start::At(at) => at.get(&p).copied().unwrap_or(0),
                    Start::Only(partition, offset) if *partition == p => *offset,
                    Start::Only(..) => i64::MAX,
                };
                let end = match &from {
                    Start::Only(_, offset) => offset.saturating_add(1),
                    _ => i64::MAX,
                };
                (p, start..end)
            })
            .collect();
        reader.narrow(&ranges)?;
        Ok::<_, KafkaError>(reader)
    })
    .await
}

/// The DLTs the template names, in name order.
fn discover(config: &Source) -> Result<Vec<String>, KafkaError> {
    let consumer = client(config, READER_GROUP)?;
    let metadata = consumer.fetch_metadata(None, TIMEOUT)?;
    let mut topics: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|name| config.dlq_template.is_dlq_topic(name))
        .filter(|name| crate::record::retry::parse_topic(name).is_none())
        .collect();
    topics.sort();
    Ok(topics)
}

/// The audit topic's end (0 while it does not exist).
fn audit_end(config: &Source) -> Result<i64, KafkaError> {
    let consumer = client(config, READER_GROUP)?;
    let metadata = consumer.fetch_metadata(Some(&config.state.audit), TIMEOUT)?;
    let Some(t) = metadata.topics().first().filter(|t| t.error().is_none()) else {
        return Ok(0);
    };
    let mut end = 0;
    for p in t.partitions() {
        end += consumer
            .fetch_watermarks(&config.state.audit, p.id(), TIMEOUT)?
            .1;
    }
    Ok(end)
}

fn client(config: &Source, group: &str) -> Result<BaseConsumer<LogContext>, KafkaError> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    config.librdkafka.apply(&mut client);
    crate::kafka::create_logged(&client)
}

/// The park logs the watcher reads, and the groups whose dead letters were counted before
/// their park logs were looked at.
#[derive(Default)]
struct Parks {
    logs: ParkLogs,
    unchecked: std::collections::BTreeSet<(String, String)>,
}

impl Parks {
    /// Reads the park logs of `pairs` on, blocking in a task of its own.
    async fn catch_up(
        &mut self,
        config: &Source,
        pairs: &std::collections::BTreeSet<(String, String)>,
    ) -> Result<Heads, KafkaError> {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", &config.brokers);
        config.librdkafka.apply(&mut client);
        let mut logs = std::mem::take(&mut self.logs);
        let pairs = pairs.clone();
        let (logs, heads) = tokio::task::spawn_blocking(move || {
            let heads = logs.catch_up(&client, &pairs);
            (logs, heads)
        })
        .await
        .expect("console read task");
        self.logs = logs;
        heads
    }
}

/// Why a step of the watcher failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    // Boxed: a state error is large, and a step's result is returned on every tick.
    #[error(transparent)]
    State(Box<crate::state::StateError>),
}

impl From<crate::state::StateError> for StepError {
    fn from(e: crate::state::StateError) -> Self {
        StepError::State(Box::new(e))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, KafkaError> + Send + 'static,
) -> Result<T, KafkaError> {
    tokio::task::spawn_blocking(f)
        .await
        .expect("console read task")
}

/// Whether `entry` counts: the source has no scope, or its scope keeps it.
fn in_scope(config: &Source, entry: &DlqEntry) -> bool {
    config.scope.as_ref().is_none_or(|f| f.matches(entry))
}
