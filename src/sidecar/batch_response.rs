//! A batch call's 2xx answer, read by AWS Lambda's rules for partial batch responses:
//! `{"batchItemFailures": [{"itemIdentifier": "<record id>"}, …]}` names the records that
//! failed (transient; an item may add `"kind": "permanent"` and `"message"`).
//!
//! - **Every record succeeded**: an empty body, `null`, a JSON object without
//!   `batchItemFailures` (so `{}` and a target that predates partial responses, answering
//!   `{"ok":true}`), `"batchItemFailures": null` or an empty list.
//! - **The whole batch failed, transiently** (it is retried, and its records are never
//!   dead-lettered on the spot): a body that is not JSON (`OK`), JSON that is neither an object
//!   nor `null`, a `batchItemFailures` that is not a list, an item without a string
//!   `itemIdentifier` (a misspelt key, `null`), an empty identifier, or an identifier that is not
//!   the id of a record in the batch — as SQS does, so a target that reports offsets or keys
//!   instead of ids never has its failed records settled as handled.
//! - **Otherwise** only the named records failed; the others succeeded.

use serde::Deserialize;
use serde_json::Value;

use crate::failure::HandlerError;
use crate::record::Record;

/// How many bytes of a 2xx answer are read.
pub(super) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How many characters of a body that is not a partial batch response its error shows.
const SHOWN_CHARS: usize = 200;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    item_identifier: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The outcome of a batch of `records` whose target answered 2xx with `body`, by the rules
/// in this module's documentation.
pub fn outcome(body: &[u8], records: &[Record]) -> Result<(), HandlerError> {
    let text = String::from_utf8_lossy(body);
    if text.trim().is_empty() {
        return Ok(());
    }
    let invalid = |why: String| {
        let shown: String = text
            .chars()
            .take(SHOWN_CHARS)
            .flat_map(char::escape_default)
            .collect();
        HandlerError::transient(format!(
            "the target answered 2xx with a body that is not a partial batch response \
             ({{\"batchItemFailures\":[{{\"itemIdentifier\":\"<record id>\"}}]}}): {why}; \
             the whole batch failed: {shown}"
        ))
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|e| invalid(format!("it is not JSON ({e})")))?;
    let items = match value {
        Value::Null => return Ok(()),
        Value::Object(mut fields) => match fields.remove("batchItemFailures") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(invalid("\"batchItemFailures\" is not a list".into())),
        },
        _ => return Err(invalid("it is neither a JSON object nor null".into())),
    };
    let mut failures = Vec::new();
    for item in items {
        let item: Item = serde_json::from_value(item).map_err(|e| {
            invalid(format!(
                "an item is not {{\"itemIdentifier\": \"<record id>\"}} ({e})"
            ))
        })?;
        if item.item_identifier.is_empty() {
            return Err(invalid("an item's \"itemIdentifier\" is empty".into()));
        }
        let named: Vec<&Record> = records
            .iter()
            .filter(|r| r.id == item.item_identifier)
            .collect();
        if named.is_empty() {
            let id: String = item.item_identifier.escape_default().collect();
            return Err(invalid(format!(
                "it names \"{id}\", which is not the id of a record in this batch"
            )));
        }
        let message = item
            .message
            .unwrap_or_else(|| "the target reported this record as failed".into());
        let error = match item.kind.as_deref() {
            Some("permanent") => HandlerError::permanent(message),
            _ => HandlerError::transient(message),
        };
        failures.extend(named.into_iter().map(|r| (r.offset, error.clone())));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(HandlerError::partial(failures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    fn records() -> Vec<Record> {
        (0..3)
            .map(|o| Record {
                id: format!("r-{o}"),
                topic: "t".into(),
                partition: 0,
                offset: 10 + o,
                key: None,
                payload: None,
                headers: vec![],
                timestamp: None,
                timestamp_type: None,
                retry: None,
                delivery_count: None,
            })
            .collect()
    }

    #[test]
    fn lambdas_success_answers_are_success() {
        for body in [
            &b""[..],
            b"  \n",
            b"null",
            b"{}",
            br#"{"batchItemFailures":null}"#,
            br#"{"batchItemFailures":[]}"#,
            br#"{"ok":true}"#,
        ] {
            assert_eq!(
                outcome(body, &records()),
                Ok(()),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn named_records_fail_transient_by_default_or_permanent() {
        let body = br#"{"batchItemFailures":[{"itemIdentifier":"r-1"},
            {"itemIdentifier":"r-2","kind":"permanent","message":"row 2 rejected"}]}"#;
        let error = outcome(body, &records()).unwrap_err();
        let failures = error.failed_records().unwrap();
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].0, 11);
        assert_eq!(failures[0].1.kind(), FailureKind::Transient);
        assert_eq!(failures[1].0, 12);
        assert_eq!(failures[1].1.kind(), FailureKind::Permanent);
        assert_eq!(failures[1].1.message(), "row 2 rejected");
    }

    #[test]
    fn an_answer_that_is_no_valid_response_fails_the_whole_batch_transiently() {
        for (body, why) in [
            (&b"OK"[..], "not JSON"),
            (b"\"done\"", "neither a JSON object nor null"),
            (b"[]", "neither a JSON object nor null"),
            (br#"{"batchItemFailures":"r-1"}"#, "not a list"),
            (br#"{"batchItemFailures":[{"id":"r-1"}]}"#, "an item is not"),
            (
                br#"{"batchItemFailures":[{"itemIdentifier":null}]}"#,
                "an item is not",
            ),
            (
                br#"{"batchItemFailures":[{"itemIdentifier":""}]}"#,
                "is empty",
            ),
            (
                br#"{"batchItemFailures":[{"itemIdentifier":"r-1"},{"itemIdentifier":"11"}]}"#,
                "names \"11\", which is not the id of a record in this batch",
            ),
        ] {
            let error = outcome(body, &records()).unwrap_err();
            assert!(error.failed_records().is_none(), "{error}");
            assert_eq!(error.kind(), FailureKind::Transient, "{error}");
            assert!(error.message().contains(why), "{why}: {error}");
            assert!(
                error.message().contains("the whole batch failed"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_shown_body_has_its_control_characters_escaped() {
        let error = outcome(b"\x1b[31mred", &records()).unwrap_err();
        assert!(!error.message().contains('\x1b'), "{error}");
        assert!(error.message().contains("\\u{1b}[31mred"), "{error}");
    }
}
