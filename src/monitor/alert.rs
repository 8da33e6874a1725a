//! What an alert says (the dead letters behind one are gathered by the monitor's window).

use super::mrkdwn::code;
use std::collections::BTreeMap;

/// One message for the team.
#[derive(Debug, Clone, PartialEq)]
// An alert is made at most once a minute: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Alert {
    /// New dead letters arrived.
    Increase(Increase),
    /// Dead letters were replayed, some remain.
    Decrease {
        /// Outstanding dead letters before.
        previous: u64,
        /// Outstanding dead letters now.
        total: u64,
    },
    /// Retention deleted dead letters that no replay had passed: they are gone, unhandled.
    /// Never a resolution: sent instead of *went down* or *resolved* for that check.
    Expired {
        /// Dead letters deleted since the last check.
        expired: u64,
        /// Outstanding dead letters now.
        total: u64,
    },
    /// The DLQ holds no outstanding dead letters any more.
    Resolved {
        /// Outstanding dead letters before.
        previous: u64,
    },
    /// The consumer's outage breaker opened: the downstream looks down.
    BreakerOpened,
    /// The outage breaker closed: the downstream answers again.
    BreakerClosed,
}

/// The content of an increase alert.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Increase {
    /// Dead letters in this alert.
    pub new: u64,
    /// Outstanding dead letters on the watched topics now (unknown: `None`).
    pub total: Option<u64>,
    /// New dead letters by source topic.
    pub by_source_topic: BTreeMap<String, u64>,
    /// New dead letters by error kind (`permanent`, `retries_exhausted`, `unreadable`).
    pub by_kind: BTreeMap<String, u64>,
    /// New dead letters by the consumer group (the service) that dead-lettered them
    /// (`(unknown)` when the dead letter does not say).
    pub by_group: BTreeMap<String, u64>,
    /// New dead letters that went through retry topics ([`crate::retry_tier`]), by the last
    /// retry topic they were consumed from.
    pub after_retry_topics: BTreeMap<String, u64>,
    /// The most frequent error groups: fingerprint, count, one example message.
    pub top_errors: Vec<ErrorGroup>,
    /// Fingerprints never seen before by this monitor.
    pub new_fingerprints: Vec<String>,
    /// A few record ids.
    pub sample_ids: Vec<String>,
    /// The DLQ topics the dead letters are on.
    pub dlq_topics: Vec<String>,
    /// A few payloads, only when payloads are enabled.
    pub sample_payloads: Vec<String>,
    /// The keys parked behind these dead letters and the records waiting behind them
    /// (`key_order_after_failure = "park"`), as the park logs said when the alert was made.
    pub parked: crate::outstanding::parked::Parked,
    /// When the first of these dead letters was read.
    pub window_start: Option<chrono::DateTime<chrono::Utc>>,
    /// When the alert was made.
    pub window_end: Option<chrono::DateTime<chrono::Utc>>,
}

/// What waits behind an alert's dead letters: `2 keys wait behind them, 9 records in all,
/// handled in order once each head is redriven and handled, or discarded`; `None` when none.
pub(super) fn parked_line(p: &crate::outstanding::parked::Parked) -> Option<String> {
    (p.keys > 0).then(|| {
        format!(
            "{} key{} wait{} behind them, {} record{} in all, handled in order once each head is redriven and handled, or discarded",
            p.keys,
            if p.keys == 1 { "" } else { "s" },
            if p.keys == 1 { "s" } else { "" },
            p.records,
            if p.records == 1 { "" } else { "s" },
        )
    })
}

/// Dead letters whose error messages share a fingerprint.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorGroup {
    /// `kind: normalised message`.
    pub fingerprint: String,
    /// How many.
    pub count: u64,
    /// One original message.
    pub example: String,
    /// The record id of one of them.
    pub sample_id: Option<String>,
}

impl Alert {
    /// The message text (Slack mrkdwn), with the exact commands to inspect and replay.
    /// `brokers` goes into those commands.
    pub fn text(&self, brokers: &str) -> String {
        match self {
            Alert::Increase(i) => {
                let mut t = format!(
                    ":rotating_light: *{} new dead letter{}*",
                    i.new,
                    if i.new == 1 { "" } else { "s" }
                );
                if let Some(total) = i.total {
                    t.push_str(&format!(" ({total} outstanding)"));
                }
                let topics: Vec<String> = i.dlq_topics.iter().map(|t| code(t)).collect();
                t.push_str(&format!(" on {}\n", topics.join(", ")));
                t.push_str(&format!(
                    "*By source topic:* {}\n",
                    join_counts(&i.by_source_topic)
                ));
                t.push_str(&format!("*By error kind:* {}\n", join_counts(&i.by_kind)));
                t.push_str(&format!("*By group:* {}\n", join_counts(&i.by_group)));
                if let Some(parked) = parked_line(&i.parked) {
                    t.push_str(&format!("*Parked:* {parked}\n"));
                }
                if !i.after_retry_topics.is_empty() {
                    t.push_str(&format!(
                        "*After retry topics:* {}\n",
                        join_counts(&i.after_retry_topics)
                    ));
                }
                t.push_str("*Top errors:*\n");
                for g in &i.top_errors {
                    let new = if i.new_fingerprints.contains(&g.fingerprint) {
                        " :new: *first seen*"
                    } else {
                        ""
                    };
                    t.push_str(&format!("• {}× {}{new}\n", g.count, code(&g.fingerprint)));
                }
                if !i.sample_ids.is_empty() {
                    let ids: Vec<String> = i.sample_ids.iter().map(|id| code(id)).collect();
                    t.push_str(&format!("*Sample ids:* {}\n", ids.join(", ")));
                }
                for p in &i.sample_payloads {
                    t.push_str(&format!("*Payload:* {}\n", code(p)));
                }
                for topic in &i.dlq_topics {
                    t.push_str(&format!(
                        "*Inspect:* {}\n",
                        code(&format!("kafka-dlq dlq list --brokers {brokers} --dlq-topic {topic}"))
                    ));
                    t.push_str(&format!(
                        "*Replay (after the fix):* {}, then without `--dry-run`\n",
                        code(&format!(
                            "kafka-dlq dlq replay --brokers {brokers} --dlq-topic {topic} --dry-run"
                        ))
                    ));
                }
                t.trim_end().to_string()
            }
            Alert::Decrease { previous, total } => format!(
                ":arrow_down: Dead letters went down from {previous} to {total} outstanding."
            ),
            Alert::Expired { expired, total } => format!(
                ":hourglass: *{expired} dead letter{} expired* before anyone replayed {}: the topic's retention deleted {}, so {} will not be handled. {total} outstanding.",
                if *expired == 1 { "" } else { "s" },
                if *expired == 1 { "it" } else { "them" },
                if *expired == 1 { "it" } else { "them" },
                if *expired == 1 { "it" } else { "they" },
            ),
            Alert::Resolved { previous } => format!(
                ":white_check_mark: *Resolved:* no outstanding dead letters (was {previous})."
            ),
            Alert::BreakerOpened => ":construction: *Downstream outage:* most recent calls failed transiently, so the outage breaker opened. Consumption is paused and one record probes the downstream at growing intervals; no record is dead-lettered because of the outage.".to_string(),
            Alert::BreakerClosed => ":white_check_mark: *Downstream back:* a probe succeeded, the outage breaker closed and consumption resumed.".to_string(),
        }
    }
}

fn join_counts(counts: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{} {n}", code(k)))
        .collect::<Vec<_>>()
        .join(", ")
}
