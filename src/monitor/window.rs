//! The dead letters gathered since the last increase alert, and the alert they make.

use std::collections::BTreeMap;

use super::alert::{ErrorGroup, Increase};
use super::seen::Seen;
use crate::dlq_reader::DlqContent;
use crate::fingerprint::fingerprint;
use crate::outstanding::parked::Heads;
use crate::park::resolve::HeadRef;

/// How many sample record ids an alert lists.
const SAMPLE_IDS: usize = 5;
/// How many error groups an alert lists.
const TOP_ERRORS: usize = 5;
/// How many distinct values (source topics, kinds, groups, retry topics, error fingerprints)
/// a window counts one by one; the values after them, which producers or foreign dead letters
/// control, are counted together under [`OTHER`], so a backlog of varied errors read at full
/// speed holds a bounded window.
const MAX_DISTINCT: usize = 1000;
/// How many dead letters of a window are looked up as parked keys' heads.
const MAX_HEADS: usize = 10_000;
/// Where the values past [`MAX_DISTINCT`] are counted.
const OTHER: &str = "(others)";

/// Counts one `key` in `counts`, or under [`OTHER`] once [`MAX_DISTINCT`] keys are counted.
fn count(counts: &mut BTreeMap<String, u64>, key: String) {
    let key = if counts.len() < MAX_DISTINCT || counts.contains_key(&key) {
        key
    } else {
        OTHER.to_string()
    };
    *counts.entry(key).or_default() += 1;
}

/// Dead letters seen since the last increase alert.
#[derive(Debug, Default)]
pub(super) struct Window {
    new: u64,
    by_source_topic: BTreeMap<String, u64>,
    by_kind: BTreeMap<String, u64>,
    by_group: BTreeMap<String, u64>,
    after_retry_topics: BTreeMap<String, u64>,
    groups: BTreeMap<String, (u64, String, Option<String>)>,
    new_fingerprints: Vec<String>,
    sample_ids: Vec<String>,
    dlq_topics: Vec<String>,
    sample_payloads: Vec<String>,
    /// The source records of its dead letters, which may be parked keys' heads (the first
    /// [`MAX_HEADS`]).
    heads: Vec<HeadRef>,
    started: Option<chrono::DateTime<chrono::Utc>>,
}

impl Window {
    #[cfg(test)]
    /// No dead letter gathered.
    pub(super) fn is_empty(&self) -> bool {
        self.new == 0
    }

