//! The Grafana dashboard (`alerting/grafana-dashboard.json`) asks only for metrics that a
//! running consumer's `/metrics` really serves, and every panel has a query; and the alert
//! rules (`alerting/kafka-dlq.rules.yml`) too.

mod common;

use std::time::Duration;

use common::dashboard::*;
use common::*;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_rule_asks_for_metrics_that_metrics_serves() {
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut queries = String::new();
    for panel in panels {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has a query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            assert!(
                expr.contains("kafka_dlq_"),
                "panel {} asks for kafka-dlq metrics: {expr}",
                panel["title"]
            );
            queries.push_str(expr);
            queries.push('\n');
        }
    }
    // Per service: every consumer query picks the `group` variable, and sums keep the group
    // apart, so two services on one topic are never added together.
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(variables.contains(&"group"), "{variables:?}");
    for query in queries.lines() {
        let console = !console_families().is_disjoint(&families_named(query));
        if !console {
            assert!(query.contains("group=~\"$group\""), "{query}");
        }
        assert!(!query.contains("by (topic"), "{query}");
    }
    // The share members' and the console's families are checked where those serve /metrics
    // (tests/share.rs, tests/console.rs); the rest are a consumer's.
    let asked: std::collections::BTreeSet<String> = families_named(&queries)
        .difference(
            &share_families()
                .union(&console_families())
                .cloned()
                .collect(),
        )
        .cloned()
        .collect();
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/alerting/kafka-dlq.rules.yml"
    ))
    .unwrap();
    let ruled = families_named(&rules);
    for expr in rules
        .lines()
        .filter(|l| l.trim_start().starts_with("expr:"))
    {
        assert!(expr.contains(" by (group, "), "an alert per group: {expr}");
    }

    // A consumer that handled, retried and dead-lettered records, as /metrics shows it.
    let brokers = brokers();
    let topic = unique("dashboard");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &format!("{topic}-dlt"), 1).await;
    produce(
        &brokers,
        &topic,
        vec![
            Out::new(0, "ok-1"),
            Out::new(0, "trans1-2"),
            Out::new(0, "perm-3"),
        ],
    )
    .await;
    let mut config = test_config(&brokers, &group, &topic);
    // With a retry tier and parking, so that their series exist too.
    config.retry_topic_delays_ms = "60000".parse().unwrap();
    config.key_order_after_failure = kafka_dlq::config::KeyOrderAfterFailure::Park;
    config.librdkafka.insert("statistics.interval.ms", "200");
    let handler = Scripted::default();
    let consumer = kafka_dlq::Consumer::new(config, handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kafka_dlq::server::serve(
        listener,
        metrics.clone(),
        stop.clone().cancelled_owned(),
        Duration::from_secs(5),
    ));
    let run = tokio::spawn(consumer.run(stop.clone().cancelled_owned()));
    assert!(
        eventually(WAIT, || metrics
            .total("kafka_dlq_records_dead_lettered_total")
            == 1.0
            && metrics.render().contains("kafka_dlq_consumer_lag{"))
        .await,
        "{}",
        metrics.render()
    );
    let page = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    stop.cancel();
    run.await.unwrap().unwrap();
    let _ = server.await;

    let served = families_served(&page);
    let missing: Vec<_> = asked.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard asks for {missing:?}, which /metrics does not serve:\n{page}"
    );
    let missing: Vec<_> = ruled.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the alert rules ask for {missing:?}, which /metrics does not serve:\n{page}"
    );
    // The manual names only families that are served: a consumer's here, a share member's
    // and the console's in their own tests.
    let named = manual_families();
    let consumer: Vec<_> = named
        .difference(
            &of_share(&named)
                .union(&of_console(&named))
                .cloned()
                .collect(),
        )
        .filter(|f| !served.contains(*f))
        .cloned()
        .collect();
    assert!(
        consumer.is_empty(),
        "the manual names {consumer:?}, which /metrics does not serve:\n{page}"
    );
    // The dashboard shows every kafka-dlq family /metrics serves (OpenTelemetry's messaging
    // metrics beside them, `messaging_*`, are for dashboards built on the conventions).
    let unshown: Vec<_> = served
        .difference(&asked)
        .filter(|f| f.starts_with("kafka_dlq_"))
        .collect();
    assert!(unshown.is_empty(), "no panel shows {unshown:?}");
}
