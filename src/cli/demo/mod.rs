//! `kafka-dlq demo`: the whole product in one command, on an embedded broker.
//!
//! A parcel-tracking service consumes delivery events. Some are malformed JSON, some name a
//! carrier whose API fails twice and then answers, some a carrier whose API never answers, some
//! a status the service does not know yet. The demo runs the consumer and the DLQ monitor
//! (its alerts arrive at a stand-in Slack webhook on loopback and are printed as Slack shows
//! them), shows the dead-letter topic, "deploys the fix", replays the DLQ through the fixed
//! service, and ends with a report. Without `--brokers` it starts librdkafka's mock cluster
//! in-process; with it, the same runs against a real cluster on topics of its own.

mod broker;
mod parcels;
mod slack;

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;
use kafka_dlq::monitor::{Monitor, MonitorConfig, Secret, SlackTarget};
use kafka_dlq::replay::{replay, ReplayOptions};
use kafka_dlq::{Consumer, ConsumerConfig};
use rdkafka::mocking::MockCluster;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::CliError;

use broker::{create_topics, produce, wait_committed, wait_for};
use parcels::{events, Tracking};
use slack::slack_stand_in;

/// Flags of `kafka-dlq demo`.
#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// Run against this cluster instead of the embedded one. Only this flag does: neither
    /// `KAFKA_BROKERS` nor a config file's `brokers` moves the demo off the embedded broker,
    /// so it never creates topics on a cluster by surprise.
    #[arg(long = "brokers", id = "demo_brokers", value_name = "BROKERS")]
    brokers: Option<String>,
    /// How many delivery events to produce.
    #[arg(long, default_value_t = 300)]
    events: u32,
    /// Print the final report as one JSON object.
    #[arg(long)]
    json: bool,
    /// After the tour, keep the broker running with the DLQ console on it (and the alerts
    /// linking to it) until Ctrl-C; its address and sign-in token are printed.
    #[arg(long)]
    console: bool,
    /// Where the console listens.
    #[arg(long, default_value = "127.0.0.1:8090", requires = "console")]
    console_listen: String,
    #[command(flatten)]
    connection: super::connection::ConnectionArgs,
}

impl DemoArgs {
    /// Its connection settings (for `--brokers`).
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        &mut self.connection
    }
}

/// What happened, counted.
#[derive(Debug, Default, Serialize)]
pub(super) struct Report {
    /// Events produced.
    pub produced: u64,
    /// Distinct events stored by the service, by v1 and v2.
    pub handled: u64,
    /// Retries scheduled, by v1 and v2.
    pub retried: u64,
    /// Dead letters written by v1.
    pub dead_lettered_first_run: u64,
    /// Records the replay sent back.
    pub replayed: u64,
    /// Dead letters written by v2 (still malformed after the fix).
    pub dead_lettered_after_fix: u64,
    /// Alerts the monitor delivered to Slack.
    pub alerts: u64,
    /// Of those, alerts about new dead letters.
    pub increase_alerts: u64,
    /// Wall-clock seconds.
    pub elapsed_s: f64,
}

