//! `kafka-dlq-bench`: what kafka-dlq costs over a plain rdkafka consumer, and how it compares
//! with what users would run instead (Spring Kafka, Confluent's Parallel Consumer), measured
//! side by side in one run on the same broker and topic data.
//!
//! It pre-produces N records (default 1,000,000 × 200 B over 12 partitions) and, for the
//! `readme` scenarios, Parallel Consumer's README workload (10,000 records on one partition,
//! 1,000 keys, 0–5 ms of work each); then each scenario consumes its records in a consumer
//! group of its own, in a process of its own, taking turns pass by pass (see
//! [`scenario::ALL`]). kafka-dlq's rows give their ratio to the peer doing the same job.
//!
//! Each scenario prints records/s, seconds, its ratio (see the table's last column), the
//! ratio to its peer, p50/p99 from fetch to settle (kafka-dlq only), the peak RSS of its
//! process (VmHWM) and the CPU time its process used per record (all threads), and a line
//! `RESULT <scenario> records_per_s=<x> ratio=<y> rss_mb=<z> [vs_peer=<w>]`. The clock starts
//! at the first record, so the group join and a JVM's start are not counted, and stops when
//! the handler is done with the last record (and every dead letter is acknowledged).
//!
//! On librdkafka's mock cluster (no `--brokers`), which holds at most 5 MB per partition, the
//! main topic is consumed in several passes and the Java peers do not run.

mod baseline;
mod child;
mod console;
mod decoding;
mod delay;
mod figures;
mod handler;
mod mock;
mod ours;
mod peers;
// The tests' schema registry (Confluent's REST API), for the decoding table.
#[allow(dead_code)]
#[path = "../../tests/common/registry_server.rs"]
mod registry_server;
mod report;
mod scale;
mod scenario;
mod share;
mod stats;
mod tools;
mod topic;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Parser;

use figures::Figures;
use scenario::{Data, Runner, Scenario};

