//! Which dead letters a request means: the filter of the query string or the body, or the
//! records ticked in the page. Deciding only.

use std::collections::BTreeSet;

use chrono::Utc;
use serde::Deserialize;

use super::error::ApiError;
use super::Console;
use crate::console::access::Caller;
use crate::dlq_reader::{ErrorText, Expression, Filter};
use crate::failure::DeadLetterKind;
use crate::outstanding::inbox::parse_age;

/// Which dead letters an API call means: the same names as the inbox's filter, and a
/// selection of DLQ records.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Selection {
    /// The DLT (required for actions when the console shows several).
    pub dlq_topic: Option<String>,
    /// The consumer group.
    pub group: Option<String>,
    /// The source topic.
    #[serde(alias = "topic")]
    pub source_topic: Option<String>,
    /// The fingerprint.
    pub fingerprint: Option<String>,
    /// `permanent`, `retries_exhausted`, `deserialization` or `unclassified`.
    pub kind: Option<String>,
    /// Text the error message contains.
    pub text: Option<String>,
    /// Dead-lettered longer ago than this (`30m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// Dead-lettered more recently than this.
    pub newer_than: Option<String>,
    /// The record id.
    pub id: Option<String>,
    /// A filter expression (CEL, docs/tools.md "Filter expressions") that must be true.
    #[serde(rename = "where")]
    pub where_: Option<String>,
    /// These DLQ records only.
    pub records: Option<Vec<Coordinates>>,
}

/// One DLQ record.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Coordinates {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

impl Selection {
    pub(super) fn filter(&self) -> Result<Filter, String> {
        let kind = match self.kind.as_deref().filter(|k| !k.is_empty()) {
            None => None,
            Some(name) => Some(DeadLetterKind::from_name(name).ok_or_else(|| {
                format!(
                    "kind `{name}`: expected permanent, retries_exhausted, deserialization or unclassified"
                )
            })?),
        };
        let now = Utc::now();
        let age = |a: &Option<String>| {
            a.as_deref()
                .filter(|a| !a.is_empty())
                .map(parse_age)
                .transpose()
                .map(|d| d.map(|d| now - d))
        };
        let set = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        let where_ = set(&self.where_)
            .map(|text| Expression::compile(&text).map_err(|e| format!("where: {e}")))
            .transpose()?;
        if where_.as_ref().is_some_and(Expression::reads_decoded) {
            return Err(
                "where: `decoded` is read by `dlq list / show --schema-registry-url`; \
                        the console's filter sees the payload as written"
                    .into(),
            );
        }
        Ok(Filter {
            source_topic: set(&self.source_topic),
            kind,
            since: age(&self.newer_than)?,
            until: age(&self.older_than)?,
            id: set(&self.id),
            group: set(&self.group),
            error: set(&self.text).map(ErrorText::Contains),
            fingerprint: set(&self.fingerprint),
            dlq_records: self.records.as_ref().map(|r| {
                r.iter()
                    .map(|c| (c.partition, c.offset))
                    .collect::<BTreeSet<_>>()
            }),
            where_,
            ..Filter::default()
        })
    }

    /// The DLT an action is on: the one named, or the only one `caller` sees.
    pub(super) fn topic(&self, c: &Console, caller: &Caller) -> Result<String, ApiError> {
        match &self.dlq_topic {
            Some(t) if c.is_topic(caller, t) => Ok(t.clone()),
            Some(t) => Err(ApiError::NotFound(format!(
                "`{t}` is not a dead-letter topic this console shows"
            ))),
            None => match c.topics(caller).as_slice() {
                [one] => Ok(one.clone()),
                _ => Err(ApiError::BadRequest(
                    "name the dlq_topic: this console shows several".into(),
                )),
            },
        }
    }
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    #[serde(flatten)]
    pub(super) selection: SelectionQuery,
    pub(super) limit: Option<usize>,
    pub(super) state: Option<String>,
}

