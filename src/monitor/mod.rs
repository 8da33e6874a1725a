//! The DLQ monitor: watches dead-letter topics and tells the team when their volume changes.
//!
//! A dead-letter topic nobody watches is slow data loss. The monitor reads the DLQ topics in a
//! consumer group of its own (default `kafka-dlq-monitor`) and sends one message per incident:
//!
//! - **increase**: new dead letters are gathered over a window (`window_ms`, default 30 s, from
//!   the first new one) into one alert: how many, how many are outstanding, by source topic and
//!   error kind, the most frequent errors grouped by a normalised [fingerprint](crate::fingerprint::fingerprint)
//!   (an error never seen before is marked *first seen*), a few record ids, and the exact
//!   commands to inspect and replay. Alerts are at least `min_interval_ms` (default 60 s)
//!   apart, except that an alert with a never-seen error goes out as soon as its window closes.
//! - **decrease** and **resolved**: every `check_interval_ms` (default 10 s) the monitor counts
//!   the outstanding dead letters — on each DLQ partition, the records after both the log start
//!   (retention) and the replay position (the committed offset of group `kafka-dlq-replay`,
//!   which `kafka-dlq dlq replay` advances) — and says when that number went down, or to zero.
//! - **expired**: dead letters that retention deleted before a replay passed them are counted
//!   apart and announced as such (never as *went down* or *resolved*): they are gone unhandled.
//!
//! Payloads are never sent unless `include_payloads` is set: they may hold personal data.
//!
//! The monitor commits its position only after the alert covering those records was delivered
//! (or refused for good, and logged), so after a restart it neither repeats nor loses an alert.
//! Slack trouble never touches record processing: the monitor runs on its own consumer and task,
//! delivery is retried (429 after `Retry-After`, 5xx and network errors with backoff) and the
//! pending alert goes out once Slack is back. With no Slack configured, alert texts go to the log.

pub mod alert;
pub mod blocks;
mod delivery;
mod mrkdwn;
mod seen;
pub mod slack;
mod thread;
mod volume;
mod window;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::{ClientConfig, Message};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use alert::{Alert, Increase};
pub use blocks::{Links, SlackMessage};
pub use slack::{DeliveryError, Notifier, Secret, SlackTarget};
pub use volume::{count, outstanding, CountError, DlqCount};

use delivery::{deliver_all, send_or_stop};
use volume::Volume;

use crate::config::ConfigError;
use crate::kafka::LogContext;

/// Settings of the monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Dead-letter topics to watch.
    pub dlq_topics: Vec<String>,
    /// The monitor's consumer group (its position survives restarts). Default
    /// `kafka-dlq-monitor`.
    pub group_id: String,
    /// How long new dead letters are gathered into one alert. Default 30000 ms.
    pub window_ms: u64,
    /// Least time between two increase alerts (unless a never-seen error is in one).
    /// Default 60000 ms.
    pub min_interval_ms: u64,
    /// How often the outstanding volume is counted. Default 10000 ms.
    pub check_interval_ms: u64,
    /// Put a few payloads in alerts. Default false.
    pub include_payloads: bool,
    /// Where alerts go. Default: the log.
    pub slack: SlackTarget,
    /// Where an alert's buttons lead: the runbook, and the operator's own page for a topic.
    pub links: Links,
    /// Raw librdkafka properties, applied last.
    pub librdkafka: crate::kafka::ClientOptions,
    /// Where kafka-dlq keeps its state ([`crate::state`]): the replay positions the count
    /// starts from, and the audit (dead letters the console discarded or a filtered replay
    /// sent are not outstanding, [`crate::outstanding`]); with its key, unsealed records are
    /// ignored. Default `kafka-dlq-audit` and its positions topic, unsealed.
    pub state: crate::state::StateTopics,
    /// The alert scope (`--where`): only the dead letters this filter keeps are alerted on
    /// and counted; `None`: every one. A scoped count reads the outstanding dead letters
    /// (the console's way) rather than counting offsets.
    pub scope: Option<crate::dlq_reader::Filter>,
}

impl MonitorConfig {
    /// The defaults for watching `dlq_topics` on `brokers`.
    pub fn new<T: Into<String>>(brokers: &str, dlq_topics: impl IntoIterator<Item = T>) -> Self {
        Self {
            brokers: brokers.to_string(),
            dlq_topics: dlq_topics.into_iter().map(Into::into).collect(),
            group_id: "kafka-dlq-monitor".into(),
            window_ms: 30_000,
            min_interval_ms: 60_000,
            check_interval_ms: 10_000,
            include_payloads: false,
            slack: SlackTarget::Log,
            links: Links::default(),
            librdkafka: crate::kafka::ClientOptions::new(),
            state: crate::state::StateTopics::default(),
            scope: None,
        }
    }

