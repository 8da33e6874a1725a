//! `kafka-dlq dlq discard`: mark outstanding dead letters as needing no redrive, with a reason,
//! as the console's Discard does; a parked key whose head is discarded is released.

use std::collections::BTreeSet;
use std::io::Write;

use clap::Args;
use kafka_dlq::park::resolve::{self, HeadRef, WaitingBehind};
use kafka_dlq::park::How;
use kafka_dlq::replay::audit::{Action, ReplayRun};
use kafka_dlq::ConfigError;

use super::{FilterArgs, Source, View};
use crate::cli::CliError;

/// Flags of `dlq discard`.
#[derive(Debug, Args)]
pub(crate) struct DiscardArgs {
    #[command(flatten)]
    pub(super) source: Source,
    #[command(flatten)]
    filter: FilterArgs,
    /// Why these dead letters need no redrive, for the audit (required).
    #[arg(long)]
    reason: String,
    /// Say what would be discarded and released; record and release nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// Who discards, for the audit (default: the login name).
    #[arg(long, env = "KAFKA_DLQ_OPERATOR")]
    operator: Option<String>,
}

/// Counts the outstanding dead letters the filter selects, resolves the parked keys' heads
/// among them (their owners then release the records parked behind them, in order), and
/// records the discard on the audit topic, bounded by the ends of the dead-letter topic as it
/// read them: a dead letter written later stays outstanding. The release comes first: if it
/// fails, nothing is recorded and running the command again does it all.
pub(super) async fn run(args: DiscardArgs) -> Result<(), CliError> {
    let reason = args.reason.trim();
    if reason.is_empty() {
        return Err(
            ConfigError::new("reason", "", "say why these dead letters need no redrive").into(),
        );
    }
    let filter = args.filter.filter()?;
    if filter.is_empty() {
        return Err(ConfigError::new(
            "filter",
            "",
            "a discard needs at least one of --source-topic, --kind, --since, --until, --id, \
             --group, --source-partition, --source-offsets, --key, --error-contains, \
             --error-matches, --fingerprint or --where; to discard everything, say so with \
             --until",
        )
        .into());
    }
    if let Some(w) = filter.where_.as_ref().filter(|w| w.reads_decoded()) {
        return Err(ConfigError::new(
            "where",
            w.source(),
            "a discard decodes nothing: select with `dlq list --schema-registry-url … --where …` \
             and discard by --id",
        )
        .into());
    }
    let source = &args.source;
    let mut client = rdkafka::ClientConfig::new();
    client.set("bootstrap.servers", source.brokers()?);
    source.librdkafka()?.apply(&mut client);
    let park_logs = {
        let client = client.clone();
        tokio::task::spawn_blocking(move || resolve::park_logs(&client))
            .await
            .expect("park log listing")
            .map_err(|e| runtime(format!("cannot list the park logs: {e}")))?
    };
    let mut heads: BTreeSet<HeadRef> = BTreeSet::new();
    let read = super::read(
        source,
        &filter,
        View::Outstanding,
        None,
        None,
        |entry, _, _| {
            let head = entry
                .content
                .envelope()
                .and_then(|e| kafka_dlq::outstanding::parked::head_of(&e.source))
                .filter(|h| park_logs.contains(&kafka_dlq::park::park_topic(&h.source, &h.group)));
            heads.extend(head);
        },
    )
    .await?;
    let found = {
        let client = client.clone();
        tokio::task::spawn_blocking(move || resolve::find(&client, &heads))
            .await
            .expect("park log read")
            .map_err(|e| runtime(format!("cannot read the park logs: {e}")))?
    };
    let operator = args
        .operator
        .clone()
        .unwrap_or_else(kafka_dlq::replay::audit::operator_name);
    if args.dry_run || read.matched == 0 {
        let outcome = Outcome {
            run: None,
            discarded: read.matched as u64,
            released: WaitingBehind::of(&found),
            dry_run: args.dry_run,
        };
        return print(&args, &outcome);
    }
    let released = resolve::resolve(&client, &found, How::Discarded, &operator)
        .await
        .map_err(|e| runtime(format!("{e}; nothing was discarded")))?;
    let mut run = ReplayRun::record(Action::Discard, &operator, &source.dlq_topic);
    run.filter = filter.key();
    run.selection = Some(filter);
    run.ends = read.ends.into_iter().collect();
    run.reason = Some(reason.chars().take(1000).collect());
    run.scanned = read.matched as u64;
    run.passed_over = read.matched as u64;
    let state = source.state.topics()?;
    kafka_dlq::state::audit::append(&source.brokers()?, &source.librdkafka()?, &state, &run)
        .await
        .map_err(|e| {
            runtime(format!(
                "cannot write the discard to the audit topic `{}`: {e}; nothing was discarded \
                 (the parked keys were released already)",
                state.audit
            ))
        })?;
    let outcome = Outcome {
        run: Some(run.run),
        discarded: read.matched as u64,
        released,
        dry_run: false,
    };
    print(&args, &outcome)
}

/// What a discard did, or with `--dry-run` would do.
struct Outcome {
    run: Option<String>,
    discarded: u64,
    released: WaitingBehind,
    dry_run: bool,
}

fn print(args: &DiscardArgs, o: &Outcome) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let line = if args.json {
        serde_json::json!({
            "run": o.run,
            "discarded": o.discarded,
            "released": {"keys": o.released.keys, "records": o.released.records},
            "dry_run": o.dry_run,
        })
        .to_string()
    } else {
        let (discard, release) = match o.dry_run {
            true => ("would discard", "would release"),
            false => ("discarded", "released"),
        };
        let mut line = format!(
            "{discard} {} outstanding dead letter(s) of `{}`; {release} {} parked record(s) of {} key(s)",
            o.discarded, args.source.dlq_topic, o.released.records, o.released.keys
        );
        if let Some(run) = &o.run {
            line.push_str(&format!(
                "\nrun {run} on the audit topic `{}` (the console restores it: its history, or \
                 POST /api/discards/{run}/restore)",
                args.source.state.audit_topic
            ));
        }
        line
    };
    let _ = writeln!(out, "{line}");
    Ok(())
}

fn runtime(message: String) -> CliError {
    CliError::Runtime(anyhow::anyhow!(message))
}
