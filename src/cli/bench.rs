//! `kafka-dlq bench`: what kafka-dlq costs over a plain rdkafka consumer, measured side by side
//! in one run on the same broker and topic.
//!
//! It pre-produces N records (default 1,000,000 × 200 B over 12 partitions), then consumes the
//! whole topic once per scenario, each in a consumer group of its own:
//!
//! - `baseline`: a plain rdkafka `StreamConsumer` loop that stores each offset — the limit;
//! - `noop`: kafka-dlq with a handler that does nothing;
//! - `stalled`: the first record of partition 0 waits out a 10-minute retry; the rate is that
//!   of the other partitions, compared with their share of the no-op rate;
//! - `slow`: each record takes 1 ms of async work (a downstream call); the first
//!   `--slow-records` records;
//! - `slow-keyed`: the same with key-ordered concurrency (`ordering = key`, 64 in flight per
//!   partition); its ratio is to `slow`;
//! - `poison1`: 1% of records fail permanently, so 1% are written to the DLQ; last, because
//!   its dead letters slow a real broker down for the scenarios after it.
//!
//! Each scenario prints records/s, the ratio to the baseline (to no-op for `poison1` and
//! `stalled`), p50/p99 from fetch to settle, the peak RSS of its process (VmHWM) and the CPU
//! time its process used per record (all threads, librdkafka's included), and ends with
//! `RESULT <scenario> records_per_s=<x> ratio=<y> rss_mb=<z>`. The clock starts at the first
//! record, so the group join is not counted, and stops when the handler has seen the last
//! record of every partition (and every dead letter is acknowledged).
//!
//! On the mock cluster, which holds at most 5 MB per partition, the topic is consumed in
//! several passes; each pass runs every scenario once, in turn, each in a process of its own,
//! so that a slow spell of a shared machine falls on all scenarios alike.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use kafka_dlq::config::Ordering;
use kafka_dlq::{Consumer, ConsumerConfig, FailureKind, Handler, HandlerError, Record};
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message};
use tokio_util::sync::CancellationToken;

use super::CliError;

/// Flags of `kafka-dlq bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Run against this cluster instead of librdkafka's mock cluster in-process.
    #[arg(long)]
    brokers: Option<String>,
    /// Records to pre-produce.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Partitions of the benchmark topic.
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Bytes per record value.
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// Records the slow (1 ms per record) scenario handles.
    #[arg(long, default_value_t = 60_000)]
    slow_records: u64,
    /// Scenarios to run, comma-separated (default: all, in order).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Internal: serve librdkafka's mock cluster with these `topic:partitions` and print its
    /// address; the bench runs it in a child process so that its copy of the data does not
    /// count in the consumer's memory.
    #[arg(long, hide = true, value_delimiter = ',')]
    serve_mock: Vec<String>,
    /// Internal: run this one scenario on `--topic` (already produced) and print its figures;
    /// the bench runs each scenario in a process of its own, so that its peak memory is its
    /// own.
    #[arg(long, hide = true, requires = "topic")]
    run_scenario: Option<String>,
    /// Internal: the topic of `--run-scenario`.
    #[arg(long, hide = true)]
    topic: Option<String>,
    /// Internal: which pass over the topic `--run-scenario` makes (names its group).
    #[arg(long, hide = true, default_value_t = 0)]
    pass: u64,
}

/// Every scenario, in the order they run. `poison1` runs last: its dead letters slow a real
/// broker down for a while (tansu's sqlite: `stalled` measured 0.06 of its share right after it,
/// 1.00 before it).
const ALL: [&str; 6] = [
    "baseline",
    "noop",
    "stalled",
    "slow",
    "slow-keyed",
    "poison1",
];

/// One scenario's figures.
#[derive(Default)]
struct Figures {
    records: u64,
    elapsed: Duration,
    p50: Option<Duration>,
    p99: Option<Duration>,
    rss_mb: f64,
    /// CPU time the scenario's process used (all its threads, librdkafka's included) while
    /// the clock ran.
    cpu: Duration,
}

