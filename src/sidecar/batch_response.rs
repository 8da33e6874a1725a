//! A batch call's 2xx answer, read as AWS Lambda's partial batch response:
//! `{"batchItemFailures": [{"itemIdentifier": "<record id>"}, …]}` names the records that
//! failed (transient; an item may add `"kind": "permanent"` and `"message"`). An empty body or
//! an empty list means every record succeeded; an id that is not in the batch is logged and
//! ignored; any other body is a failure of the whole batch (which is then bisected).

use serde::Deserialize;

use crate::failure::HandlerError;
use crate::record::Record;

/// How many bytes of a 2xx answer are read.
pub(super) const MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    batch_item_failures: Vec<Item>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    item_identifier: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The outcome of a batch of `records` whose target answered 2xx with `body`.
pub fn outcome(body: &[u8], records: &[Record]) -> Result<(), HandlerError> {
    let text = String::from_utf8_lossy(body);
    if text.trim().is_empty() {
        return Ok(());
    }
    let response: Response = serde_json::from_str(&text).map_err(|e| {
        let shown: String = text.chars().take(200).collect();
        HandlerError::permanent(format!(
            "the target answered 2xx with a body that is not a partial batch response \
             ({{\"batchItemFailures\":[{{\"itemIdentifier\":\"<record id>\"}}]}}): {e}: {shown}"
        ))
    })?;
    let mut failures = Vec::new();
    for item in response.batch_item_failures {
        let message = item
            .message
            .unwrap_or_else(|| "the target reported this record as failed".into());
        let error = match item.kind.as_deref() {
            Some("permanent") => HandlerError::permanent(message),
            _ => HandlerError::transient(message),
        };
        let mut found = false;
        for record in records.iter().filter(|r| r.id == item.item_identifier) {
            failures.push((record.offset, error.clone()));
            found = true;
        }
        if !found {
            tracing::warn!(event = "batch_partial_unknown_record", id = %item.item_identifier,
                "the target named a record that is not in the batch; ignored");
        }
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
            })
            .collect()
    }

    #[test]
    fn no_body_or_an_empty_list_is_success() {
        assert_eq!(outcome(b"", &records()), Ok(()));
        assert_eq!(outcome(b"  \n", &records()), Ok(()));
        assert_eq!(outcome(br#"{"batchItemFailures":[]}"#, &records()), Ok(()));
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
    fn unknown_ids_are_ignored() {
        let body = br#"{"batchItemFailures":[{"itemIdentifier":"nope"}]}"#;
        assert_eq!(outcome(body, &records()), Ok(()));
    }

    #[test]
    fn another_body_fails_the_whole_batch() {
        for body in [
            &b"ok"[..],
            br#"{"status":"done"}"#,
            br#"{"batchItemFailures":"r-1"}"#,
        ] {
            let error = outcome(body, &records()).unwrap_err();
            assert!(error.failed_records().is_none(), "{error}");
            assert!(
                error.message().contains("not a partial batch response"),
                "{error}"
            );
        }
    }
}
