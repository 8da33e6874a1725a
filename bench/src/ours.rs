//! One pass of a kafka-dlq scenario in this process: the library's [`Consumer`] with the
//! scenario's handler, until the handler is done with the records it waits for.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::bail;
use kafka_dlq::config::Ordering;
use kafka_dlq::{Consumer, ConsumerConfig};
use tokio_util::sync::CancellationToken;

use crate::figures::{peak_rss_mb, settle_quantile, since, Figures};
use crate::handler::{Behaviour, BenchHandler, Counts, Goal};

/// When a kafka-dlq scenario ends.
#[derive(Clone, Copy)]
pub enum End<'a> {
    /// When the handler has seen this many records of each partition (a permanent failure
    /// counts as seen) and every dead letter is acknowledged.
    Partitions(&'a [u64]),
    /// When the handler has accepted this many records.
    Records(u64),
}

/// One pass of a kafka-dlq scenario.
pub struct Run<'a> {
    pub brokers: &'a str,
    /// How the clients reach the brokers.
    pub options: &'a kafka_dlq::kafka::ClientOptions,
    pub group: &'a str,
    pub topic: &'a str,
    pub partitions: i32,
    pub behaviour: Behaviour,
    pub end: End<'a>,
    pub ordering: Ordering,
    /// Records in flight per partition in key order.
    pub max_in_flight: usize,
    /// Exactly once: the scenario ends once its records' transactions committed.
    pub exactly_once: bool,
    /// `key_order_after_failure = "park"`: the scenario ends once every record that left
    /// holds its key parked (the main topic's keys are unique: a key per dead letter).
    pub park: bool,
}

/// Runs kafka-dlq with `run.behaviour` until `run.end`.
pub async fn run(run: Run<'_>) -> anyhow::Result<Figures> {
    let config = ConsumerConfig {
        ordering: run.ordering,
        max_in_flight: run.max_in_flight,
        exactly_once: run.exactly_once,
        key_order_after_failure: match run.park {
            true => kafka_dlq::config::KeyOrderAfterFailure::Park,
            false => kafka_dlq::config::KeyOrderAfterFailure::Continue,
        },
        max_retries: 1,
        backoff_initial: Duration::from_millis(600_000),
        backoff_max: Duration::from_millis(600_000),
        shutdown_timeout: Duration::from_millis(2_000),
        librdkafka: run.options.clone(),
        ..ConsumerConfig::new(run.brokers, run.group, [run.topic])
    };
    let (settled, goal) = match run.end {
        End::Partitions(targets) => (targets.iter().sum(), Some(Arc::new(Goal::new(targets)))),
        End::Records(n) => (n, None),
    };
    let started = Arc::new(OnceLock::new());
    let seen = Arc::new(Counts::new(run.partitions));
    let failed = Arc::new(AtomicU64::new(0));
    let handler = BenchHandler {
        behaviour: run.behaviour,
        first: started.clone(),
        seen: seen.clone(),
        failed: failed.clone(),
        goal: goal.clone(),
    };
    let consumer = Consumer::new(config, handler)?;
    let metrics = consumer.metrics();
    let stop = CancellationToken::new();
    let mut task = tokio::spawn(consumer.run(stop.clone().cancelled_owned()));
    let mut last_progress = Instant::now();
    let mut last_seen = 0;
    let mut progressing = |at_most: Duration| -> anyhow::Result<()> {
        let now_seen = seen.total();
        if now_seen != last_seen {
            last_seen = now_seen;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > at_most {
            bail!("no progress for {at_most:?} at {now_seen} of {settled} records");
        }
        Ok(())
    };
    let mut end = None;
    match &goal {
        Some(goal) if settled > 0 => loop {
            tokio::select! {
                _ = goal.notify.notified() => {
                    end = goal.reached.get().copied();
                    break;
                }
                stopped = &mut task => bail!("the consumer stopped early: {:?}", stopped?),
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    progressing(Duration::from_secs(60))?
                }
            }
        },
        _ => {
            while seen.total() < settled {
                if task.is_finished() {
                    bail!("the consumer stopped early: {:?}", task.await?);
                }
                progressing(Duration::from_secs(60))?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    // Settled means dead letters acknowledged too.
    let dead_letters = failed.load(AtomicOrdering::Relaxed);
    let waited = Instant::now();
    while (metrics.total("kafka_dlq_records_dead_lettered_total") as u64) < dead_letters {
        if waited.elapsed() > Duration::from_secs(60) {
            bail!("{dead_letters} dead letters not all acknowledged after 60 s");
        }
        end = None;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Parking: settled means each dead letter's key parked (its head in the park log, the
    // partition's table holding it). A run that parked nothing measured nothing.
    if run.park {
        let waited = Instant::now();
        while (metrics.total("kafka_dlq_parked_keys") as u64) < dead_letters {
            if waited.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{} of {dead_letters} keys parked after 60 s",
                    metrics.total("kafka_dlq_parked_keys")
                );
            }
            end = None;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        eprintln!(
            "{}: {} keys parked",
            run.group,
            metrics.total("kafka_dlq_parked_keys")
        );
    }
    // Exactly once: settled means committed in a transaction.
    if run.exactly_once {
        let committed = || {
            metrics
                .render()
                .lines()
                .find(|l| l.starts_with("kafka_dlq_transaction_records_sum"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        let waited = Instant::now();
        while committed() < settled {
            if waited.elapsed() > Duration::from_secs(60) {
                bail!("{} of {settled} records committed after 60 s", committed());
            }
            end = None;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let first = started.get().copied();
    let (elapsed, cpu) = match (first, end) {
        (Some((t0, c0)), Some((t1, c1))) => (t1 - t0, c1.saturating_sub(c0)),
        _ => since(first),
    };
    let rss_mb = peak_rss_mb();
    let figures = Figures {
        records: settled,
        elapsed,
        p50: settle_quantile(metrics.registry(), 0.5),
        p99: settle_quantile(metrics.registry(), 0.99),
        rss_mb,
        cpu,
    };
    stop.cancel();
    task.await??;
    Ok(figures)
}
