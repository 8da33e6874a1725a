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
        "KAFKA_OPTIONS",
        "KAFKA_SECURITY_PROTOCOL",
        "KAFKA_SASL_PASSWORD",
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
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "svc"
"sasl.password" = "hunter2"

[run]
group_id = "deliveries"
topics = ["parcel-events", "returns"]
target_url = "http://localhost:8080/events"
max_retries = 5
monitor = true
"##;

/// `kafka-dlq --config <f> config check <command>`, with no variables.
fn config_check(f: &tempfile::NamedTempFile, command: &str) -> (i32, String, String) {
    let path = f.path().to_str().unwrap();
    kafka_dlq(&["--config", path, "config", "check", command], &[])
}

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
    let (code, out, err) = config_check(&f, "run");
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("hunter2") && !out.contains("xoxb-very-secret"),
        "{out}"
    );
    assert_eq!(
        line(&out, "slack_token"),
        "slack_token = <redacted>    # file"
    );
    assert!(line(&out, "[librdkafka]").contains("sasl.password=<redacted>"));
    assert!(line(&out, "[librdkafka]").contains("security.protocol=SASL_SSL"));
}

/// Every variable a secret may be given in, and a config file holding the rest.
const SECRET_ENV: [(&str, &str); 5] = [
    ("KAFKA_OPTIONS", "sasl.password=env-hunter2"),
    (
        "TARGET_URL",
        "http://svc:url-pass@target:8080/events?code=url-token",
    ),
    ("KAFKA_SASL_PASSWORD", "env-sasl-secret"),
    ("KAFKA_OAUTH_CLIENT_SECRET", "env-client-secret"),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/T0/B0/env-webhook",
    ),
];

#[test]
fn help_never_shows_a_value_from_the_environment_or_the_file() {
    let f = file(&format!(
        "{BASE}sasl_password = \"file-sasl-secret\"\nslack_webhook_url = \"https://hooks.slack.com/services/T0/B0/file-webhook\"\n"
    ));
    let path = f.path().to_str().unwrap();
    for command in [
        vec!["run", "--help"],
        vec!["monitor", "--help"],
        vec!["dlq", "list", "--help"],
        vec!["dlq", "replay", "--help"],
        vec!["demo", "--help"],
    ] {
        let mut args = vec!["--config", path];
        args.extend(&command);
        let (code, out, err) = kafka_dlq(&args, &SECRET_ENV);
        assert_eq!(code, 0, "{command:?}: {err}");
        for secret in [
            "env-hunter2",
            "url-pass",
            "url-token",
            "env-sasl-secret",
            "env-client-secret",
            "env-webhook",
            "file-sasl-secret",
            "file-webhook",
            "hunter2",
            "xoxb-very-secret",
        ] {
            assert!(
                !out.contains(secret),
                "{command:?} --help shows {secret}:\n{out}"
            );
        }
    }
    let (_, out, _) = kafka_dlq(&["run", "--help"], &SECRET_ENV);
    assert!(
        out.contains("KAFKA_SASL_PASSWORD"),
        "the variable is named, its value not:\n{out}"
    );
}

#[test]
fn config_check_shows_no_credentials_of_a_url_or_a_comma_split_password() {
    let env = [
        (
            "KAFKA_OPTIONS",
            "security.protocol=SASL_SSL,sasl.mechanism=PLAIN,sasl.username=svc,sasl.password=pa,ss=wo,rd",
        ),
        ("TARGET_URL", "http://svc:url-pass@target:8080/events?code=url-token"),
        ("KAFKA_DLQ_TARGET_PROXY", "http://proxy-user:s3cret@proxy:3128"),
        ("KAFKA_DLQ_AUDIT_KEY", "an-audit-key-nobody-may-read-0123"),
    ];
    let (code, out, err) = kafka_dlq(
        &[
            "config",
            "check",
            "run",
            "--brokers",
            "k:9092",
            "--group-id",
            "g",
            "--topics",
            "t",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    for secret in [
        "url-pass",
        "url-token",
        "pa,ss",
        "ss=wo",
        "wo,rd",
        "s3cret",
        "an-audit-key-nobody",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret}:\n{out}{err}"
        );
    }
    assert_eq!(
        line(&out, "target_url"),
        "target_url = http://***@target:8080/events?code=***    # environment"
    );
    assert_eq!(
        line(&out, "target_proxy"),
        "target_proxy = http://***@proxy:3128    # environment"
    );
    assert_eq!(
        line(&out, "audit_key"),
        "audit_key = <redacted>    # environment"
    );
    assert!(
        line(&out, "kafka_options").contains("sasl.password=<redacted>"),
        "{out}"
    );
    assert!(
        line(&out, "kafka_options").contains("sasl.username=svc"),
        "{out}"
    );
}

