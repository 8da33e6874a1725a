//! One memory bound for the whole consumer, on Apache Kafka: the records a member has fetched
//! and not handled stay within `max_buffered_bytes` however many partitions it owns, no
//! partition starves, and every partition paused at its share is fetched again.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use kafka_dlq::{Handler, HandlerError, Record};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

const PARTITIONS: i32 = 40;
const PER_PARTITION: usize = 150;
const VALUE_BYTES: usize = 2_048;
/// The consumer's buffer: half of it (512 KiB) for the partitions' librdkafka queues.
const BUFFER: usize = 1 << 20;

/// Produces `PER_PARTITION` records of `VALUE_BYTES` to each partition, all in flight at once:
/// each partition's records in one or two record batches of about 300 kB, far more than a
/// partition's share of the buffer (a broker never splits a batch).
async fn fill(brokers: &str, topic: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut pending = Vec::new();
    for i in 0..PER_PARTITION {
        for partition in 0..PARTITIONS {
            let mut value = format!("{partition}-{i}-").into_bytes();
            value.resize(VALUE_BYTES, b'x');
            let record = FutureRecord::<(), [u8]>::to(topic)
                .partition(partition)
                .payload(&value);
            pending.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
        }
    }
    for delivery in pending {
        delivery.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
}

/// Holds every call until `open`, then counts the records handled per partition.
#[derive(Clone, Default)]
struct Gated {
    open: Arc<AtomicBool>,
    opened: Arc<tokio::sync::Notify>,
    /// The partitions whose records reached the handler while it was held.
    called: Arc<Mutex<std::collections::HashSet<i32>>>,
    handled: Arc<Mutex<HashMap<i32, usize>>>,
}

impl Handler for Gated {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        self.called.lock().unwrap().insert(record.partition);
        while !self.open.load(Ordering::SeqCst) {
            let opened = self.opened.notified();
            if self.open.load(Ordering::SeqCst) {
                break;
            }
            opened.await;
        }
        *self
            .handled
            .lock()
            .unwrap()
            .entry(record.partition)
            .or_default() += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_owning_many_partitions_holds_one_buffer_bound_and_starves_none() {
    let brokers = brokers();
    let topic = unique("memory");
    let group = unique("g");
    create_topic(&brokers, &topic, PARTITIONS).await;
    fill(&brokers, &topic).await;

    let handler = Gated::default();
    let config = kafka_dlq::ConsumerConfig {
        max_buffered_bytes: BUFFER,
        ..test_config(&brokers, &group, &topic)
    };
    init_logs();
    let consumer = kafka_dlq::Consumer::new(config, handler.clone()).unwrap();
    let metrics = consumer.metrics();
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(consumer.run(stop.clone().cancelled_owned()));

    // Every handler call held. librdkafka stops fetching a partition once its queue holds
    // its share (half the buffer divided by the partitions the consumer's topics have, the
    // group's redrive topic's included: as many, all empty) and one fetch beyond it; a fetch
    // here brings a whole 300 kB record batch, of which the partition's worker copies its
    // next chunk while the handler is held and drops the rest by pausing the partition. So
    // the queues never hold much more than half the buffer and one fetch per partition (64 kB,
    // the fetch's floor: each share here is 6.5 kB); without the drop they held a batch each
    // (11.6 MB). 12 MB of records wait on the broker.
    // The redrive topic is created as the consumer starts, and assigned once librdkafka's
    // metadata shows it: sampled from the start, for 6 s once every partition is assigned
    // (within 60 s), through three of librdkafka's statistics.
    let mut most = 0i64;
    let mut assigned = 0;
    let mut samples = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while samples < 600 {
        most = most.max(metrics.buffered_bytes());
        assigned = assigned.max(metrics.partitions_assigned());
        if assigned == 2 * i64::from(PARTITIONS) {
            samples += 1;
        } else if tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        assigned,
        2 * i64::from(PARTITIONS),
        "the topic's and its redrive topic's"
    );
    let budget = (BUFFER / 2) as i64;
    let bound = budget + i64::from(PARTITIONS) * 64 * 1024;
    assert!(
        most <= bound,
        "the queues held {most} bytes, more than their budget and one fetch per partition ({bound})"
    );
    let called = handler.called.lock().unwrap().len();
    assert_eq!(
        called, PARTITIONS as usize,
        "every partition's records reached the handler while it was held: none starved"
    );
    eprintln!("the queues held {most} bytes at most (bound {bound})");

    // Opened: every partition is fetched again to its end.
    handler.open.store(true, Ordering::SeqCst);
    handler.opened.notify_waiters();
    let all = (PARTITIONS as usize) * PER_PARTITION;
    let done = eventually(Duration::from_secs(120), || {
        handler.handled.lock().unwrap().values().sum::<usize>() >= all
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let handled = handler.handled.lock().unwrap().clone();
    assert!(done, "handled per partition: {handled:?}");
    for partition in 0..PARTITIONS {
        assert!(
            handled.get(&partition).copied().unwrap_or(0) >= PER_PARTITION,
            "partition {partition} handled {:?} of {PER_PARTITION}",
            handled.get(&partition)
        );
    }
    let committed = committed(&brokers, &group, &topic, PARTITIONS);
    for partition in 0..PARTITIONS {
        assert_eq!(
            committed.get(&partition),
            Some(&(PER_PARTITION as i64)),
            "partition {partition} committed to its end"
        );
    }
    assert_eq!(metrics.buffered_bytes(), 0, "nothing left in the queues");
}