/// mimalloc, as in the `kafka-dlq` binary (serving C's `malloc` too, without huge pages), so
/// that kafka-dlq runs here as it runs there. The bare loops run in this process, so they have
/// it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// kafka-dlq's benchmark.
#[derive(Debug, Parser)]
#[command(name = "kafka-dlq-bench", version)]
pub struct Args {
    /// Run against this cluster (Apache Kafka, Redpanda) instead of librdkafka's mock cluster
    /// in-process; the Java peers run only then.
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
    /// Records the slow (1 ms per record) scenarios handle.
    #[arg(long, default_value_t = 60_000)]
    slow_records: u64,
    /// Records the exactly-once scenarios and Spring's transactional ones handle (Spring's
    /// container commits a transaction per record: a few hundred a second).
    #[arg(long, default_value_t = 10_000)]
    transactional_records: u64,
    /// Records of Parallel Consumer's README workload.
    #[arg(long, default_value_t = 10_000)]
    readme_records: u64,
    /// Scenarios to run, comma-separated (default: all, in order).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Leave the Java peers out.
    #[arg(long)]
    no_peers: bool,
    /// Where the peers' Maven projects are [default: bench/peers of this checkout].
    #[arg(long)]
    peers_dir: Option<PathBuf>,
    /// Spring's container concurrency (consumers) [default: the partition count].
    #[arg(long)]
    spring_concurrency: Option<usize>,
    /// Records kafka-dlq's key-ordered mode has in flight per partition (`max_in_flight`);
    /// Parallel Consumer gets the same concurrency over the topic's partitions.
    #[arg(long, default_value_t = 64)]
    max_in_flight: usize,
    /// Internal: serve librdkafka's mock cluster with these `topic:partitions` and print its
    /// address (the bench runs it in a child process).
    #[arg(long, hide = true, value_delimiter = ',')]
    serve_mock: Vec<String>,
    /// Internal: run this one kafka-dlq or baseline scenario on `--topic` (already produced)
    /// and print its figures (each scenario runs in a process of its own).
    #[arg(long, hide = true, requires = "topic")]
    run_scenario: Option<String>,
    /// Internal: the topic of `--run-scenario`.
    #[arg(long, hide = true)]
    topic: Option<String>,
    /// Internal: which pass `--run-scenario` makes (names its group).
    #[arg(long, hide = true, default_value_t = 0)]
    pass: u64,
    /// Internal: what sets `--run-scenario` apart from a twin on the same topic and pass (the
    /// TLS run beside the plaintext one), so that each has a group of its own and starts from
    /// the first record rather than from the twin's commits.
    #[arg(long, hide = true, default_value = "")]
    variant: String,
    /// Instead of the scenarios: fill a DLT with this many dead letters on `--brokers` and
    /// measure the peak RSS of `dlq list` and `dlq replay` on it.
    #[arg(long, requires = "brokers")]
    tools_memory: Option<u64>,
    /// Instead of the scenarios: the console on DLTs of these many dead letters: time to the
    /// first inbox, to 1,000 more, and peak RSS (needs `--brokers`; see `bench/src/console.rs`).
    #[arg(long, value_delimiter = ',', requires = "brokers")]
    console_sizes: Vec<u64>,
    /// Instead of the scenarios: the share-group benchmark with these member counts on one
    /// partition (needs `--brokers`, Apache Kafka 4.2+; see `bench/src/share.rs`).
    #[arg(long, value_delimiter = ',', requires = "brokers")]
    share_members: Vec<usize>,
    /// Records each share-group run handles.
    #[arg(long, default_value_t = 10_000)]
    share_records: u64,
    /// Runs of the share-group benchmark (the table gives the median and the spread).
    #[arg(long, default_value_t = 3)]
    share_runs: usize,
    /// The share-group variants to run (default all): `share`, `java-share`, `share-16`,
    /// `java-share-16`, `group`.
    #[arg(long, value_delimiter = ',')]
    share_variants: Vec<String>,
    /// Internal: run this one share-group variant on `--topic` and print its figures.
    #[arg(long, hide = true, requires = "topic")]
    run_share: Option<String>,
    /// Instead of the scenarios: peak memory of one member owning this many partitions, each
    /// count in turn, with a 20 ms downstream (needs `--brokers`; see `bench/src/scale.rs`).
    #[arg(long, value_delimiter = ',', requires = "brokers")]
    memory_partitions: Vec<i32>,
    /// How long each memory run lasts, seconds.
    #[arg(long, default_value_t = 15)]
    memory_seconds: u64,
    /// Instead of the scenarios: records/s and CPU of kafka-dlq and the bare loop at these
    /// partition counts (one member), and at `--scale-members` (needs `--brokers`).
    #[arg(long, value_delimiter = ',', requires = "brokers")]
    scale_partitions: Vec<i32>,
    /// Members of one group for the scale table, on a topic of `--partitions` partitions.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    scale_members: Vec<usize>,
    /// Records of each scale topic.
    #[arg(long, default_value_t = 500_000)]
    scale_records: u64,
    /// Runs of the memory and scale tables (they give the median and the spread).
    #[arg(long, default_value_t = 3)]
    scale_runs: usize,
    /// Instead of the scenarios: records/s and CPU per record of the same orders in Avro and
    /// Protobuf, consumed as bytes by the bare loop and kafka-dlq and decoded to JSON by
    /// kafka-dlq's decoding layer, this many records per format (needs `--brokers`; see
    /// `bench/src/decoding.rs`). Runs `--scale-runs` times over `--partitions`.
    #[arg(long, requires = "brokers")]
    decode_records: Option<u64>,
    /// Internal: the schema registry a `decoded` variant of `--run-scale` decodes with.
    #[arg(long, hide = true)]
    schema_registry_url: Option<String>,
    /// Internal: run this one memory or scale variant on `--topic` in `--group`.
    #[arg(long, hide = true, requires_all = ["topic", "group"])]
    run_scale: Option<String>,
    /// Internal: the group of `--run-scale`.
    #[arg(long, hide = true)]
    group: Option<String>,
    /// The `kafka-dlq` binary `--tools-memory` runs.
    #[arg(long, default_value = "target/release/kafka-dlq")]
    kafka_dlq_bin: PathBuf,
    /// A librdkafka property KEY=VALUE for the clients of the scenarios kafka-dlq and the bare
    /// loop run (repeatable): how they reach `--brokers`.
    #[arg(long = "kafka-option", value_name = "KEY=VALUE")]
    kafka_options: Vec<String>,
    /// Also run each kafka-dlq and bare-loop scenario over TLS, right after it runs in
    /// plaintext, on this listener of the same broker (e.g. `scripts/kafka.sh` started with
    /// `KAFKA_TLS_PORT`), and print what TLS costs beside plaintext.
    #[arg(long, requires = "brokers")]
    tls_brokers: Option<String>,
    /// The CA of `--tls-brokers`' certificate (PEM).
    #[arg(long, requires = "tls_brokers")]
    tls_ca: Option<String>,
}

