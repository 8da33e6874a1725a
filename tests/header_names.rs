//! Header names are bytes: a record whose header name is not UTF-8 reaches the handler and the
//! dead-letter topic intact, its partition goes on, and `dlq list/show/replay` read and replay
//! it. (rdkafka's header iterator panicked on such a name: the partition's worker died, every
//! later record of the partition was never delivered, and the dlq tools panicked too.)

mod common;

use std::time::Duration;

use common::*;
use kafka_dlq::dlq::Envelope;
use rdkafka::Message;

const WAIT: Duration = Duration::from_secs(30);
const NAME: &[u8] = &[0xff, 0xfe, b'-', b'i', b'd'];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_name_that_is_not_utf8_reaches_the_handler_and_the_dlq_and_the_partition_goes_on()
{
    let brokers = brokers();
    let topic = unique("names");
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let mut odd = Out::new(0, "perm-odd");
    odd.headers = vec![
        (NAME.to_vec(), Some(vec![0x80, 0x00])),
        (b"plain".to_vec(), None),
    ];
    produce(
        &brokers,
        &topic,
        vec![Out::new(0, "ok-1"), odd, Out::new(0, "ok-3")],
    )
    .await;

    let handler = Scripted::default();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    struct Keep(
        Scripted,
        std::sync::Arc<std::sync::Mutex<Vec<kafka_dlq::Record>>>,
    );
    impl kafka_dlq::Handler for Keep {
        async fn handle(&self, r: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
            self.1.lock().unwrap().push(r.clone());
            kafka_dlq::Handler::handle(&self.0, r).await
        }
    }
    let running = Running::start(
        test_config(&brokers, &group, &topic),
        Keep(handler.clone(), seen.clone()),
    );
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&3))
        .await,
        "the partition went on past the record: {:?}",
        handler.calls()
    );
    running.stop().await;
    assert_eq!(
        handler.attempts("ok-3"),
        1,
        "the record after it was handled"
    );
    let odd = seen
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.offset == 1)
        .cloned()
        .unwrap();
    assert_eq!(odd.headers[0].key, NAME, "the name, byte for byte");
    assert_eq!(odd.headers[0].value, Some(vec![0x80, 0x00]));
    assert_eq!(odd.headers[1].key, b"plain");

    // The dead letter carries the name in its envelope (base64) and in its Kafka headers.
    let letters = read_all(&brokers, &dlq);
    assert_eq!(letters.len(), 1);
    let envelope = Envelope::from_slice(letters[0].payload().unwrap()).unwrap();
    assert_eq!(envelope.headers().unwrap(), odd.headers);
    assert_eq!(
        kafka_dlq::kafka::headers::find(letters[0].headers().unwrap(), NAME),
        Some(Some(&[0x80, 0x00][..]))
    );

    // The dlq tools read it, and a replay sends it back with the name intact.
    let id = format!("{topic}-0-1");
    let (code, table, err) = cli(&["dlq", "list", "--brokers", &brokers, "--dlq-topic", &dlq]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains(&id), "{table}");
    let (code, shown, err) = cli(&[
        "dlq",
        "show",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlq,
        &id,
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        shown["envelope"]["source"]["headers"][0]["key_encoding"],
        "base64"
    );
    let (code, out, err) = replay_cli(&brokers, &dlq, &["--to-source"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replayed 1 of 1 scanned"), "{out}");
    let source = read_all(&brokers, &topic);
    assert_eq!(source.len(), 4);
    assert_eq!(source[3].payload(), Some(&b"perm-odd"[..]));
    let replayed = kafka_dlq::RecordHeader::read_all(source[3].headers().unwrap());
    assert_eq!(replayed[0].key, NAME);
    assert_eq!(replayed[0].value, Some(vec![0x80, 0x00]));
}
