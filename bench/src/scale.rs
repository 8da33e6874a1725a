//! How kafka-dlq's cost grows with the work, beside the bare rdkafka loop, each measurement in
//! processes of its own, `--scale-runs` times (the tables give the median and the spread):
//!
//! - **memory** (`--memory-partitions 12,60,240,1000`): one kafka-dlq member owning every
//!   partition of a topic of 2 KB records, more than each partition's old 1.5 MB queue held,
//!   with a 20 ms downstream, for `--memory-seconds` from its first record: its peak RSS (VmHWM) and the most its
//!   partitions' librdkafka queues held at once (`kafka_dlq_buffered_bytes`, sampled every
//!   50 ms: librdkafka's statistics, every 2 s) and how often a worker dropped a record batch
//!   larger than its queue's share (`kafka_dlq_queue_trims_total`);
//! - **rate** (`--scale-partitions 12,60,240`): records/s and CPU per record of the no-op
//!   handler and of the bare loop, one member each, over `--scale-records` records of 200 B;
//! - **members** (`--scale-members 1,2,3`): the same with 1, 2, 3 members of one group (each a
//!   process of its own, started together) on a topic of `--partitions` partitions: records/s
//!   from the first record any member saw to the last, CPU of all members per record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use kafka_dlq::schema::{
    Codec, DecodedHandler, DecodedRecord, Decoding, Registry, RegistrySettings,
};
use kafka_dlq::{Handler, HandlerError, Record};
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::Message as _;
use tokio_util::sync::CancellationToken;

use crate::figures::{cpu_time, peak_rss_mb};
use crate::handler::downstream;
use crate::stats::{median, spread};
use crate::topic;

/// Bytes of a record's value in the memory table.
const MEMORY_VALUE_BYTES: usize = 2_048;
/// Records per partition in the memory table: 1.6 MB of values, more than the 1.5 MB a
/// partition's own queue held before the consumer-wide bound.
const MEMORY_RECORDS_PER_PARTITION: u64 = 800;
/// The memory table's downstream: 20 ms a call.
const MEMORY_DOWNSTREAM_MS: u64 = 20;
/// A member of the rate tables stops once it has seen no record for this long.
const IDLE_END: Duration = Duration::from_secs(3);

/// The memory table; see the module docs.
pub async fn memory(
    brokers: &str,
    counts: &[i32],
    runs: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    println!("\nMemory: one member owning every partition, {MEMORY_RECORDS_PER_PARTITION} records of {MEMORY_VALUE_BYTES} B per partition, {MEMORY_DOWNSTREAM_MS} ms downstream, {seconds} s, max_buffered_bytes 32 MiB (the default); {runs} run(s), median (min–max)\n");
    println!(
        "| partitions | peak RSS MB | most in the queues MB | queue trims | records handled/s |"
    );
    println!("|---|---|---|---|---|");
    for &partitions in counts {
        let topic = format!("bench-memory-{}-{partitions}", stamp());
        topic::create(brokers, &[(&topic, partitions)]).await?;
        let shape = topic::Uniform {
            partitions,
            value_bytes: MEMORY_VALUE_BYTES,
        };
        topic::produce(
            brokers,
            &topic,
            MEMORY_RECORDS_PER_PARTITION * partitions as u64,
            &shape,
        )
        .await?;
        let (mut rss, mut inbox, mut rate, mut trims) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut made = vec![topic.clone()];
        for run in 0..runs {
            let group = format!("{topic}-{run}");
            made.push(kafka_dlq::record::retry::redrive_topic(&topic, &group));
            let line = child(brokers, &topic, &group, "memory", seconds, None).await?;
            let [r, i, handled, t]: [f64; 4] = parse(&line, "MEMORY")?;
            eprintln!("run {run}: {partitions} partitions: {r:.0} MB peak RSS, {:.1} MB in the queues at most, {t:.0} queue trims, {:.0} records/s", i / 1e6, handled / seconds as f64);
            trims.push(t);
            rss.push(r);
            inbox.push(i / 1e6);
            rate.push(handled / seconds as f64);
        }
        println!(
            "| {partitions} | {} | {} | {} | {} |",
            spread(&rss, 0),
            spread(&inbox, 1),
            spread(&trims, 0),
            spread(&rate, 0)
        );
        println!(
            "RESULT memory-{partitions} rss_mb={:.0} queue_mb={:.1}",
            median(&rss),
            median(&inbox)
        );
        topic::delete(brokers, &made).await?;
    }
    Ok(())
}

