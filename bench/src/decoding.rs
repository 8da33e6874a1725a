//! What decoding Schema Registry payloads costs (`--decode-records N`): the same orders
//! written in Avro and in Protobuf (Confluent's prefix framing, a schema registered in a
//! registry on loopback), each topic consumed by the bare rdkafka loop, by kafka-dlq handing
//! the no-op handler the raw bytes, and by kafka-dlq with the decoding layer
//! (`schema::Decoding`) handing it the value as JSON — one member each, in processes of their
//! own, `--scale-runs` times (the table gives the median and the spread).
//!
//! The registry is the tests' own (`tests/common/registry_server.rs`, which follows
//! Confluent's REST API and is checked by confluent-kafka's clients in the tests); the
//! consumers fetch each schema from it once and keep it compiled, so what the table shows is
//! the per-record decoding.

use anyhow::bail;
use kafka_dlq::schema::compiled::{self, Compiled};
use kafka_dlq::schema::{framing, SchemaType};
use serde_json::{json, Value};

use crate::registry_server::TestRegistry;
use crate::scale::{group_run, stamp, Measured};
use crate::stats::{median, spread};
use crate::topic::{self, Shape};

/// An order in Avro: a nested record, an enum, an array of records, a union.
const AVRO: &str = r#"{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "id", "type": "long"},
  {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": null}]}},
  {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
  {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
    {"name": "sku", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "price", "type": "double"}]}}},
  {"name": "note", "type": "string"}]}"#;

/// The same order in Protobuf.
const PROTOBUF: &str = r#"syntax = "proto3";
package bench;
message Order {
  int64 id = 1;
  Customer customer = 2;
  Status status = 3;
  repeated Line lines = 4;
  string note = 5;
}
message Customer { string name = 1; string email = 2; }
enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
message Line { string sku = 1; int32 quantity = 2; double price = 3; }
"#;

/// Order `i` as JSON: about 200 bytes once encoded.
fn order(i: u64) -> Value {
    json!({
        "id": i,
        "customer": {"name": format!("customer-{}", i % 1000), "email": format!("c{}@example.com", i % 1000)},
        "status": "PAID",
        "lines": [
            {"sku": format!("sku-{}", i % 97), "quantity": 1 + (i % 5) as i32, "price": 9.5},
            {"sku": format!("sku-{}", i % 89), "quantity": 2, "price": 120.25},
            {"sku": format!("sku-{}", i % 83), "quantity": 1, "price": 0.99},
        ],
        "note": "leave at the door, ring twice; fragile: glass inside, this side up",
    })
}

/// Orders framed for the registry: schema `id` in front of each body.
struct Orders {
    compiled: Compiled,
    id: u32,
    indexes: Option<&'static [usize]>,
    partitions: i32,
}

impl Shape for Orders {
    fn record(&self, i: u64) -> (i32, String, Vec<u8>) {
        let body = compiled::encode(&self.compiled, &order(i), self.indexes)
            .expect("the bench's orders fit their schema");
        let mut value = framing::prefix(self.id, self.indexes);
        value.extend(body);
        ((i % self.partitions as u64) as i32, i.to_string(), value)
    }
}

/// The consumers of each topic, in the order they run.
const VARIANTS: [(&str, &str); 3] = [
    ("baseline", "bare rdkafka loop (bytes)"),
    ("noop", "kafka-dlq, no-op handler (bytes)"),
    ("decoded", "kafka-dlq, decoded to JSON, no-op handler"),
];

