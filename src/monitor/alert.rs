//! What an alert says, and how dead letters are gathered into one.

use std::collections::{BTreeMap, HashSet};

use crate::dlq::DlqContent;

pub use super::fingerprint::fingerprint;

/// How many sample record ids an alert lists.
const SAMPLE_IDS: usize = 5;
/// How many error groups an alert lists.
const TOP_ERRORS: usize = 5;

/// One message for the team.
#[derive(Debug, Clone, PartialEq)]
// An alert is made at most once a minute: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Alert {
    /// New dead letters arrived.
    Increase(Increase),
    /// Dead letters left the DLQ (replayed or expired), some remain.
    Decrease {
        /// Outstanding dead letters before.
        previous: u64,
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
    /// When the first of these dead letters was read.
    pub window_start: Option<chrono::DateTime<chrono::Utc>>,
    /// When the alert was made.
    pub window_end: Option<chrono::DateTime<chrono::Utc>>,
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

/// Dead letters seen since the last increase alert.
#[derive(Debug, Default)]
pub struct Window {
    new: u64,
    by_source_topic: BTreeMap<String, u64>,
    by_kind: BTreeMap<String, u64>,
    after_retry_topics: BTreeMap<String, u64>,
    groups: BTreeMap<String, (u64, String, Option<String>)>,
    new_fingerprints: Vec<String>,
    sample_ids: Vec<String>,
    dlq_topics: Vec<String>,
    sample_payloads: Vec<String>,
    started: Option<chrono::DateTime<chrono::Utc>>,
}

impl Window {
    /// No dead letter gathered.
    pub fn is_empty(&self) -> bool {
        self.new == 0
    }

    /// Adds one record read from `dlq_topic`; `seen` is every fingerprint this monitor ever
    /// announced, and learns the new ones.
    pub fn add(
        &mut self,
        dlq_topic: &str,
        content: &DlqContent,
        seen: &mut HashSet<String>,
        include_payloads: bool,
    ) {
        self.new += 1;
        self.started.get_or_insert_with(chrono::Utc::now);
        if !self.dlq_topics.iter().any(|t| t == dlq_topic) {
            self.dlq_topics.push(dlq_topic.to_string());
        }
        let (source, kind, message, id) = match (content, content.envelope()) {
            (_, Some(env)) => (
                env.source.topic.clone(),
                env.error.kind.as_str().to_string(),
                env.error.message.clone(),
                Some((env.id.clone(), env)),
            ),
            (content, None) => (
                "(unknown)".to_string(),
                "unreadable".to_string(),
                match content {
                    DlqContent::NotAnEnvelope { reason, .. } => {
                        format!("not a kafka-dlq envelope: {reason}")
                    }
                    _ => "not a kafka-dlq envelope".to_string(),
                },
                None,
            ),
        };
        *self.by_source_topic.entry(source).or_default() += 1;
        *self.by_kind.entry(kind.clone()).or_default() += 1;
        if let Some(last) = id.as_ref().and_then(|(_, env)| env.history.last()) {
            *self
                .after_retry_topics
                .entry(last.topic.clone())
                .or_default() += 1;
        }
        let fp = fingerprint(&kind, &message);
        if seen.insert(fp.clone()) {
            self.new_fingerprints.push(fp.clone());
        }
        let group =
            self.groups
                .entry(fp)
                .or_insert((0, message, id.as_ref().map(|(id, _)| id.clone())));
        group.0 += 1;
        if let Some((id, env)) = id {
            if self.sample_ids.len() < SAMPLE_IDS {
                self.sample_ids.push(id);
                if include_payloads {
                    self.sample_payloads
                        .push(env.payload.get().chars().take(300).collect());
                }
            }
        }
    }

    /// Whether an error never seen before is in the window.
    pub fn has_new_fingerprint(&self) -> bool {
        !self.new_fingerprints.is_empty()
    }

    /// Empties the window into an alert.
    pub fn take(&mut self, total: Option<u64>) -> Increase {
        let window = std::mem::take(self);
        let mut top_errors: Vec<ErrorGroup> = window
            .groups
            .into_iter()
            .map(|(fingerprint, (count, example, sample_id))| ErrorGroup {
                fingerprint,
                count,
                example,
                sample_id,
            })
            .collect();
        top_errors.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.fingerprint.cmp(&b.fingerprint))
        });
        top_errors.truncate(TOP_ERRORS);
        Increase {
            new: window.new,
            total,
            by_source_topic: window.by_source_topic,
            by_kind: window.by_kind,
            after_retry_topics: window.after_retry_topics,
            top_errors,
            new_fingerprints: window.new_fingerprints,
            sample_ids: window.sample_ids,
            dlq_topics: window.dlq_topics,
            sample_payloads: window.sample_payloads,
            window_start: window.started,
            window_end: Some(chrono::Utc::now()),
        }
    }
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
                t.push_str(&format!(" on `{}`\n", i.dlq_topics.join("`, `")));
                t.push_str(&format!(
                    "*By source topic:* {}\n",
                    join_counts(&i.by_source_topic)
                ));
                t.push_str(&format!("*By error kind:* {}\n", join_counts(&i.by_kind)));
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
                    t.push_str(&format!("• {}× `{}`{new}\n", g.count, g.fingerprint));
                }
                if !i.sample_ids.is_empty() {
                    t.push_str(&format!("*Sample ids:* `{}`\n", i.sample_ids.join("`, `")));
                }
                for p in &i.sample_payloads {
                    t.push_str(&format!("*Payload:* `{p}`\n"));
                }
                for topic in &i.dlq_topics {
                    t.push_str(&format!(
                        "*Inspect:* `kafka-dlq dlq list --brokers {brokers} --dlq-topic {topic}`\n"
                    ));
                    t.push_str(&format!(
                        "*Replay (after the fix):* `kafka-dlq dlq replay --brokers {brokers} --dlq-topic {topic} --dry-run`, then without `--dry-run`\n"
                    ));
                }
                t.trim_end().to_string()
            }
            Alert::Decrease { previous, total } => format!(
                ":arrow_down: Dead letters went down from {previous} to {total} outstanding."
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
        .map(|(k, n)| format!("`{k}` {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;

    fn content(value: &[u8]) -> DlqContent {
        match Envelope::from_slice(value) {
            Ok(env) => DlqContent::Envelope(Box::new(env)),
            Err(e) => DlqContent::NotAnEnvelope {
                reason: e.to_string(),
                preview: String::new(),
            },
        }
    }
    use crate::failure::DeadLetterKind;
    use crate::record::Record;

    #[test]
    fn fingerprints_group_messages_that_differ_in_values() {
        let cases = [
            (
                "target answered HTTP 503",
                "permanent: target answered HTTP #",
            ),
            (
                "parcel P-1234 not found in  shard 7",
                "permanent: parcel # not found in shard #",
            ),
            (
                "malformed JSON: expected value at line 1 column 2",
                "permanent: malformed JSON: expected value at line # column #",
            ),
            ("id 9f8e7d6c-aaaa-bbbb missing", "permanent: id # missing"),
            ("no digits here", "permanent: no digits here"),
        ];
        for (message, expected) in cases {
            assert_eq!(fingerprint("permanent", message), expected, "{message}");
        }
    }

    fn envelope(topic: &str, id: &str, kind: DeadLetterKind, message: &str) -> Vec<u8> {
        let record = Record {
            id: id.into(),
            topic: topic.into(),
            partition: 0,
            offset: 0,
            key: None,
            payload: Some(b"{\"secret\":\"pii\"}".to_vec()),
            headers: vec![],
            timestamp: None,
            timestamp_type: None,
            retry: None,
        };
        Envelope::new(&record, kind, message, 1, "g").to_vec()
    }

    #[test]
    fn dead_letters_after_retry_topics_are_counted_by_their_last_tier() {
        let mut seen = HashSet::new();
        let mut w = Window::default();
        let mut env = Envelope::from_slice(&envelope(
            "orders",
            "o-1",
            DeadLetterKind::RetriesExhausted,
            "HTTP 503",
        ))
        .unwrap();
        env.history = ["orders", "orders-retry-0", "orders-retry-1"]
            .map(|topic| crate::retry_tier::RetryStage {
                topic: topic.into(),
                attempts: 2,
                error: "HTTP 503".into(),
                at: chrono::Utc::now(),
            })
            .to_vec();
        w.add("orders-dlt", &content(&env.to_vec()), &mut seen, false);
        let plain = envelope("orders", "o-2", DeadLetterKind::Permanent, "bad");
        w.add("orders-dlt", &content(&plain), &mut seen, false);
        let inc = w.take(None);
        assert_eq!(
            inc.after_retry_topics,
            [("orders-retry-1".to_string(), 1)].into()
        );
        let text = Alert::Increase(inc).text("kafka:9092");
        assert!(
            text.contains("*After retry topics:* `orders-retry-1` 1"),
            "{text}"
        );
    }

    #[test]
    fn window_counts_by_topic_kind_and_error_and_keeps_a_few_ids() {
        let mut seen = HashSet::new();
        let mut w = Window::default();
        for i in 0..8 {
            let v = envelope(
                "orders",
                &format!("o-{i}"),
                DeadLetterKind::Permanent,
                &format!("bad row {i}"),
            );
            w.add("orders-dlt", &content(&v), &mut seen, false);
        }
        let v = envelope(
            "parcels",
            "p-1",
            DeadLetterKind::RetriesExhausted,
            "HTTP 503",
        );
        w.add("parcels-dlt", &content(&v), &mut seen, false);
        w.add("orders-dlt", &content(b"garbage"), &mut seen, false);
        assert!(w.has_new_fingerprint());
        let inc = w.take(Some(42));
        assert!(w.is_empty());
        assert_eq!(inc.new, 10);
        assert_eq!(inc.by_source_topic["orders"], 8);
        assert_eq!(inc.by_source_topic["(unknown)"], 1);
        assert_eq!(inc.by_kind["permanent"], 8);
        assert_eq!(inc.by_kind["retries_exhausted"], 1);
        assert_eq!(inc.by_kind["unreadable"], 1);
        assert_eq!(inc.top_errors[0].fingerprint, "permanent: bad row #");
        assert_eq!(inc.top_errors[0].count, 8);
        assert_eq!(inc.sample_ids.len(), 5);
        assert_eq!(inc.new_fingerprints.len(), 3);
        let text = Alert::Increase(inc).text("kafka:9092");
        assert!(
            text.contains("*10 new dead letters* (42 outstanding)"),
            "{text}"
        );
        assert!(text.contains("kafka-dlq dlq replay --brokers kafka:9092 --dlq-topic orders-dlt"));
        assert!(
            !text.contains("pii"),
            "payloads stay out of Slack by default"
        );

        // The same errors again are no longer new.
        let v = envelope("orders", "o-9", DeadLetterKind::Permanent, "bad row 99");
        w.add("orders-dlt", &content(&v), &mut seen, true);
        assert!(!w.has_new_fingerprint());
        let text = Alert::Increase(w.take(None)).text("b:1");
        assert!(text.contains("pii"), "payloads only when enabled");
    }
}
