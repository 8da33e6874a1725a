//! Which dead letters an operator means: `dlq list/show/replay`'s filters.

use chrono::{DateTime, Utc};

use super::reader::DlqEntry;
use crate::failure::DeadLetterKind;

/// Which dead letters an operator means. Every field set must match; an entry that is not an
/// envelope matches only filters on id (its DLQ coordinates) and time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// The source topic (`source.topic`).
    pub source_topic: Option<String>,
    /// The error kind.
    pub kind: Option<DeadLetterKind>,
    /// Dead-lettered at or after.
    pub since: Option<DateTime<Utc>>,
    /// Dead-lettered before.
    pub until: Option<DateTime<Utc>>,
    /// The record id.
    pub id: Option<String>,
}

impl Filter {
    /// No field is set.
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    /// Whether `entry` is meant.
    pub fn matches(&self, entry: &DlqEntry) -> bool {
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
        match entry.content.envelope() {
            Some(e) => {
                self.source_topic
                    .as_ref()
                    .is_none_or(|t| *t == e.source.topic)
                    && self.kind.is_none_or(|k| k == e.error.kind)
            }
            None => self.source_topic.is_none() && self.kind.is_none(),
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
}