impl Figures {
    /// Adds another pass: records and times add up; quantiles and peak memory are the worst
    /// pass's.
    fn add(&mut self, pass: Figures) {
        self.records += pass.records;
        self.elapsed += pass.elapsed;
        self.cpu += pass.cpu;
        self.rss_mb = self.rss_mb.max(pass.rss_mb);
        self.p50 = self.p50.max(pass.p50);
        self.p99 = self.p99.max(pass.p99);
    }

    fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU microseconds per record.
    fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.records.max(1) as f64
    }
}

/// CPU time used so far by this process, all threads.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A count per partition, each on its own cache line: the workers of different partitions
/// run on different threads, and one shared counter bumped for every record would cost the
/// scenario more than the plain loop's local count costs the baseline.
struct Counts(Box<[Counter]>);

#[repr(align(128))]
#[derive(Default)]
struct Counter(std::sync::atomic::AtomicU64);

impl Counts {
    fn new(partitions: i32) -> Self {
        Self((0..partitions.max(1)).map(|_| Counter::default()).collect())
    }

    /// Counts one more for `partition`; returns its count now.
    fn add(&self, partition: i32) -> u64 {
        let shard = &self.0[partition as usize % self.0.len()];
        shard.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    fn total(&self) -> u64 {
        self.0
            .iter()
            .map(|c| c.0.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }
}

/// What the handler does in a scenario.
#[derive(Clone, Copy)]
enum Behaviour {
    Noop,
    Poison1,
    Stalled,
    Slow,
}

struct BenchHandler {
    behaviour: Behaviour,
    /// When the handler was first called, and the process's CPU time then: the clock's start.
    first: std::sync::Arc<std::sync::OnceLock<(Instant, Duration)>>,
    /// Records the handler is done with (accepted or failed permanently), per partition.
    seen: std::sync::Arc<Counts>,
    /// Records that failed permanently: the dead letters to wait for.
    failed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    goal: Option<std::sync::Arc<Goal>>,
}

impl Handler for BenchHandler {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        self.first.get_or_init(|| (Instant::now(), cpu_time()));
        let result = self.outcome(record).await;
        let done = match &result {
            Ok(()) => true,
            Err(e) if e.kind() == FailureKind::Permanent => {
                self.failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                true
            }
            Err(_) => false,
        };
        if done {
            let seen = self.seen.add(record.partition);
            if let Some(goal) = &self.goal {
                goal.saw(record.partition, seen);
            }
        }
        result
    }
}

impl BenchHandler {
    async fn outcome(&self, record: &Record) -> Result<(), HandlerError> {
        match self.behaviour {
            Behaviour::Noop => Ok(()),
            Behaviour::Poison1 if record.offset % 100 == 0 => {
                Err(HandlerError::permanent("poison record"))
            }
            Behaviour::Poison1 => Ok(()),
            Behaviour::Stalled if record.partition == 0 && record.offset == 0 => {
                Err(HandlerError::transient("stuck downstream for partition 0"))
            }
            Behaviour::Stalled => Ok(()),
            Behaviour::Slow => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok(())
            }
        }
    }
}

