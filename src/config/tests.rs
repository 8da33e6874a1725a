//! Tests of the configuration's validation and librdkafka settings.

use super::*;
use std::time::Duration;

fn valid() -> ConsumerConfig {
    ConsumerConfig::new("localhost:9092", "g", ["orders"])
}

#[test]
fn defaults_are_valid_and_spring_like() {
    let c = valid();
    c.validate().unwrap();
    assert_eq!(c.max_retries, 10);
    assert_eq!(c.dlq_topic().unwrap().for_topic("orders"), "orders-dlt");
}

#[test]
fn errors_name_the_setting_and_value() {
    let cases: Vec<(ConsumerConfig, &str, &str)> = vec![
        (
            ConsumerConfig {
                brokers: "".into(),
                ..valid()
            },
            "brokers",
            "",
        ),
        (
            ConsumerConfig {
                brokers: "localhost".into(),
                ..valid()
            },
            "brokers",
            "localhost",
        ),
        (
            ConsumerConfig {
                group_id: " ".into(),
                ..valid()
            },
            "group_id",
            " ",
        ),
        (
            ConsumerConfig {
                topics: vec![],
                ..valid()
            },
            "topics",
            "",
        ),
        (
            ConsumerConfig {
                topics: vec!["bad topic".into()],
                ..valid()
            },
            "topics",
            "bad topic",
        ),
        (
            ConsumerConfig {
                dlq_topic: "{topic}".into(),
                ..valid()
            },
            "dlq_topic",
            "{topic}",
        ),
        (
            ConsumerConfig {
                backoff_initial: Duration::from_millis(0),
                ..valid()
            },
            "backoff_initial_ms",
            "0",
        ),
        (
            ConsumerConfig {
                backoff_max: Duration::from_millis(10),
                ..valid()
            },
            "backoff_max_ms",
            "10",
        ),
        (
            ConsumerConfig {
                backoff_jitter: 2.0,
                ..valid()
            },
            "backoff_jitter",
            "2",
        ),
        (
            ConsumerConfig {
                backoff_multiplier: 0.5,
                ..valid()
            },
            "backoff_multiplier",
            "0.5",
        ),
        (
            ConsumerConfig {
                auto_offset_reset: "start".into(),
                ..valid()
            },
            "auto_offset_reset",
            "start",
        ),
        (
            ConsumerConfig {
                max_buffered_records: 0,
                ..valid()
            },
            "max_buffered_records",
            "0",
        ),
        (
            ConsumerConfig {
                max_buffered_bytes: 1000,
                ..valid()
            },
            "max_buffered_bytes",
            "1000",
        ),
        (
            ConsumerConfig {
                batch_size: 0,
                ..valid()
            },
            "batch_size",
            "0",
        ),
        (
            ConsumerConfig {
                breaker_failure_ratio: 1.5,
                ..valid()
            },
            "breaker_failure_ratio",
            "1.5",
        ),
        (
            ConsumerConfig {
                breaker_probe_max: Duration::from_millis(10),
                ..valid()
            },
            "breaker_probe_max_ms",
            "10",
        ),
    ];
    for (config, key, value) in cases {
        let err = config.validate().unwrap_err();
        assert_eq!(
            (err.key.as_str(), err.value.as_str()),
            (key, value),
            "{err}"
        );
        assert!(err.to_string().contains(key));
    }
}

#[test]
fn a_topic_that_is_another_sources_redrive_topic_is_refused() {
    let looping = ConsumerConfig {
        topics: vec!["orders".into(), "orders-redrive-g".into()],
        ..valid()
    };
    let error = looping.validate().unwrap_err().to_string();
    assert!(
        error.contains("topics") && error.contains("`orders-redrive-g`"),
        "{error}"
    );
}

#[test]
fn a_group_whose_redrive_topic_reads_as_another_sources_retry_topic_is_refused() {
    // `orders-redrive-billing-retry-0` is both `orders`' redrive topic for group
    // `billing-retry-0` and tier 0's topic of the source `orders-redrive-billing`.
    let colliding = ConsumerConfig {
        group_id: "billing-retry-0".into(),
        topics: vec!["orders".into(), "orders-redrive-billing".into()],
        ..valid()
    };
    let error = colliding.validate().unwrap_err().to_string();
    assert!(
        error.contains("`orders-redrive-billing-retry-0`") && error.contains("retries in"),
        "{error}"
    );
    // Alone, such a group id is fine: its redrive topic is never read as a tier's.
    ConsumerConfig {
        group_id: "billing-retry-0".into(),
        ..valid()
    }
    .validate()
    .unwrap();
}

#[test]
fn classic_protocol_is_cooperative_and_consumer_protocol_sets_no_assignor() {
    let classic = valid().consumer_client_config();
    assert_eq!(classic.get("group.protocol"), Some("classic"));
    assert_eq!(
        classic.get("partition.assignment.strategy"),
        Some("cooperative-sticky")
    );
    let consumer = ConsumerConfig {
        group_protocol: GroupProtocol::Consumer,
        ..valid()
    }
    .consumer_client_config();
    assert_eq!(consumer.get("group.protocol"), Some("consumer"));
    assert_eq!(consumer.get("partition.assignment.strategy"), None);
}

