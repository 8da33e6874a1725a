//! A source partition's parking, kept by its worker: the table of the partition's park log,
//! read to the log's end before the worker's first record ([`PartitionPark::open`]) and read
//! again while keys are parked, for the resolutions others write ([`PartitionPark::catch_up`]);
//! the events the worker writes itself count in it at once.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::log::{ParkLog, ParkReader, PendingPark};
use crate::backoff::ExponentialBackoff;
use crate::metrics::Metrics;
use crate::park::{Cause, Decision, ParkEvent, ParkTable};
use crate::record::Record;
use crate::stopped::Stopped;

/// While keys are parked, the park log is read again at most this often: how long a key
/// waits at least after its head is resolved elsewhere.
pub(crate) const CATCH_UP_EVERY: Duration = Duration::from_millis(200);

/// The park log is trimmed once this many of its events are no longer needed (or once no
/// key is parked): a trim is a request to the broker, not one per release.
const TRIM_EVERY: i64 = 1_000;

/// See the module docs.
pub(crate) struct PartitionPark {
    table: ParkTable,
    log: Arc<dyn ParkLog>,
    reader: Box<dyn ParkReader>,
    source: String,
    partition: i32,
    /// When the log was last read.
    read_at: tokio::time::Instant,
    /// The park-log offset this member last trimmed the log to.
    trimmed: i64,
    metrics: Metrics,
}

