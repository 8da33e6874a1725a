//! The park log as the consumer uses it, behind a seam ([`ParkLog`]) so that the simulation
//! runs the workers' parking against a park log of its own world: events written (each
//! acknowledged with its park-log offset, written again after a failure until stopped) and
//! a partition's events read from an offset up to the log's end. [`KafkaParkLog`] is the real
//! one: writes on the dead-letter producer, reads with a client of its own per partition.

use std::future::Future;
use std::pin::Pin;

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::{ClientConfig, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::backoff::ExponentialBackoff;
use crate::kafka::send::{send_until_acknowledged, Failed, Written};
use crate::kafka::LogContext;
use crate::park::{park_topic, ParkEvent};
use crate::stopped::Stopped;

/// A park event's write: its park-log offset once acknowledged, or [`Stopped`] when `cancel`
/// fired between two tries.
pub(crate) type PendingPark = Pin<Box<dyn Future<Output = Result<i64, Stopped>> + Send>>;

/// A read of a park partition: its events from the offset asked (or the log's start, if that
/// was deleted) up to its end when asked, and the offset after them.
pub(crate) type ParkRead =
    Pin<Box<dyn Future<Output = Result<(Vec<(i64, ParkEvent)>, i64), KafkaError>> + Send>>;

/// See the module docs. The park log of a source partition is partition `partition` of the
/// group's park log of `source` ([`park_topic`]).
pub(crate) trait ParkLog: Send + Sync + 'static {
    /// Hands `event` to the producer now (so events written one after another keep their
    /// order); the future waits for the acknowledgement, writing again after a failure until
    /// `cancel`.
    fn write(
        &self,
        source: &str,
        partition: i32,
        event: &ParkEvent,
        cancel: CancellationToken,
    ) -> PendingPark;

    /// A reader of `source`'s park partition `partition`.
    fn reader(&self, source: &str, partition: i32) -> Box<dyn ParkReader>;

    /// Deletes the events of `source`'s park partition `partition` before park-log offset
    /// `before` (none of them is needed any more: [`crate::park::ParkTable::low_water`]),
    /// without waiting. A failure is logged; the next trim, from a later offset, covers it.
    fn trim(&self, source: &str, partition: i32, before: i64);
}

/// One park partition's reader.
pub(crate) trait ParkReader: Send {
    /// The events from `from` up to the log's end now ([`ParkRead`]).
    fn read(&mut self, from: i64) -> ParkRead;
}

/// The real [`ParkLog`].
pub(crate) struct KafkaParkLog {
    producer: FutureProducer<LogContext>,
    group: String,
    /// The readers' client settings (the consumer's connection and security).
    readers: ClientConfig,
    /// Deletes records below the low water: made at the first trim.
    admin: std::sync::OnceLock<Option<Arc<AdminClient<LogContext>>>>,
}

impl KafkaParkLog {
    /// Writes with `producer` to `group`'s park logs; reads with clients of `readers`
    /// settings.
    pub(crate) fn new(
        producer: FutureProducer<LogContext>,
        group: &str,
        readers: ClientConfig,
    ) -> Self {
        Self {
            producer,
            group: group.to_string(),
            readers,
            admin: std::sync::OnceLock::new(),
        }
    }
}

impl ParkLog for KafkaParkLog {
    fn write(
        &self,
        source: &str,
        partition: i32,
        event: &ParkEvent,
        cancel: CancellationToken,
    ) -> PendingPark {
        let topic = park_topic(source, &self.group);
        let (headers, value) = event.encode();
        let key = event.key().to_vec();
        let producer = self.producer.clone();
        let first = crate::park::write::send(
            &producer,
            &topic,
            partition,
            &key,
            &headers,
            value.as_deref(),
        );
        let name = event.name();
        Box::pin(async move {
            let backoff = ExponentialBackoff::infrastructure();
            let written = send_until_acknowledged(
                &cancel,
                &backoff,
                (),
                first,
                |()| {
                    crate::park::write::send(
                        &producer,
                        &topic,
                        partition,
                        &key,
                        &headers,
                        value.as_deref(),
                    )
                },
                |(), _| Failed::Later,
                |(), error, delay| {
                    tracing::error!(event = "park_log_write_failed", %topic, partition,
                        park_event = name, %error, retry_in_ms = delay.as_millis() as u64,
                        "the partition does not advance past the record until it succeeds");
                },
            )
            .await?;
            match written {
                Written::Acknowledged((), delivery) => Ok(delivery.offset),
                Written::GaveUp => unreachable!("a park event is written until acknowledged"),
            }
        })
    }

