//! `kafka-dlq dlq parked`: the keys a consumer group keeps parked behind a record that left
//! (`key_order_after_failure = "park"`), read from its park log.

use std::io::Write;

use anyhow::Context as _;
use base64::Engine as _;
use clap::Args;
use kafka_dlq::park::{ParkTable, ParkedKey};

use super::{view, Cluster};
use crate::cli::CliError;

/// Flags of `dlq parked`.
#[derive(Debug, Args)]
pub(crate) struct ParkedArgs {
    #[command(flatten)]
    cluster: Cluster,
    /// The source topic whose keys the group parks.
    #[arg(long)]
    source_topic: String,
    /// The consumer group that parks its keys.
    #[arg(long)]
    group: String,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

impl ParkedArgs {
    pub(super) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub(super) fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// The park log it reads.
    pub(super) fn park_topic(&self) -> String {
        kafka_dlq::park::park_topic(&self.source_topic, &self.group)
    }
}

/// Prints the parked keys, partition by partition, each with its unresolved heads and the
/// records waiting behind it.
pub(super) async fn run(args: ParkedArgs) -> Result<(), CliError> {
    let (brokers, options) = (args.cluster.brokers()?, args.cluster.librdkafka()?);
    let topic = args.park_topic();
    let mut client = rdkafka::ClientConfig::new();
    client.set("bootstrap.servers", &brokers);
    options.apply(&mut client);
    let read = topic.clone();
    let tables = tokio::task::spawn_blocking(move || kafka_dlq::park::read::tables(&client, &read))
        .await
        .expect("park log read")
        .with_context(|| {
            format!(
                "cannot read the park log `{topic}` (does group `{}` park keys of `{}`?)",
                args.group, args.source_topic
            )
        })
        .map_err(CliError::Runtime)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        for (partition, table) in &tables {
            for (key, parked) in sorted(table) {
                let line = json(&args.source_topic, *partition, key, parked);
                let _ = writeln!(out, "{line}");
            }
        }
        return Ok(());
    }
    let _ = writeln!(
        out,
        "{:<9} {:<24} {:<12} {:<12} {:<24} {:>7}",
        "PARTITION", "KEY", "HEAD", "CAUSE", "SINCE", "WAITING"
    );
    let (mut keys, mut waiting) = (0, 0);
    for (partition, table) in &tables {
        for (key, parked) in sorted(table) {
            let (head, cause, since) = match parked.head() {
                Some(h) => (
                    h.offset.to_string(),
                    h.cause.as_str().to_string(),
                    h.since.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                ),
                None => ("resolved".into(), "-".into(), "-".into()),
            };
            let _ = writeln!(
                out,
                "{partition:<9} {:<24} {head:<12} {cause:<12} {since:<24} {:>7}",
                view::escaped(&key_text(key).0),
                parked.waiting.len()
            );
        }
        keys += table.len();
        waiting += table.waiting();
    }
    let _ = writeln!(
        out,
        "{keys} parked key(s), {waiting} record(s) waiting in {}",
        args.park_topic()
    );
    Ok(())
}

/// The keys of `table`, by their first head's offset (the oldest first).
fn sorted(table: &ParkTable) -> Vec<(&[u8], &ParkedKey)> {
    let mut keys: Vec<_> = table.keys().collect();
    keys.sort_by_key(|(key, parked)| (parked.head().map_or(i64::MAX, |h| h.offset), key.to_vec()));
    keys
}

/// A key as text: itself when it is UTF-8, else its base64 (and which).
fn key_text(key: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(key) {
        Ok(text) => (text.to_string(), "utf8"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(key),
            "base64",
        ),
    }
}

/// One parked key as a JSON object.
fn json(topic: &str, partition: i32, key: &[u8], parked: &ParkedKey) -> serde_json::Value {
    let (text, encoding) = key_text(key);
    let heads: Vec<serde_json::Value> = parked
        .heads
        .values()
        .map(|h| {
            serde_json::json!({
                "offset": h.offset,
                "id": h.id,
                "cause": h.cause.as_str(),
                "since": h.since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            })
        })
        .collect();
    let waiting: Vec<i64> = parked.waiting.iter().map(|w| w.offset).collect();
    serde_json::json!({
        "topic": topic,
        "partition": partition,
        "key": text,
        "key_encoding": encoding,
        "heads": heads,
        "waiting": waiting.len(),
        "waiting_offsets": waiting,
    })
}
