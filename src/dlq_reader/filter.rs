//! Which dead letters an operator means: `dlq list/show/replay`'s filters.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::expression::Expression;
use super::reader::DlqEntry;
use super::scope::Scope;
use crate::failure::DeadLetterKind;

/// Which dead letters an operator means. Every field set must match; an entry that is not an
/// envelope matches only filters on id (its DLQ coordinates), DLQ records and time.
///
/// Its JSON form (in the audit topic's run summaries, so that what a run selected can be
/// evaluated again) has the field names below, those not set left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Filter {
    /// The source topic (`source.topic`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_topic: Option<String>,
    /// The error kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<DeadLetterKind>,
    /// Dead-lettered at or after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Dead-lettered before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// The record id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The consumer group that dead-lettered it (`source.group`; for a Spring dead letter, its
    /// `kafka_dlt-original-consumer-group`): the service whose failure it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The source partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_partition: Option<i32>,
    /// Source offsets from `start` (included) to `end` (excluded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_offsets: Option<std::ops::Range<i64>>,
    /// The record key as the envelope writes it: its text when it is UTF-8, else its base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The error message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorText>,
    /// The error's fingerprint ([`crate::fingerprint::fingerprint`] of its kind and message):
    /// one cause, as the monitor and the console group them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Only these DLQ records, as (partition, offset): a selection made one by one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlq_records: Option<BTreeSet<(i32, i64)>>,
    /// A filter expression ([`Expression`]) that must be true: `--where`.
    #[serde(rename = "where", skip_serializing_if = "Option::is_none")]
    pub where_: Option<Expression>,
    /// Only dead letters in this scope: the console's grants of the caller who acted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<Scope>,
    /// Only DLQ records before these offsets, by partition (none of a partition not named):
    /// a selection frozen when it was made, so that dead letters written later are not in it
    /// (the console's requests that wait for approval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<std::collections::BTreeMap<i32, i64>>,
}

/// What an error message must hold to match. JSON: `{"contains": "…"}` or
/// `{"matches": "regex"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorText {
    /// This text, anywhere in it.
    Contains(String),
    /// A match of this regular expression (the `regex-lite` syntax: Perl-like, ASCII classes),
    /// anywhere in it.
    Matches(#[serde(with = "regex_text")] regex_lite::Regex),
}

/// A regular expression as its pattern.
mod regex_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        regex: &regex_lite::Regex,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(regex.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<regex_lite::Regex, D::Error> {
        let pattern = String::deserialize(d)?;
        regex_lite::Regex::new(&pattern).map_err(serde::de::Error::custom)
    }
}

impl ErrorText {
    /// A regular expression, or why it is not one.
    pub fn regex(pattern: &str) -> Result<ErrorText, regex_lite::Error> {
        regex_lite::Regex::new(pattern).map(ErrorText::Matches)
    }

    fn matches(&self, message: &str) -> bool {
        match self {
            ErrorText::Contains(text) => message.contains(text.as_str()),
            ErrorText::Matches(regex) => regex.is_match(message),
        }
    }
}