/// The decoding table; see the module docs.
pub async fn measure(
    brokers: &str,
    records: u64,
    partitions: i32,
    runs: usize,
) -> anyhow::Result<()> {
    let registry = TestRegistry::start().await;
    let url = registry.url();
    let stamp = stamp();
    let mut topics = Vec::new();
    let mut made = Vec::new();
    for (format, schema_type, text, indexes) in [
        ("avro", SchemaType::Avro, AVRO, None),
        (
            "protobuf",
            SchemaType::Protobuf,
            PROTOBUF,
            Some(&[0usize][..]),
        ),
    ] {
        let topic = format!("bench-decode-{format}-{stamp}");
        let id = registry
            .register(&format!("{topic}-value"), schema_type.as_str(), text)
            .map_err(anyhow::Error::msg)?;
        let compiled = compiled::compile(schema_type, text, &[]).map_err(anyhow::Error::msg)?;
        topic::create(brokers, &[(&topic, partitions)]).await?;
        let shape = Orders {
            compiled,
            id,
            indexes,
            partitions,
        };
        let size = shape.record(0).2.len();
        topic::produce(brokers, &topic, records, &shape).await?;
        eprintln!("{format}: {records} orders of {size} B in {topic}");
        made.push(topic.clone());
        topics.push((format, size, topic));
    }
    let mut rows: Vec<((&str, &str), Vec<Measured>)> = Vec::new();
    for run in 0..runs {
        for (format, _, topic) in &topics {
            for (variant, _) in VARIANTS {
                let group = format!("{topic}-{variant}-{run}");
                if variant != "baseline" {
                    made.push(kafka_dlq::record::retry::redrive_topic(topic, &group));
                }
                let measured = group_run(brokers, topic, &group, variant, 1, Some(&url)).await?;
                if measured.records < records {
                    bail!(
                        "{format} {variant} saw {} of {records} records",
                        measured.records
                    );
                }
                eprintln!(
                    "run {run}: {format} {variant}: {:.0} records/s, {:.2} µs CPU/record",
                    measured.rate(),
                    measured.cpu_us()
                );
                match rows.iter_mut().find(|(k, _)| *k == (*format, variant)) {
                    Some((_, all)) => all.push(measured),
                    None => rows.push(((format, variant), vec![measured])),
                }
            }
        }
    }
    topic::delete(brokers, &made).await?;
    let of = |format: &str, variant: &str| {
        rows.iter()
            .find(|(k, _)| *k == (format, variant))
            .map(|(_, all)| all.as_slice())
            .unwrap_or_default()
    };
    println!("\nDecoding: {records} orders per format over {partitions} partitions, one member; {runs} run(s), median (min–max); the ratio of each run to the row above it in the same run\n");
    println!("| format | consumer | records/s | CPU µs/record | ratio |");
    println!("|---|---|---|---|---|");
    for (format, size, _) in &topics {
        let mut above: Option<&[Measured]> = None;
        for (variant, name) in VARIANTS {
            let all = of(format, variant);
            let rates: Vec<f64> = all.iter().map(Measured::rate).collect();
            let cpu: Vec<f64> = all.iter().map(Measured::cpu_us).collect();
            let ratio = match above {
                Some(base) => spread(
                    &all.iter()
                        .zip(base)
                        .map(|(a, b)| a.rate() / b.rate())
                        .collect::<Vec<_>>(),
                    2,
                ),
                None => "-".into(),
            };
            println!(
                "| {format} ({size} B) | {name} | {} | {} | {ratio} |",
                spread(&rates, 0),
                spread(&cpu, 2)
            );
            println!(
                "RESULT decode-{format}-{variant} records_per_s={:.0} cpu_us={:.2}",
                median(&rates),
                median(&cpu)
            );
            above = Some(all);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_fit_both_schemas_and_decode_back() {
        for (schema_type, text, indexes) in [
            (SchemaType::Avro, AVRO, None),
            (SchemaType::Protobuf, PROTOBUF, Some(&[0usize][..])),
        ] {
            let shape = Orders {
                compiled: compiled::compile(schema_type, text, &[]).unwrap(),
                id: 7,
                indexes,
                partitions: 12,
            };
            let (partition, key, value) = shape.record(13);
            assert_eq!((partition, key.as_str()), (1, "13"));
            let framed = framing::locate(&value, None).unwrap();
            let decoded = compiled::decode(&shape.compiled, framed.body, None).unwrap();
            assert_eq!(
                decoded["customer"]["name"], "customer-13",
                "{schema_type:?}"
            );
            assert!((150..260).contains(&value.len()), "{} B", value.len());
        }
    }
}
