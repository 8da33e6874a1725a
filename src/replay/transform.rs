//! A bulk fix: a transformation applied to each dead letter's payload before it is redriven,
//! and what it did to a run (counts, and digests of every payload before and after). Pure.
//!
//! A transformation is a JSON merge patch (RFC 7396: the patch's fields replace the payload's,
//! `null` removes one, objects merge) or a filter-language expression (CEL, the variables of
//! `--where`) whose value is the new payload. Either way the payload is JSON: one that is not
//! (or a tombstone) fails the transformation, and a dead letter it fails on is reported and
//! not sent. A payload whose value the transformation leaves as it was is sent byte for byte
//! as it was; a changed one is written as compact JSON (object keys in alphabetical order).

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::dlq_reader::{DlqEntry, Expression};
pub use crate::state::audit::TransformSummary;

/// How a payload is changed. JSON: `{"merge_patch": {…}}` or `{"expression": "…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Transform {
    /// An RFC 7396 JSON merge patch.
    MergePatch(Json),
    /// An expression whose value is the new payload (a string value is a JSON string).
    Expression(Expression),
}

/// What a transformation did to one payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transformed {
    /// A new payload.
    Changed(Vec<u8>),
    /// The same value: the payload goes as it was.
    Unchanged,
}

impl Transform {
    /// The transformation of `payload` (`None`: a tombstone), the payload of `entry`; why not,
    /// when it fails.
    pub fn apply(&self, entry: &DlqEntry, payload: Option<&[u8]>) -> Result<Transformed, String> {
        let bytes = payload.ok_or("a tombstone has no JSON to transform")?;
        let before: Json =
            serde_json::from_slice(bytes).map_err(|e| format!("the payload is not JSON ({e})"))?;
        let after = match self {
            Transform::MergePatch(patch) => {
                let mut value = before.clone();
                merge(&mut value, patch);
                value
            }
            Transform::Expression(e) => e.evaluate(entry)?,
        };
        if after == before {
            return Ok(Transformed::Unchanged);
        }
        Ok(Transformed::Changed(
            serde_json::to_vec(&after).expect("a JSON value serializes"),
        ))
    }

    /// A digest of the transformation as written (a run's position key).
    pub fn digest(&self) -> String {
        crate::state::audit::sha256_hex(
            serde_json::to_string(self)
                .expect("a transformation serializes")
                .as_bytes(),
        )
    }
}

/// RFC 7396: `patch` merged into `target`.
fn merge(target: &mut Json, patch: &Json) {
    let Json::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Json::Object(Default::default());
    }
    let map = target.as_object_mut().expect("made an object above");
    for (name, value) in fields {
        if value.is_null() {
            map.remove(name);
        } else {
            merge(map.entry(name.clone()).or_insert(Json::Null), value);
        }
    }
}

/// [`TransformSummary`] as a run goes.
pub struct Tally {
    transform: Transform,
    changed: u64,
    unchanged: u64,
    failed: u64,
    before: openssl::sha::Sha256,
    after: openssl::sha::Sha256,
}

impl Tally {
    /// Nothing counted yet.
    pub fn new(transform: Transform) -> Tally {
        Tally {
            transform,
            changed: 0,
            unchanged: 0,
            failed: 0,
            before: openssl::sha::Sha256::new(),
            after: openssl::sha::Sha256::new(),
        }
    }

    /// The transformation counted.
    pub fn transform(&self) -> &Transform {
        &self.transform
    }

    /// One payload `before` that went as `after` (`None`: the transformation failed on it).
    pub fn count(&mut self, before: &[u8], after: Option<&[u8]>) {
        feed(&mut self.before, before);
        match after {
            None => self.failed += 1,
            Some(sent) => {
                if sent == before {
                    self.unchanged += 1;
                } else {
                    self.changed += 1;
                }
                feed(&mut self.after, sent);
            }
        }
    }

    /// The summary.
    pub fn summary(&self) -> TransformSummary {
        let hex = |h: &openssl::sha::Sha256| {
            h.clone()
                .finish()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        TransformSummary {
            transform: serde_json::to_value(&self.transform).expect("a transformation serializes"),
            changed: self.changed,
            unchanged: self.unchanged,
            failed: self.failed,
            before_sha256: hex(&self.before),
            after_sha256: hex(&self.after),
        }
    }
}

fn feed(hash: &mut openssl::sha::Sha256, bytes: &[u8]) {
    hash.update(&(bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::dlq_reader::DlqContent;
    use crate::failure::DeadLetterKind;
    use crate::record::Record;
    use serde_json::json;

    fn entry(payload: &[u8]) -> DlqEntry {
        let record = Record::new("orders".to_string(), 0, 1).with_payload(payload.to_vec());
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, "bad", 1, "billing");
        DlqEntry {
            topic: "orders-dlt".into(),
            partition: 0,
            offset: 7,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(envelope)),
            unresolved: None,
        }
    }

    fn patched(payload: &str, patch: Json) -> Result<Transformed, String> {
        let entry = entry(payload.as_bytes());
        Transform::MergePatch(patch).apply(&entry, Some(payload.as_bytes()))
    }

    #[test]
    fn a_merge_patch_replaces_removes_and_merges_as_rfc_7396_says() {
        // The RFC's own example.
        let out = patched(
            r#"{"title":"Goodbye!","author":{"givenName":"John","familyName":"Doe"},"tags":["example","sample"],"content":"This will be unchanged"}"#,
            json!({"title":"Hello!","phoneNumber":"+01-123-456-7890","author":{"familyName":null},"tags":["example"]}),
        )
        .unwrap();
        let Transformed::Changed(bytes) = out else {
            panic!("changed")
        };
        let value: Json = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            json!({"title":"Hello!","author":{"givenName":"John"},"tags":["example"],"content":"This will be unchanged","phoneNumber":"+01-123-456-7890"})
        );
        assert_eq!(
            patched(r#"{ "a" : 1 }"#, json!({"a": 1})).unwrap(),
            Transformed::Unchanged,
            "the same value: sent as it was"
        );
        assert!(patched("not json", json!({}))
            .unwrap_err()
            .contains("not JSON"));
    }

    #[test]
    fn an_expression_gives_the_new_payload() {
        let entry = entry(br#"{"amount":"12.50","currency":"eur"}"#);
        let e = Expression::compile(
            r#"{"amount": double(payload.amount), "currency": "EUR", "was": payload.currency}"#,
        )
        .unwrap();
        let out = Transform::Expression(e)
            .apply(&entry, Some(br#"{"amount":"12.50","currency":"eur"}"#))
            .unwrap();
        assert_eq!(
            out,
            Transformed::Changed(br#"{"amount":12.5,"currency":"EUR","was":"eur"}"#.to_vec())
        );
        let failing = Expression::compile("payload.missing.field").unwrap();
        assert!(Transform::Expression(failing)
            .apply(&entry, Some(b"{}"))
            .is_err());
    }

    #[test]
    fn a_tally_counts_and_digests_what_went() {
        let mut t = Tally::new(Transform::MergePatch(json!({})));
        t.count(b"{}", Some(b"{}"));
        t.count(b"{\"a\":1}", Some(b"{\"a\":2}"));
        t.count(b"x", None);
        let s = t.summary();
        assert_eq!((s.changed, s.unchanged, s.failed), (1, 1, 1));
        assert_ne!(s.before_sha256, s.after_sha256);
        assert_eq!(s.before_sha256.len(), 64);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["transform"], json!({"merge_patch": {}}));
    }
}
