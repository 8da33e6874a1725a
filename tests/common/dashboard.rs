//! The metric families the shipped Grafana dashboard and alert rules ask for, so that each
//! test binary that serves `/metrics` (a consumer, a share member, the console) checks the
//! names it serves against them.

use std::collections::BTreeSet;

/// Every `kafka_dlq_*` metric family named in `text` (a histogram's `_bucket`, `_sum` and
/// `_count` series count as the histogram).
pub fn families_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("kafka_dlq_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(&name)
            .to_string();
        out.insert(family);
    }
    out
}

/// The families a `/metrics` page serves (its `# TYPE` lines).
pub fn families_served(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `alerting/grafana-dashboard.json`, parsed.
pub fn dashboard() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/alerting/grafana-dashboard.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every query of the dashboard's panels, one per line.
pub fn dashboard_queries() -> String {
    let mut queries = String::new();
    for panel in dashboard()["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push_str(target["expr"].as_str().unwrap());
            queries.push('\n');
        }
    }
    queries
}

/// The families of the dashboard's queries that a share-group member serves.
pub fn share_families() -> BTreeSet<String> {
    families_named(&dashboard_queries())
        .into_iter()
        .filter(|f| f.starts_with("kafka_dlq_share_"))
        .collect()
}

/// The families of the dashboard's queries that the DLQ console serves.
pub fn console_families() -> BTreeSet<String> {
    families_named(&dashboard_queries())
        .into_iter()
        .filter(|f| f.starts_with("kafka_dlq_console_") || f == "kafka_dlq_state_unverified_records")
        .collect()
}
