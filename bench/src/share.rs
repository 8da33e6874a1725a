//! The share-group benchmark (`--share-members 1,2,4`, on Apache Kafka 4.2+ with share groups;
//! `KAFKA_VERSION=4.4.0 scripts/kafka.sh start` starts one): records/s, CPU and peak RSS with
//! a 1 ms handler, at 1, 2 and 4 members of one share group on **one** partition — the point
//! of share groups: the rate grows with members, not partitions.
//!
//! Beside each other, each in a process of its own on a topic of its own, `--share-runs` times
//! (default 3), the table giving the median and the spread:
//! - `kafka-dlq share`: `ShareConsumer`s (one per member, all in one process), one record at a
//!   time per member (`max_in_flight` 1) out of the 16 a fetch acquires
//!   (`share_acquire_records`, its default): the same concurrency as the Java peer;
//! - `kafka-dlq share, max_in_flight 16`: each member handles the 16 records of a fetch at once;
//! - `KafkaShareConsumer`: kafka-clients 4.4 (`bench/peers/share-consumer`), one thread and
//!   consumer per member, up to 16 records per poll handled one after another, each ACCEPTed;
//! - `KafkaShareConsumer, 16 at once`: the same, a poll's records handed to 16 threads per
//!   member and ACCEPTed once all are done;
//! - `kafka-dlq group`: the consumer group on the same partition, for scale: one member works
//!   it, however many run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kafka_dlq::config::Consumption;
use kafka_dlq::{Handler, HandlerError, Record};

use crate::figures::{cpu_time, peak_rss_mb, Figures};
use crate::handler::downstream;
use crate::peers::{PeerRun, Peers};
use crate::stats::{median, spread};
use crate::topic;

/// Records per producer batch: jobs as services write them, a few per request. The broker
/// hands a share member at least a whole batch (`batch_optimized` acquisition, what kafka-dlq
/// uses), so with batches of thousands one member takes them all.
const PRODUCER_BATCH: u32 = 16;

/// The variants, by name (`--run-share <name>`).
pub const VARIANTS: &[&str] = &["share", "java-share", "share-16", "java-share-16", "group"];

/// What the table calls a variant.
fn label(variant: &str) -> &'static str {
    match variant {
        "share" => "kafka-dlq share, one at a time",
        "share-16" => "kafka-dlq share, max_in_flight 16",
        "java-share" => "KafkaShareConsumer, one at a time",
        "java-share-16" => "KafkaShareConsumer, 16 at once",
        _ => "kafka-dlq group (in order)",
    }
}

/// Runs the benchmark: every variant at every member count, `runs` times, and prints the
/// table.
pub async fn bench(
    brokers: &str,
    members: &[usize],
    records: u64,
    runs: usize,
    only: &[String],
    peers: &Peers,
) -> anyhow::Result<()> {
    if let Some(unknown) = only.iter().find(|v| !VARIANTS.contains(&v.as_str())) {
        bail!("--share-variants: no variant {unknown} (the variants: {VARIANTS:?})");
    }
    let variants: Vec<&str> = VARIANTS
        .iter()
        .copied()
        .filter(|v| only.is_empty() || only.iter().any(|o| o == v))
        .collect();
    if variants.iter().any(|v| v.starts_with("java-")) {
        peers.ensure_built().await?;
    }
    let mut results: Vec<((&str, usize), Vec<Figures>)> = Vec::new();
    for run in 0..runs {
        for &m in members {
            for &variant in &variants {
                if variant == "group" && m != members[0] {
                    continue;
                }
                let topic = format!("share-bench-{:016x}", rand());
                let group = format!("{topic}-{variant}");
                topic::create(brokers, &[(&topic, 1)]).await?;
                topic::produce_in_batches(
                    brokers,
                    &topic,
                    records,
                    &topic::Uniform {
                        partitions: 1,
                        value_bytes: 200,
                    },
                    PRODUCER_BATCH,
                )
                .await?;
                let figures = if let Some(scenario) = variant.strip_prefix("java-") {
                    peers
                        .run(PeerRun {
                            project: "share-consumer",
                            scenario,
                            brokers,
                            topic: &topic,
                            group: &group,
                            expect: records,
                            concurrency: m,
                        })
                        .await?
                } else {
                    child(brokers, &topic, variant, m, records).await?
                };
                eprintln!(
                    "run {run}: {} with {m} member(s): {:.0} records/s, {:.1} µs CPU/record, {:.0} MB",
                    label(variant),
                    figures.rate(),
                    figures.cpu_us(),
                    figures.rss_mb
                );
                match results.iter_mut().find(|(k, _)| *k == (variant, m)) {
                    Some((_, all)) => all.push(figures),
                    None => results.push(((variant, m), vec![figures])),
                }
            }
        }
    }
    println!("\nShare groups: {records} records of 200 B on one partition (producer batches of {PRODUCER_BATCH}), 1 ms per record, {runs} run(s); median (min–max)\n");
    println!("| members | consumer | records/s | CPU µs/record | peak RSS MB |");
    println!("|---|---|---|---|---|");
    for ((variant, m), all) in &results {
        let rates: Vec<f64> = all.iter().map(Figures::rate).collect();
        let cpu: Vec<f64> = all.iter().map(Figures::cpu_us).collect();
        let rss: Vec<f64> = all.iter().map(|f| f.rss_mb).collect();
        println!(
            "| {m} | {} | {} | {} | {} |",
            label(variant),
            spread(&rates, 0),
            spread(&cpu, 1),
            spread(&rss, 0)
        );
        println!(
            "RESULT share-{variant}-{m} records_per_s={:.0} cpu_us={:.1} rss_mb={:.0}",
            median(&rates),
            median(&cpu),
            median(&rss)
        );
    }
    Ok(())
}

