//! The benchmark's table and its `RESULT` lines.

use std::collections::HashMap;
use std::time::Duration;

use crate::figures::Figures;
use crate::scenario::{RatioTo, Runner, Scenario};
use crate::Args;

/// What the peers run with, printed before the table.
pub fn setup(args: &Args, scenarios: &[Scenario]) -> String {
    let mut lines = vec![format!(
        "kafka-dlq: one worker per partition; key order with {} in flight per partition",
        args.max_in_flight
    )];
    if scenarios
        .iter()
        .any(|s| matches!(s.runner, Runner::Spring(_)))
    {
        lines.push(format!(
            "spring-*: Spring Kafka 4.1.2, ConcurrentMessageListenerContainer concurrency {}, DefaultErrorHandler(DeadLetterPublishingRecoverer, ExponentialBackOffWithMaxRetries(10) 1 s x2 to 30 s), JVM -Xmx{}",
            args.spring_concurrency.unwrap_or(args.partitions as usize),
            crate::peers::HEAP
        ));
    }
    if scenarios.iter().any(|s| {
        matches!(
            s.runner,
            Runner::OursExactlyOnce(_) | Runner::Spring("tx-noop" | "tx-poison1")
        )
    }) {
        lines.push(format!(
            "eos-*: kafka-dlq exactly_once (transactions of 100 ms, ended once committed); spring-tx-*: a KafkaTransactionManager on the container (a transaction per record), DefaultAfterRollbackProcessor(transactional DeadLetterPublishingRecoverer, the same back-off, commitRecovered), read_committed; both on the first {} records",
            args.transactional_records.min(args.records)
        ));
    }
    if scenarios
        .iter()
        .any(|s| matches!(s.runner, Runner::OursParking(_)))
    {
        lines.push(
            "*-park: kafka-dlq with key_order_after_failure = park: each dead letter parks its key (unique keys: nothing waits behind it), ended once every key is parked; memory is with that many keys parked".to_string(),
        );
    }
    if scenarios
        .iter()
        .any(|s| matches!(s.runner, Runner::ParallelConsumer(_)))
    {
        lines.push(format!(
            "pc-*: Parallel Consumer 0.5.3.3, KEY order, maxConcurrency {} (slow) and {} (readme: one partition), JVM -Xmx{}",
            args.max_in_flight * args.partitions as usize,
            args.max_in_flight,
            crate::peers::HEAP
        ));
    }
    lines.join("\n")
}

/// The ratio of `scenario` and what it is to.
fn ratio(
    args: &Args,
    scenario: &Scenario,
    results: &HashMap<&str, Figures>,
) -> Option<(f64, String)> {
    let rate = results.get(scenario.name)?.rate();
    match scenario.ratio_to {
        RatioTo::Nothing => None,
        RatioTo::Rate(other) => Some((rate / results.get(other)?.rate(), other.to_string())),
        RatioTo::Share(other) => {
            let share = f64::from(args.partitions - 1) / f64::from(args.partitions);
            Some((
                rate / (results.get(other)?.rate() * share),
                format!("{other} share"),
            ))
        }
    }
}

/// Prints the table and the `RESULT` lines.
pub fn print(args: &Args, scenarios: &[Scenario], results: &HashMap<&str, Figures>) {
    println!(
        "{:<16} {:>9} {:>11} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7} {:>10}",
        "scenario",
        "records",
        "records/s",
        "secs",
        "ratio",
        "vs peer",
        "p50",
        "p99",
        "rss MB",
        "cpu µs/rec"
    );
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.1}ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    let mut result_lines = Vec::new();
    for scenario in scenarios {
        let Some(figures) = results.get(scenario.name) else {
            continue;
        };
        let ratio = ratio(args, scenario, results);
        let vs_peer = scenario
            .peer
            .and_then(|peer| results.get(peer).map(|p| (figures.rate() / p.rate(), peer)));
        let number = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let mut notes = Vec::new();
        if let Some((_, to)) = &ratio {
            notes.push(format!("ratio to {to}"));
        }
        if let Some((_, peer)) = vs_peer {
            notes.push(format!("vs {peer}"));
        }
        println!(
            "{:<16} {:>9} {:>11.0} {:>7.2} {:>7} {:>8} {:>8} {:>8} {:>7.1} {:>10.2}   {}",
            scenario.name,
            figures.records,
            figures.rate(),
            figures.elapsed.as_secs_f64(),
            number(ratio.as_ref().map(|r| r.0)),
            number(vs_peer.map(|v| v.0)),
            ms(figures.p50),
            ms(figures.p99),
            figures.rss_mb,
            figures.cpu_us(),
            notes.join(", ")
        );
        let mut line = format!(
            "RESULT {} records_per_s={:.0} secs={:.3} ratio={} rss_mb={:.1} cpu_us={:.2}",
            scenario.name,
            figures.rate(),
            figures.elapsed.as_secs_f64(),
            ratio.map_or("nan".into(), |r| format!("{:.3}", r.0)),
            figures.rss_mb,
            figures.cpu_us()
        );
        if let Some((v, _)) = vs_peer {
            line.push_str(&format!(" vs_peer={v:.3}"));
        }
        result_lines.push(line);
    }
    println!();
    for line in result_lines {
        println!("{line}");
    }
}

/// What TLS costs: each kafka-dlq and bare-loop scenario run over TLS right after it ran in
/// plaintext on the same broker (`--tls-brokers`), and the ratio of the two.
pub fn print_tls(
    scenarios: &[Scenario],
    plain: &HashMap<&str, Figures>,
    tls: &HashMap<&str, Figures>,
) {
    println!("\nTLS beside plaintext (each scenario over TLS right after it ran in plaintext):");
    println!(
        "{:<16} {:>13} {:>11} {:>9} {:>16} {:>14} {:>13}",
        "scenario",
        "plain rec/s",
        "TLS rec/s",
        "TLS/plain",
        "plain cpu µs/rec",
        "TLS cpu µs/rec",
        "TLS rss MB"
    );
    for scenario in scenarios {
        let (Some(p), Some(t)) = (plain.get(scenario.name), tls.get(scenario.name)) else {
            continue;
        };
        println!(
            "{:<16} {:>13.0} {:>11.0} {:>9.3} {:>16.2} {:>14.2} {:>13.1}",
            scenario.name,
            p.rate(),
            t.rate(),
            t.rate() / p.rate(),
            p.cpu_us(),
            t.cpu_us(),
            t.rss_mb
        );
        println!(
            "RESULT {}+tls records_per_s={:.0} ratio_to_plaintext={:.3} cpu_us={:.2} rss_mb={:.1}",
            scenario.name,
            t.rate(),
            t.rate() / p.rate(),
            t.cpu_us(),
            t.rss_mb
        );
    }
}