/// The rate tables; see the module docs.
pub async fn rate(
    brokers: &str,
    counts: &[i32],
    members: &[usize],
    members_partitions: i32,
    records: u64,
    runs: usize,
) -> anyhow::Result<()> {
    let mut rows: Vec<(String, Vec<Measured>)> = Vec::new();
    let mut record = |label: String, measured: Measured| {
        match rows.iter_mut().find(|(l, _)| *l == label) {
            Some((_, all)) => all.push(measured),
            None => rows.push((label, vec![measured])),
        };
    };
    let mut topics = Vec::new();
    let mut made = Vec::new();
    for &partitions in counts.iter().chain(std::iter::once(&members_partitions)) {
        let topic = format!("bench-scale-{}-{partitions}", stamp());
        topic::create(brokers, &[(&topic, partitions)]).await?;
        let shape = topic::Uniform {
            partitions,
            value_bytes: 200,
        };
        topic::produce(brokers, &topic, records, &shape).await?;
        made.push(topic.clone());
        topics.push((partitions, topic));
    }
    for run in 0..runs {
        for (i, &(partitions, ref topic)) in topics.iter().enumerate() {
            let member_counts: &[usize] = if i < counts.len() { &[1] } else { members };
            for &m in member_counts {
                for variant in ["baseline", "noop"] {
                    let group = format!("{topic}-{variant}-{m}-{run}");
                    if variant == "noop" {
                        made.push(kafka_dlq::record::retry::redrive_topic(topic, &group));
                    }
                    let measured = group_run(brokers, topic, &group, variant, m, None).await?;
                    if measured.records < records {
                        bail!(
                            "{variant} with {m} member(s) saw {} of {records} records",
                            measured.records
                        );
                    }
                    eprintln!(
                        "run {run}: {variant}, {partitions} partitions, {m} member(s): {:.0} records/s, {:.2} µs CPU/record",
                        measured.rate(),
                        measured.cpu_us()
                    );
                    let label = if i < counts.len() {
                        format!("partitions|{partitions}|{variant}")
                    } else {
                        format!("members|{m}|{variant}")
                    };
                    record(label, measured);
                }
            }
        }
    }
    topic::delete(brokers, &made).await?;
    for (table, what) in [
        ("partitions", "partitions (one member)"),
        ("members", "members of one group"),
    ] {
        println!("\nScale by {what}: {records} records of 200 B, no-op handler; {runs} run(s), median (min–max)\n");
        println!("| {table} | consumer | records/s | CPU µs/record | ratio to the bare loop |");
        println!("|---|---|---|---|---|");
        for (label, all) in rows.iter().filter(|(l, _)| l.starts_with(table)) {
            let mut parts = label.split('|').skip(1);
            let (n, variant) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let rates: Vec<f64> = all.iter().map(Measured::rate).collect();
            let cpu: Vec<f64> = all.iter().map(Measured::cpu_us).collect();
            let base = rows
                .iter()
                .find(|(l, _)| *l == format!("{table}|{n}|baseline"))
                .map(|(_, b)| b);
            let ratios: Vec<f64> = match base {
                Some(base) => all
                    .iter()
                    .zip(base)
                    .map(|(a, b)| a.rate() / b.rate())
                    .collect(),
                None => Vec::new(),
            };
            let name = if variant == "noop" {
                "kafka-dlq"
            } else {
                "bare rdkafka loop"
            };
            println!(
                "| {n} | {name} | {} | {} | {} |",
                spread(&rates, 0),
                spread(&cpu, 2),
                if variant == "noop" && !ratios.is_empty() {
                    spread(&ratios, 2)
                } else {
                    "-".into()
                }
            );
            println!(
                "RESULT scale-{table}-{n}-{variant} records_per_s={:.0} cpu_us={:.2}",
                median(&rates),
                median(&cpu)
            );
        }
    }
    Ok(())
}