/// Runs the benchmark.
pub async fn run(args: BenchArgs) -> Result<(), CliError> {
    bench(args).await.map_err(CliError::Runtime)
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if !args.serve_mock.is_empty() {
        return serve_mock(&args.serve_mock).await;
    }
    if let (Some(scenario), Some(topic), Some(brokers)) =
        (&args.run_scenario, &args.topic, &args.brokers)
    {
        let figures = run_scenario(&args, brokers, topic, scenario).await?;
        println!(
            "FIGURES {} {} {} {} {} {}",
            figures.records,
            figures.elapsed.as_nanos(),
            figures.p50.map_or(0, |d| d.as_nanos()),
            figures.p99.map_or(0, |d| d.as_nanos()),
            peak_rss_mb(),
            figures.cpu.as_nanos()
        );
        return Ok(());
    }
    let scenarios: Vec<String> = if args.scenarios.is_empty() {
        ALL.iter().map(|s| s.to_string()).collect()
    } else {
        args.scenarios.clone()
    };
    for s in &scenarios {
        if !ALL.contains(&s.as_str()) {
            bail!("unknown scenario `{s}`; expected one of {}", ALL.join(", "));
        }
    }
    let run_id = chrono::Utc::now().format("%Y%m%d%H%M%S").to_string();
    let topic = format!("bench-{run_id}");
    let dlq = format!("{topic}-dlt");
    let mut args = args;
    // On the mock cluster, how many times each scenario consumes the topic (see `passes`).
    let mut passes = 1;
    let mock = match &args.brokers {
        Some(_) => None,
        None => {
            // librdkafka's mock cluster keeps at most 5 MB per partition and drops older
            // records; the topic holds what fits and each scenario consumes it several times.
            let per_record = args.value_bytes as u64 + 70;
            let cap = (4_500_000 / per_record * args.partitions as u64).max(1);
            if args.records > cap {
                passes = args.records.div_ceil(cap);
                println!(
                    "note: the mock cluster keeps at most 5 MB per partition: the topic holds {cap} records, and each scenario consumes it {passes} times, each time in a new group (use --brokers for one pass over {} records)",
                    args.records
                );
                args.records = cap;
            }
            Some(MockChild::start(&[(&topic, args.partitions), (&dlq, 1)]).await?)
        }
    };
    let brokers = match (&args.brokers, &mock) {
        (Some(b), _) => b.clone(),
        (None, Some(m)) => m.bootstrap.clone(),
        (None, None) => unreachable!(),
    };
    if mock.is_none() {
        super::demo::create_topics(&brokers, &[(&topic, args.partitions), (&dlq, 1)]).await?
    }
    println!(
        "broker: {} | topic {topic}: {} records x {} B over {} partitions",
        if mock.is_some() {
            "librdkafka mock cluster (child process)".to_string()
        } else {
            brokers.clone()
        },
        args.records,
        args.value_bytes,
        args.partitions
    );
    let started = Instant::now();
    produce(
        &brokers,
        &topic,
        args.records,
        args.partitions,
        args.value_bytes,
    )
    .await?;
    println!("produced in {:.1} s\n", started.elapsed().as_secs_f64());
    println!(
        "{:<10} {:>10} {:>12} {:>8} {:>9} {:>9} {:>8} {:>11}",
        "scenario", "records", "records/s", "ratio", "p50", "p99", "rss MB", "cpu µs/rec"
    );

    // Pass by pass, each scenario in turn, so that a slower or faster spell of a shared machine
    // falls on all of them rather than on one. The slow scenarios make one pass: they measure
    // a handler-bound rate and flat memory, which more passes would not change.
    let mut results: HashMap<String, Figures> = HashMap::new();
    for pass in 0..passes {
        for scenario in &scenarios {
            if pass > 0 && scenario.starts_with("slow") {
                continue;
            }
            let figures = scenario_process(&args, &brokers, &topic, scenario, pass).await?;
            results.entry(scenario.clone()).or_default().add(figures);
        }
        if passes > 1 {
            eprintln!("pass {} of {passes} done", pass + 1);
        }
    }
    for scenario in &scenarios {
        let figures = &results[scenario];
        let (ratio, against) = match scenario.as_str() {
            "baseline" => (1.0, "baseline"),
            "poison1" => ratio(&results, "noop", figures.rate()),
            "slow-keyed" => ratio(&results, "slow", figures.rate()),
            "stalled" => {
                let share = f64::from(args.partitions - 1) / f64::from(args.partitions);
                match results.get("noop") {
                    Some(noop) => (figures.rate() / (noop.rate() * share), "no-op share"),
                    None => (f64::NAN, "no-op share"),
                }
            }
            _ => ratio(&results, "baseline", figures.rate()),
        };
        let ms = |d: Option<Duration>| {
            d.map(|d| format!("{:.1}ms", d.as_secs_f64() * 1000.0))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:<10} {:>10} {:>12.0} {:>8.3} {:>9} {:>9} {:>8.1} {:>11.2}   (ratio to {against})",
            scenario,
            figures.records,
            figures.rate(),
            ratio,
            ms(figures.p50),
            ms(figures.p99),
            figures.rss_mb,
            figures.cpu_us()
        );
        println!(
            "RESULT {scenario} records_per_s={:.0} ratio={:.3} rss_mb={:.1}",
            figures.rate(),
            ratio,
            figures.rss_mb
        );
    }
    drop(mock);
    Ok(())
}