impl Args {
    /// The client options of `--kafka-option`.
    fn client_options(&self) -> anyhow::Result<kafka_dlq::kafka::ClientOptions> {
        self.kafka_options
            .iter()
            .map(|o| {
                o.split_once('=')
                    .with_context(|| format!("--kafka-option {o}: expected KEY=VALUE"))
            })
            .collect()
    }

    /// The `--kafka-option`s of the TLS twin of a scenario.
    fn tls_options(&self) -> Vec<String> {
        let mut options = vec!["security.protocol=SSL".to_string()];
        if let Some(ca) = &self.tls_ca {
            options.push(format!("ssl.ca.location={ca}"));
        }
        options
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(bench(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench(args: Args) -> anyhow::Result<()> {
    if !args.serve_mock.is_empty() {
        return mock::serve(&args.serve_mock).await;
    }
    if let (Some(records), Some(brokers)) = (args.tools_memory, &args.brokers) {
        return tools::measure(brokers, records, &args.kafka_dlq_bin).await;
    }
    if let (false, Some(brokers)) = (args.console_sizes.is_empty(), &args.brokers) {
        return console::measure(
            brokers,
            &args.console_sizes,
            args.scale_runs,
            &args.kafka_dlq_bin,
            &args.kafka_options,
        )
        .await;
    }
    if let (Some(variant), Some(topic), Some(group), Some(brokers)) =
        (&args.run_scale, &args.topic, &args.group, &args.brokers)
    {
        return scale::run_child(
            brokers,
            topic,
            group,
            variant,
            args.memory_seconds,
            args.schema_registry_url.as_deref(),
        )
        .await;
    }
    if let (Some(records), Some(brokers)) = (args.decode_records, &args.brokers) {
        return decoding::measure(brokers, records, args.partitions, args.scale_runs).await;
    }
    if let (false, Some(brokers)) = (args.memory_partitions.is_empty(), &args.brokers) {
        return scale::memory(
            brokers,
            &args.memory_partitions,
            args.scale_runs,
            args.memory_seconds,
        )
        .await;
    }
    if let (false, Some(brokers)) = (args.scale_partitions.is_empty(), &args.brokers) {
        return scale::rate(
            brokers,
            &args.scale_partitions,
            &args.scale_members,
            args.partitions,
            args.scale_records,
            args.scale_runs,
        )
        .await;
    }
    if let (Some(variant), Some(topic), Some(brokers)) =
        (&args.run_share, &args.topic, &args.brokers)
    {
        let members = args.share_members.first().copied().unwrap_or(1);
        let figures = share::run_here(brokers, topic, variant, members, args.share_records).await?;
        println!("{}", figures.line());
        return Ok(());
    }
    if let (false, Some(brokers)) = (args.share_members.is_empty(), &args.brokers) {
        let peers = peers::Peers::new(args.peers_dir.clone());
        return share::bench(
            brokers,
            &args.share_members,
            args.share_records,
            args.share_runs,
            &args.share_variants,
            &peers,
        )
        .await;
    }
    if let (Some(name), Some(topic), Some(brokers)) =
        (&args.run_scenario, &args.topic, &args.brokers)
    {
        let scenario = scenario::named(name).with_context(|| format!("unknown scenario {name}"))?;
        let figures = run_here(&args, brokers, topic, scenario).await?;
        println!(
            "{}",
            Figures {
                rss_mb: figures::peak_rss_mb(),
                ..figures
            }
            .line()
        );
        return Ok(());
    }
    let mut scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        scenario::ALL.to_vec()
    } else {
        args.scenarios
            .iter()
            .map(|name| {
                scenario::named(name).with_context(|| {
                    let all: Vec<&str> = scenario::ALL.iter().map(|s| s.name).collect();
                    format!(
                        "unknown scenario `{name}`; expected one of {}",
                        all.join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let peers = peers::Peers::new(args.peers_dir.clone());
    if args.brokers.is_none() || args.no_peers {
        if scenarios.iter().any(|s| s.runner.is_peer()) && args.scenarios.is_empty() {
            println!(
                "note: the Java peers (Spring Kafka, Parallel Consumer) {}",
                if args.no_peers {
                    "are left out (--no-peers)"
                } else {
                    "run only on a real broker (--brokers)"
                }
            );
        }
        scenarios.retain(|s| !s.runner.is_peer() || (args.brokers.is_some() && !args.no_peers));
    }
    let parking = |s: &Scenario| matches!(s.runner, Runner::OursParking(_));
    if args.brokers.is_none() && scenarios.iter().any(parking) {
        // The park log is created, checked and trimmed with CreateTopics, DescribeConfigs and
        // DeleteRecords, which librdkafka's mock cluster does not answer.
        println!(
            "note: the *-park scenarios run only on a real broker (--brokers): the mock cluster has no CreateTopics, DescribeConfigs or DeleteRecords for the park log"
        );
        scenarios.retain(|s| !parking(s));
    }
    if scenarios.iter().any(|s| s.runner.is_peer()) {
        peers.ensure_built().await?;
    }
    let run_id = chrono::Utc::now().format("%Y%m%d%H%M%S").to_string();
    let topic = format!("bench-{run_id}");
    let readme_topic = format!("{topic}-readme");
    let mut topics = vec![
        (topic.as_str(), args.partitions),
        (readme_topic.as_str(), 1),
    ];
    let dlts: Vec<String> = topics.iter().map(|(t, _)| format!("{t}-dlt")).collect();
    topics.push((dlts[0].as_str(), args.partitions)); // Spring dead-letters to the same partition
    topics.push((dlts[1].as_str(), 1));
    let mut args = args;
    // On the mock cluster, how many times each whole-topic scenario consumes the topic.
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
            // Each kafka-dlq consumer reads its group's redrive topic and creates it when
            // missing; the mock cluster does not create topics on request, so they are made
            // here, one per scenario and pass (the groups of `run_one`).
            let mut redrives = Vec::new();
            for pass in 0..passes {
                for scenario in scenarios.iter().filter(|s| s.runner.is_ours()) {
                    if pass > 0
                        && matches!(
                            scenario.data,
                            Data::Slow | Data::Transactional | Data::Readme
                        )
                    {
                        continue;
                    }
                    let (on, partitions) = if scenario.data == Data::Readme {
                        (&readme_topic, 1)
                    } else {
                        (&topic, args.partitions)
                    };
                    let group = format!("{on}-{}-{pass}", scenario.name);
                    redrives.push((
                        kafka_dlq::record::retry::redrive_topic(on, &group),
                        partitions,
                    ));
                }
            }
            let mut all = topics.clone();
            all.extend(redrives.iter().map(|(t, p)| (t.as_str(), *p)));
            Some(mock::MockChild::start(&all).await?)
        }
    };
    let brokers = match (&args.brokers, &mock) {
        (Some(b), _) => b.clone(),
        (None, Some(m)) => m.bootstrap.clone(),
        (None, None) => unreachable!(),
    };
    if mock.is_none() {
        topic::create(&brokers, &topics).await?;
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
    let shape = topic::Uniform {
        partitions: args.partitions,
        value_bytes: args.value_bytes,
    };
    topic::produce(&brokers, &topic, args.records, &shape).await?;
    if scenarios.iter().any(|s| s.data == Data::Readme) {
        topic::produce(&brokers, &readme_topic, args.readme_records, &topic::Readme).await?;
    }
    println!("produced in {:.1} s", started.elapsed().as_secs_f64());
    println!("{}\n", report::setup(&args, &scenarios));

    // Pass by pass, each scenario in turn, so that a slower or faster spell of a shared machine
    // falls on all of them rather than on one. Only whole-topic scenarios make more than one
    // pass: the others measure a handler-bound rate, which more passes would not change.
    let mut results: HashMap<&'static str, Figures> = HashMap::new();
    let mut tls_results: HashMap<&'static str, Figures> = HashMap::new();
    for pass in 0..passes {
        for scenario in &scenarios {
            if pass > 0
                && matches!(
                    scenario.data,
                    Data::Slow | Data::Transactional | Data::Readme
                )
            {
                continue;
            }
            let on = if scenario.data == Data::Readme {
                &readme_topic
            } else {
                &topic
            };
            let figures = run_one(&args, &peers, &brokers, on, scenario, pass).await?;
            results.entry(scenario.name).or_default().add(figures);
            if let Some(tls) = args
                .tls_brokers
                .clone()
                .filter(|_| !scenario.runner.is_peer())
            {
                let options = args.tls_options();
                let figures =
                    scenario_process(&args, &tls, &options, "-tls", on, scenario, pass).await?;
                tls_results.entry(scenario.name).or_default().add(figures);
            }
        }
        if passes > 1 {
            eprintln!("pass {} of {passes} done", pass + 1);
        }
    }
    report::print(&args, &scenarios, &results);
    if !tls_results.is_empty() {
        report::print_tls(&scenarios, &results, &tls_results);
    }
    if mock.is_none() {
        topic::delete_prefixed(&brokers, &topic).await?;
    }
    drop(mock);
    Ok(())
}

/// Records of each partition of `topic` that a scenario on `data` waits for.
async fn targets(args: &Args, brokers: &str, topic: &str, data: Data) -> anyhow::Result<Vec<u64>> {
    let partitions = if data == Data::Readme {
        1
    } else {
        args.partitions
    };
    let mut per_partition = Vec::new();
    for partition in 0..partitions {
        per_partition.push(
            topic::partition_records(brokers, &args.client_options()?, topic, partition).await?,
        );
    }
    if data == Data::AllButPartition0 {
        per_partition[0] = 0;
    }
    Ok(per_partition)
}

/// One pass of one scenario, in a process of its own.
async fn run_one(
    args: &Args,
    peers: &peers::Peers,
    brokers: &str,
    topic: &str,
    scenario: &Scenario,
    pass: u64,
) -> anyhow::Result<Figures> {
    let group = format!("{topic}-{}-{pass}", scenario.name);
    let expect = match scenario.data {
        Data::Slow => args.slow_records.min(args.records),
        Data::Transactional => args.transactional_records.min(args.records),
        data => targets(args, brokers, topic, data).await?.iter().sum(),
    };
    let partitions = if scenario.data == Data::Readme {
        1
    } else {
        args.partitions
    };
    let (project, name, concurrency) = match scenario.runner {
        Runner::Spring(name) => (
            "spring-kafka",
            name,
            args.spring_concurrency.unwrap_or(args.partitions as usize),
        ),
        Runner::ParallelConsumer(name) => (
            "parallel-consumer",
            name,
            args.max_in_flight * partitions as usize,
        ),
        Runner::Baseline
        | Runner::BaselineSplit
        | Runner::Ours(..)
        | Runner::OursExactlyOnce(_)
        | Runner::OursParking(_) => {
            return scenario_process(
                args,
                brokers,
                &args.kafka_options,
                "",
                topic,
                scenario,
                pass,
            )
            .await
        }
    };
    peers
        .run(peers::PeerRun {
            project,
            scenario: name,
            brokers,
            topic,
            group: &group,
            expect,
            concurrency,
        })
        .await
}

/// Runs a kafka-dlq or baseline scenario in a child process (`--run-scenario`), so that its
/// peak memory is its own, and reads its figures.
async fn scenario_process(
    args: &Args,
    brokers: &str,
    options: &[String],
    variant: &str,
    topic: &str,
    scenario: &Scenario,
    pass: u64,
) -> anyhow::Result<Figures> {
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--brokers", brokers, "--topic", topic])
        .args(options.iter().flat_map(|o| ["--kafka-option", o.as_str()]))
        .args(["--run-scenario", scenario.name])
        .args(["--pass", &pass.to_string()])
        // `=`: a variant may start with a dash.
        .arg(format!("--variant={variant}"))
        .args(["--records", &args.records.to_string()])
        .args(["--partitions", &args.partitions.to_string()])
        .args(["--slow-records", &args.slow_records.to_string()])
        .args([
            "--transactional-records",
            &args.transactional_records.to_string(),
        ])
        .args(["--max-in-flight", &args.max_in_flight.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running scenario {}", scenario.name))?;
    // `output` captures the child's standard error: pass on what it logged.
    {
        use std::io::Write;
        let _ = std::io::stderr().write_all(&output.stderr);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    Figures::parse(&stdout).with_context(|| {
        format!(
            "scenario {} failed ({}): {stdout}",
            scenario.name, output.status
        )
    })
}

/// The child's side of [`scenario_process`].
async fn run_here(
    args: &Args,
    brokers: &str,
    topic: &str,
    scenario: Scenario,
) -> anyhow::Result<Figures> {
    let group = format!("{topic}-{}-{}{}", scenario.name, args.pass, args.variant);
    let partitions = if scenario.data == Data::Readme {
        1
    } else {
        args.partitions
    };
    let options = args.client_options()?;
    let per_partition = match scenario.data {
        Data::Slow | Data::Transactional => Vec::new(),
        data => targets(args, brokers, topic, data).await?,
    };
    let end = match scenario.data {
        Data::Slow => ours::End::Records(args.slow_records.min(args.records)),
        Data::Transactional => ours::End::Records(args.transactional_records.min(args.records)),
        _ => ours::End::Partitions(&per_partition),
    };
    match scenario.runner {
        Runner::Baseline => baseline::run(brokers, &options, &group, topic, args.records).await,
        Runner::BaselineSplit => {
            baseline::run_split(brokers, &options, &group, topic, partitions, args.records).await
        }
        Runner::Ours(..) | Runner::OursExactlyOnce(_) | Runner::OursParking(_) => {
            use kafka_dlq::config::Ordering::Partition;
            let (behaviour, ordering, exactly_once, park) = match scenario.runner {
                Runner::Ours(behaviour, ordering) => (behaviour, ordering, false, false),
                Runner::OursExactlyOnce(behaviour) => (behaviour, Partition, true, false),
                Runner::OursParking(behaviour) => (behaviour, Partition, false, true),
                _ => unreachable!("matched above"),
            };
            ours::run(ours::Run {
                brokers,
                options: &options,
                group: &group,
                topic,
                partitions,
                behaviour,
                end,
                ordering,
                max_in_flight: args.max_in_flight,
                exactly_once,
                park,
            })
            .await
        }
        _ => bail!("{} runs in a JVM, not here", scenario.name),
    }
}