impl PartialEq for ErrorText {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ErrorText::Contains(a), ErrorText::Contains(b)) => a == b,
            (ErrorText::Matches(a), ErrorText::Matches(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Filter {
    /// No field is set.
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    /// The fields set, as `name=value` pairs joined by `&`, in a fixed order: what tells one
    /// filter from another (a filtered replay keeps its position under a group named after it).
    pub fn key(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                parts.push(format!("{name}={v}"));
            }
        };
        add("source_topic", self.source_topic.clone());
        add("kind", self.kind.map(|k| k.as_str().to_string()));
        add("since", self.since.map(|t| t.to_rfc3339()));
        add("until", self.until.map(|t| t.to_rfc3339()));
        add("id", self.id.clone());
        add("group", self.group.clone());
        add(
            "source_partition",
            self.source_partition.map(|p| p.to_string()),
        );
        add(
            "source_offsets",
            self.source_offsets
                .as_ref()
                .map(|r| format!("{}..{}", r.start, r.end)),
        );
        add("key", self.key.clone());
        add(
            "error",
            self.error.as_ref().map(|e| match e {
                ErrorText::Contains(t) => format!("contains:{t}"),
                ErrorText::Matches(r) => format!("matches:{}", r.as_str()),
            }),
        );
        add("fingerprint", self.fingerprint.clone());
        add(
            "dlq_records",
            self.dlq_records.as_ref().map(|records| {
                let list: Vec<String> = records.iter().map(|(p, o)| format!("{p}@{o}")).collect();
                list.join(",")
            }),
        );
        add(
            "where",
            self.where_.as_ref().map(|w| w.source().to_string()),
        );
        add("within", self.within.as_ref().map(Scope::key));
        add(
            "before",
            self.before.as_ref().map(|ends| {
                let list: Vec<String> = ends.iter().map(|(p, o)| format!("{p}@{o}")).collect();
                list.join(",")
            }),
        );
        parts.join("&")
    }

    /// Whether its `where` expression reads `decoded`, which only a schema registry gives.
    pub fn reads_decoded(&self) -> bool {
        self.where_.as_ref().is_some_and(Expression::reads_decoded)
    }

    /// Whether `entry` is meant (a `where` expression that reads `decoded` sees null: see
    /// [`Filter::matches_decoded`]).
    pub fn matches(&self, entry: &DlqEntry) -> bool {
        self.matches_decoded(entry, None)
    }

    /// Whether `entry`, whose payload a schema registry `decoded` (when one is configured),
    /// is meant. A `where` expression that cannot say (a field the dead letter lacks, a
    /// result that is not a boolean) does not match.
    pub fn matches_decoded(&self, entry: &DlqEntry, decoded: Option<&serde_json::Value>) -> bool {
        self.matches_fields(entry)
            && self
                .where_
                .as_ref()
                .is_none_or(|w| w.matches(entry, decoded).unwrap_or(false))
    }

    fn matches_fields(&self, entry: &DlqEntry) -> bool {
        let when = match entry.content.envelope() {
            Some(e) => Some(e.timestamp),
            None => entry.timestamp,
        };
        if let Some(since) = self.since {
            if when.is_none_or(|w| w < since) {
                return false;
            }
        }
        if let Some(until) = self.until {
            if when.is_none_or(|w| w >= until) {
                return false;
            }
        }
        if let Some(id) = &self.id {
            if entry.id() != *id {
                return false;
            }
        }
        if let Some(records) = &self.dlq_records {
            if !records.contains(&(entry.partition, entry.offset)) {
                return false;
            }
        }
        if let Some(ends) = &self.before {
            if ends
                .get(&entry.partition)
                .is_none_or(|end| entry.offset >= *end)
            {
                return false;
            }
        }
        if let Some(scope) = &self.within {
            let group = entry.content.envelope().map(|e| e.source.group.as_str());
            if !scope.covers(&entry.topic, group) {
                return false;
            }
        }
        match entry.content.envelope() {
            Some(e) => {
                let source = &e.source;
                self.source_topic
                    .as_ref()
                    .is_none_or(|t| *t == source.topic)
                    && self.kind.is_none_or(|k| k == e.error.kind)
                    && self.group.as_ref().is_none_or(|g| *g == source.group)
                    && self.source_partition.is_none_or(|p| p == source.partition)
                    && self
                        .source_offsets
                        .as_ref()
                        .is_none_or(|r| r.contains(&source.offset))
                    && self
                        .key
                        .as_ref()
                        .is_none_or(|k| source.key.as_deref() == Some(k.as_str()))
                    && self
                        .error
                        .as_ref()
                        .is_none_or(|t| t.matches(&e.error.message))
                    && self
                        .fingerprint
                        .as_ref()
                        .is_none_or(|f| *f == entry.content.fingerprint())
            }
            None => {
                self.source_topic.is_none()
                    && self.kind.is_none()
                    && self.group.is_none()
                    && self.source_partition.is_none()
                    && self.source_offsets.is_none()
                    && self.key.is_none()
                    && self.error.is_none()
                    && self
                        .fingerprint
                        .as_ref()
                        .is_none_or(|f| *f == entry.content.fingerprint())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::dlq_reader::DlqContent;
    use crate::record::Record;

    fn entry(source: &str, kind: DeadLetterKind, id: &str) -> DlqEntry {
        let record = Record::new(source, 0, 0).with_id(id);
        DlqEntry {
            topic: "x-dlt".into(),
            partition: 0,
            offset: 5,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(Envelope::new(&record, kind, "m", 1, "g"))),
            unresolved: None,
        }
    }

    #[test]
    fn filters_match_every_field_set() {
        let e = entry("orders", DeadLetterKind::Permanent, "o-1");
        assert!(Filter::default().matches(&e));
        let f = |source: Option<&str>, kind: Option<DeadLetterKind>, id: Option<&str>| Filter {
            source_topic: source.map(String::from),
            kind,
            id: id.map(String::from),
            ..Filter::default()
        };
        assert!(f(Some("orders"), None, None).matches(&e));
        assert!(!f(Some("parcels"), None, None).matches(&e));
        assert!(f(None, Some(DeadLetterKind::Permanent), Some("o-1")).matches(&e));
        assert!(!f(None, Some(DeadLetterKind::RetriesExhausted), None).matches(&e));
        assert!(!f(None, None, Some("o-2")).matches(&e));
        let past = Utc::now() - chrono::Duration::hours(1);
        assert!(Filter {
            since: Some(past),
            ..Filter::default()
        }
        .matches(&e));
        assert!(!Filter {
            until: Some(past),
            ..Filter::default()
        }
        .matches(&e));
    }

    #[test]
    fn garbage_matches_only_coordinate_and_time_filters() {
        let g = DlqEntry {
            topic: "x-dlt".into(),
            partition: 1,
            offset: 9,
            timestamp: Some(Utc::now()),
            content: DlqContent::NotAnEnvelope {
                reason: "r".into(),
                preview: "p".into(),
            },
            unresolved: None,
        };
        assert_eq!(g.id(), "x-dlt-1-9");
        assert!(Filter::default().matches(&g));
        assert!(Filter {
            id: Some("x-dlt-1-9".into()),
            ..Filter::default()
        }
        .matches(&g));
        assert!(!Filter {
            source_topic: Some("orders".into()),
            ..Filter::default()
        }
        .matches(&g));
    }

    #[test]
    fn a_where_expression_is_one_more_field_kept_in_the_key_and_the_json() {
        let e = entry("orders", DeadLetterKind::Permanent, "o-1");
        let f = Filter {
            kind: Some(DeadLetterKind::Permanent),
            where_: Some(Expression::compile("id == 'o-1'").unwrap()),
            ..Filter::default()
        };
        assert!(f.matches(&e));
        let other = Filter {
            where_: Some(Expression::compile("id == 'o-2'").unwrap()),
            ..f.clone()
        };
        assert!(!other.matches(&e));
        assert_eq!(f.key(), "kind=permanent&where=id == 'o-1'");
        assert_ne!(
            f.key(),
            other.key(),
            "each filter keeps a position of its own"
        );
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["where"], "id == 'o-1'");
        let back: Filter = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        // An expression that cannot answer for a dead letter does not select it.
        let unanswerable = Filter {
            where_: Some(Expression::compile("payload.no.such.field == 1").unwrap()),
            ..Filter::default()
        };
        assert!(!unanswerable.matches(&e));
        assert!(!f.reads_decoded());
    }

    #[test]
    fn filters_by_group_partition_offsets_key_and_error_text() {
        let record = Record::new("orders", 3, 120)
            .with_id("o-9")
            .with_key("customer-7");
        let e = DlqEntry {
            topic: "orders-dlt".into(),
            partition: 0,
            offset: 5,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(Envelope::new(
                &record,
                DeadLetterKind::RetriesExhausted,
                "ledger answered HTTP 503 after 30 s",
                4,
                "billing",
            ))),
            unresolved: None,
        };
        let yes = |f: Filter| assert!(f.matches(&e), "{f:?}");
        let no = |f: Filter| assert!(!f.matches(&e), "{f:?}");
        let f = Filter::default;
        yes(Filter {
            group: Some("billing".into()),
            ..f()
        });
        no(Filter {
            group: Some("shipping".into()),
            ..f()
        });
        yes(Filter {
            source_partition: Some(3),
            ..f()
        });
        no(Filter {
            source_partition: Some(0),
            ..f()
        });
        yes(Filter {
            source_offsets: Some(100..121),
            ..f()
        });
        no(Filter {
            source_offsets: Some(100..120),
            ..f()
        });
        yes(Filter {
            key: Some("customer-7".into()),
            ..f()
        });
        no(Filter {
            key: Some("customer-8".into()),
            ..f()
        });
        yes(Filter {
            error: Some(ErrorText::Contains("HTTP 503".into())),
            ..f()
        });
        no(Filter {
            error: Some(ErrorText::Contains("HTTP 500".into())),
            ..f()
        });
        yes(Filter {
            error: Some(ErrorText::regex(r"HTTP 5\d\d").unwrap()),
            ..f()
        });
        no(Filter {
            error: Some(ErrorText::regex(r"^HTTP").unwrap()),
            ..f()
        });
        assert!(ErrorText::regex("(unclosed").is_err());

        let both = Filter {
            group: Some("billing".into()),
            source_partition: Some(3),
            ..f()
        };
        assert_eq!(both.key(), "group=billing&source_partition=3");
        assert_eq!(Filter::default().key(), "");
    }
}
