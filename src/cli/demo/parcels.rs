//! The demo's parcel-tracking service: its delivery events and the handler that stores
//! them, with the failures the demo shows (malformed JSON, a flaky carrier, a dead carrier,
//! an unknown status).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_dlq::{Handler, HandlerError, Record};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Event {
    event_id: String,
    parcel_id: String,
    status: String,
    carrier: String,
}

const KNOWN: [&str; 4] = ["picked_up", "in_transit", "out_for_delivery", "delivered"];

/// The tracking service. Version 1 has two bugs the fix removes: it cannot reach the
/// `ghost-post` carrier, and it rejects the new status `held_at_customs`. "Deploying" v2 sets
/// `fixed`.
pub(super) struct Tracking {
    pub(super) fixed: Arc<AtomicBool>,
    pub(super) store: Arc<Mutex<HashMap<String, String>>>,
    pub(super) flaky_calls: Arc<Mutex<HashMap<String, u32>>>,
}

impl Handler for Tracking {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let event: Event = record.json()?;
        let fixed = self.fixed.load(Ordering::SeqCst);
        if !fixed && !KNOWN.contains(&event.status.as_str()) {
            return Err(HandlerError::permanent(format!(
                "unknown status `{}` for parcel {}",
                event.status, event.parcel_id
            )));
        }
        match event.carrier.as_str() {
            "flaky-express" => {
                let mut calls = self.flaky_calls.lock().unwrap();
                let n = calls.entry(event.event_id.clone()).or_default();
                *n += 1;
                if *n <= 2 {
                    return Err(HandlerError::transient(format!(
                        "carrier API flaky-express answered 503 (call {n})"
                    )));
                }
            }
            "ghost-post" if !fixed => {
                return Err(HandlerError::transient(
                    "carrier API ghost-post timed out after 2 s",
                ));
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(1)).await; // the database write
        self.store
            .lock()
            .unwrap()
            .insert(event.event_id, event.status);
        Ok(())
    }
}

pub(super) fn events(n: u32) -> Vec<(String, String, Vec<u8>)> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..n)
        .map(|i| {
            let id = format!("evt-{i:05}");
            let parcel = format!("P-{}", 1000 + rng.u32(0..60));
            let value = match i % 50 {
                7 | 31 => format!(r#"{{"event_id":"{id}","parcel_id":"{parcel}","status":"deliv"#),
                13 | 29 | 44 => format!(
                    r#"{{"event_id":"{id}","parcel_id":"{parcel}","status":"in_transit","carrier":"flaky-express"}}"#
                ),
                21 => format!(
                    r#"{{"event_id":"{id}","parcel_id":"{parcel}","status":"out_for_delivery","carrier":"ghost-post"}}"#
                ),
                38 => format!(
                    r#"{{"event_id":"{id}","parcel_id":"{parcel}","status":"held_at_customs","carrier":"dhl"}}"#
                ),
                _ => format!(
                    r#"{{"event_id":"{id}","parcel_id":"{parcel}","status":"{}","carrier":"{}"}}"#,
                    KNOWN[rng.usize(0..4)],
                    ["dhl", "ups", "postnl"][rng.usize(0..3)]
                ),
            };
            (id, parcel, value.into_bytes())
        })
        .collect()
}
