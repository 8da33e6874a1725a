//! The Helm chart (`deploy/helm/kafka-dlq`): `helm lint --strict` and `helm template` with each
//! of its value files (`ci/`: the least a user gives, and every option on), every rendered
//! manifest decoded strictly into its Kubernetes API type (unknown fields refused), and the
//! config file the chart renders read by the real binary with the secrets mounted as the chart
//! mounts them. `scripts/test.sh` installs Helm and the validator (`deploy/helm/validate`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/kafka-dlq")
}

fn helm(args: &[&str]) -> (i32, String, String) {
    let bin = std::env::var("HELM_BIN").unwrap_or_else(|_| "helm".into());
    let out = Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}; run ./scripts/test.sh, which installs Helm"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The value files the chart is checked with.
const VALUES: [&str; 2] = ["ci/sidecar-values.yaml", "ci/all-options-values.yaml"];

fn template(values: &str, extra: &[&str]) -> String {
    let chart = chart();
    let values = chart.join(values);
    let mut args = vec![
        "template",
        "orders",
        chart.to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
    ];
    args.extend(extra);
    let (code, out, err) = helm(&args);
    assert_eq!(code, 0, "helm template with {}: {err}", values.display());
    out
}

#[test]
fn the_chart_lints_strictly_with_each_value_file() {
    for values in VALUES {
        let path = chart().join(values);
        let (code, out, err) = helm(&[
            "lint",
            "--strict",
            chart().to_str().unwrap(),
            "-f",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "helm lint --strict -f {values}:\n{out}{err}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn every_rendered_manifest_decodes_strictly_as_its_kubernetes_type() {
    let bin = std::env::var("KUBE_VALIDATE_BIN").unwrap_or_else(|_| "kube-validate".into());
    let kinds = |values: &str| -> Vec<String> {
        let manifests = template(values, &[]);
        let mut child = Command::new(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e}; run ./scripts/test.sh, which builds it"));
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), manifests.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{values}:\n{report}");
        report
            .lines()
            .filter_map(|l| l.strip_prefix("ok "))
            .map(|l| {
                l.split('/')
                    .take(l.split('/').count() - 1)
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect()
    };
    let least = kinds(VALUES[0]);
    for kind in [
        "v1 ConfigMap",
        "v1 ServiceAccount",
        "apps/v1 Deployment",
        "v1 Service",
        "policy/v1 PodDisruptionBudget",
    ] {
        assert!(least.iter().any(|k| k == kind), "{kind} in {least:?}");
    }
    let all = kinds(VALUES[1]);
    for kind in [
        "keda.sh/v1alpha1 ScaledObject",
        "keda.sh/v1alpha1 TriggerAuthentication",
        "monitoring.coreos.com/v1 ServiceMonitor",
        "monitoring.coreos.com/v1 PrometheusRule",
        "networking.k8s.io/v1 Ingress",
        "networking.k8s.io/v1 NetworkPolicy",
    ] {
        assert!(all.iter().any(|k| k == kind), "{kind} in {all:?}");
    }
    assert_eq!(
        all.iter().filter(|k| *k == "apps/v1 Deployment").count(),
        3,
        "the sidecar, the monitor and the console"
    );
}

#[test]
fn a_bad_field_is_refused_by_the_validator() {
    // The check can fail: a misspelt field of a Deployment is refused, naming it.
    let bin = std::env::var("KUBE_VALIDATE_BIN").unwrap_or_else(|_| "kube-validate".into());
    let manifests = template(VALUES[0], &[]).replace("replicas: 2", "replicaz: 2");
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), manifests.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{report}");
    assert!(report.contains("replicaz"), "{report}");
}

#[test]
fn a_required_value_left_out_is_named() {
    let chart = chart();
    let (code, _, err) = helm(&["template", "orders", chart.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("kafka.brokers is required"), "{err}");
    let (code, _, err) = helm(&[
        "template",
        "orders",
        chart.to_str().unwrap(),
        "--set",
        "kafka.brokers=k:9092,sidecar.groupId=g,sidecar.topics={t},sidecar.targetUrl=http://t/,console.enabled=true",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("console.operatorTokens.secretName is required"),
        "{err}"
    );
    let (code, _, err) = helm(&[
        "template",
        "orders",
        chart.to_str().unwrap(),
        "--set",
        "kafka.brokers=k:9092,sidecar.groupId=g,sidecar.topics={t},sidecar.targetUrl=http://t/,console.enabled=true,console.operatorTokens.secretName=s,console.replicas=2",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("console.replicas > 1 needs console.sessionKey.secretName"),
        "{err}"
    );
}

/// The value of `key` in the rendered ConfigMap `kafka-dlq.toml`, de-indented.
fn config_file(manifests: &str) -> String {
    let mut lines = manifests
        .lines()
        .skip_while(|l| l.trim() != "kafka-dlq.toml: |");
    lines.next().expect("the ConfigMap holds kafka-dlq.toml");
    lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_config_file_the_chart_renders_is_read_by_kafka_dlq_with_its_secrets_mounted() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(secrets.join("tls")).unwrap();
    // The files the chart mounts from Secrets.
    let pki = common::security::Pki::create(&dir.path().join("pki")).unwrap();
    for (file, from) in [
        ("tls/ca.crt", pki.ca()),
        ("tls/tls.crt", pki.client_certificate()),
        ("tls/tls.key", pki.client_key()),
    ] {
        std::fs::copy(from, secrets.join(file)).unwrap();
    }
    for (file, content) in [
        ("sasl-password", "s3cret-password\n"),
        (
            "ssl-key-password",
            &format!("{}\n", common::security::CLIENT_KEY_PASSWORD),
        ),
        ("audit-key", "an-audit-key-of-32-characters-00\n"),
        ("slack-token", "xoxb-0000-token\n"),
        ("operator-tokens", "alice:operator-token-0123456789\n"),
        ("viewer-tokens", "bob:viewer-token-0123456789ab\n"),
        ("session-key", "a-session-key-of-at-least-32-characters\n"),
    ] {
        std::fs::write(secrets.join(file), content).unwrap();
    }
    for values in VALUES {
        let rendered = config_file(&template(
            values,
            &["--show-only", "templates/configmap.yaml"],
        ))
        .replace("/etc/kafka-dlq/secrets", secrets.to_str().unwrap());
        let path = dir.path().join("kafka-dlq.toml");
        std::fs::write(&path, &rendered).unwrap();
        let commands: &[&[&str]] = if values.contains("all-options") {
            &[&["run"], &["monitor"], &["console"]]
        } else {
            &[&["run"]]
        };
        for command in commands {
            let mut args = vec!["--config", path.to_str().unwrap(), "config", "check"];
            args.extend(*command);
            let out = Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
                .args(&args)
                .env_clear()
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{values}, config check {command:?}:\n{stdout}{stderr}\n--- the file:\n{rendered}"
            );
            assert!(stdout.contains("# configuration OK"), "{stdout}");
            assert!(!stdout.contains("s3cret-password"), "{stdout}");
        }
    }
}
