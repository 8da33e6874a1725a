//! `kafka-dlq-bench` as a user runs it, small: on librdkafka's mock cluster (kafka-dlq and the
//! bare loop only) and on Apache Kafka with the Java peers beside kafka-dlq. Only that every
//! scenario runs, consumes its records and reports its figures is checked here; rates are
//! measured by running the benchmark, never asserted in tests.

#[path = "../../tests/common/broker.rs"]
#[allow(dead_code)]
mod broker;

use std::collections::HashMap;
use std::time::Duration;

/// Runs the bench with `args` (at most 10 minutes) and returns its standard output.
async fn bench(args: &[&str]) -> String {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq-bench"))
        .args(args)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("bench ends within 10 minutes")
        .expect("bench starts");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "bench failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Checks the row and the `RESULT` line of each of `expected` (scenario, records).
fn check_rows(stdout: &str, expected: &[(&str, u64)]) {
    // Table rows: scenario, records, records/s, secs, …
    let rows: HashMap<&str, Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 10 && f[1].parse::<u64>().is_ok())
        .map(|f| (f[0], f))
        .collect();
    for (scenario, records) in expected {
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
        for key in ["records_per_s", "secs", "rss_mb", "cpu_us"] {
            let value = fields
                .get(key)
                .unwrap_or_else(|| panic!("{scenario}: no {key} in `{result}`"));
            assert!(*value > 0.0, "{scenario}: {key} = {value} in `{result}`");
        }
    }
}

#[tokio::test]
async fn bench_runs_every_scenario_on_the_mock_cluster_and_reports_a_result_line_each() {
    let stdout = bench(&[
        "--records",
        "24000",
        "--slow-records",
        "600",
        "--readme-records",
        "300",
        "--transactional-records",
        "2000",
    ])
    .await;
    check_rows(
        &stdout,
        &[
            ("baseline", 24_000),
            ("baseline-split", 24_000),
            ("noop", 24_000),
            ("stalled", 22_000), // partition 0 of 12 is stuck
            ("slow", 600),
            ("slow-keyed", 600),
            ("readme-partition", 300),
            ("readme-keyed", 300),
            ("poison1", 24_000),
            ("eos-noop", 2_000),
            ("eos-poison1", 2_000),
        ],
    );
    assert!(
        stdout.contains("run only on a real broker"),
        "says why the peers did not run:\n{stdout}"
    );
    assert!(
        stdout.contains("the *-park scenarios run only on a real broker"),
        "says why the parking rows did not run:\n{stdout}"
    );
    assert!(!stdout.contains("RESULT spring-"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_spring_kafka_and_parallel_consumer_beside_kafka_dlq_on_apache_kafka() {
    let kafka = broker::Kafka::start().unwrap_or_else(|e| panic!("{e}"));
    kafka.keep_log_on_panic();
    let brokers = kafka.brokers();
    let stdout = bench(&[
        "--brokers",
        &brokers,
        "--records",
        "12000",
        "--slow-records",
        "600",
        "--readme-records",
        "300",
        "--transactional-records",
        "2000",
    ])
    .await;
    check_rows(
        &stdout,
        &[
            ("baseline-split", 12_000),
            ("noop", 12_000),
            ("spring-noop", 12_000),
            ("stalled", 11_000),
            ("spring-stalled", 11_000),
            ("slow", 600),
            ("spring-slow", 600),
            ("slow-keyed", 600),
            ("pc-slow-keyed", 600),
            ("readme-keyed", 300),
            ("pc-readme", 300),
            ("poison1", 12_000),
            ("spring-poison1", 12_000),
            ("poison1-park", 12_000),
            ("poison10-park", 12_000),
            ("eos-noop", 2_000),
            ("spring-tx-noop", 2_000),
            ("eos-poison1", 2_000),
            ("spring-tx-poison1", 2_000),
        ],
    );
    for ours in [
        "noop",
        "stalled",
        "slow",
        "slow-keyed",
        "readme-keyed",
        "poison1",
        "eos-noop",
        "eos-poison1",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("RESULT {ours} ")))
            .unwrap();
        assert!(
            line.contains(" vs_peer="),
            "{ours} has its ratio to its peer: {line}"
        );
    }

    // The decoding table, on the same broker: Avro and Protobuf orders as bytes and decoded.
    let stdout = bench(&[
        "--brokers",
        &brokers,
        "--decode-records",
        "3000",
        "--partitions",
        "3",
        "--scale-runs",
        "1",
    ])
    .await;
    for format in ["avro", "protobuf"] {
        for variant in ["baseline", "noop", "decoded"] {
            let result = format!("decode-{format}-{variant}");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("RESULT {result} ")))
                .unwrap_or_else(|| panic!("no RESULT line for {result}:\n{stdout}"));
            for key in ["records_per_s=", "cpu_us="] {
                let value: f64 = line
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {key} in {line}"));
                assert!(value > 0.0, "{line}");
            }
        }
    }
    assert!(
        stdout.contains("| kafka-dlq, decoded to JSON, no-op handler |"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_the_share_group_benchmark_beside_the_java_share_consumer() {
    let kafka = broker::Kafka::start_share().unwrap_or_else(|e| panic!("{e}"));
    kafka.keep_log_on_panic();
    let brokers = kafka.brokers();
    let stdout = bench(&[
        "--brokers",
        &brokers,
        "--share-members",
        "1,2",
        "--share-records",
        "400",
        "--share-runs",
        "1",
    ])
    .await;
    for result in [
        "share-share-1",
        "share-share-16-1",
        "share-java-share-1",
        "share-group-1",
        "share-share-2",
        "share-share-16-2",
        "share-java-share-2",
        "share-java-share-16-1",
        "share-java-share-16-2",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("RESULT {result} ")))
            .unwrap_or_else(|| panic!("no RESULT line for {result}:\n{stdout}"));
        let rate: f64 = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("records_per_s="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {line}"));
        assert!(rate > 0.0, "{line}");
    }
    assert!(stdout.contains("| 2 | KafkaShareConsumer"), "{stdout}");
}