/// Runs the demo.
pub(super) async fn run(args: DemoArgs) -> Result<(), CliError> {
    demo(args).await.map_err(CliError::Runtime)
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut out = std::io::stdout();
    // The connection settings (flags, variables, a config file) are for `--brokers` alone:
    // the embedded broker speaks plaintext, whatever the environment says of a real cluster.
    let options = match &args.brokers {
        Some(_) => args.connection.client_options()?,
        None => kafka_dlq::kafka::ClientOptions::new(),
    };
    let mock = match &args.brokers {
        Some(_) => None,
        None => Some(MockCluster::new(1).context("starting the embedded broker")?),
    };
    let (brokers, suffix) = match (&args.brokers, &mock) {
        (Some(b), _) => (
            b.clone(),
            format!("-{}", chrono::Utc::now().format("%Y%m%d%H%M%S")),
        ),
        (None, Some(m)) => (m.bootstrap_servers(), String::new()),
        (None, None) => unreachable!("a mock cluster exists without --brokers"),
    };
    let topic = format!("parcel-events{suffix}");
    let dlq = format!("{topic}-dlt");
    let group = format!("parcel-tracking{suffix}");
    // Where a replay puts this service's dead letters back: read by this group alone.
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    let audit = kafka_dlq::replay::audit::DEFAULT_AUDIT_TOPIC;
    let state = kafka_dlq::state::StateTopics::new(audit);
    let topics = [
        (topic.as_str(), 3),
        (dlq.as_str(), 1),
        (redrive.as_str(), 3),
    ];
    // The embedded broker keeps no topic settings: the state topics are made there too. On a
    // real cluster the tools create them as they must be (kept for ever, compacted).
    let state_topics = [(state.audit.as_str(), 1), (state.positions.as_str(), 1)];
    match &mock {
        None => {
            say(&mut out, &format!("Broker: {brokers}"));
            super::connection::admitted(&brokers, &options)
                .await
                .map_err(|e| match e {
                    CliError::Runtime(e) => e,
                    CliError::Config(e) => e.into(),
                })?;
            create_topics(&brokers, &options, &topics).await?;
        }
        Some(mock) => {
            say(
                &mut out,
                &format!("Broker: {brokers} (embedded: librdkafka's mock cluster)"),
            );
            for (t, p) in topics.into_iter().chain(state_topics) {
                mock.create_topic(t, p, 1)?;
            }
        }
    }

    // Bound before the tour, so a port in use is said at once.
    let console = match args.console {
        false => None,
        true => {
            let listener = tokio::net::TcpListener::bind(&args.console_listen)
                .await
                .with_context(|| {
                    format!("cannot listen on --console-listen {}", args.console_listen)
                })?;
            let url = format!("http://{}/", listener.local_addr()?);
            Some((listener, url))
        }
    };

    // A stand-in for Slack's incoming webhook: prints what the monitor posts.
    let alerts = Arc::new(AtomicU32::new(0));
    let increases = Arc::new(AtomicU32::new(0));
    let webhook = slack_stand_in(alerts.clone(), increases.clone()).await?;

    let all = events(args.events);
    produce(&brokers, &options, &topic, &all).await?;
    say(&mut out, &format!("Produced {} delivery events to `{topic}` (3 partitions): a few malformed, some for a flaky carrier, some for a carrier v1 cannot reach, some with a status v1 does not know.", all.len()));

    let stop_monitor = CancellationToken::new();
    let monitor = Monitor::new(MonitorConfig {
        group_id: format!("demo-monitor{suffix}"),
        window_ms: 1_500,
        min_interval_ms: 0,
        check_interval_ms: 500,
        slack: SlackTarget::Webhook {
            url: Secret::new(webhook),
        },
        links: kafka_dlq::monitor::Links {
            console: console.as_ref().map(|(_, url)| url.clone()),
            ..Default::default()
        },
        librdkafka: options.clone(),
        ..MonitorConfig::new(&brokers, [dlq.clone()])
    })?;
    let monitor = tokio::spawn(monitor.run(stop_monitor.clone().cancelled_owned()));

    let config = ConsumerConfig {
        id_header: Some("event-id".into()),
        max_retries: 3,
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        shutdown_timeout: Duration::from_millis(5_000),
        librdkafka: options.clone(),
        ..ConsumerConfig::new(&brokers, &group, [topic.as_str()])
    };
    let store = Arc::new(Mutex::new(HashMap::new()));
    let fixed = Arc::new(AtomicBool::new(false));
    let service = Tracking {
        fixed: fixed.clone(),
        store: store.clone(),
        flaky_calls: Arc::new(Mutex::new(HashMap::new())),
    };
    let consumer = Consumer::new(config, service)?;
    let metrics = consumer.metrics();
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.run(stop.clone().cancelled_owned()));

    say(
        &mut out,
        "\n== 1. tracking-service v1 consumes (max 3 retries, 50 ms doubling) ==",
    );
    wait_committed(&brokers, &options, &group, &topic).await?;
    let retried_v1 = metrics.total("kafka_dlq_records_retried_total");
    let dead_v1 = metrics.total("kafka_dlq_records_dead_lettered_total");
    say(
        &mut out,
        &format!(
            "v1 settled every record: {} stored, {retried_v1} retries, {dead_v1} dead-lettered.",
            store.lock().unwrap().len()
        ),
    );
    wait_for(&increases, 1).await;

    say(&mut out, &format!("\n== 2. the dead-letter topic `{dlq}` ==\n$ kafka-dlq dlq list --brokers {brokers} --dlq-topic {dlq}"));
    let mut reader = {
        let (b, d, o) = (brokers.clone(), dlq.clone(), options.clone());
        tokio::task::spawn_blocking(move || kafka_dlq::dlq_reader::DlqReader::open(&b, &o, &d))
            .await??
    };
    let mut entries = Vec::new();
    while let Some(e) = reader.next_entry().await {
        entries.push(e?);
    }
    super::dlq::print_table(&entries, &mut out);

    say(&mut out, "\n== 3. deploy tracking-service v2 (ghost-post integration fixed, held_at_customs known) and replay ==");
    fixed.store(true, Ordering::SeqCst);
    say(
        &mut out,
        &format!("$ kafka-dlq dlq replay --brokers {brokers} --dlq-topic {dlq}"),
    );
    let report = replay(
        &ReplayOptions {
            librdkafka: options.clone(),
            ..ReplayOptions::new(&brokers, &dlq)
        },
        |_, _, _| {},
        &CancellationToken::new(),
    )
    .await?;
    say(
        &mut out,
        &format!(
            "replayed {} of {} dead letters to `{redrive}`, which only {group} reads (other services on `{topic}` never see them)",
            report.replayed, report.scanned
        ),
    );
    say(
        &mut out,
        &format!("$ kafka-dlq dlq history --brokers {brokers} --dlq-topic {dlq}"),
    );
    let runs = {
        let (brokers, dlq, options) = (brokers.clone(), dlq.clone(), options.clone());
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            kafka_dlq::replay::audit::history(&brokers, &options, &state, Some(&dlq))
        })
        .await??
        .runs
    };
    super::dlq::print_history(&runs, &mut out);
    wait_committed(&brokers, &options, &group, &redrive).await?;
    stop.cancel();
    running.await??;
    let dead_after_fix = metrics.total("kafka_dlq_records_dead_lettered_total") - dead_v1;
    say(&mut out, &format!(
        "v2 handled the replayed records; {dead_after_fix} came back to the DLQ (malformed JSON no fix can parse: it must be corrected where it is produced)."
    ));
    wait_for(&increases, 2).await;
    wait_for(&alerts, 3).await;
    stop_monitor.cancel();
    monitor.await??;

    let result = Report {
        produced: all.len() as u64,
        handled: store.lock().unwrap().len() as u64,
        retried: metrics.total("kafka_dlq_records_retried_total") as u64,
        dead_lettered_first_run: dead_v1 as u64,
        replayed: report.replayed,
        dead_lettered_after_fix: dead_after_fix as u64,
        alerts: u64::from(alerts.load(Ordering::SeqCst)),
        increase_alerts: u64::from(increases.load(Ordering::SeqCst)),
        elapsed_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    if result.handled + result.dead_lettered_after_fix != result.produced {
        bail!("records unaccounted for: {result:?}");
    }
    say(&mut out, "\n== report ==");
    if args.json {
        say(&mut out, &serde_json::to_string(&result)?);
    } else {
        say(&mut out, &format!(
            "produced {}  handled {}  retried {}  dead-lettered {} (then {} after the fix)  replayed {}  alerts {}  elapsed {:.1} s\nno record lost: handled + still dead-lettered = produced",
            result.produced, result.handled, result.retried, result.dead_lettered_first_run,
            result.dead_lettered_after_fix, result.replayed, result.alerts, result.elapsed_s
        ));
    }
    if let Some((listener, url)) = console {
        serve_console(&mut out, listener, &url, &brokers, &options, &dlq).await?;
    }
    drop(mock);
    Ok(())
}