/// [`Selection`] from a query string (no record list).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SelectionQuery {
    dlq_topic: Option<String>,
    group: Option<String>,
    #[serde(alias = "topic")]
    source_topic: Option<String>,
    fingerprint: Option<String>,
    kind: Option<String>,
    text: Option<String>,
    older_than: Option<String>,
    newer_than: Option<String>,
    id: Option<String>,
    #[serde(rename = "where")]
    where_: Option<String>,
    /// DLQ records as `partition@offset`, comma-separated (the ticked ones).
    records: Option<String>,
}

impl SelectionQuery {
    /// The selection it names, or why `records` is not a list of `partition@offset`.
    pub(super) fn selection(self) -> Result<Selection, String> {
        let q = self;
        let records = match q.records.as_deref().filter(|r| !r.trim().is_empty()) {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(|item| {
                        let (p, o) = item.trim().split_once('@').ok_or(())?;
                        Ok(Coordinates {
                            partition: p.parse().map_err(|_| ())?,
                            offset: o.parse().map_err(|_| ())?,
                        })
                    })
                    .collect::<Result<Vec<_>, ()>>()
                    .map_err(|()| {
                        format!("records `{list}`: expected partition@offset, comma-separated")
                    })?,
            ),
        };
        Ok(Selection {
            dlq_topic: q.dlq_topic,
            group: q.group,
            source_topic: q.source_topic,
            fingerprint: q.fingerprint,
            kind: q.kind,
            text: q.text,
            older_than: q.older_than,
            newer_than: q.newer_than,
            id: q.id,
            where_: q.where_,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_becomes_the_filter_replays_use() {
        let before = Utc::now();
        let s = Selection {
            group: Some("billing".into()),
            source_topic: Some("orders".into()),
            fingerprint: Some("permanent: bad row #".into()),
            kind: Some("retries_exhausted".into()),
            text: Some("HTTP 503".into()),
            older_than: Some("1h".into()),
            newer_than: Some("7d".into()),
            id: Some(String::new()),
            records: Some(vec![Coordinates {
                partition: 1,
                offset: 7,
            }]),
            ..Selection::default()
        };
        let f = s.filter().unwrap();
        assert_eq!(f.group.as_deref(), Some("billing"));
        assert_eq!(f.source_topic.as_deref(), Some("orders"));
        assert_eq!(f.fingerprint.as_deref(), Some("permanent: bad row #"));
        assert_eq!(f.kind, Some(DeadLetterKind::RetriesExhausted));
        assert_eq!(f.error, Some(ErrorText::Contains("HTTP 503".into())));
        assert_eq!(f.id, None, "an empty field is no filter");
        assert_eq!(f.dlq_records, Some(BTreeSet::from([(1, 7)])));
        let until = f.until.unwrap();
        let since = f.since.unwrap();
        assert!(until <= Utc::now() - chrono::Duration::hours(1));
        assert!(until >= before - chrono::Duration::hours(1));
        assert!(since <= Utc::now() - chrono::Duration::days(7) && since < until);
    }

    #[test]
    fn a_query_names_ticked_records_as_partition_at_offset() {
        let q = SelectionQuery {
            records: Some("0@17, 2@5".into()),
            ..SelectionQuery::default()
        };
        let f = q.selection().unwrap().filter().unwrap();
        assert_eq!(f.dlq_records, Some(BTreeSet::from([(0, 17), (2, 5)])));
        let bad = SelectionQuery {
            records: Some("0:17".into()),
            ..SelectionQuery::default()
        };
        assert!(bad.selection().unwrap_err().contains("records `0:17`"));
    }

    #[test]
    fn a_bad_kind_or_age_says_which() {
        let kind = Selection {
            kind: Some("sad".into()),
            ..Selection::default()
        };
        assert!(kind.filter().unwrap_err().contains("kind `sad`"));
        let age = Selection {
            older_than: Some("soon".into()),
            ..Selection::default()
        };
        assert!(age.filter().unwrap_err().contains("`soon` is not an age"));
        assert!(Selection::default().filter().unwrap().is_empty());
    }
}
