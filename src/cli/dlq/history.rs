//! `kafka-dlq dlq history`: the replay runs on the audit topic (see `kafka_dlq::replay::audit`).

use std::io::Write;

use anyhow::Context as _;
use clap::Args;

use super::{view, Cluster};
use crate::cli::CliError;

/// Flags of `dlq history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(flatten)]
    cluster: Cluster,
    /// Only the runs that read this dead-letter topic.
    #[arg(long)]
    dlq_topic: Option<String>,
    #[command(flatten)]
    state: crate::cli::state::StateArgs,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

impl HistoryArgs {
    pub(super) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub(super) fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    pub(super) fn state(&self) -> &crate::cli::state::StateArgs {
        &self.state
    }
}

/// Lists the replay runs on the audit topic, oldest first.
pub(super) async fn run(args: HistoryArgs) -> Result<(), CliError> {
    let (brokers, options) = (args.cluster.brokers()?, args.cluster.librdkafka()?);
    let (state, dlq) = (args.state.topics()?, args.dlq_topic.clone());
    {
        let mut client = rdkafka::ClientConfig::new();
        client.set("bootstrap.servers", &brokers);
        options.apply(&mut client);
        kafka_dlq::state::topics::warn(&client, &brokers, &state).await;
    }
    let audit = tokio::task::spawn_blocking(move || {
        kafka_dlq::replay::audit::history(&brokers, &options, &state, dlq.as_deref())
    })
    .await
    .expect("history task")
    .with_context(|| format!("cannot read the audit topic `{}`", args.state.audit_topic))
    .map_err(CliError::Runtime)?;
    if audit.unverified > 0 {
        eprintln!(
            "warning: {} record(s) of the audit topic were passed over: not sealed with the audit key",
            audit.unverified
        );
    }
    let runs = audit.runs;
    let mut out = std::io::stdout().lock();
    if args.json {
        for run in &runs {
            let _ = writeln!(out, "{}", serde_json::to_string(run).expect("JSON"));
        }
    } else {
        view::print_history(&runs, &mut out);
    }
    Ok(())
}
