//! `kafka-dlq dlq seal`: seals the state written before an `audit_key` was set. Once the key is
//! set, every tool ignores state records not sealed with it; run this once, with the key, and
//! the audit's runs and the latest position of every replay group are written again, sealed
//! (the unsealed copies stay, ignored).

use anyhow::Context as _;
use clap::Args;
use kafka_dlq::state::audit::{append, history};
use kafka_dlq::state::{PositionKey, PositionRecord, PositionStore};

use super::Cluster;
use crate::cli::CliError;

/// Flags of `dlq seal`.
#[derive(Debug, Args)]
pub(crate) struct SealArgs {
    #[command(flatten)]
    cluster: Cluster,
    /// The state to seal, and the key (required).
    #[command(flatten)]
    state: crate::cli::state::StateArgs,
}

impl SealArgs {
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

/// Writes every run of the audit topic and the latest position of every replay group again,
/// sealed with the key; says how many.
pub(super) async fn run(args: SealArgs) -> Result<(), CliError> {
    let (brokers, options) = (args.cluster.brokers()?, args.cluster.librdkafka()?);
    let sealed = args.state.topics()?;
    if sealed.key.is_none() {
        return Err(kafka_dlq::ConfigError::new(
            "audit_key",
            "",
            "is required: `dlq seal` seals the state with it",
        )
        .into());
    }
    // Read as written: unsealed.
    let unsealed = sealed.clone().sealed_with(None);
    let audit = {
        let (brokers, options, unsealed) = (brokers.clone(), options.clone(), unsealed.clone());
        tokio::task::spawn_blocking(move || history(&brokers, &options, &unsealed, None))
            .await
            .expect("history task")
            .with_context(|| format!("cannot read the audit topic `{}`", sealed.audit))
            .map_err(CliError::Runtime)?
    };
    for run in &audit.runs {
        append(&brokers, &options, &sealed, run)
            .await
            .with_context(|| format!("cannot write run {} to `{}`", run.run, sealed.audit))
            .map_err(CliError::Runtime)?;
    }
    let mut reader = PositionStore::new(&brokers, &options, &unsealed);
    reader
        .catch_up()
        .await
        .with_context(|| format!("cannot read the positions topic `{}`", sealed.positions))
        .map_err(CliError::Runtime)?;
    let mut writer = PositionStore::new(&brokers, &options, &sealed);
    let mut positions = 0;
    for (dlq_topic, group, kept) in reader.table().all() {
        for (partition, position) in &kept.partitions {
            let key = PositionKey {
                dlq_topic: dlq_topic.to_string(),
                partition: *partition,
                group: group.to_string(),
            };
            let record = PositionRecord {
                next: position.next,
                lost: position.lost.clone(),
                selection: kept.selection.clone(),
                run: kept.run.clone(),
                operator: kept.operator.clone(),
                at: chrono::Utc::now(),
                migrated: false,
                honoured: kept.honoured.get(partition).cloned().unwrap_or_default(),
            };
            writer
                .write(&key, &record)
                .await
                .with_context(|| format!("cannot write the position {key}"))
                .map_err(CliError::Runtime)?;
            positions += 1;
        }
    }
    println!(
        "sealed {} run(s) on `{}` and {positions} position(s) on `{}`",
        audit.runs.len(),
        sealed.audit,
        sealed.positions
    );
    Ok(())
}