/// One pass of one scenario, in this process, in a new group.
async fn run_scenario(
    args: &BenchArgs,
    brokers: &str,
    topic: &str,
    scenario: &str,
) -> anyhow::Result<Figures> {
    // The records of each partition: the scenarios that consume the whole topic end when the
    // handler has seen all of them (all but partition 0's when it is stalled).
    let mut per_partition = Vec::new();
    if matches!(scenario, "noop" | "poison1" | "stalled") {
        for partition in 0..args.partitions {
            per_partition.push(partition_records(brokers, topic, partition).await?);
        }
        if scenario == "stalled" {
            per_partition[0] = 0;
        }
    }
    let group = format!("{topic}-{scenario}-{}", args.pass);
    let whole = End::Partitions(&per_partition);
    let slow = End::Records(args.slow_records.min(args.records));
    let (behaviour, end, ordering) = match scenario {
        "baseline" => {
            return baseline(brokers, &group, topic, args.records, args.partitions).await;
        }
        "noop" => (Behaviour::Noop, whole, Ordering::Partition),
        "poison1" => (Behaviour::Poison1, whole, Ordering::Partition),
        "stalled" => (Behaviour::Stalled, whole, Ordering::Partition),
        "slow" => (Behaviour::Slow, slow, Ordering::Partition),
        "slow-keyed" => (Behaviour::Slow, slow, Ordering::Key),
        _ => unreachable!("scenarios are checked before they run"),
    };
    kafka_dlq(Run {
        brokers,
        group: &group,
        topic,
        partitions: args.partitions,
        behaviour,
        end,
        ordering,
    })
    .await
}

/// Runs `scenario` in a child process (`bench --run-scenario`) and reads its figures.
async fn scenario_process(
    args: &BenchArgs,
    brokers: &str,
    topic: &str,
    scenario: &str,
    pass: u64,
) -> anyhow::Result<Figures> {
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .args(["bench", "--brokers", brokers, "--topic", topic])
        .args(["--run-scenario", scenario])
        .args(["--pass", &pass.to_string()])
        .args(["--records", &args.records.to_string()])
        .args(["--partitions", &args.partitions.to_string()])
        .args(["--slow-records", &args.slow_records.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running scenario {scenario}"))?;
    // `output` captures the child's standard error: pass on what it logged.
    {
        use std::io::Write;
        let _ = std::io::stderr().write_all(&output.stderr);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FIGURES "))
        .with_context(|| format!("scenario {scenario} failed ({})", output.status))?;
    let n: Vec<f64> = line
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad figures from scenario {scenario}: {line}"))?;
    let nanos = |v: f64| (v > 0.0).then(|| Duration::from_nanos(v as u64));
    Ok(Figures {
        records: n[0] as u64,
        elapsed: Duration::from_nanos(n[1] as u64),
        p50: nanos(n[2]),
        p99: nanos(n[3]),
        rss_mb: n[4],
        cpu: Duration::from_nanos(n[5] as u64),
    })
}

/// librdkafka's mock cluster in a child process (this binary, `bench --serve-mock`). It stops
/// when this handle is dropped: the child exits when its standard input closes, and is killed
/// if it has not.
struct MockChild {
    bootstrap: String,
    _child: tokio::process::Child,
}

impl MockChild {
    async fn start(topics: &[(&str, i32)]) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let spec: Vec<String> = topics.iter().map(|(t, p)| format!("{t}:{p}")).collect();
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["bench", "--serve-mock", &spec.join(",")])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting the mock cluster's process")?;
        let stdout = child.stdout.take().context("mock cluster stdout")?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .context("the mock cluster did not start within 30 s")??;
        let bootstrap = line
            .strip_prefix("BOOTSTRAP ")
            .map(|b| b.trim().to_string())
            .with_context(|| format!("unexpected line from the mock cluster: {line:?}"))?;
        Ok(Self {
            bootstrap,
            _child: child,
        })
    }
}

/// The child's side: start the mock cluster with `topics` (`name:partitions`), print
/// `BOOTSTRAP <servers>`, serve until standard input closes.
async fn serve_mock(topics: &[String]) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mock = MockCluster::new(1).context("starting the mock cluster")?;
    for spec in topics {
        let (name, partitions) = spec
            .rsplit_once(':')
            .with_context(|| format!("expected topic:partitions, got `{spec}`"))?;
        mock.create_topic(name, partitions.parse()?, 1)?;
    }
    println!("BOOTSTRAP {}", mock.bootstrap_servers());
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    Ok(())
}

