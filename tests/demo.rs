//! `kafka-dlq demo` runs to completion on its embedded broker and its report matches what it did.

#[test]
fn the_demo_runs_to_completion_and_its_report_adds_up() {
    let started = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["demo", "--json"])
        .env_remove("KAFKA_BROKERS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

    // 300 events: every 50, 2 malformed, 3 for the flaky carrier (2 failures each), 1 for the
    // unreachable carrier (3 retries, then dead-lettered), 1 with a status v1 rejects.
    assert_eq!(report["produced"], 300);
    assert_eq!(report["dead_lettered_first_run"], 12 + 6 + 6);
    assert_eq!(report["retried"], 18 * 2 + 6 * 3);
    assert_eq!(report["replayed"], 24);
    assert_eq!(
        report["dead_lettered_after_fix"], 12,
        "malformed JSON stays malformed"
    );
    assert_eq!(report["handled"], 300 - 12);
    assert_eq!(report["increase_alerts"], 2, "one alert per burst");
    assert!(
        report["alerts"].as_u64().unwrap() >= 3,
        "and a decrease or resolved message"
    );

    assert!(
        stdout.contains("Slack #parcel-alerts"),
        "alerts printed in their Slack form"
    );
    assert!(stdout.contains("24 dead letter(s)"), "the DLQ is shown");
    // Reported, not asserted: wall-clock limits make tests flaky on shared machines.
    eprintln!("demo took {:.1} s", started.elapsed().as_secs_f64());
}
