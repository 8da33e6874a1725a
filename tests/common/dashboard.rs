//! The metric families the shipped Grafana dashboard, the alert rules and the manual name, so
//! that each test binary that serves `/metrics` (a consumer, a share member, the console)
//! checks the names it serves against them.

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

/// The families of the dashboard's queries and the manual that a share-group member serves.
pub fn share_families() -> BTreeSet<String> {
    let mut all = families_named(&dashboard_queries());
    all.extend(manual_families());
    of_share(&all)
}

/// The families of the dashboard's queries and the manual that the DLQ console serves.
pub fn console_families() -> BTreeSet<String> {
    let mut all = families_named(&dashboard_queries());
    all.extend(manual_families());
    of_console(&all)
}

/// Every metric family the manual names: README.md, ARCHITECTURE.md, docs/*.md, the runbook.
pub fn manual_families() -> BTreeSet<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    let mut files = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("alerting/RUNBOOK.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        files.push(entry.unwrap().path());
    }
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        text.push_str(&std::fs::read_to_string(file).unwrap());
    }
    // `kafka_dlq_console_{outstanding,…}` and `_causes` style shorthands name no family.
    families_named(&text)
        .into_iter()
        .filter(|f| !f.ends_with('_'))
        .collect()
}

/// Of `families`, the share members' (`kafka_dlq_share_*`).
pub fn of_share(families: &BTreeSet<String>) -> BTreeSet<String> {
    families
        .iter()
        .filter(|f| f.starts_with("kafka_dlq_share_"))
        .cloned()
        .collect()
}

/// Of `families`, the console's.
pub fn of_console(families: &BTreeSet<String>) -> BTreeSet<String> {
    families
        .iter()
        .filter(|f| {
            f.starts_with("kafka_dlq_console_") || *f == "kafka_dlq_state_unverified_records"
        })
        .cloned()
        .collect()
}
