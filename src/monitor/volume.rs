//! Counting the outstanding dead letters: those after both the log start and the replay
//! position, and those the replay passed over because their source record is gone
//! ([`crate::dlq_reader::position::Position`]), less those a discard or a filtered replay resolved
//! ([`crate::outstanding`]). The replay position is the unfiltered replay's, read from the
//! positions topic ([`crate::state`]), where Kafka never expires it.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::ClientConfig;

use super::MonitorConfig;
use crate::dlq_reader::REPLAY_GROUP;
use crate::kafka::{ClientOptions, LogContext};
use crate::state::{PositionStore, StateError, StateTopics};

/// Counts outstanding dead letters.
pub(super) struct Volume {
    /// Counting only what an alert scope keeps: from the watcher's reading.
    scoped: bool,
    reader: Arc<BaseConsumer<LogContext>>,
    topics: Vec<String>,
    store: tokio::sync::Mutex<PositionStore>,
    /// What the console's actions resolved past the replay position.
    watch: Arc<crate::outstanding::watch::Watch>,
}

impl Volume {
    pub(super) fn new(c: &MonitorConfig) -> Result<Self, rdkafka::error::KafkaError> {
        let source = crate::outstanding::Source {
            brokers: c.brokers.clone(),
            librdkafka: c.librdkafka.clone(),
            dlq_topics: c.dlq_topics.clone(),
            dlq_template: crate::dlq::DlqTopic::default(),
            state: c.state.clone(),
            scope: c.scope.clone(),
        };
        Ok(Self {
            scoped: c.scope.is_some(),
            reader: Arc::new(watermark_reader(&c.brokers, &c.librdkafka)?),
            topics: c.dlq_topics.clone(),
            store: tokio::sync::Mutex::new(PositionStore::new(&c.brokers, &c.librdkafka, &c.state)),
            watch: crate::outstanding::watch::Watch::new(Arc::new(source)),
        })
    }

    /// The watcher of what the console's actions resolved, to run beside the monitor.
    pub(super) fn watch(&self) -> Arc<crate::outstanding::watch::Watch> {
        self.watch.clone()
    }

    /// The dead letters outstanding and expired now ([`count`]), less those the console's
    /// actions resolved past the replay position (as of the watcher's last read; none before
    /// its first); `None` when the broker cannot tell. With an alert scope, the outstanding
    /// ones in scope as of the watcher's last read (`None` before its first).
    pub(super) async fn count(&self) -> Option<DlqCount> {
        let mut store = self.store.lock().await;
        let counted = count_with(&mut store, &self.reader, &self.topics).await;
        let mut count = match counted {
            Ok(count) => count,
            Err(error) => {
                tracing::warn!(event = "monitor_count_failed", %error,
                    "the outstanding dead letters could not be counted this time");
                return None;
            }
        };
        let status = self.watch.status();
        if self.scoped {
            // The dead letters in scope are known only once the watcher has read them all;
            // retention's deletions (expired) are of every dead letter, in scope or not.
            status.current_at?;
            count.outstanding = status.outstanding;
            return Some(count);
        }
        count.outstanding = count.outstanding.saturating_sub(status.resolved_by_actions);
        Some(count)
    }

    /// Σ over DLQ partitions of [`crate::dlq_reader::position::Position::outstanding`]; `None` when the broker cannot tell.
    pub(super) async fn outstanding(&self) -> Option<u64> {
        self.count().await.map(|c| c.outstanding)
    }
}

/// What the DLQ topics hold, counted against the replay position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DlqCount {
    /// Dead letters not replayed yet (Σ [`crate::dlq_reader::position::Position::outstanding`]).
    pub outstanding: u64,
    /// Dead letters the log no longer holds that no replay passed (Σ [`crate::dlq_reader::position::Position::expired`]):
    /// deleted by retention, unreplayed. Only grows, as long as the topics exist.
    pub expired: u64,
}

/// Why the DLQ topics could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum CountError {
    /// The DLQ topics' metadata or watermarks could not be read.
    #[error("cannot read the dead-letter topics: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The replay positions could not be read (or moved to the positions topic).
    #[error(transparent)]
    State(#[from] StateError),
}

/// The outstanding and expired dead letters on `topics` now, against the unfiltered replay's
/// position in `state`'s positions topic (not counting what discards and filtered replays
/// resolved: [`crate::outstanding`] does).
pub async fn count(
    brokers: &str,
    librdkafka: &ClientOptions,
    state: &StateTopics,
    topics: &[String],
) -> Result<DlqCount, CountError> {
    let mut store = PositionStore::new(brokers, librdkafka, state);
    let reader = Arc::new(watermark_reader(brokers, librdkafka)?);
    count_with(&mut store, &reader, topics).await
}

/// [`count`]'s outstanding dead letters.
pub async fn outstanding(
    brokers: &str,
    librdkafka: &ClientOptions,
    state: &StateTopics,
    topics: &[String],
) -> Result<u64, CountError> {
    count(brokers, librdkafka, state, topics)
        .await
        .map(|c| c.outstanding)
}

fn watermark_reader(
    brokers: &str,
    librdkafka: &ClientOptions,
) -> Result<BaseConsumer<LogContext>, rdkafka::error::KafkaError> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", brokers)
        .set("group.id", "kafka-dlq-monitor-counter")
        .set("enable.auto.commit", "false");
    librdkafka.apply(&mut client);
    crate::kafka::create_logged(&client)
}

/// Counts `topics` through `reader` (watermarks) and `store` (positions, caught up first; a
/// DLT's unfiltered replay position still kept as a committed offset is moved there).
async fn count_with(
    store: &mut PositionStore,
    reader: &Arc<BaseConsumer<LogContext>>,
    topics: &[String],
) -> Result<DlqCount, CountError> {
    store.catch_up().await?;
    for topic in topics {
        store.migrate(topic, REPLAY_GROUP, &[]).await?;
    }
    let (reader, names) = (reader.clone(), topics.to_vec());
    let marks = tokio::task::spawn_blocking(move || {
        // Nothing else polls this reader: its events (a token to refresh) are served here.
        let _ = reader.poll(Duration::ZERO);
        watermarks(&reader, &names)
    })
    .await
    .expect("watermark task")?;
    let mut total = DlqCount::default();
    for (topic, partition, low, high) in marks {
        let position = store
            .table()
            .group(&topic, REPLAY_GROUP)
            .and_then(|g| g.partitions.get(&partition))
            .and_then(|p| crate::state::position_record::still_valid(Some(p), high))
            .cloned()
            .unwrap_or_default();
        total.outstanding += position.outstanding(low, high);
        total.expired += position.expired(low);
    }
    Ok(total)
}

/// Each partition of `topics` that exists, with its log start and end. Blocks.
fn watermarks(
    reader: &BaseConsumer<LogContext>,
    topics: &[String],
) -> Result<Vec<(String, i32, i64, i64)>, rdkafka::error::KafkaError> {
    let timeout = Duration::from_secs(5);
    let mut marks = Vec::new();
    for topic in topics {
        let md = reader.fetch_metadata(Some(topic), timeout)?;
        let Some(t) = md.topics().first() else {
            continue;
        };
        if t.error().is_some() {
            continue; // not created yet: nothing outstanding
        }
        for p in t.partitions() {
            let (low, high) = reader.fetch_watermarks(topic, p.id(), timeout)?;
            marks.push((topic.clone(), p.id(), low, high));
        }
    }
    Ok(marks)
}