    /// Adds one record read from `dlq_topic`; `seen` holds the fingerprints this monitor
    /// announced (bounded, see [`Seen`]), and learns the new ones.
    pub(super) fn add(
        &mut self,
        dlq_topic: &str,
        content: &DlqContent,
        seen: &mut Seen,
        include_payloads: bool,
    ) {
        self.new += 1;
        self.started.get_or_insert_with(chrono::Utc::now);
        if !self.dlq_topics.iter().any(|t| t == dlq_topic) {
            self.dlq_topics.push(dlq_topic.to_string());
        }
        let (kind, message) = content.cause();
        let (kind, message) = (kind.to_string(), message.into_owned());
        let (source, id) = match content.envelope() {
            Some(env) => (env.source.topic.clone(), Some((env.id.clone(), env))),
            None => ("(unknown)".to_string(), None),
        };
        count(&mut self.by_source_topic, source);
        count(&mut self.by_kind, kind.clone());
        let group = content
            .envelope()
            .map(|env| env.source.group.clone())
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| "(unknown)".to_string());
        count(&mut self.by_group, group);
        if let Some((_, env)) = id.as_ref().filter(|_| self.heads.len() < MAX_HEADS) {
            self.heads
                .extend(crate::outstanding::parked::head_of(&env.source));
        }
        if let Some(last) = id.as_ref().and_then(|(_, env)| env.history.last()) {
            count(&mut self.after_retry_topics, last.topic.clone());
        }
        let mut fp = fingerprint(&kind, &message);
        if seen.insert(&fp) && self.new_fingerprints.len() < MAX_DISTINCT {
            self.new_fingerprints.push(fp.clone());
        }
        if self.groups.len() >= MAX_DISTINCT && !self.groups.contains_key(&fp) {
            fp = OTHER.to_string();
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
    pub(super) fn has_new_fingerprint(&self) -> bool {
        !self.new_fingerprints.is_empty()
    }

    /// Empties the window into an alert; `parked`, the heads parked now, says what waits
    /// behind its dead letters.
    pub(super) fn take(&mut self, total: Option<u64>, parked: &Heads) -> Increase {
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
            by_group: window.by_group,
            after_retry_topics: window.after_retry_topics,
            top_errors,
            new_fingerprints: window.new_fingerprints,
            sample_ids: window.sample_ids,
            dlq_topics: window.dlq_topics,
            sample_payloads: window.sample_payloads,
            parked: parked.behind(&window.heads),
            window_start: window.started,
            window_end: Some(chrono::Utc::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::failure::DeadLetterKind;
    use crate::monitor::alert::Alert;
    use crate::record::Record;

    fn content(value: &[u8]) -> DlqContent {
        match Envelope::from_slice(value) {
            Ok(env) => DlqContent::Envelope(Box::new(env)),
            Err(e) => DlqContent::NotAnEnvelope {
                reason: e.to_string(),
                preview: String::new(),
            },
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
            delivery_count: None,
        };
        Envelope::new(&record, kind, message, 1, "g").to_vec()
    }

    #[test]
    fn producer_controlled_values_past_a_thousand_are_counted_together() {
        let mut w = Window::default();
        let mut seen = Seen::default();
        for i in 0..3000 {
            // A distinct source topic and a distinct error text (words, no digits) each.
            let word: String = format!("{i:x}")
                .chars()
                .map(|c| (b'g' + c.to_digit(16).unwrap() as u8) as char)
                .collect();
            let value = envelope(
                &format!("topic-{word}"),
                "id",
                DeadLetterKind::Permanent,
                &format!("unknown field {word}"),
            );
            w.add("orders-dlt", &content(&value), &mut seen, false);
        }
        assert!(w.by_source_topic.len() <= MAX_DISTINCT + 1);
        assert!(w.groups.len() <= MAX_DISTINCT + 1);
        assert!(w.new_fingerprints.len() <= MAX_DISTINCT);
        assert_eq!(
            w.by_source_topic.values().sum::<u64>(),
            3000,
            "none uncounted"
        );
        assert_eq!(w.by_source_topic[OTHER], 2000);
        assert_eq!(w.groups[OTHER].0, 2000);
    }

    #[test]
    fn an_alert_names_the_records_parked_behind_its_dead_letters() {
        use crate::outstanding::parked::HeadState;
        let mut seen = Seen::default();
        let mut w = Window::default();
        for id in ["o-1", "o-2"] {
            let value = envelope("orders", id, DeadLetterKind::Permanent, "bad");
            w.add("orders-dlt", &content(&value), &mut seen, false);
        }
        // The first dead letter's record (orders-0 offset 0, group g) is a parked head.
        let parked = Heads::of_heads([(
            HeadRef {
                source: "orders".into(),
                group: "g".into(),
                partition: 0,
                offset: 0,
            },
            HeadState {
                waiting: 3,
                since: chrono::Utc::now(),
                first: true,
            },
        )]);
        let inc = w.take(None, &parked);
        assert_eq!((inc.parked.keys, inc.parked.records), (1, 3));
        let text = Alert::Increase(inc.clone()).text("b:1");
        assert!(
            text.contains("*Parked:* 1 key waits behind them, 3 records in all"),
            "{text}"
        );
        let without = Alert::Increase(Increase {
            parked: Default::default(),
            ..inc
        });
        assert!(!without.text("b:1").contains("Parked"));
    }

    #[test]
    fn dead_letters_after_retry_topics_are_counted_by_their_last_tier() {
        let mut seen = Seen::default();
        let mut w = Window::default();
        let mut env = Envelope::from_slice(&envelope(
            "orders",
            "o-1",
            DeadLetterKind::RetriesExhausted,
            "HTTP 503",
        ))
        .unwrap();
        env.history = ["orders", "orders-retry-0", "orders-retry-1"]
            .map(|topic| crate::record::retry::RetryStage {
                topic: topic.into(),
                attempts: 2,
                error: "HTTP 503".into(),
                at: chrono::Utc::now(),
            })
            .to_vec();
        w.add("orders-dlt", &content(&env.to_vec()), &mut seen, false);
        let plain = envelope("orders", "o-2", DeadLetterKind::Permanent, "bad");
        w.add("orders-dlt", &content(&plain), &mut seen, false);
        let inc = w.take(None, &Heads::default());
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
        let mut seen = Seen::default();
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
        let inc = w.take(Some(42), &Heads::default());
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
        let text = Alert::Increase(w.take(None, &Heads::default())).text("b:1");
        assert!(text.contains("pii"), "payloads only when enabled");
    }

    #[test]
    fn an_alert_names_the_groups_that_dead_lettered() {
        let mut seen = Seen::default();
        let mut w = Window::default();
        for (group, id) in [("billing", "o-1"), ("billing", "o-2"), ("shipping", "o-3")] {
            let record = Record::new("orders", 0, 0).with_id(id).with_payload("{}");
            let env = Envelope::new(&record, DeadLetterKind::Permanent, "bad", 1, group);
            w.add("orders-dlt", &content(&env.to_vec()), &mut seen, false);
        }
        let inc = w.take(None, &Heads::default());
        assert_eq!(
            inc.by_group,
            [("billing".to_string(), 2), ("shipping".to_string(), 1)].into()
        );
        let text = Alert::Increase(inc).text("kafka:9092");
        assert!(
            text.contains("*By group:* `billing` 2, `shipping` 1"),
            "{text}"
        );
    }
}