#[test]
fn config_check_creates_each_client_and_names_what_librdkafka_refuses() {
    let not_pem = file("this is no certificate\n");
    let ca = not_pem.path().to_str().unwrap();
    let cases = [
        (
            format!("security_protocol = \"SSL\"\nssl_ca_location = \"{ca}\"\n"),
            "invalid setting `ssl_ca_location` (--ssl-ca-location)",
        ),
        (
            "security_protocol = \"SASL_SSL\"\nsasl_mechanism = \"GSSAPI\"\n".to_string(),
            "Kerberos (GSSAPI) is not supported",
        ),
        (
            "security_protocol = \"SASL_SSL\"\n".to_string(),
            "needs a SASL mechanism",
        ),
        (
            "[librdkafka]\n\"ssl.key.password\" = \"hunter2\"\n\"security.protocol\" = \"SSL\"\n\"ssl.key.location\" = \"/nonexistent/key.pem\"\n".to_string(),
            "librdkafka refuses it",
        ),
    ];
    for (text, expected) in cases {
        let f = file(&format!(
            "brokers = \"k:9092\"\n{text}\n[run]\ngroup_id = \"g\"\ntopics = [\"t\"]\ntarget_url = \"http://localhost:8080/\"\n"
        ));
        let (code, out, err) = config_check(&f, "run");
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert!(err.contains(expected), "{text}: {err}");
        assert!(!out.contains("configuration OK"), "{out}");
        assert!(
            !err.contains("hunter2") && !out.contains("hunter2"),
            "{err}"
        );
    }
    // The manual's own example (docs/operating.md) checks out: this build has TLS and SCRAM.
    let f = file(
        "brokers = \"b-1.kafka.example.com:9096\"\nsecurity_protocol = \"SASL_SSL\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nsasl_username = \"svc-deliveries\"\nsasl_password = \"pw\"\n[run]\ngroup_id = \"g\"\ntopics = [\"t\"]\ntarget_url = \"http://localhost:8080/\"\n",
    );
    let (code, out, err) = config_check(&f, "run");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("# configuration OK"));
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
        let (code, _, err) = config_check(&f, "run");
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
    let (code, out, err) = config_check(&f, "run");
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("backoff_max_ms") && err.contains("100"),
        "{err}"
    );
}

#[test]
fn a_setting_no_command_takes_is_an_error_naming_it() {
    for (text, key) in [
        ("trace_records = true\n", "trace_records"),
        (
            "[run]\ngroup_id = \"g\"\ntrace_records = true\n",
            "run.trace_records",
        ),
    ] {
        let f = file(text);
        let (code, _, err) = config_check(&f, "run");
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(key), "{text}: {err}");
        assert!(err.contains("otlp_endpoint"), "says what to set: {err}");
    }
}

#[test]
fn a_top_level_dlq_topic_is_the_consumers_template_in_every_command() {
    let f = file(&format!(
        "dlq_topic = \"{{topic}}.DLT\"\n{BASE}\n[console]\ndlq_topic = [\"parcel-events.DLT\"]\nanonymous = \"viewer\"\n"
    ));
    let (code, out, err) = config_check(&f, "run");
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "dlq_topic"), "dlq_topic = {topic}.DLT    # file");
    let (code, out, err) = config_check(&f, "console");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        line(&out, "dlq_topic_template"),
        "dlq_topic_template = {topic}.DLT    # file"
    );
    assert_eq!(
        line(&out, "dlq_topic"),
        "dlq_topic = parcel-events.DLT    # file"
    );
    let path = f.path().to_str().unwrap();
    let (code, out, err) = kafka_dlq(
        &[
            "--config",
            path,
            "config",
            "check",
            "dlq",
            "list",
            "--dlq-topic",
            "parcel-events.DLT",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        line(&out, "dlq_topic_template"),
        "dlq_topic_template = {topic}.DLT    # file"
    );
}

#[test]
fn monitor_settings_come_from_the_same_file() {
    let f = file(&format!(
        "{BASE}\n[monitor]\ndlq_topics = [\"parcel-events-dlt\"]\nwindow_ms = 5000\n"
    ));
    let (code, out, err) = config_check(&f, "monitor");
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "window_ms"), "window_ms = 5000    # file");
    assert_eq!(
        line(&out, "slack_channel"),
        "slack_channel = #alerts    # file"
    );
}

#[test]
fn console_settings_come_from_the_same_file() {
    let f = file(&format!(
        "{BASE}\n[console]\ndlq_topic = [\"parcel-events-dlt\", \"orders-dlt\"]\nlisten = \"0.0.0.0:9000\"\npath_prefix = \"/dlq\"\noperator_token = \"alice:0123456789abcdef0123\"\n"
    ));
    let (code, out, err) = config_check(&f, "console");
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "listen"), "listen = 0.0.0.0:9000    # file");
    assert_eq!(line(&out, "path_prefix"), "path_prefix = /dlq    # file");
    assert_eq!(
        line(&out, "operator_token"),
        "operator_token = <redacted>    # file"
    );
    assert!(
        line(&out, "dlq_topic").contains("parcel-events-dlt"),
        "{out}"
    );
    assert!(!out.contains("0123456789abcdef0123"), "{out}");
}

#[test]
fn an_oidc_token_endpoint_in_clear_is_refused_unless_it_is_this_machine() {
    let check = |endpoint: &str| {
        kafka_dlq(
            &[
                "config",
                "check",
                "run",
                "--brokers",
                "k:9093",
                "--group-id",
                "g",
                "--topics",
                "t",
                "--target-url",
                "http://127.0.0.1:9/",
                "--security-protocol",
                "SASL_SSL",
                "--sasl-mechanism",
                "OAUTHBEARER",
                "--oauth-token-endpoint",
                endpoint,
                "--oauth-client-id",
                "svc",
                "--oauth-client-secret",
                "client-s3cret",
            ],
            &[],
        )
    };
    let (code, out, err) = check("http://id:pw@idp.example.com/token");
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("oauth_token_endpoint") && err.contains("https://"),
        "{err}"
    );
    assert!(
        !err.contains("id:pw") && !out.contains("client-s3cret"),
        "{out}{err}"
    );
    let (code, out, err) = check("http://127.0.0.1:8080/token");
    assert_eq!(code, 0, "{out}{err}");
}