/// What the members of one run measured, together.
pub struct Measured {
    pub records: u64,
    elapsed: Duration,
    cpu: Duration,
}

impl Measured {
    /// Records per second, first record to last.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU microseconds (all threads) per record.
    pub fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.records.max(1) as f64
    }
}

/// `members` processes of `variant` in `group`, started together; `registry` is the schema
/// registry the `decoded` variant decodes with.
pub async fn group_run(
    brokers: &str,
    topic: &str,
    group: &str,
    variant: &str,
    members: usize,
    registry: Option<&str>,
) -> anyhow::Result<Measured> {
    let mut children = tokio::task::JoinSet::new();
    for _ in 0..members {
        let (b, t, g, v, r) = (
            brokers.to_string(),
            topic.to_string(),
            group.to_string(),
            variant.to_string(),
            registry.map(str::to_string),
        );
        children.spawn(async move { child(&b, &t, &g, &v, 0, r.as_deref()).await });
    }
    let mut lines = Vec::new();
    while let Some(line) = children.join_next().await {
        lines.push(line??);
    }
    let (mut records, mut first, mut last, mut cpu) = (0u64, u128::MAX, 0u128, 0u128);
    for line in &lines {
        let [n, f, l, c]: [f64; 4] = parse(line, "MEMBER")?;
        if n == 0.0 {
            continue;
        }
        records += n as u64;
        first = first.min(f as u128);
        last = last.max(l as u128);
        cpu += c as u128;
    }
    Ok(Measured {
        records,
        elapsed: Duration::from_nanos(last.saturating_sub(first) as u64),
        cpu: Duration::from_nanos(cpu as u64),
    })
}

/// Runs `variant` in a child process (`--run-scale`) and returns its last line.
async fn child(
    brokers: &str,
    topic: &str,
    group: &str,
    variant: &str,
    seconds: u64,
    registry: Option<&str>,
) -> anyhow::Result<String> {
    let seconds = seconds.to_string();
    let mut args = vec![
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--group",
        group,
        "--run-scale",
        variant,
        "--memory-seconds",
        &seconds,
    ];
    if let Some(url) = registry {
        args.extend(["--schema-registry-url", url]);
    }
    let stdout = crate::child::run(&args, variant).await?;
    Ok(stdout.lines().last().unwrap_or_default().to_string())
}

/// The numbers of a `<tag> n1 n2 …` line.
fn parse<const N: usize>(line: &str, tag: &str) -> anyhow::Result<[f64; N]> {
    let mut words = line.split_whitespace();
    if words.next() != Some(tag) {
        bail!("expected a {tag} line, got {line:?}");
    }
    let numbers: Vec<f64> = words.map(str::parse).collect::<Result<_, _>>()?;
    numbers
        .try_into()
        .map_err(|_| anyhow::anyhow!("expected {N} numbers in {line:?}"))
}

pub fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%d%H%M%S").to_string()
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// Counts records; sleeps `ms` first when `ms` > 0.
struct Counting {
    seen: Arc<AtomicU64>,
    ms: u64,
}