    /// Checks every setting; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::new("brokers", &self.brokers, "is required"));
        }
        crate::config::check_options(&self.librdkafka)?;
        if self.dlq_topics.is_empty() {
            return Err(ConfigError::new(
                "dlq_topics",
                "",
                "at least one topic is required",
            ));
        }
        for t in &self.dlq_topics {
            crate::dlq::check_topic_name(t).map_err(|r| ConfigError::new("dlq_topics", t, r))?;
        }
        if self.group_id.trim().is_empty() {
            return Err(ConfigError::new(
                "monitor_group_id",
                &self.group_id,
                "is required",
            ));
        }
        for (key, value) in [
            ("window_ms", self.window_ms),
            ("check_interval_ms", self.check_interval_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, value, "must be greater than 0"));
            }
        }
        if let Err(e) = url::Url::parse(&self.links.runbook) {
            return Err(ConfigError::new("runbook_url", &self.links.runbook, e));
        }
        if let Some(console) = &self.links.console {
            match url::Url::parse(console) {
                Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                Ok(_) => {
                    return Err(ConfigError::new(
                        "console_url",
                        console,
                        "expected an http or https URL",
                    ))
                }
                Err(e) => return Err(ConfigError::new("console_url", console, e)),
            }
        }
        if let Some(template) = &self.links.topic_page {
            let example = template.replace("{topic}", "orders-dlt");
            if !template.contains("{topic}") {
                return Err(ConfigError::new("topic_link", template, "needs `{topic}`"));
            }
            if let Err(e) = url::Url::parse(&example) {
                return Err(ConfigError::new("topic_link", template, e));
            }
        }
        Ok(())
    }
}

