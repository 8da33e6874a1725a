//! The console at scale: `kafka-dlq console` started on a DLT of N dead letters (50 causes),
//! the time until its inbox holds them all (built by streaming the DLT from the replay
//! position), the time until 1,000 more written afterwards are in it too (read as they
//! arrive, without building again), the time a bulk fix's preview takes over all of them (a
//! merge patch applied to every payload, `POST /api/transforms/preview`), and the peak RSS of
//! its process (the kernel's VmHWM, the preview included), each over several starts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kafka_dlq::dlq::Envelope;
use kafka_dlq::{DeadLetterKind, Record};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::stats::spread;
use crate::topic::{self, Shape};

/// Causes the dead letters fall into.
const CAUSES: u64 = 50;
/// Dead letters written while the console runs.
const LATER: u64 = 1_000;

/// Dead letters as the consumer writes them, a 200-byte JSON payload each, over 50 causes of
/// three services; `offset` numbers them after those written before.
struct DeadLetters {
    source: String,
    offset: u64,
}

impl Shape for DeadLetters {
    fn record(&self, i: u64) -> (i32, String, Vec<u8>) {
        let i = i + self.offset;
        let record = Record::new(self.source.clone(), 0, i as i64)
            .with_id(format!("{}-0-{i}", self.source))
            .with_key(format!("key-{i}").into_bytes())
            .with_payload(format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(180)).into_bytes());
        let cause = i % CAUSES;
        // Letters, not digits: each cause its own fingerprint.
        let name: String = [cause / 26, cause % 26]
            .iter()
            .map(|c| (b'a' + *c as u8) as char)
            .collect();
        let message = format!("row {i} rejected: rule {name} failed");
        let group = ["billing", "shipping", "ledger"][(cause % 3) as usize];
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, &message, 1, group);
        (0, format!("key-{i}"), envelope.to_vec())
    }
}

/// For each of `sizes`: fills a fresh DLT, then starts the console on it `runs` times (with
/// `options`, `--kafka-option`s) and prints the table.
pub async fn measure(
    brokers: &str,
    sizes: &[u64],
    runs: usize,
    kafka_dlq: &Path,
    options: &[String],
) -> anyhow::Result<()> {
    println!("| dead letters | first inbox | 1,000 more in it | fix preview over all | peak RSS |");
    println!("|---:|---:|---:|---:|---:|");
    for &size in sizes {
        let run = chrono::Utc::now().format("%H%M%S").to_string();
        let source = format!("console-{size}-{run}");
        let dlq = format!("{source}-dlt");
        topic::create(brokers, &[(&dlq, 1)]).await?;
        eprintln!("producing {size} dead letters to {dlq}");
        topic::produce(
            brokers,
            &dlq,
            size,
            &DeadLetters {
                source: source.clone(),
                offset: 0,
            },
        )
        .await?;
        let (mut first, mut more, mut fix, mut rss) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut written = size;
        for _ in 0..runs {
            let figures = start(brokers, &dlq, &source, kafka_dlq, options, &mut written).await?;
            first.push(figures.0);
            more.push(figures.1);
            fix.push(figures.2);
            rss.push(figures.3);
        }
        println!(
            "| {size} | {} s | {} s | {} s | {} MB |",
            spread(&first, 2),
            spread(&more, 2),
            spread(&fix, 2),
            spread(&rss, 0)
        );
        topic::delete(brokers, &[dlq]).await?;
    }
    Ok(())
}

/// One start of the console on `dlq` (holding `written` dead letters): seconds to the first
/// complete inbox, seconds until 1,000 written afterwards are in it, seconds a fix's preview
/// over all of them takes, peak RSS in MB.
async fn start(
    brokers: &str,
    dlq: &str,
    source: &str,
    kafka_dlq: &Path,
    options: &[String],
    written: &mut u64,
) -> anyhow::Result<(f64, f64, f64, f64)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(kafka_dlq)
        .args([
            "console",
            "--brokers",
            brokers,
            "--dlq-topic",
            dlq,
            "--anonymous",
            "viewer",
            "--show-payloads",
        ])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--audit-topic",
            &format!("{dlq}-audit"),
        ])
        .args(options.iter().flat_map(|o| ["--kafka-option", o.as_str()]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", kafka_dlq.display()))?;
    let pid = child.id().context("the console runs")?;
    wait_for(port, *written, Duration::from_secs(600)).await?;
    let first = started.elapsed().as_secs_f64();
    topic::produce(
        brokers,
        dlq,
        LATER,
        &DeadLetters {
            source: source.to_string(),
            offset: *written,
        },
    )
    .await?;
    let produced = Instant::now();
    *written += LATER;
    wait_for(port, *written, Duration::from_secs(120)).await?;
    let more = produced.elapsed().as_secs_f64();
    let asked = Instant::now();
    let preview = post(
        port,
        "/api/transforms/preview",
        &serde_json::json!({
            "filter": { "dlq_topic": dlq },
            "transform": { "merge_patch": { "pad": null, "fixed": true } },
        }),
    )
    .await?;
    let fix = asked.elapsed().as_secs_f64();
    if preview["changed"].as_u64() != Some(*written) {
        bail!(
            "the preview changed {} of {written}: {preview}",
            preview["changed"]
        );
    }
    let rss = peak_rss_mb(pid)?;
    child.kill().await?;
    Ok((first, more, fix, rss))
}

/// `POST path` with `body`, over a plain HTTP/1.1 connection: the JSON answer.
async fn post(
    port: u16,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    answer(stream).await
}

/// The JSON body of the answer `stream` carries (a `Connection: close` answer).
async fn answer(mut stream: tokio::net::TcpStream) -> anyhow::Result<serde_json::Value> {
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    Ok(serde_json::from_str(body)?)
}

/// Waits until the console on `port` says its inbox is current with `outstanding` dead letters.
async fn wait_for(port: u16, outstanding: u64, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(status) = status(port).await {
            if status["current_at"].is_string()
                && status["outstanding"].as_u64() == Some(outstanding)
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("the console's inbox never held {outstanding} dead letters");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /api/status`, over a plain HTTP/1.1 connection.
async fn status(port: u16) -> anyhow::Result<serde_json::Value> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(b"GET /api/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    answer(stream).await
}

/// The peak resident set of process `pid` so far, MB (`VmHWM`).
fn peak_rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmHWM in /proc/<pid>/status")?;
    Ok(kb / 1024.0)
}
