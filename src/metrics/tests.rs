//! Tests of the metrics: every family rendered, totals, health and readiness.

use super::*;

#[test]
fn renders_every_metric_family() {
    let m = Metrics::new();
    m.consumed.with_label_values(&["orders"]).inc();
    m.dead_lettered
        .with_label_values(&["orders", "permanent"])
        .inc();
    m.consumed.with_label_values(&["parcels"]).inc_by(2);
    assert_eq!(m.total("kafka_dlq_records_consumed_total"), 3.0);
    assert_eq!(m.total("kafka_dlq_records_retried_total"), 0.0);
    let text = m.render();
    assert!(text.contains("kafka_dlq_records_consumed_total{topic=\"orders\"} 1"));
    assert!(text
        .contains("kafka_dlq_records_dead_lettered_total{kind=\"permanent\",topic=\"orders\"} 1"));
    assert!(text.contains("kafka_dlq_partitions_in_backoff 0"));
}

#[test]
fn a_consumers_series_name_its_group() {
    let m = Metrics::for_group("billing");
    m.dead_lettered
        .with_label_values(&["orders", "permanent"])
        .inc();
    let text = m.render();
    assert!(
        text.contains(
            "kafka_dlq_records_dead_lettered_total{kind=\"permanent\",topic=\"orders\",group=\"billing\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("kafka_dlq_partitions_assigned{group=\"billing\"} 0"),
        "{text}"
    );
    assert_eq!(m.total("kafka_dlq_records_dead_lettered_total"), 1.0);
}

#[test]
fn a_dead_worker_makes_the_consumer_unhealthy_naming_its_partition() {
    let m = Metrics::new();
    assert_eq!(m.health(), Ok(()));
    m.worker_died("orders-3", "index out of bounds");
    let why = m.health().unwrap_err().to_string();
    assert!(
        why.contains("orders-3") && why.contains("index out of bounds"),
        "{why}"
    );
}

#[test]
fn ready_needs_an_assignment_and_a_broker() {
    let m = Metrics::new();
    assert!(!m.is_ready());
    m.partitions_assigned.set(2);
    assert!(!m.is_ready());
    m.broker_up.set(1);
    assert!(m.is_ready());
}

#[test]
fn backoff_gauge_guard_decrements_on_drop() {
    let m = Metrics::new();
    {
        let _g = GaugeGuard::inc(&m.partitions_in_backoff);
        assert_eq!(m.partitions_in_backoff.get(), 1);
    }
    assert_eq!(m.partitions_in_backoff.get(), 0);
}