/// Serves the console on the demo's broker until Ctrl-C or SIGTERM.
async fn serve_console(
    out: &mut std::io::Stdout,
    listener: tokio::net::TcpListener,
    url: &str,
    brokers: &str,
    options: &kafka_dlq::kafka::ClientOptions,
    dlq: &str,
) -> anyhow::Result<()> {
    use kafka_dlq::console::access::{Access, Role};
    let mut bytes = [0u8; 16];
    openssl::rand::rand_bytes(&mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let access = Access::new(vec![("demo".into(), token.clone(), Role::Operator)], None);
    let config = kafka_dlq::console::ConsoleConfig {
        librdkafka: options.clone(),
        ..kafka_dlq::console::ConsoleConfig::new(brokers, vec![dlq.to_string()])
    };
    say(out, &format!("\n== the DLQ console ==\nConsole: {url}\nSign in with the operator token {token}\nThe broker ({brokers}) and the console run until Ctrl-C."));
    super::console::serve(
        config,
        access,
        None,
        kafka_dlq::monitor::SlackTarget::Log,
        listener,
        super::shutdown_signal(),
    )
    .await
    .map_err(|e| match e {
        CliError::Runtime(e) => e,
        CliError::Config(e) => e.into(),
    })
}

fn say(out: &mut std::io::Stdout, text: &str) {
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
