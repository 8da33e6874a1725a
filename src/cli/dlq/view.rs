//! How dead letters are shown: a table for people, JSON for tools.

use std::io::Write;

use kafka_dlq::dlq_reader::{DlqContent, DlqEntry};
use kafka_dlq::replay::Outcome;
use kafka_dlq::state::ledger::Resolution;

pub(super) fn entry_json(
    e: &DlqEntry,
    resolution: Option<&Resolution>,
    decoded: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "dlq_topic": e.topic,
        "dlq_partition": e.partition,
        "dlq_offset": e.offset,
        "outstanding": resolution.is_none(),
    });
    if let Some(r) = resolution {
        v["resolved"] = serde_json::to_value(r).expect("a resolution serializes");
    }
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
    if let Some(unresolved) = &e.unresolved {
        v["unresolved"] = unresolved.to_string().into();
    }
    if let Some(decoded) = decoded {
        v["decoded"] = decoded.clone();
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

/// `text` with its control characters escaped (`\u{1b}`), so that a producer-controlled id
/// cannot drive the operator's terminal.
pub(crate) fn escaped(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// The line `dlq replay` prints for one dead letter dealt with, ids escaped; `None` for one
/// the filter passed over.
pub(super) fn outcome_line(outcome: &Outcome, verb: &str, max_replays: u32) -> Option<String> {
    Some(match outcome {
        Outcome::Replayed { id, to } => format!("{verb} {} -> {}", escaped(id), escaped(to)),
        Outcome::Refused { id, replays } => format!(
            "refused {} (already replayed {replays} times; loop guard --max-replays {max_replays})",
            escaped(id)
        ),
        Outcome::NotAnEnvelope { id } => {
            format!("skipped {} (not a kafka-dlq envelope)", escaped(id))
        }
        Outcome::Undecodable { id, why } => format!(
            "skipped {} (its envelope does not decode: {})",
            escaped(id),
            escaped(why)
        ),
        Outcome::Untransformable { id, why } => format!(
            "skipped {} (the transformation failed: {}; not sent, it stays outstanding)",
            escaped(id),
            escaped(why)
        ),
        Outcome::Lost { id, why } => format!(
            "lost {} ({}; not sent, it stays outstanding)",
            escaped(id),
            escaped(why)
        ),
        Outcome::AlreadyResolved { id, by } => format!(
            "skipped {} (already resolved: {}; not sent again)",
            escaped(id),
            escaped(by)
        ),
        Outcome::DestinationRefused { id, to, why } => format!(
            "refused {} -> {} ({}; not sent, it stays outstanding)",
            escaped(id),
            escaped(to),
            escaped(why)
        ),
        _ => return None,
    })
}

/// Prints dead letters as a table for people.
pub(crate) fn print_table(entries: &[DlqEntry], out: &mut impl Write) {
    print_header(out, false);
    for e in entries {
        print_row(e, None, out);
    }
    print_count(entries.len(), false, out);
}

/// The table's header line; with `all`, a column says what resolved each.
pub(super) fn print_header(out: &mut impl Write, all: bool) {
    let _ = writeln!(
        out,
        "{}{:<12} {:<28} {:<30} {:<16} {:<17} {:>3} {:<24} ERROR",
        if all {
            format!("{:<11} ", "STATE")
        } else {
            String::new()
        },
        "DLQ",
        "ID",
        "SOURCE",
        "GROUP",
        "KIND",
        "TRY",
        "DEAD-LETTERED"
    );
}

/// What resolved a dead letter, in a word.
pub(super) fn state_word(resolution: Option<&Resolution>) -> &'static str {
    match resolution {
        None => "outstanding",
        Some(Resolution::Replayed) => "replayed",
        Some(Resolution::Redriven { .. }) => "redriven",
        Some(Resolution::Discarded { .. }) => "discarded",
    }
}

/// One dead letter's line of the table; with a `state` (a listing of them all,
/// [`state_word`]), that first.
pub(super) fn print_row(e: &DlqEntry, state: Option<&str>, out: &mut impl Write) {
    if let Some(state) = state {
        let _ = write!(out, "{state:<11} ");
    }
    let at = format!("{}:{}", e.partition, e.offset);
    match (&e.content, e.content.envelope()) {
        (_, Some(env)) => {
            let source = format!(
                "{}/{}@{}",
                env.source.topic, env.source.partition, env.source.offset
            );
            let _ = writeln!(
                out,
                "{:<12} {:<28} {:<30} {:<16} {:<17} {:>3} {:<24} {}",
                at,
                cut(&env.id, 28),
                cut(&source, 30),
                cut(&env.source.group, 16),
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

/// The table's last line.
pub(super) fn print_count(count: usize, all: bool, out: &mut impl Write) {
    match all {
        true => {
            let _ = writeln!(out, "{count} dead letter(s)");
        }
        false => {
            let _ = writeln!(out, "{count} dead letter(s) outstanding");
        }
    }
}

/// The progress of a replay: a bar, done/total, the rate so far and the time left at it.
pub(super) fn progress_line(done: u64, total: u64, elapsed: std::time::Duration) -> String {
    let width = 30usize;
    let filled = if total == 0 {
        width
    } else {
        ((done.min(total) as usize) * width) / total as usize
    };
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let eta = if done >= total {
        "done".to_string()
    } else if rate > 0.0 {
        format!(
            "ETA {}",
            duration_text(((total - done) as f64 / rate).ceil() as u64)
        )
    } else {
        "ETA …".to_string()
    };
    format!(
        "[{}{}] {done}/{total}  {rate:.0}/s  {eta}",
        "=".repeat(filled),
        " ".repeat(width - filled)
    )
}

/// Seconds as `42 s`, `3 min 20 s` or `2 h 5 min`.
fn duration_text(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The replay runs as a table.
pub(crate) fn print_history(runs: &[kafka_dlq::replay::audit::ReplayRun], out: &mut impl Write) {
    let _ = writeln!(
        out,
        "{:<24} {:<20} {:<24} {:<24} {:>9} {:>9} {:<12} FILTER",
        "STARTED", "BY", "DLQ", "TO", "REPLAYED", "SCANNED", "ENDED"
    );
    for r in runs {
        let ended = match (&r.error, r.interrupted) {
            (Some(_), _) => "failed",
            (None, true) => "interrupted",
            (None, false) => "done",
        };
        let _ = writeln!(
            out,
            "{:<24} {:<20} {:<24} {:<24} {:>9} {:>9} {:<12} {}",
            r.started.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            cut(&format!("{}@{}", r.operator, r.host), 20),
            cut(&r.dlq_topic, 24),
            cut(&r.to, 24),
            r.replayed,
            r.scanned,
            ended,
            if r.filter.is_empty() {
                "(none)".to_string()
            } else {
                cut(&r.filter, 60)
            },
        );
        if let Some(e) = &r.error {
            let _ = writeln!(out, "    error: {}", cut(e, 100));
        }
    }
    let _ = writeln!(out, "{} run(s)", runs.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_ids_are_escaped_and_the_rest_kept() {
        assert_eq!(escaped("t-0-1"), "t-0-1");
        assert_eq!(escaped("\x1b]0;pwned\x07é"), "\\u{1b}]0;pwned\\u{7}é");
        let line = outcome_line(
            &Outcome::Replayed {
                id: "\x1b[2Jx".into(),
                to: "t".into(),
            },
            "replayed",
            3,
        )
        .unwrap();
        assert_eq!(line, "replayed \\u{1b}[2Jx -> t");
        assert_eq!(outcome_line(&Outcome::FilteredOut, "replayed", 3), None);
    }

    #[test]
    fn progress_shows_rate_and_time_left() {
        let line = progress_line(250, 1000, std::time::Duration::from_secs(5));
        assert!(line.ends_with("250/1000  50/s  ETA 15 s"), "{line}");
        let line = progress_line(1000, 1000, std::time::Duration::from_secs(20));
        assert!(line.ends_with("1000/1000  50/s  done"), "{line}");
        assert!(progress_line(0, 10, std::time::Duration::ZERO).ends_with("ETA …"));
        assert_eq!(duration_text(200), "3 min 20 s");
        assert_eq!(duration_text(7500), "2 h 5 min");
    }
}
