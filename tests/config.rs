//! Configuration: file, environment and flags in that order of precedence; errors that name
//! the setting and the value; secrets never printed.

use std::process::Command;

fn kafka_dlq(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kafka-dlq"));
    command.args(args);
    for var in [
        "KAFKA_BROKERS",
        "KAFKA_GROUP_ID",
        "KAFKA_TOPICS",
        "TARGET_URL",
        "KAFKA_DLQ_MAX_RETRIES",
        "KAFKA_DLQ_CONFIG",
        "SLACK_BOT_TOKEN",
        "SLACK_WEBHOOK_URL",
    ] {
        command.env_remove(var);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

const BASE: &str = r##"
brokers = "kafka-1:9092,kafka-2:9092"
slack_token = "xoxb-very-secret"
slack_channel = "#alerts"

[librdkafka]
"security.protocol" = "SASL_SSL"
"sasl.password" = "hunter2"

[run]
group_id = "deliveries"
topics = ["parcel-events", "returns"]
target_url = "http://localhost:8080/events"
max_retries = 5
monitor = true
"##;

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no `{key}` in:\n{out}"))
}

#[test]
fn flags_beat_environment_beat_the_file_beat_defaults() {
    let f = file(BASE);
    let path = f.path().to_str().unwrap();
    let check = ["--config", path, "config", "check", "run"];

    let (code, out, err) = kafka_dlq(&check, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "max_retries"), "max_retries = 5    # file");
    assert_eq!(
        line(&out, "topics"),
        "topics = parcel-events,returns    # file"
    );
    assert_eq!(
        line(&out, "brokers"),
        "brokers = kafka-1:9092,kafka-2:9092    # file"
    );
    assert_eq!(
        line(&out, "request_timeout_ms"),
        "request_timeout_ms = 10000    # default"
    );
    assert!(out.contains("# configuration OK"));

    let (_, out, _) = kafka_dlq(&check, &[("KAFKA_DLQ_MAX_RETRIES", "6")]);
    assert_eq!(
        line(&out, "max_retries"),
        "max_retries = 6    # environment"
    );

    let mut with_flag = check.to_vec();
    with_flag.extend(["--", "--max-retries", "7"]);
    let (_, out, _) = kafka_dlq(&with_flag, &[("KAFKA_DLQ_MAX_RETRIES", "6")]);
    assert_eq!(line(&out, "max_retries"), "max_retries = 7    # flag");

    // KAFKA_DLQ_CONFIG names the file as well as --config does.
    let (code, out, _) = kafka_dlq(&["config", "check", "run"], &[("KAFKA_DLQ_CONFIG", path)]);
    assert_eq!(code, 0);
    assert_eq!(line(&out, "group_id"), "group_id = deliveries    # file");
}

#[test]
fn secrets_are_redacted_in_the_effective_configuration() {
    let f = file(BASE);
    let (code, out, err) = kafka_dlq(
        &[
            "--config",
            f.path().to_str().unwrap(),
            "config",
            "check",
            "run",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("hunter2") && !out.contains("xoxb-very-secret"),
        "{out}"
    );
    assert_eq!(
        line(&out, "slack_token"),
        "slack_token = <redacted>    # file"
    );
    assert!(line(&out, "kafka_options").contains("sasl.password=<redacted>"));
    assert!(line(&out, "kafka_options").contains("security.protocol=SASL_SSL"));
}

#[test]
fn unknown_keys_and_bad_values_are_errors_naming_both() {
    let cases = [
        ("[run]\nmax_retrys = 3\n", "run.max_retrys"),
        ("colour = \"blue\"\n", "colour"),
        ("[sidecar]\nx = 1\n", "sidecar"),
        ("[run]\nmax_retries = \"many\"\n", "many"),
        ("this is not toml", "not valid TOML"),
    ];
    for (text, expected) in cases {
        let f = file(text);
        let (code, _, err) = kafka_dlq(
            &[
                "--config",
                f.path().to_str().unwrap(),
                "config",
                "check",
                "run",
            ],
            &[],
        );
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(expected), "{text}: {err}");
    }
    let (code, _, err) = kafka_dlq(&["--config", "/no/such/file.toml", "config", "check"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("/no/such/file.toml"), "{err}");
}

#[test]
fn an_invalid_combination_is_reported_by_config_check() {
    let f = file(&format!(
        "{BASE}backoff_initial_ms = 5000\nbackoff_max_ms = 100\n"
    ));
    let (code, out, err) = kafka_dlq(
        &[
            "--config",
            f.path().to_str().unwrap(),
            "config",
            "check",
            "run",
        ],
        &[],
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("backoff_max_ms") && err.contains("100"),
        "{err}"
    );
}

#[test]
fn monitor_settings_come_from_the_same_file() {
    let f = file(&format!(
        "{BASE}\n[monitor]\ndlq_topics = [\"parcel-events-dlt\"]\nwindow_ms = 5000\n"
    ));
    let (code, out, err) = kafka_dlq(
        &[
            "--config",
            f.path().to_str().unwrap(),
            "config",
            "check",
            "monitor",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "window_ms"), "window_ms = 5000    # file");
    assert_eq!(
        line(&out, "slack_channel"),
        "slack_channel = #alerts    # file"
    );
}
