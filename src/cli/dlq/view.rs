//! How dead letters are shown: a table for people, JSON for tools.

use std::io::Write;

use kafka_dlq::dlq::{DlqContent, DlqEntry};

pub(super) fn entry_json(e: &DlqEntry) -> serde_json::Value {
    let mut v = serde_json::json!({
        "dlq_topic": e.topic,
        "dlq_partition": e.partition,
        "dlq_offset": e.offset,
    });
    if let DlqContent::Foreign { format, .. } = &e.content {
        v["written_by"] = format.as_str().into();
    }
    match (&e.content, e.content.envelope()) {
        (_, Some(env)) => {
            v["envelope"] = serde_json::to_value(env).expect("an envelope serializes");
        }
        (DlqContent::NotAnEnvelope { reason, preview }, None) => {
            v["not_an_envelope"] = serde_json::json!({"reason": reason, "preview": preview});
        }
        (_, None) => {}
    }
    v
}

fn cut(text: &str, n: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > n {
        flat.chars().take(n - 1).collect::<String>() + "…"
    } else {
        flat
    }
}

/// Prints dead letters as a table for people.
pub fn print_table(entries: &[DlqEntry], out: &mut impl Write) {
    let _ = writeln!(
        out,
        "{:<12} {:<28} {:<30} {:<17} {:>3} {:<24} ERROR",
        "DLQ", "ID", "SOURCE", "KIND", "TRY", "DEAD-LETTERED"
    );
    for e in entries {
        let at = format!("{}:{}", e.partition, e.offset);
        match (&e.content, e.content.envelope()) {
            (_, Some(env)) => {
                let source = format!(
                    "{}/{}@{}",
                    env.source.topic, env.source.partition, env.source.offset
                );
                let _ = writeln!(
                    out,
                    "{:<12} {:<28} {:<30} {:<17} {:>3} {:<24} {}",
                    at,
                    cut(&env.id, 28),
                    cut(&source, 30),
                    env.error.kind.as_str(),
                    env.error.attempts,
                    env.timestamp.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                    cut(&env.error.message, 60)
                );
            }
            (content, None) => {
                let reason = match content {
                    DlqContent::NotAnEnvelope { reason, .. } => reason.as_str(),
                    _ => "unknown form",
                };
                let _ = writeln!(
                    out,
                    "{:<12} {:<28} (not a kafka-dlq envelope: {})",
                    at,
                    cut(&e.id(), 28),
                    cut(reason, 70)
                );
            }
        }
    }
    let _ = writeln!(out, "{} dead letter(s)", entries.len());
}
