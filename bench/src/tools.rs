//! The operator tools' memory: `kafka-dlq dlq list` and `dlq replay` on a DLT of many dead
//! letters, each in a process of its own, its peak RSS read from the kernel when it exits
//! (`wait4`'s `ru_maxrss`). A tool that streams holds about the same whatever the DLT's size;
//! one that collects grows with it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _};
use kafka_dlq::dlq::Envelope;
use kafka_dlq::{DeadLetterKind, Record};

use crate::topic::{self, Shape};

/// Dead letters as the consumer writes them: a 200-byte JSON payload each, errors that differ.
struct DeadLetters {
    source: String,
}

impl Shape for DeadLetters {
    fn record(&self, i: u64) -> (i32, String, Vec<u8>) {
        let record = Record::new(self.source.clone(), 0, i as i64)
            .with_id(format!("{}-0-{i}", self.source))
            .with_key(format!("key-{i}").into_bytes())
            .with_payload(format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(180)).into_bytes());
        let message = format!("row {i} rejected by the ledger");
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, &message, 1, "bench");
        (0, format!("key-{i}"), envelope.to_vec())
    }
}

/// Fills a fresh DLT on `brokers` with `records` dead letters, runs each tool on it with
/// `kafka_dlq` (the binary) and prints a table of peak RSS and time.
pub async fn measure(brokers: &str, records: u64, kafka_dlq: &Path) -> anyhow::Result<()> {
    let run = chrono::Utc::now().format("%H%M%S").to_string();
    let source = format!("tools-{run}");
    let dlq = format!("{source}-dlt");
    let sink = format!("{source}-sink");
    topic::create(brokers, &[(&source, 1), (&dlq, 1), (&sink, 1)]).await?;
    eprintln!("producing {records} dead letters to {dlq}");
    topic::produce(brokers, &dlq, records, &DeadLetters { source }).await?;
    let base = ["--brokers", brokers, "--dlq-topic", dlq.as_str()];
    let tools: Vec<(&str, Vec<&str>)> = vec![
        ("dlq list", [&["dlq", "list"][..], &base].concat()),
        (
            "dlq list --json",
            [&["dlq", "list"][..], &base, &["--json"]].concat(),
        ),
        (
            "dlq replay --dry-run",
            [&["dlq", "replay"][..], &base, &["--dry-run"]].concat(),
        ),
        (
            "dlq replay --to sink",
            [&["dlq", "replay"][..], &base, &["--to", &sink]].concat(),
        ),
    ];
    println!(
        "| tool ({records} dead letters, {}) | peak RSS | time |",
        kafka_dlq.display()
    );
    println!("|---|---:|---:|");
    for (name, args) in tools {
        let (rss_kb, seconds) = peak_rss(kafka_dlq, &args).with_context(|| name.to_string())?;
        println!(
            "| `{name}` | {:.1} MB | {seconds:.1} s |",
            rss_kb as f64 / 1024.0
        );
    }
    Ok(())
}

/// Runs `program` with `args`, its output discarded; its peak RSS in KiB and its time.
fn peak_rss(program: &Path, args: &[&str]) -> anyhow::Result<(i64, f64)> {
    let started = Instant::now();
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 only writes into the two out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    if waited < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("exited with status {status}");
    }
    Ok((usage.ru_maxrss, started.elapsed().as_secs_f64()))
}
