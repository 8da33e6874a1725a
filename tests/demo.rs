//! `kafka-dlq demo` runs to completion on its embedded broker and its report matches what it did.

#[test]
fn the_demo_runs_to_completion_and_its_report_adds_up() {
    let started = std::time::Instant::now();
    // A shell set up for a real cluster, as docs/connecting.md has users do: the demo still
    // runs on its embedded broker (only `--brokers` moves it), creating nothing there.
    let mut config = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut config, b"brokers = \"127.0.0.1:1\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([
            "--config",
            config.path().to_str().unwrap(),
            "demo",
            "--json",
        ])
        .env("KAFKA_BROKERS", "127.0.0.1:1")
        .env("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
        .env("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
        .env("KAFKA_SASL_USERNAME", "someone")
        .env("KAFKA_SASL_PASSWORD", "secret")
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
    assert!(
        stdout.contains("(embedded: librdkafka's mock cluster)"),
        "{stdout}"
    );
    // Reported, not asserted: wall-clock limits make tests flaky on shared machines.
    eprintln!("demo took {:.1} s", started.elapsed().as_secs_f64());
}

/// `demo --console`: after the tour the embedded broker stays up with the console on it; the
/// inbox holds what is still dead-lettered after the fix, and SIGTERM stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_keeps_its_console_up_after_the_tour() {
    use tokio::io::AsyncBufReadExt as _;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([
            "demo",
            "--console",
            "--console-listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env_remove("KAFKA_BROKERS")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut url, mut token) = (None, None);
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(u) = line.strip_prefix("Console: ") {
                url = Some(u.to_string());
            }
            if let Some(t) = line.strip_prefix("Sign in with the operator token ") {
                token = Some(t.to_string());
                break;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(180), read)
        .await
        .expect("the console's address is printed");
    let (url, token) = (url.unwrap(), token.unwrap());
    assert_eq!(url, format!("http://127.0.0.1:{port}/"));
    let client = reqwest::Client::new();
    let mut outstanding = 0;
    for _ in 0..150 {
        let inbox = client
            .get(format!("{url}api/inbox"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(inbox.status(), 200);
        let v: serde_json::Value = serde_json::from_str(&inbox.text().await.unwrap()).unwrap();
        outstanding = v["status"]["outstanding"].as_u64().unwrap_or(0);
        if v["status"]["current_at"].is_string() && outstanding > 0 {
            assert!(
                v["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["kind"] == "permanent"),
                "{v}"
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(outstanding, 12, "the malformed events no fix can parse");
    // SAFETY: kill only sends a signal to the child's pid.
    unsafe {
        libc::kill(child.id().unwrap() as i32, libc::SIGTERM);
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}