impl Handler for Counting {
    async fn handle(&self, _record: &Record) -> Result<(), HandlerError> {
        downstream(self.ms).await;
        self.seen.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl DecodedHandler for Counting {
    async fn handle(&self, record: &Record, decoded: &DecodedRecord) -> Result<(), HandlerError> {
        std::hint::black_box(decoded);
        Handler::handle(self, record).await
    }
}

/// The child's side: `memory` prints `MEMORY <peak RSS MB> <most queued bytes> <records>
/// <queue trims>`
/// after `seconds`; `noop`, `decoded` (the no-op handler behind the decoding layer, on
/// `registry`) and `baseline` print `MEMBER <records> <first ns> <last ns> <cpu ns>`
/// (wall-clock times of the first and last record, looked at every millisecond, the first
/// from the look before it; CPU between them) once no record came for 3 s.
pub async fn run_child(
    brokers: &str,
    topic: &str,
    group: &str,
    variant: &str,
    seconds: u64,
    registry: Option<&str>,
) -> anyhow::Result<()> {
    let seen = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let config = kafka_dlq::ConsumerConfig::new(brokers, group, [topic]);
    let (task, metrics) = match variant {
        "memory" | "noop" => {
            let handler = Counting {
                seen: seen.clone(),
                ms: if variant == "memory" {
                    MEMORY_DOWNSTREAM_MS
                } else {
                    0
                },
            };
            let consumer = kafka_dlq::Consumer::new(config, handler)?;
            let metrics = consumer.metrics();
            let shutdown = stop.clone().cancelled_owned();
            let task =
                tokio::spawn(async move { consumer.run(shutdown).await.map_err(Into::into) });
            (task, Some(metrics))
        }
        "decoded" => {
            let Some(url) = registry else {
                bail!("the decoded variant needs --schema-registry-url");
            };
            let registry = Registry::new(&RegistrySettings {
                url: url.to_string(),
                timeout: Duration::from_secs(10),
                ..Default::default()
            })?;
            let codec = Arc::new(Codec::new(registry, kafka_dlq::schema::DEFAULT_CACHE_BOUND));
            let handler = Counting {
                seen: seen.clone(),
                ms: 0,
            };
            let consumer = kafka_dlq::Consumer::new(config, Decoding::values(codec, handler))?;
            let metrics = consumer.metrics();
            let shutdown = stop.clone().cancelled_owned();
            let task =
                tokio::spawn(async move { consumer.run(shutdown).await.map_err(Into::into) });
            (task, Some(metrics))
        }
        "baseline" => {
            let (seen, stop) = (seen.clone(), stop.clone());
            let task = tokio::spawn(bare_loop(config, seen, stop));
            (task, None)
        }
        other => bail!("unknown scale variant {other}"),
    };
    if variant == "memory" {
        let metrics = metrics.expect("kafka-dlq's metrics");
        // The window starts at the first record: joining the group and creating the redrive
        // topic take longer on a broker with thousands of partitions.
        let joined = Instant::now();
        while seen.load(Ordering::Relaxed) == 0 {
            if joined.elapsed() > Duration::from_secs(120) {
                bail!("no record handled within 120 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let end = Instant::now() + Duration::from_secs(seconds);
        let mut most = 0i64;
        while Instant::now() < end {
            most = most.max(metrics.buffered_bytes());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let handled = seen.load(Ordering::Relaxed);
        let rss = peak_rss_mb();
        stop.cancel();
        task.await??;
        println!("MEMORY {rss} {most} {handled} {}", metrics.queue_trims());
        return Ok(());
    }
    let started = Instant::now();
    let (mut first, mut last) = (None, None);
    let mut count = 0;
    // The window opens at the look before the first records were seen: a topic handled
    // between two looks (3,000 records can be) would otherwise have no length and no CPU.
    let mut before = (unix_ns(), cpu_time());
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now_seen = seen.load(Ordering::Relaxed);
        let at = (unix_ns(), cpu_time(), Instant::now());
        if now_seen != count {
            count = now_seen;
            first.get_or_insert(before);
            last = Some(at);
        }
        before = (at.0, at.1);
        match last {
            Some((_, _, at)) if at.elapsed() > IDLE_END => break,
            None if started.elapsed() > Duration::from_secs(120) => break,
            _ => {}
        }
    }
    stop.cancel();
    task.await??;
    match (first, last) {
        (Some((f, fc)), Some((l, lc, _))) => println!(
            "MEMBER {count} {f} {l} {}",
            lc.saturating_sub(fc).as_nanos()
        ),
        _ => println!("MEMBER 0 0 0 0"),
    }
    Ok(())
}

/// The bare loop with kafka-dlq's fetch settings (as [`crate::baseline`]), counting into
/// `seen` until `stop`.
async fn bare_loop(
    config: kafka_dlq::ConsumerConfig,
    seen: Arc<AtomicU64>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let consumer: StreamConsumer =
        crate::baseline::client_config(&config.brokers, &config.group_id).create()?;
    consumer.subscribe(&[config.topics[0].as_str()])?;
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => break,
            message = consumer.recv() => message?,
        };
        consumer.store_offset_from_message(&message)?;
        std::hint::black_box(message.payload());
        seen.fetch_add(1, Ordering::Relaxed);
    }
    tokio::task::spawn_blocking(move || drop(consumer)).await?;
    Ok(())
}
