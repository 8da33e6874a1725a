//! `kafka-dlq bench` as a user runs it, small: every scenario runs on librdkafka's mock cluster,
//! consumes all its records and reports its figures. Only that it works is checked here; rates
//! are measured by running the benchmark, never asserted in tests.

use std::collections::HashMap;
use std::time::Duration;

#[tokio::test]
async fn bench_runs_every_scenario_and_reports_a_result_line_each() {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["bench", "--records", "24000", "--slow-records", "600"])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("bench ends within 5 minutes")
        .expect("bench starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    // Table rows: scenario, records, records/s, ratio, …
    let rows: HashMap<&str, Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 8 && f[1].parse::<u64>().is_ok())
        .map(|f| (f[0], f))
        .collect();
    let expected_records = [
        ("baseline", 24_000),
        ("noop", 24_000),
        ("stalled", 22_000), // partition 0 of 12 is stuck
        ("slow", 600),
        ("slow-keyed", 600),
        ("poison1", 24_000),
    ];
    for (scenario, records) in expected_records {
        let row = rows
            .get(scenario)
            .unwrap_or_else(|| panic!("no row for {scenario}:\n{stdout}"));
        assert_eq!(row[1], records.to_string(), "{scenario} records:\n{stdout}");

        let result = stdout
            .lines()
            .find(|l| l.starts_with(&format!("RESULT {scenario} ")))
            .unwrap_or_else(|| panic!("no RESULT line for {scenario}:\n{stdout}"));
        let fields: HashMap<&str, f64> = result
            .split_whitespace()
            .skip(2)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.parse().expect("a number")))
            .collect();
        for key in ["records_per_s", "ratio", "rss_mb"] {
            let value = fields
                .get(key)
                .unwrap_or_else(|| panic!("{scenario}: no {key} in `{result}`"));
            assert!(*value > 0.0, "{scenario}: {key} = {value} in `{result}`");
        }
    }
}