/// Why the monitor could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MonitorError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused the consumer configuration.
    #[error("could not create the monitor's Kafka consumer: {0}")]
    CreateConsumer(#[source] rdkafka::error::KafkaError),
    /// Subscribing failed.
    #[error("could not subscribe to {0:?}: {1}")]
    Subscribe(Vec<String>, #[source] rdkafka::error::KafkaError),
}

/// An alert waiting for delivery and the DLQ positions to commit once it is delivered.
pub(crate) struct Pending {
    alert: Alert,
    positions: Vec<(String, i32, i64)>,
}

/// The DLQ monitor. See the [module docs](self).
pub struct Monitor {
    config: MonitorConfig,
    notifier: Arc<Notifier>,
    breaker: Option<tokio::sync::watch::Receiver<crate::breaker::BreakerState>>,
}

impl Monitor {
    /// Its settings.
    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// Checks the settings and builds the Slack client.
    pub fn new(config: MonitorConfig) -> Result<Self, MonitorError> {
        config.validate()?;
        let notifier = Arc::new(Notifier::new(config.slack.clone())?);
        Ok(Self {
            config,
            notifier,
            breaker: None,
        })
    }

    /// Also announces when a consumer's outage breaker opens and closes (see
    /// [`Consumer::breaker_state`](crate::Consumer::breaker_state)).
    pub fn with_breaker(
        mut self,
        breaker: tokio::sync::watch::Receiver<crate::breaker::BreakerState>,
    ) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Watches until `shutdown` completes. An alert still being delivered then is given up
    /// (and, uncommitted, sent after the next start).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), MonitorError> {
        let c = &self.config;
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &c.brokers)
            .set("group.id", &c.group_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        c.librdkafka.apply(&mut client);
        let consumer: Arc<StreamConsumer<LogContext>> =
            Arc::new(crate::kafka::create_logged(&client).map_err(MonitorError::CreateConsumer)?);
        let topics: Vec<&str> = c.dlq_topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| MonitorError::Subscribe(c.dlq_topics.clone(), e))?;
        // A state topic that deletes what it holds would make resolved dead letters
        // outstanding again one day: said now, not then.
        tokio::spawn({
            let (brokers, state) = (c.brokers.clone(), c.state.clone());
            let mut config = ClientConfig::new();
            config.set("bootstrap.servers", &c.brokers);
            c.librdkafka.apply(&mut config);
            async move { crate::state::topics::warn(&config, &brokers, &state).await }
        });
        let stop_watch = CancellationToken::new();
        let volume = Volume::new(c).map_err(MonitorError::CreateConsumer)?;
        let watcher = tokio::spawn(volume.watch().run(stop_watch.clone()));
        tracing::info!(event = "monitor_started", dlq_topics = ?c.dlq_topics,
            slack = self.notifier.is_slack());
        for topic in &c.dlq_topics {
            let (brokers, raw, topic) = (c.brokers.clone(), c.librdkafka.clone(), topic.clone());
            let checked = tokio::task::spawn_blocking(move || {
                let checked = crate::dlq_reader::check_exists(&brokers, &raw, &topic);
                (topic, checked)
            })
            .await;
            if let Ok((topic, Err(e))) = checked {
                if crate::dlq_reader::is_unknown_topic(&e) {
                    tracing::warn!(event = "dlq_topic_missing", %topic,
                        "the dead-letter topic does not exist (yet); it counts as empty until it does");
                }
            }
        }

        let stop = CancellationToken::new();
        let (tx, rx) = mpsc::channel::<Pending>(16);
        let restored = {
            let (consumer, topics) = (consumer.clone(), c.dlq_topics.clone());
            tokio::task::spawn_blocking(move || thread::restore(&*consumer, &topics))
                .await
                .unwrap_or_default()
        };
        if let Some(ts) = &restored.0 {
            tracing::info!(event = "monitor_incident_restored", thread_ts = %ts,
                "an incident is open: its follow-ups go to the same Slack thread");
        }
        let delivery = tokio::spawn(deliver_all(
            rx,
            self.notifier.clone(),
            consumer.clone(),
            c.brokers.clone(),
            c.links.clone(),
            restored,
            stop.clone(),
        ));

        let window_len = Duration::from_millis(c.window_ms);
        let min_interval = Duration::from_millis(c.min_interval_ms);
        let mut window = window::Window::default();
        let mut opened: Option<Instant> = None;
        let mut last_sent: Option<Instant> = None;
        let mut positions: HashMap<(String, i32), i64> = HashMap::new();
        let mut seen = seen::Seen::default();
        let mut last_total: Option<u64> = None;
        let mut last_expired: Option<u64> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut check = tokio::time::interval(Duration::from_millis(c.check_interval_ms));
        let mut breaker = self.breaker.clone();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                polled = consumer.recv() => match polled {
                    Ok(m) => {
                        let content = crate::dlq_reader::DlqContent::decode(&m);
                        let entry = crate::dlq_reader::DlqEntry {
                            topic: m.topic().to_string(),
                            partition: m.partition(),
                            offset: m.offset(),
                            timestamp: None,
                            content,
                            unresolved: None,
                        };
                        // Out of scope: passed (its position goes with the next alert), never
                        // a reason for one.
                        if c.scope.as_ref().is_none_or(|f| f.matches(&entry)) {
                            window.add(m.topic(), &entry.content, &mut seen, c.include_payloads);
                            opened.get_or_insert_with(Instant::now);
                        }
                        positions.insert((m.topic().to_string(), m.partition()), m.offset() + 1);
                    }
                    Err(e) => {
                        crate::kafka::warn_gated("monitor_poll_failed", &e, "polling again in 1 s");
                        tokio::select! {
                            biased;
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                },
                _ = tick.tick() => {
                    let due = opened.is_some_and(|o| o.elapsed() >= window_len)
                        && (window.has_new_fingerprint()
                            || last_sent.is_none_or(|s| s.elapsed() >= min_interval));
                    if due {
                        let total = volume.outstanding().await;
                        let pending = Pending {
                            alert: Alert::Increase(window.take(total, &volume.watch().parked())),
                            positions: positions.drain().map(|((t, p), o)| (t, p, o)).collect(),
                        };
                        opened = None;
                        last_sent = Some(Instant::now());
                        last_total = total.or(last_total);
                        if !send_or_stop(&tx, pending, &mut shutdown).await {
                            break;
                        }
                    }
                }
                changed = async { breaker.as_mut().expect("guarded").changed().await }, if breaker.is_some() => {
                    let Ok(()) = changed else {
                        breaker = None; // the consumer is gone
                        continue;
                    };
                    let state = *breaker.as_mut().expect("guarded").borrow_and_update();
                    let alert = match state {
                        crate::breaker::BreakerState::Open => Alert::BreakerOpened,
                        crate::breaker::BreakerState::Closed => Alert::BreakerClosed,
                    };
                    if !send_or_stop(&tx, Pending { alert, positions: vec![] }, &mut shutdown).await {
                        break;
                    }
                }
                _ = check.tick() => {
                    let Some(count) = volume.count().await else { continue };
                    let total = count.outstanding;
                    // Expired since the last check: counted from the first check on, so those
                    // deleted before the monitor started are not announced again at each start.
                    let expired = last_expired.map_or(0, |e| count.expired.saturating_sub(e));
                    last_expired = Some(count.expired);
                    let alert = match last_total {
                        _ if expired > 0 => {
                            tracing::warn!(event = "dead_letters_expired", expired, outstanding = total,
                                "retention deleted dead letters nobody replayed");
                            Some(Alert::Expired { expired, total })
                        }
                        Some(prev) if total < prev && total == 0 => Some(Alert::Resolved { previous: prev }),
                        Some(prev) if total < prev => Some(Alert::Decrease { previous: prev, total }),
                        _ => None,
                    };
                    last_total = Some(total);
                    if let Some(alert) = alert {
                        if !send_or_stop(&tx, Pending { alert, positions: vec![] }, &mut shutdown).await {
                            break;
                        }
                    }
                }
            }
        }
        drop(tx);
        stop.cancel();
        stop_watch.cancel();
        let _ = watcher.await;
        let _ = delivery.await;
        let _ = tokio::task::spawn_blocking(move || drop(consumer)).await;
        tracing::info!(event = "monitor_stopped");
        Ok(())
    }
}