impl PartitionPark {
    /// `source`/`partition`'s parking, its park log read to its end; a failed read is tried
    /// again (1 s doubling to 60 s) until `cancel` fires. Its parked keys and records are
    /// shown in `metrics` while it lives.
    pub(crate) async fn open(
        log: Arc<dyn ParkLog>,
        source: &str,
        partition: i32,
        metrics: Metrics,
        cancel: &CancellationToken,
    ) -> Result<Self, Stopped> {
        let mut park = Self {
            table: ParkTable::default(),
            reader: log.reader(source, partition),
            log,
            source: source.to_string(),
            partition,
            read_at: tokio::time::Instant::now(),
            trimmed: 0,
            metrics,
        };
        let mut delays = ExponentialBackoff::infrastructure().delays();
        while let Err(error) = park.read().await {
            let delay = delays.next().expect("an infrastructure backoff never ends");
            tracing::error!(event = "park_log_read_failed", topic = %park.source,
                partition, %error, retry_in_ms = delay.as_millis() as u64,
                "the partition's records wait until its park log is read");
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(Stopped),
                _ = tokio::time::sleep(delay) => {}
            }
        }
        tracing::debug!(event = "park_log_read", topic = %park.source, partition,
            parked_keys = park.table.len(), waiting = park.table.waiting());
        Ok(park)
    }

    /// Shows the table in the metrics: its parked keys and the records waiting (cheap: after
    /// every event), and with `oldest` how long the oldest unresolved head has waited (a walk
    /// of the table: after each read of the log, every 200 ms while keys are parked).
    fn report(&self, oldest: bool) {
        let labels = [self.source.as_str(), &self.partition.to_string()];
        let m = &self.metrics;
        m.parked_keys
            .with_label_values(&labels)
            .set(self.table.len() as i64);
        m.parked_records
            .with_label_values(&labels)
            .set(self.table.waiting() as i64);
        if oldest {
            let since = self
                .table
                .keys()
                .flat_map(|(_, parked)| parked.heads.values().map(|h| h.since))
                .min();
            let seconds = since.map_or(0, |since| (chrono::Utc::now() - since).num_seconds());
            m.parked_oldest_seconds
                .with_label_values(&labels)
                .set(seconds.max(0));
        }
    }

    /// Reads the events after the last one read, up to the log's end.
    async fn read(&mut self) -> Result<(), rdkafka::error::KafkaError> {
        let (events, next) = self.reader.read(self.table.next()).await?;
        for (at, event) in &events {
            self.table.apply(*at, event);
        }
        self.table.read_to(next);
        self.read_at = tokio::time::Instant::now();
        self.report(true);
        self.trim();
        Ok(())
    }

    /// Deletes the log's events that no key needs any more ([`ParkTable::low_water`]) when
    /// enough of them are, or none is parked: so that a log kept for ever (`retention.ms=-1`)
    /// holds what is parked, not every event since the topic was made. A key the table holds
    /// keeps every event of it from its oldest; a release's records are trimmed only once its
    /// `released` event, written after they were settled, is in the table.
    fn trim(&mut self) {
        let low = self.table.low_water();
        if low > self.trimmed && (low - self.trimmed >= TRIM_EVERY || self.table.is_empty()) {
            self.log.trim(&self.source, self.partition, low);
            self.trimmed = low;
        }
    }

    /// The source topic.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The source partition.
    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }

    /// The table.
    pub(crate) fn table(&self) -> &ParkTable {
        &self.table
    }

    /// What to do with `record`, a record of the source partition.
    pub(crate) fn decide(&self, record: &Record) -> Decision {
        if self.table.is_empty() {
            return Decision::Pass;
        }
        self.table.decide(record.key.as_deref(), record.offset)
    }

    /// Whether keys are parked and the log was not read for [`CATCH_UP_EVERY`].
    pub(crate) fn catch_up_due(&self) -> bool {
        !self.table.is_empty() && self.read_at.elapsed() >= CATCH_UP_EVERY
    }

    /// Reads what others wrote since the last read (resolutions); a failed read is logged and
    /// tried again at the next turn.
    pub(crate) async fn catch_up(&mut self) {
        if let Err(error) = self.read().await {
            self.read_at = tokio::time::Instant::now();
            tracing::warn!(event = "park_log_read_failed", topic = %self.source,
                partition = self.partition, %error, "read again in a moment");
        }
    }

    /// When `record` (of the source partition) is one of its key's heads, come again and now
    /// handled: writes its resolution.
    pub(crate) fn resolve_if_head(
        &mut self,
        record: &Record,
        group: &str,
        now: chrono::DateTime<chrono::Utc>,
        cancel: CancellationToken,
    ) -> Option<PendingPark> {
        let key = record.key.as_deref()?;
        self.table.get(key)?.heads.get(&record.offset)?;
        let event = ParkEvent::Resolved {
            key: key.to_vec(),
            head: record.offset,
            how: crate::park::How::Handled,
            by: group.to_string(),
            at: now,
        };
        Some(self.write(event, cancel))
    }

    /// Resolves, as expired, every head that left more than `max_age` before `now`: their
    /// keys' parked records follow them to the dead-letter topic when released. The writes,
    /// to be awaited.
    pub(crate) fn expire(
        &mut self,
        now: chrono::DateTime<chrono::Utc>,
        max_age: std::time::Duration,
        cancel: &CancellationToken,
    ) -> Vec<PendingPark> {
        let Ok(max_age) = chrono::TimeDelta::from_std(max_age) else {
            return Vec::new();
        };
        let expired: Vec<(Vec<u8>, i64)> = self
            .table
            .keys()
            .flat_map(|(key, parked)| {
                parked
                    .heads
                    .values()
                    .filter(|h| h.since + max_age <= now)
                    .map(move |h| (key.to_vec(), h.offset))
            })
            .collect();
        expired
            .into_iter()
            .map(|(key, head)| {
                tracing::warn!(event = "parked_key_expired", topic = %self.source,
                    partition = self.partition, key = %String::from_utf8_lossy(&key), head,
                    "its head was not resolved within park_max_age: its parked records follow it to the dead-letter topic");
                let event = ParkEvent::Resolved {
                    key,
                    head,
                    how: crate::park::How::Expired,
                    by: "park_max_age".into(),
                    at: now,
                };
                self.write(event, cancel.clone())
            })
            .collect()
    }

    /// The keys whose records may be released.
    pub(crate) fn releasable(&self) -> Vec<Vec<u8>> {
        self.table.releasable().map(<[u8]>::to_vec).collect()
    }

    /// Parks `record` (its key is parked): counts it at once and writes it to the log.
    pub(crate) fn park(&mut self, record: &Record, cancel: CancellationToken) -> PendingPark {
        let event = ParkEvent::Parked {
            key: record.key.clone().unwrap_or_default(),
            offset: record.offset,
            id: record.id.clone(),
            timestamp: record.timestamp.map(|t| t.timestamp_millis()),
            headers: record.headers.clone(),
            value: record.payload.clone(),
        };
        self.write(event, cancel)
    }

    /// `record` (a record of the source partition, with a key) leaves for `cause` at `now`:
    /// its key is parked behind it at once, and the head written.
    pub(crate) fn head(
        &mut self,
        record: &Record,
        cause: Cause,
        now: chrono::DateTime<chrono::Utc>,
        cancel: CancellationToken,
    ) -> PendingPark {
        let event = head_of(record, cause, now);
        self.write(event, cancel)
    }

    /// Writes that the parked records of `key` were settled through park-log offset
    /// `through`, source offset `offset`.
    pub(crate) fn released(
        &mut self,
        key: &[u8],
        offset: i64,
        through: i64,
        cancel: CancellationToken,
    ) -> PendingPark {
        let event = ParkEvent::Released {
            key: key.to_vec(),
            offset,
            through,
        };
        self.write(event, cancel)
    }

    fn write(&mut self, event: ParkEvent, cancel: CancellationToken) -> PendingPark {
        self.table.apply_written(&event);
        self.report(false);
        let pending = self.log.write(&self.source, self.partition, &event, cancel);
        if matches!(event, ParkEvent::Released { .. }) {
            self.trim();
        }
        pending
    }

    /// The log's events from `from` up to its end (those not read before count in the table
    /// as they come).
    pub(crate) async fn read_from(
        &mut self,
        from: i64,
    ) -> Result<Vec<(i64, ParkEvent)>, rdkafka::error::KafkaError> {
        let (events, next) = self.reader.read(from).await?;
        let read = self.table.next();
        for (at, event) in events.iter().filter(|(at, _)| *at >= read) {
            self.table.apply(*at, event);
        }
        self.table.read_to(next);
        self.report(true);
        if next > read {
            self.read_at = tokio::time::Instant::now();
        }
        self.trim();
        Ok(events)
    }
}

/// The head event of `record` leaving for `cause` at `now`.
pub(crate) fn head_of(
    record: &Record,
    cause: Cause,
    now: chrono::DateTime<chrono::Utc>,
) -> ParkEvent {
    ParkEvent::Head {
        key: record.key.clone().unwrap_or_default(),
        offset: record.offset,
        id: record.id.clone(),
        cause,
        at: now,
    }
}

impl Drop for PartitionPark {
    /// The partition is no longer this member's: its owner shows it now.
    fn drop(&mut self) {
        let labels = [self.source.as_str(), &self.partition.to_string()];
        let m = &self.metrics;
        for gauge in [&m.parked_keys, &m.parked_records, &m.parked_oldest_seconds] {
            let _ = gauge.remove_label_values(&labels);
        }
    }
}