fn ratio(
    results: &HashMap<String, Figures>,
    against: &'static str,
    rate: f64,
) -> (f64, &'static str) {
    match results.get(against) {
        Some(f) => (rate / f.rate(), against),
        None => (f64::NAN, against),
    }
}

async fn produce(
    brokers: &str,
    topic: &str,
    n: u64,
    partitions: i32,
    bytes: usize,
) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()?;
    let filler = "x".repeat(bytes);
    let mut pending = Vec::with_capacity(20_000);
    for i in 0..n {
        let mut value = format!("{{\"n\":{i},\"pad\":\"");
        value.push_str(&filler[..bytes.saturating_sub(value.len() + 2)]);
        value.push_str("\"}");
        let key = i.to_string();
        let record = FutureRecord::to(topic)
            .partition((i % partitions as u64) as i32)
            .key(&key)
            .payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => pending.push(delivery),
            Err((e, _)) => bail!("producing record {i}: {e}"),
        }
        if pending.len() >= 20_000 {
            for d in pending.drain(..) {
                d.await?.map_err(|(e, _)| e)?;
            }
        }
    }
    for d in pending {
        d.await?.map_err(|(e, _)| e)?;
    }
    Ok(())
}

async fn partition_records(brokers: &str, topic: &str, partition: i32) -> anyhow::Result<u64> {
    let (b, t) = (brokers.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || -> anyhow::Result<u64> {
        let c: rdkafka::consumer::BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &b).create()?;
        let (low, high) = c.fetch_watermarks(&t, partition, Duration::from_secs(10))?;
        Ok((high - low) as u64)
    })
    .await?
}

/// The plain rdkafka loop: receive, store the offset, count.
async fn baseline(
    brokers: &str,
    group: &str,
    topic: &str,
    n: u64,
    partitions: i32,
) -> anyhow::Result<Figures> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    // The same fetch settings as kafka-dlq's consumer, so only the loop differs.
    for (key, value) in kafka_dlq::config::FETCH_SETTINGS {
        config.set(key, value);
    }
    // kafka-dlq's budget is per partition (each has its own queue); this loop has one queue
    // for all of them, so it gets the same memory in total.
    config.set(
        "queued.max.messages.kbytes",
        (1536 * partitions).to_string(),
    );
    let consumer: StreamConsumer = config.create()?;
    consumer.subscribe(&[topic])?;
    let mut count = 0u64;
    let mut first: Option<(Instant, Duration)> = None;
    while count < n {
        let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .with_context(|| format!("no record for 60 s after {count} of {n}"))??;
        first.get_or_insert_with(|| (Instant::now(), cpu_time()));
        consumer.store_offset_from_message(&message)?;
        std::hint::black_box(message.payload());
        count += 1;
    }
    let (elapsed, cpu) = since(first);
    let rss_mb = peak_rss_mb();
    tokio::task::spawn_blocking(move || drop(consumer)).await?;
    Ok(Figures {
        records: count,
        elapsed,
        p50: None,
        p99: None,
        rss_mb,
        cpu,
    })
}

