//! `dlq replay` in the simulated world: some of the dead letters acknowledged so far go back to
//! the group's redrive topic, as the real replay sends them.

use chrono::DateTime;

use super::world::{World, GROUP, SOURCE};
use crate::record::retry::{redrive_topic, RetryDelivery};
use crate::record::Record;

/// Replays up to 20 of the dead letters `world` has acknowledged and not replayed yet: each
/// goes to the group's redrive topic as the original record with its calls and stages so far,
/// due now, a little earlier, or (a foreign or broken writer) in 2099 — never to be waited for.
pub(super) fn replay(world: &mut World, rng: &mut fastrand::Rng) {
    let tp = (redrive_topic(SOURCE, GROUP), 0);
    let now = world.now();
    let letters = world
        .dead_lettered
        .as_mut()
        .expect("a schedule with replays keeps its dead letters");
    let n = rng.usize(0..=letters.len().min(20));
    let chosen: Vec<Record> = letters.drain(..n).collect();
    for original in chosen {
        let due = match rng.u8(0..4) {
            0 => DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
                .expect("a valid date")
                .to_utc(),
            1 => now - chrono::Duration::seconds(5),
            _ => now,
        };
        let before = original.retry.as_deref();
        let retry = RetryDelivery {
            tier: None,
            topic: tp.0.clone(),
            partition: 0,
            offset: 0,
            due,
            attempts: before.map_or(0, |r| r.attempts),
            history: before.map_or_else(Vec::new, |r| r.history.clone()),
            group: Some(GROUP.to_string()),
        };
        let redriven = Record {
            retry: Some(Box::new(retry)),
            ..original
        };
        world.append(&tp, redriven);
    }
}