#[test]
fn debug_redacts_raw_options() {
    let mut c = valid();
    c.librdkafka.insert("sasl.password", "hunter2");
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("sasl.password"));
}

#[test]
fn raw_options_apply_last() {
    let mut c = valid();
    c.librdkafka.insert("message.timeout.ms", "2000");
    assert_eq!(
        c.producer_client_config().get("message.timeout.ms"),
        Some("2000")
    );
}

#[test]
fn retry_tiers_are_checked_naming_the_setting() {
    let tiers = |list: &str| ConsumerConfig {
        retry_topic_delays_ms: list.parse().unwrap(),
        ..valid()
    };
    tiers("60000,600000,3600000").validate().unwrap();
    let error = tiers("60000,0").validate().unwrap_err().to_string();
    assert!(
        error.contains("retry_topic_delays_ms") && error.contains("0 ms"),
        "{error}"
    );
    let many = vec!["1"; 33].join(",");
    let error = tiers(&many).validate().unwrap_err().to_string();
    assert!(error.contains("at most 32"), "{error}");
    // orders-retry-0 is a topic this consumer already reads.
    let looping = ConsumerConfig {
        topics: vec!["orders".into(), "orders-retry-0".into()],
        ..tiers("1000")
    };
    let error = looping.validate().unwrap_err().to_string();
    assert!(error.contains("`orders-retry-0`"), "{error}");
    let long = ConsumerConfig {
        topics: vec!["t".repeat(245)],
        ..tiers("1000")
    };
    let error = long.validate().unwrap_err().to_string();
    assert!(error.contains("retry_topic_delays_ms"), "{error}");
}

#[test]
fn a_share_group_refuses_what_it_cannot_do_naming_the_setting() {
    let share = || ConsumerConfig {
        consumption: crate::config::Consumption::Share,
        ..valid()
    };
    assert_eq!(share().validate(), Ok(()));
    let cases = [
        (
            ConsumerConfig {
                ordering: crate::config::Ordering::Key,
                ..share()
            },
            "ordering",
        ),
        (
            ConsumerConfig {
                batch_size: 10,
                ..share()
            },
            "batch_size",
        ),
        (
            ConsumerConfig {
                retry_topic_delays_ms: crate::retry_tier::RetryTiers::new([1000]),
                ..share()
            },
            "retry_topic_delays_ms",
        ),
        (
            ConsumerConfig {
                max_in_flight: 0,
                ..share()
            },
            "max_in_flight",
        ),
        (
            ConsumerConfig {
                share_acquire_records: 0,
                ..share()
            },
            "share_acquire_records",
        ),
    ];
    for (config, key) in cases {
        let err = config.validate().unwrap_err();
        assert_eq!(err.key, key, "{err}");
        assert!(err.to_string().contains("share"), "{err}");
    }
}

#[test]
fn a_share_fetch_acquires_its_batch_and_never_fewer_than_may_be_in_flight() {
    let one_at_a_time = ConsumerConfig {
        max_in_flight: 1,
        ..ConsumerConfig::default()
    };
    assert_eq!(one_at_a_time.share_fetch_records(), 16);
    let wide = ConsumerConfig {
        max_in_flight: 64,
        share_acquire_records: 16,
        ..ConsumerConfig::default()
    };
    assert_eq!(wide.share_fetch_records(), 64);
}

#[test]
fn parking_refuses_what_has_no_key_order_to_keep_or_is_not_built_yet_naming_why() {
    use crate::config::{Consumption, KeyOrderAfterFailure};
    let park = || ConsumerConfig {
        key_order_after_failure: KeyOrderAfterFailure::Park,
        ..valid()
    };
    assert_eq!(park().validate(), Ok(()));
    assert_eq!(
        "park".parse::<KeyOrderAfterFailure>(),
        Ok(KeyOrderAfterFailure::Park)
    );
    assert!("wait"
        .parse::<KeyOrderAfterFailure>()
        .unwrap_err()
        .contains("`continue` or `park`"));
    let cases = [
        (
            ConsumerConfig {
                consumption: Consumption::Share,
                ..park()
            },
            "no key order to keep",
        ),
        (
            ConsumerConfig {
                ordering: crate::config::Ordering::Key,
                ..park()
            },
            "ordering = \"partition\"",
        ),
        (
            ConsumerConfig {
                batch_size: 10,
                ..park()
            },
            "batch_size 1",
        ),
        (
            ConsumerConfig {
                exactly_once: true,
                ..park()
            },
            "exactly_once",
        ),
    ];
    for (config, why) in cases {
        let error = config.validate().unwrap_err();
        assert_eq!(error.key, "key_order_after_failure");
        assert!(error.reason.contains(why), "{error}");
    }
    let stray = ConsumerConfig {
        park_max_age: std::time::Duration::from_secs(60),
        ..valid()
    };
    assert_eq!(stray.validate().unwrap_err().key, "park_max_age_ms");
    let aged = ConsumerConfig {
        park_max_age: std::time::Duration::from_secs(60),
        ..park()
    };
    assert_eq!(aged.validate(), Ok(()));
}