/// When a kafka-dlq scenario ends.
#[derive(Clone, Copy)]
enum End<'a> {
    /// When the handler has seen this many records of each partition (a permanent failure
    /// counts as seen) and every dead letter is acknowledged.
    Partitions(&'a [u64]),
    /// When the handler has accepted this many records.
    Records(u64),
}

/// One pass of a kafka-dlq scenario.
struct Run<'a> {
    brokers: &'a str,
    group: &'a str,
    topic: &'a str,
    partitions: i32,
    behaviour: Behaviour,
    end: End<'a>,
    ordering: Ordering,
}

/// Tells the bench when the handler has seen every record of the partitions it watches,
/// without the bench polling a counter (a timer firing every millisecond costs the consumer
/// CPU that the baseline does not pay).
struct Goal {
    /// Records to see per partition.
    targets: Box<[u64]>,
    /// Partitions whose records are not all seen yet.
    left: std::sync::atomic::AtomicUsize,
    /// When the last of them was seen, and the CPU time then.
    reached: std::sync::OnceLock<(Instant, Duration)>,
    notify: tokio::sync::Notify,
}

impl Goal {
    fn new(targets: &[u64]) -> Self {
        Self {
            targets: targets.into(),
            left: targets.iter().filter(|t| **t > 0).count().into(),
            reached: std::sync::OnceLock::new(),
            notify: tokio::sync::Notify::new(),
        }
    }

    /// The handler has now seen `seen` records of `partition`.
    fn saw(&self, partition: i32, seen: u64) {
        let target = self.targets.get(partition as usize).copied().unwrap_or(0);
        if seen == target && self.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let _ = self.reached.set((Instant::now(), cpu_time()));
            self.notify.notify_one();
        }
    }
}

/// kafka-dlq with `run.behaviour`, until `run.end`.
async fn kafka_dlq(run: Run<'_>) -> anyhow::Result<Figures> {
    let config = ConsumerConfig {
        ordering: run.ordering,
        max_retries: 1,
        backoff_initial_ms: 600_000,
        backoff_max_ms: 600_000,
        shutdown_timeout_ms: 2_000,
        ..ConsumerConfig::new(run.brokers, run.group, [run.topic])
    };
    let (settled, goal) = match run.end {
        End::Partitions(targets) => (
            targets.iter().sum(),
            Some(std::sync::Arc::new(Goal::new(targets))),
        ),
        End::Records(n) => (n, None),
    };
    let started = std::sync::Arc::new(std::sync::OnceLock::new());
    let seen = std::sync::Arc::new(Counts::new(run.partitions));
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
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
    let task = tokio::spawn(consumer.run(stop.clone().cancelled_owned()));
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
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    progressing(Duration::from_secs(60))?
                }
            }
        },
        _ => {
            while seen.total() < settled {
                progressing(Duration::from_secs(60))?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    // Settled means dead letters acknowledged too.
    let dead_letters = failed.load(std::sync::atomic::Ordering::Relaxed);
    let waited = Instant::now();
    while (metrics.total("kafka_dlq_records_dead_lettered_total") as u64) < dead_letters {
        if waited.elapsed() > Duration::from_secs(60) {
            bail!("{dead_letters} dead letters not all acknowledged after 60 s");
        }
        end = None;
        tokio::time::sleep(Duration::from_millis(1)).await;
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
        p50: metrics.settle_quantile(0.5),
        p99: metrics.settle_quantile(0.99),
        rss_mb,
        cpu,
    };
    stop.cancel();
    task.await??;
    Ok(figures)
}

/// Wall-clock and CPU time since `first` (zero when there was no first record).
fn since(first: Option<(Instant, Duration)>) -> (Duration, Duration) {
    first.map_or_else(Default::default, |(at, cpu)| {
        (at.elapsed(), cpu_time().saturating_sub(cpu))
    })
}

/// The process's peak RSS, in MB (VmHWM).
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}
