//! A parcel-tracking consumer built on the kafka-dlq library.
//!
//! ```sh
//! cargo run --example deliveries -- localhost:9092 parcel-events
//! ```
//!
//! Malformed events are dead-lettered at once; a failing store is retried (5 times, 200 ms
//! doubling) and then dead-lettered to `parcel-events-dlt`. Ctrl-C drains, commits and leaves.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kafka_dlq::{Consumer, ConsumerConfig, Handler, HandlerError, Record};

#[derive(serde::Deserialize)]
struct Event {
    parcel_id: String,
    status: String,
}

/// Stores the latest status per parcel; idempotent, since a record may come twice.
#[derive(Default)]
struct Deliveries {
    latest: Mutex<HashMap<String, String>>,
}

impl Handler for Deliveries {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let event: Event = record.json()?; // malformed: permanent
        if event.status.is_empty() {
            return Err(HandlerError::permanent("status is empty"));
        }
        if event.status == "store_down" {
            return Err(HandlerError::transient("store unavailable")); // retried with backoff
        }
        println!("{} {} -> {}", record.id, event.parcel_id, event.status);
        self.latest
            .lock()
            .unwrap()
            .insert(event.parcel_id, event.status);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().init();
    let mut args = std::env::args().skip(1);
    let brokers = args.next().unwrap_or_else(|| "localhost:9092".into());
    let topic = args.next().unwrap_or_else(|| "parcel-events".into());
    let config = ConsumerConfig {
        max_retries: 5,
        backoff_initial: Duration::from_millis(200),
        ..ConsumerConfig::new(&brokers, "deliveries-example", [topic])
    };
    Consumer::new(config, Deliveries::default())?
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
