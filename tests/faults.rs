//! Broker faults injected with librdkafka's own mock cluster.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use kafka_dlq::record::retry::redrive_topic;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_dead_letter_write_holds_the_offset_until_it_succeeds() {
    let mock = MockCluster::new(1).unwrap();
    let brokers = mock.bootstrap_servers();
    let topic = unique("dlqfail");
    let group = unique("g");
    mock.create_topic(&topic, 1, 1).unwrap();
    mock.create_topic(&format!("{topic}-dlt"), 1, 1).unwrap();
    mock.create_topic(&redrive_topic(&topic, &group), 1, 1)
        .unwrap();
    // A poison record, then 5,100 good ones.
    let mut records = vec![Out::new(0, "perm-1"), Out::new(0, "ok-2")];
    records.extend((3..=5_101).map(|i| Out::new(0, &format!("ok-{i}"))));
    produce(&brokers, &topic, records).await;

    // Every produce request fails until the errors are cleared.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 10_000],
    );
    let handler = Scripted::default();
    let mut config = test_config(&brokers, &group, &topic);
    config.librdkafka.insert("message.timeout.ms", "300");
    let running = Running::start(config, handler.clone());
    assert!(eventually(WAIT, || handler.attempts("perm-1") == 1).await);

    // Failed writes (300 ms each, then 1 s, 2 s of backoff) and still no progress: the next
    // 5,000 records are handled meanwhile, and then no more, however long the writes fail; no
    // offset passes the dead letter.
    assert!(
        eventually(WAIT, || handler.count() == 1 + 5_000).await,
        "handled up to 5,000 records past the unacknowledged dead letter: {}",
        handler.count()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        handler.count(),
        1 + 5_000,
        "and no more while the write fails"
    );
    assert_eq!(handler.attempts("ok-5001"), 1);
    assert_eq!(handler.attempts("ok-5002"), 0);
    assert_eq!(
        committed(&brokers, &group, &topic, 1).get(&0),
        None,
        "the offset does not advance"
    );
    assert_eq!(
        handler.attempts("perm-1"),
        1,
        "the handler is not called again"
    );

    mock.clear_request_errors(RDKafkaApiKey::Produce);
    assert!(
        eventually(WAIT, || handler.attempts("ok-5101") == 1).await,
        "the write succeeds after recovery and the partition moves on"
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1)
            == HashMap::from([(0, 5_101)]))
        .await
    );
    running.stop().await;

    let dlq = read_all(&brokers, &format!("{topic}-dlt"));
    assert_eq!(dlq.len(), 1, "dead-lettered exactly once");
    let envelope =
        kafka_dlq::dlq::Envelope::from_slice(rdkafka::Message::payload(&dlq[0]).unwrap()).unwrap();
    assert_eq!(envelope.source.offset, 0);
    assert_eq!(envelope.error.attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_rides_out_a_broker_restart() {
    // A broker of its own, so that killing it disturbs no other test.
    let kafka = Kafka::start().unwrap();
    let brokers = kafka.brokers();
    let topic = unique("outage");
    let group = unique("g");
    create_topic(&brokers, &topic, 2).await;
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "ok-a"), Out::new(1, "ok-b")],
    )
    .await;

    let handler = Scripted::default();
    let running = Running::start(test_config(&brokers, &group, &topic), handler.clone());
    assert!(eventually(WAIT, || handler.count() == 2).await);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 1), (1, 1)]))
        .await
    );

    kafka.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kafka = kafka.restart();

    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "ok-c"), Out::new(1, "ok-d")],
    )
    .await;
    // Poll errors back off up to 30 s, so recovery may take that long.
    assert!(
        eventually(Duration::from_secs(90), || handler.attempts("ok-c") == 1
            && handler.attempts("ok-d") == 1)
        .await,
        "records produced after the restart are handled: {:?}",
        handler.calls()
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 2)
            == HashMap::from([(0, 2), (1, 2)]))
        .await
    );
    running.stop().await;
    assert_eq!(handler.count(), 4, "each record once");
    drop(kafka);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_in_flight_are_bounded_by_bytes_while_the_dlq_is_down() {
    let mock = MockCluster::new(1).unwrap();
    let brokers = mock.bootstrap_servers();
    let topic = unique("bigdlq");
    let group = unique("g");
    let partitions = 8;
    mock.create_topic(&topic, partitions, 1).unwrap();
    mock.create_topic(&format!("{topic}-dlt"), 1, 1).unwrap();
    mock.create_topic(&redrive_topic(&topic, &group), partitions, 1)
        .unwrap();
    // 8 partitions × 24 permanent failures of 160 kB: 32 writes per partition in flight would
    // hold about 8 × 24 × 214 kB = 41 MB of envelopes.
    let value = vec![0xa5u8; 160_000];
    let mut records = Vec::new();
    for p in 0..partitions {
        for i in 0..24 {
            let mut v = format!("perm-{p}-{i}-").into_bytes();
            v.extend_from_slice(&value);
            records.push(Out {
                partition: p,
                key: None,
                value: Some(v),
                headers: vec![],
            });
        }
    }
    produce(&brokers, &topic, records).await;
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 100_000],
    );
    let mut config = test_config(&brokers, &group, &topic);
    config.librdkafka.insert("message.timeout.ms", "300");
    init_logs();
    let handler = Scripted::default();
    let consumer = kafka_dlq::Consumer::new(config, handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let mut peak = 0;
    let until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < until {
        peak = peak.max(metrics.dead_letter_bytes_in_flight());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let budget = 16 * 1024 * 1024;
    eprintln!(
        "dead letters in flight peaked at {peak} bytes ({} records handled)",
        handler.count()
    );
    assert!(peak <= budget, "at most 16 MiB in flight: {peak}");
    assert!(
        peak > budget / 2,
        "the bound is what held them back: {peak}"
    );
    assert!(handler.count() < 8 * 24, "records wait for the budget");

    mock.clear_request_errors(RDKafkaApiKey::Produce);
    let ends: HashMap<i32, i64> = (0..partitions).map(|p| (p, 24)).collect();
    assert!(
        eventually(Duration::from_secs(60), || committed(
            &brokers, &group, &topic, partitions
        ) == ends)
        .await,
        "every dead letter is written once the DLQ is back"
    );
    assert!(eventually(WAIT, || metrics.dead_letter_bytes_in_flight() == 0).await);
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_the_source_cannot_serve_now_stops_the_replay_without_committing_past_it() {
    use kafka_dlq::dlq::Envelope;
    use kafka_dlq::replay::{replay, ReplayError, ReplayOptions};
    use kafka_dlq::{DeadLetterKind, Record};
    use tokio_util::sync::CancellationToken;
    let mock = MockCluster::new(1).unwrap();
    let brokers = mock.bootstrap_servers();
    let topic = unique("denied");
    let dlq = format!("{topic}-dlt");
    // Group `g`'s redrive topic, where the replay sends: the mock cluster does not create
    // topics on request.
    let redrive = redrive_topic(&topic, "g");
    mock.create_topic(&topic, 1, 1).unwrap();
    mock.create_topic(&dlq, 1, 1).unwrap();
    mock.create_topic(&redrive, 1, 1).unwrap();
    let state = kafka_dlq::state::StateTopics::default();
    mock.create_topic(&state.audit, 1, 1).unwrap();
    mock.create_topic(&state.positions, 1, 1).unwrap();
    produce(&brokers, &topic, vec![Out::new(0, "big")]).await;
    let record = |offset: i64, payload: &str| {
        Record::new(topic.clone(), 0, offset)
            .with_id(format!("{topic}-0-{offset}"))
            .with_payload(payload.as_bytes())
    };
    let letter = |envelope: Envelope| Out {
        partition: 0,
        key: None,
        value: Some(envelope.to_vec()),
        headers: vec![],
    };
    let reference = Envelope::new(&record(0, "big"), DeadLetterKind::Permanent, "m", 1, "g");
    let whole = Envelope::new(&record(7, "small"), DeadLetterKind::Permanent, "m", 1, "g");
    produce(
        &brokers,
        &dlq,
        vec![letter(reference.reference()), letter(whole)],
    )
    .await;

    // The replay may not read the source topic (as an ACL that denies it would say).
    mock.topic_error(
        &topic,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .unwrap();
    let options = ReplayOptions {
        // The mock's coordinator lets the next replay's lock in only once the last one's
        // membership has timed out.
        librdkafka: [("session.timeout.ms", "6000")].into_iter().collect(),
        ..ReplayOptions::new(&brokers, &dlq)
    };
    let denied = replay(&options, |_, _, _| {}, &CancellationToken::new()).await;
    match denied {
        Err(ReplayError::Unresolved { id, offset, .. }) => {
            assert_eq!(id, format!("{topic}-0-0"));
            assert_eq!(offset, 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        replay_position(&brokers, kafka_dlq::dlq_reader::REPLAY_GROUP, &dlq)
            .await
            .get(&0),
        None,
        "nothing kept past the reference"
    );

    // Allowed again: the same replay resolves it and goes on.
    mock.topic_error(&topic, RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
        .unwrap();
    let report = replay(&options, |_, _, _| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        (report.scanned, report.replayed, report.lost),
        (2, 2, 0),
        "{report:?}"
    );
    let sent: Vec<Vec<u8>> = read_all(&brokers, &redrive)
        .iter()
        .map(|m| rdkafka::Message::payload(m).unwrap().to_vec())
        .collect();
    assert_eq!(sent, vec![b"big".to_vec(), b"small".to_vec()]);
}
