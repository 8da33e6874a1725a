//! Parcel events into SQLite, in batches of up to 100, idempotently.
//!
//! ```sh
//! cargo run --example sqlite_sink -- localhost:9092 parcel-events deliveries.db
//! ```
//!
//! A bad row makes its batch fail; kafka-dlq bisects the batch, stores every good row once and
//! dead-letters the bad one to `parcel-events-dlt`. A record delivered again after a crash is
//! recognised by its id and not stored twice.

mod sink;

use kafka_dlq::{Consumer, ConsumerConfig};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().init();
    let mut args = std::env::args().skip(1);
    let brokers = args.next().unwrap_or_else(|| "localhost:9092".into());
    let topic = args.next().unwrap_or_else(|| "parcel-events".into());
    let path = args.next().unwrap_or_else(|| "deliveries.db".into());
    let sink = sink::SqliteSink::open(path.as_ref())?;
    let config = ConsumerConfig {
        batch_size: 100,
        batch_linger: Duration::from_millis(200),
        id_header: Some("event-id".into()),
        ..ConsumerConfig::new(&brokers, "sqlite-sink-example", [topic])
    };
    Consumer::new(config, sink.clone())?
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    println!(
        "{} rows, {} redeliveries recognised",
        sink.rows(),
        sink.duplicates()
    );
    Ok(())
}