    fn trim(&self, source: &str, partition: i32, before: i64) {
        let topic = park_topic(source, &self.group);
        let admin = self.admin.get_or_init(|| {
            crate::kafka::create_logged(&self.readers)
                .map_err(|error| {
                    tracing::warn!(event = "park_log_trim_failed", %topic, %error,
                        "no admin client: the park log keeps its released events");
                })
                .ok()
                .map(Arc::new)
        });
        let Some(admin) = admin.clone() else {
            return;
        };
        tokio::spawn(async move {
            let mut offsets = TopicPartitionList::new();
            if let Err(error) =
                offsets.add_partition_offset(&topic, partition, rdkafka::Offset::Offset(before))
            {
                tracing::warn!(event = "park_log_trim_failed", %topic, partition, %error);
                return;
            }
            let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
            match admin.delete_records(&offsets, &options).await {
                Ok(done) => {
                    let refused = done.elements().iter().find_map(|e| e.error().err());
                    match refused {
                        None => {
                            tracing::debug!(event = "park_log_trimmed", %topic, partition, before)
                        }
                        Some(error) => tracing::warn!(event = "park_log_trim_failed", %topic,
                            partition, before, %error, "the next trim covers these events"),
                    }
                }
                Err(error) => tracing::warn!(event = "park_log_trim_failed", %topic, partition,
                    before, %error, "the next trim covers these events"),
            }
        });
    }

    fn reader(&self, source: &str, partition: i32) -> Box<dyn ParkReader> {
        Box::new(KafkaParkReader {
            config: self.readers.clone(),
            topic: park_topic(source, &self.group),
            partition,
            consumer: Default::default(),
        })
    }
}

/// A park partition's reader: a client of its own, assigned the one partition (no group),
/// made at its first read and kept for the next.
struct KafkaParkReader {
    config: ClientConfig,
    topic: String,
    partition: i32,
    consumer: std::sync::Arc<std::sync::Mutex<Option<Assigned>>>,
}

/// The reader's client and where its assignment will deliver from next (`None` after a failed
/// read: assigned again at the next).
struct Assigned {
    consumer: BaseConsumer<LogContext>,
    next: Option<i64>,
}

impl ParkReader for KafkaParkReader {
    /// A read from where the last one ended (a catch-up) takes what the assignment fetched
    /// meanwhile, without a round trip: a worker that waited for its log's watermarks and a
    /// fresh fetch every 200 ms spent a third of its time waiting while keys were parked
    /// (the `poison1-park` benchmark row). A read from elsewhere (the start, a release) reads
    /// to the log's end.
    fn read(&mut self, from: i64) -> ParkRead {
        let (config, topic, partition) = (self.config.clone(), self.topic.clone(), self.partition);
        let consumer = self.consumer.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut assigned = consumer.lock().expect("one read at a time");
                if assigned.is_none() {
                    *assigned = Some(Assigned {
                        consumer: crate::park::read::reader(&config)?,
                        next: None,
                    });
                }
                let assigned = assigned.as_mut().expect("made above");
                let read = match assigned.next {
                    Some(next) if next == from => {
                        crate::park::read::read_fetched(&assigned.consumer, &topic, partition, from)
                    }
                    _ => crate::park::read::read_partition(
                        &assigned.consumer,
                        &topic,
                        partition,
                        from,
                    ),
                };
                assigned.next = read.as_ref().ok().map(|(_, next)| *next);
                read
            })
            .await
            .expect("a park read does not panic")
        })
    }
}
