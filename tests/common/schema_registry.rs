//! The schema registry of the tests: `KAFKA_DLQ_TEST_SCHEMA_REGISTRY`'s, or one of our own
//! ([`super::registry_server`]), and the reference clients that write and read through it.

use serde_json::Value;

pub use super::registry_server::TestRegistry;

/// The registry the tests use: `KAFKA_DLQ_TEST_SCHEMA_REGISTRY`'s, or one of our own.
pub async fn registry() -> (String, Option<TestRegistry>) {
    match std::env::var("KAFKA_DLQ_TEST_SCHEMA_REGISTRY") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let own = TestRegistry::start().await;
            (own.url(), Some(own))
        }
    }
}

/// Writes `count` records to `topic` with the reference serializers (tests/schemas/write.py).
pub async fn write(
    registry: &str,
    brokers: &str,
    topic: &str,
    format: &str,
    framing: &str,
    count: usize,
) {
    let python = std::env::var("KAFKA_DLQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemas/write.py");
    let out = tokio::process::Command::new(&python)
        .args([
            script,
            registry,
            brokers,
            topic,
            format,
            framing,
            &count.to_string(),
        ])
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{python} cannot run ({e}): run ./scripts/test.sh, which installs confluent-kafka"
            )
        });
    assert!(
        out.status.success(),
        "write.py {format} {framing} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads `count` values of `topic` with the reference deserializers (tests/schemas/read.py).
pub async fn read(
    registry: &str,
    brokers: &str,
    topic: &str,
    format: &str,
    count: usize,
) -> Vec<Value> {
    let python = std::env::var("KAFKA_DLQ_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemas/read.py");
    let out = tokio::process::Command::new(&python)
        .args([script, registry, brokers, topic, format, &count.to_string()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "read.py {format} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
