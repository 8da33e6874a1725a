//! Raw librdkafka options that kafka-dlq refuses: those that would break the at-least-once
//! guarantee, and those a typed setting manages.

use super::GroupProtocol;

/// Why a raw librdkafka option is refused, or `None` when it may be set. Options that would
/// break the at-least-once guarantee, and options that a typed setting manages, are refused.
pub fn refuse_raw_option(key: &str, value: &str, protocol: GroupProtocol) -> Option<String> {
    let value = value.trim();
    let why = match key {
        "enable.auto.offset.store" => {
            "kafka-dlq stores an offset only once its record is settled; librdkafka's automatic \
             store would commit records that were never handled"
        }
        "enable.auto.commit" | "auto.commit.enable" => {
            "kafka-dlq commits the stored (settled) offsets every second and at rebalance and \
             shutdown; it is not a setting"
        }
        "group.id" | "bootstrap.servers" | "metadata.broker.list" => {
            "is managed by kafka-dlq; use the typed setting instead"
        }
        "auto.offset.reset" => "use the typed setting auto_offset_reset",
        "group.protocol" => "use the typed setting group_protocol",
        "queued.min.messages" => "use the typed setting max_buffered_records",
        "queued.max.messages.kbytes" => "use the typed setting max_buffered_bytes",
        "enable.partition.eof" => "partition EOF events are not records; kafka-dlq turns them off",
        "acks" | "request.required.acks" if !matches!(value, "all" | "-1") => {
            "a dead letter must be on every in-sync replica before its record's offset is \
             committed (acks=all)"
        }
        "message.timeout.ms" | "delivery.timeout.ms" if value == "0" => {
            "an unbounded dead-letter write never fails, so a DLQ outage is never retried, \
             logged or counted; give a bound in ms"
        }
        "max.in.flight.requests.per.connection" | "max.in.flight" if value != "1" => {
            "more than one dead-letter request in flight lets a retried write overtake a later \
             one, out of the partition's order"
        }
        "transactional.id" => "set exactly_once = true instead: the consumer then gives its producer a transactional id of its own, fenced by the group (KIP-447)",
        "session.timeout.ms" | "heartbeat.interval.ms" | "partition.assignment.strategy"
            if protocol == GroupProtocol::Consumer =>
        {
            "is the broker's with group_protocol = \"consumer\" (KIP-848); set it on the \
             broker or use group_protocol = \"classic\""
        }
        _ => return None,
    };
    Some(why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConsumerConfig;

    #[test]
    fn raw_options_that_break_the_guarantees_are_refused() {
        use GroupProtocol::{Classic, Consumer};
        let refused = [
            ("enable.auto.offset.store", "true", Classic),
            ("enable.auto.commit", "false", Classic),
            ("acks", "1", Classic),
            ("request.required.acks", "0", Classic),
            ("message.timeout.ms", "0", Classic),
            ("max.in.flight.requests.per.connection", "5", Classic),
            ("transactional.id", "x", Classic),
            ("group.id", "x", Classic),
            ("session.timeout.ms", "6000", Consumer),
            ("partition.assignment.strategy", "range", Consumer),
        ];
        for (key, value, protocol) in refused {
            assert!(
                refuse_raw_option(key, value, protocol).is_some(),
                "{key}={value} must be refused"
            );
        }
        let allowed = [
            ("acks", "all", Classic),
            ("message.timeout.ms", "60000", Classic),
            ("session.timeout.ms", "6000", Classic),
            ("partition.assignment.strategy", "range", Classic),
            ("security.protocol", "SASL_SSL", Consumer),
            ("max.in.flight.requests.per.connection", "1", Classic),
        ];
        for (key, value, protocol) in allowed {
            assert_eq!(
                refuse_raw_option(key, value, protocol),
                None,
                "{key}={value}"
            );
        }
        let config = ConsumerConfig {
            librdkafka: [("acks", "1")].into_iter().collect(),
            ..ConsumerConfig::new("localhost:9092", "g", ["orders"])
        };
        let error = config.validate().unwrap_err();
        assert_eq!(error.key, "librdkafka.acks");
        assert!(error.reason.contains("acks=all"), "{error}");
    }
}
