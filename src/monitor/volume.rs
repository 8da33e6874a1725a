//! Counting the outstanding dead letters: those after both the log start and the replay
//! position, and those the replay passed over because their source record is gone
//! ([`Position`]), less those a discard or a filtered replay resolved
//! ([`crate::outstanding`]).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::MonitorConfig;
use crate::dlq_reader::position::Position;
use crate::dlq_reader::REPLAY_GROUP;
use crate::kafka::LogContext;

/// Counts outstanding dead letters.
pub(super) struct Volume {
    reader: Arc<BaseConsumer<LogContext>>,
    topics: Vec<String>,
    /// What the console's actions resolved past the replay position.
    watch: Arc<crate::outstanding::watch::Watch>,
}

impl Volume {
    pub(super) fn new(c: &MonitorConfig) -> Result<Self, rdkafka::error::KafkaError> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &c.brokers)
            .set("group.id", REPLAY_GROUP)
            .set("enable.auto.commit", "false");
        c.librdkafka.apply(&mut client);
        let source = crate::outstanding::Source {
            brokers: c.brokers.clone(),
            librdkafka: c.librdkafka.clone(),
            dlq_topics: c.dlq_topics.clone(),
            dlq_template: crate::dlq::DlqTopic::default(),
            audit_topic: c.audit_topic.clone(),
        };
        Ok(Self {
            reader: Arc::new(crate::kafka::create_logged(&client)?),
            topics: c.dlq_topics.clone(),
            watch: crate::outstanding::watch::Watch::new(Arc::new(source)),
        })
    }

    /// The watcher of what the console's actions resolved, to run beside the monitor.
    pub(super) fn watch(&self) -> Arc<crate::outstanding::watch::Watch> {
        self.watch.clone()
    }

    /// The dead letters outstanding and expired now ([`count`]), less those the console's
    /// actions resolved past the replay position (as of the watcher's last read; none before
    /// its first); `None` when the broker cannot tell.
    pub(super) async fn count(&self) -> Option<DlqCount> {
        let reader = self.reader.clone();
        let topics = self.topics.clone();
        let mut count = tokio::task::spawn_blocking(move || {
            // Nothing else polls this reader: its events (a token to refresh) are served here.
            let _ = reader.poll(Duration::ZERO);
            count(&reader, &topics)
        })
        .await
        .ok()
        .flatten()?;
        let resolved = self.watch.status().resolved_by_actions;
        count.outstanding = count.outstanding.saturating_sub(resolved);
        Some(count)
    }

    /// Σ over DLQ partitions of [`Position::outstanding`]; `None` when the broker cannot tell.
    pub(super) async fn outstanding(&self) -> Option<u64> {
        self.count().await.map(|c| c.outstanding)
    }
}

/// What the DLQ topics hold, counted against the replay position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DlqCount {
    /// Dead letters not replayed yet (Σ [`Position::outstanding`]).
    pub outstanding: u64,
    /// Dead letters the log no longer holds that no replay passed (Σ [`Position::expired`]):
    /// deleted by retention, unreplayed. Only grows, as long as the topics exist.
    pub expired: u64,
}

/// Outstanding dead letters on `topics`, read through `reader` (whose group is the replay
/// group).
pub fn outstanding<C: rdkafka::consumer::ConsumerContext>(
    reader: &BaseConsumer<C>,
    topics: &[String],
) -> Option<u64> {
    count(reader, topics).map(|c| c.outstanding)
}

/// The outstanding and expired dead letters on `topics`, read through `reader` (whose group is
/// the replay group).
pub fn count<C: rdkafka::consumer::ConsumerContext>(
    reader: &BaseConsumer<C>,
    topics: &[String],
) -> Option<DlqCount> {
    let timeout = Duration::from_secs(5);
    let mut tpl = TopicPartitionList::new();
    let mut marks = Vec::new();
    for topic in topics {
        let md = reader.fetch_metadata(Some(topic), timeout).ok()?;
        let t = md.topics().first()?;
        if t.error().is_some() {
            continue; // not created yet: nothing outstanding
        }
        for p in t.partitions() {
            let (low, high) = reader.fetch_watermarks(topic, p.id(), timeout).ok()?;
            marks.push((topic.clone(), p.id(), low, high));
            tpl.add_partition(topic, p.id());
        }
    }
    let committed = reader.committed_offsets(tpl, timeout).ok()?;
    let mut total = DlqCount::default();
    for (topic, partition, low, high) in marks {
        let position = committed
            .find_partition(&topic, partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(Position::from_commit(o, e.metadata())),
                _ => None,
            })
            .unwrap_or_default();
        total.outstanding += position.outstanding(low, high);
        total.expired += position.expired(low);
    }
    Some(total)
}