fn rand() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32
}

/// Runs `variant` in a child process (`--run-share`) and reads its figures.
async fn child(
    brokers: &str,
    topic: &str,
    variant: &str,
    members: usize,
    records: u64,
) -> anyhow::Result<Figures> {
    let (members, records) = (members.to_string(), records.to_string());
    let args = [
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--run-share",
        variant,
        "--share-members",
        &members,
        "--share-records",
        &records,
    ];
    let stdout = crate::child::run(&args, variant).await?;
    Figures::parse(&stdout).with_context(|| format!("{variant} printed no figures: {stdout}"))
}

/// The 1 ms handler, counting: the clock starts at the first call, stops at the `target`-th
/// handled record.
struct OneMs {
    first: Arc<OnceLock<(Instant, Duration)>>,
    last: Arc<OnceLock<(Instant, Duration)>>,
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<tokio::sync::Notify>,
}

impl Handler for OneMs {
    async fn handle(&self, _record: &Record) -> Result<(), HandlerError> {
        self.first.get_or_init(|| (Instant::now(), cpu_time()));
        downstream(1).await;
        if self.done.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.last.get_or_init(|| (Instant::now(), cpu_time()));
            self.finished.notify_one();
        }
        Ok(())
    }
}

/// Runs `variant` here with `members` members on `topic` until `records` are handled; prints
/// nothing, returns the figures.
pub async fn run_here(
    brokers: &str,
    topic: &str,
    variant: &str,
    members: usize,
    records: u64,
) -> anyhow::Result<Figures> {
    let (first, last) = (Arc::new(OnceLock::new()), Arc::new(OnceLock::new()));
    let done = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let handler = || OneMs {
        first: first.clone(),
        last: last.clone(),
        done: done.clone(),
        target: records,
        finished: finished.clone(),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let group = format!("{topic}-{variant}");
    let mut tasks = Vec::new();
    for _ in 0..members {
        let config = kafka_dlq::ConsumerConfig {
            max_in_flight: if variant == "share-16" { 16 } else { 1 },
            consumption: if variant == "group" {
                Consumption::Group
            } else {
                Consumption::Share
            },
            ..kafka_dlq::ConsumerConfig::new(brokers, &group, [topic])
        };
        let shutdown = stop.clone().cancelled_owned();
        if variant == "group" {
            let consumer = kafka_dlq::Consumer::new(config, handler())?;
            tasks.push(tokio::spawn(async move { consumer.run(shutdown).await }));
        } else {
            let consumer = kafka_dlq::consumer::ShareConsumer::new(config, handler())?;
            tasks.push(tokio::spawn(async move { consumer.run(shutdown).await }));
        }
    }
    let waited = tokio::time::timeout(Duration::from_secs(540), async {
        let mut reported = Instant::now();
        while last.get().is_none() {
            let _ = tokio::time::timeout(Duration::from_millis(200), finished.notified()).await;
            if reported.elapsed() > Duration::from_secs(10) {
                reported = Instant::now();
                eprintln!(
                    "  {variant}: {} of {records} records",
                    done.load(Ordering::Relaxed)
                );
            }
        }
    })
    .await;
    stop.cancel();
    for task in tasks {
        task.await??;
    }
    if waited.is_err() {
        bail!(
            "{variant}: {} of {records} records handled in 9 minutes",
            done.load(Ordering::Relaxed)
        );
    }
    let (start, start_cpu) = *first.get().expect("a first record");
    let (end, end_cpu) = *last.get().expect("the last record");
    Ok(Figures {
        records,
        elapsed: end - start,
        cpu: end_cpu.saturating_sub(start_cpu),
        rss_mb: peak_rss_mb(),
        ..Figures::default()
    })
}
