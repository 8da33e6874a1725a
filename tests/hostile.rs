//! Hostile input: the envelope decoder, the retry-record reader, the configuration parser and
//! the sidecar's response handling never panic, whatever they are given; envelopes round-trip any bytes exactly.

use chrono::{TimeZone, Utc};
use kafka_dlq::dlq::{truncate_message, Envelope, MAX_ERROR_MESSAGE_BYTES};
use kafka_dlq::fingerprint::fingerprint;
use kafka_dlq::sidecar::{classify_response, parse_retry_after};
use kafka_dlq::{ConsumerConfig, DeadLetterKind, Record, RecordHeader};
use proptest::prelude::*;
use std::time::Duration;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_envelope_decoder_never_panics(raw in bytes()) {
        if let Ok(env) = Envelope::from_slice(&raw) {
            let _ = env.payload_bytes();
            let _ = env.key_bytes();
            let _ = env.headers();
        }
    }

    #[test]
    fn the_envelope_decoder_never_panics_on_json_shaped_input(
        id in ".*", payload in ".*", enc in prop::sample::select(vec!["json", "utf8", "base64", "none", "x"]),
        key in proptest::option::of(".*"), key_enc in prop::sample::select(vec!["utf8", "base64", "json"]),
    ) {
        let doc = serde_json::json!({
            "id": id, "payload": payload, "payload_encoding": enc,
            "error": {"kind": "permanent", "message": "m", "attempts": 1},
            "timestamp": "2026-11-30T10:00:00Z",
            "source": {"topic": "t", "partition": 0, "offset": 0, "key": key, "key_encoding": key_enc,
                       "timestamp": null, "headers": [{"key": "h", "value": payload, "encoding": key_enc}],
                       "group": "g"}
        });
        if let Ok(env) = Envelope::from_slice(doc.to_string().as_bytes()) {
            let _ = env.payload_bytes();
            let _ = env.key_bytes();
            let _ = env.headers();
        }
    }

    #[test]
    fn envelopes_round_trip_any_record_exactly(
        payload in proptest::option::of(bytes()),
        key in proptest::option::of(bytes()),
        headers in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..20), proptest::option::of(bytes())), 0..20),
        message in ".*",
    ) {
        let record = {
            let mut record = Record::new("t", 1, 2).with_id("r");
            record.key = key.clone();
            record.payload = payload.clone();
            record.headers = headers.iter().map(|(k, v)| RecordHeader { key: k.clone(), value: v.clone() }).collect();
            record.timestamp = Utc.timestamp_millis_opt(1_700_000_000_000).single();
            record.timestamp_type = Some(kafka_dlq::record::TimestampType::CreateTime);
            record
        };
        let env = Envelope::new(&record, DeadLetterKind::Permanent, &message, 1, "g");
        let back = Envelope::from_slice(&env.to_vec()).unwrap();
        prop_assert_eq!(back.payload_bytes().unwrap(), payload);
        prop_assert_eq!(back.key_bytes().unwrap(), key);
        prop_assert_eq!(back.headers().unwrap(), record.headers);
        prop_assert!(back.error.message.len() <= MAX_ERROR_MESSAGE_BYTES);
    }

    #[test]
    fn retry_records_restore_whatever_their_headers_hold(
        values in prop::collection::vec(proptest::option::of(bytes()), 7),
        payload in proptest::option::of(bytes()),
    ) {
        let names = [
            "kafka_dlq-retry", "retry_topic-attempts", "retry_topic-backoff-timestamp",
            "kafka_dlt-original-topic", "kafka_dlt-original-partition",
            "kafka_dlt-original-offset", "kafka_dlt-original-timestamp",
        ];
        let headers: Vec<RecordHeader> = names
            .iter()
            .zip(values)
            .map(|(k, v)| RecordHeader { key: k.as_bytes().to_vec(), value: v })
            .collect();
        let delivered = {
            let mut record = Record::new("t-retry-0", 0, 5).with_id("t-retry-0-0-5");
            record.payload = payload.clone();
            record.headers = headers;
            record
        };
        let (record, _) = kafka_dlq::retry_tier::restore(delivered, Some(0));
        let retry = record.retry.expect("always says where it was delivered from");
        prop_assert_eq!((retry.topic.as_str(), retry.offset), ("t-retry-0", 5));
        prop_assert_eq!(record.payload, payload);
    }

    #[test]
    fn the_config_parser_takes_any_setting_with_any_value_without_panicking(
        settings in proptest::collection::vec(
            (0..ConsumerConfig::KEYS.len(), prop_oneof![
                any::<i64>().prop_map(|v| v.to_string()),
                any::<f64>().prop_filter("TOML has no NaN literal here", |v| v.is_finite())
                    .prop_map(|v| format!("{v:?}")),
                any::<bool>().prop_map(|v| v.to_string()),
                "[a-z{}_.-]{0,20}".prop_map(|v| format!("{v:?}")),
                proptest::collection::vec(0u32..100_000, 0..4).prop_map(|v| format!("{v:?}")),
            ]),
            0..12,
        ),
    ) {
        // Real keys with values of every TOML type, so that parsing succeeds often and
        // validation runs on what it is given, not only on text that is rarely TOML.
        let mut seen = std::collections::HashSet::new();
        let text: String = settings
            .iter()
            .filter(|(key, _)| seen.insert(*key))
            .map(|(key, value)| format!("{} = {value}\n", ConsumerConfig::KEYS[*key]))
            .collect();
        match toml::from_str::<ConsumerConfig>(&text) {
            Ok(config) => {
                if let Err(e) = config.validate() {
                    prop_assert!(ConsumerConfig::KEYS.iter().any(|k| e.to_string().contains(k)),
                        "the error names a setting: {e}");
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn config_validation_never_panics(
        brokers in ".{0,40}", group in ".{0,20}", topic in ".{0,30}", template in ".{0,30}",
        initial in any::<u64>(), max in any::<u64>(), multiplier in any::<f64>(), jitter in any::<f64>(),
        ratio in any::<f64>(),
    ) {
        let config = ConsumerConfig {
            dlq_topic: template,
            backoff_initial: Duration::from_millis(initial),
            backoff_max: Duration::from_millis(max),
            backoff_multiplier: multiplier,
            backoff_jitter: jitter,
            breaker_failure_ratio: ratio,
            ..ConsumerConfig::new(&brokers, &group, [topic])
        };
        if config.validate().is_ok() {
            let _ = config.backoff().unwrap().delays().take(20).count();
        }
    }

    #[test]
    fn the_sidecar_response_handling_never_panics(
        status in any::<u16>(), retry_after in proptest::option::of(".{0,40}"), body in ".{0,600}",
    ) {
        let now = Utc.timestamp_millis_opt(1_800_000_000_000).single().unwrap();
        let result = classify_response(status, retry_after.as_deref(), None, &body, now);
        if (200..300).contains(&status) {
            prop_assert!(result.is_ok());
        } else {
            let error = result.unwrap_err();
            // Only 408, 429 and 5xx take the target's Retry-After, exactly as parsed.
            let takes_retry_after = status == 408 || status == 429 || (500..600).contains(&status);
            let parsed = retry_after.as_deref().and_then(|v| parse_retry_after(v, now));
            let expected = if takes_retry_after { parsed } else { None };
            prop_assert_eq!(error.retry_after(), expected);
        }
    }

    #[test]
    fn fingerprints_and_truncation_never_panic(message in ".*") {
        let fp = fingerprint("permanent", &message);
        prop_assert!(fp.chars().count() <= 120);
        let cut = truncate_message(&message);
        prop_assert!(cut.len() <= MAX_ERROR_MESSAGE_BYTES);
    }
}
