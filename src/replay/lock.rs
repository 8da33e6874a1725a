//! One replay of a dead-letter topic at a time.
//!
//! A replay reads the DLQ by manual assignment (its position is a record of the positions
//! topic, not a group membership), so nothing stopped two replays of one DLQ from both sending
//! everything. A [`ReplayLock`] is a consumer-group membership: it joins the group
//! `kafka-dlq-replay-lock-<dlq topic>` on the DLQ topic and holds it while the replay runs. If
//! the group has another member, a replay of that DLQ is running already — whatever its
//! filter: two replays with overlapping filters would both send what both select — and this
//! one refuses to start. Two that
//! join at the same instant both see two members and both refuse: neither sends anything twice.
//! A broker that cannot describe groups (librdkafka's mock cluster, which the embedded demo
//! runs on) leaves the lock unchecked, with a warning.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

/// How long joining the lock group may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The lock consumer's context: notes when a rebalance has given it its (maybe empty) share.
struct Joined(Arc<AtomicBool>);

impl ClientContext for Joined {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::kafka::log_rdkafka(level, fac, message);
    }

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        crate::kafka::oauth_token(config)
    }
}

impl ConsumerContext for Joined {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if matches!(rebalance, Rebalance::Assign(_)) {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another replay of the same DLQ is running.
    #[error(
        "another replay of `{topic}` is running ({members} members in group `{group}`); wait \
         for it to end"
    )]
    Held {
        /// The DLQ topic.
        topic: String,
        /// The lock group.
        group: String,
        /// Its members, this one included.
        members: usize,
    },
    /// The lock group could not be joined or described.
    #[error("cannot take the replay lock `{group}`: {source}")]
    Kafka {
        /// The lock group.
        group: String,
        /// The cause.
        #[source]
        source: KafkaError,
    },
    /// Joining the lock group took longer than 30 s.
    #[error("cannot take the replay lock `{group}`: the group was not joined within 30 s")]
    Timeout {
        /// The lock group.
        group: String,
    },
}

/// A held lock; released (the group left) when dropped.
pub struct ReplayLock {
    stop: Arc<AtomicBool>,
    poller: Option<std::thread::JoinHandle<()>>,
}

impl ReplayLock {
    /// Joins `kafka-dlq-replay-lock-<topic>` on `topic` and checks that no one else is in it.
    /// Blocks for the join (up to 30 s); run it off the async threads.
    pub fn take(
        brokers: &str,
        librdkafka: &crate::kafka::ClientOptions,
        topic: &str,
    ) -> Result<ReplayLock, LockError> {
        let group = format!("{}-lock-{topic}", crate::dlq_reader::REPLAY_GROUP);
        let kafka = |source| LockError::Kafka {
            group: group.clone(),
            source,
        };
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            // A member joining makes the holder rejoin at its next heartbeat: keep that short,
            // so a second replay learns at once that the lock is held.
            .set("heartbeat.interval.ms", "500")
            // A holder killed outright keeps its membership until this passes: the console's
            // redrive lease moves to another replica only after it (redrive_record::LEASE).
            .set("session.timeout.ms", "10000");
        librdkafka.apply(&mut config);
        let joined = Arc::new(AtomicBool::new(false));
        let consumer: BaseConsumer<Joined> =
            crate::kafka::create(&config, Joined(joined.clone())).map_err(kafka)?;
        consumer.subscribe(&[topic]).map_err(kafka)?;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        while !joined.load(Ordering::Acquire) {
            if Instant::now() > deadline {
                return Err(LockError::Timeout { group });
            }
            let _ = consumer.poll(Duration::from_millis(100));
        }
        let members = match consumer.fetch_group_list(Some(&group), Duration::from_secs(10)) {
            Ok(groups) => groups
                .groups()
                .iter()
                .find(|g| g.name() == group)
                .map_or(1, |g| g.members().len()),
            // librdkafka's mock cluster (the embedded demo) cannot describe groups.
            Err(KafkaError::GroupListFetch(
                rdkafka::types::RDKafkaErrorCode::UnsupportedFeature,
            )) => {
                tracing::warn!(event = "replay_lock_unchecked", %group,
                    "the broker cannot describe consumer groups: another replay of this DLQ would not be detected");
                1
            }
            Err(e) => return Err(kafka(e)),
        };
        if members > 1 {
            return Err(LockError::Held {
                topic: topic.to_string(),
                group,
                members,
            });
        }
        // Poll while the replay runs, so that the membership outlives max.poll.interval.ms.
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let _ = consumer.poll(Duration::from_millis(200));
                }
                consumer.unsubscribe();
            })
        };
        Ok(ReplayLock {
            stop,
            poller: Some(poller),
        })
    }
}

impl Drop for ReplayLock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
    }
}
