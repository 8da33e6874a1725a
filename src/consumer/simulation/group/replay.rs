//! `dlq replay` in the simulated world: some of the dead letters acknowledged so far go back to
//! the group's redrive topic, their headers written by the real
//! `retry_tier::redrive_headers`, as the real replay sends them.

use chrono::DateTime;

use super::world::World;
use crate::record::retry::redrive_topic;
use crate::record::Record;

/// Replays up to 20 of the dead letters `world` has acknowledged and not replayed yet: each
/// goes to its group's redrive topic (`Destination::Group`) as the original record with its
/// calls and stages so far, due now, a little earlier, or (a foreign or broken writer) in 2099
/// — never to be waited for.
/// After the fix: every dead letter not replayed yet goes back, due now.
pub(super) fn replay_all(world: &mut World) {
    let now = world.now();
    let letters = world
        .dead_lettered
        .as_mut()
        .expect("a schedule with replays keeps its dead letters");
    let chosen: Vec<_> = std::mem::take(letters);
    for envelope in chosen {
        redrive(world, envelope, now);
    }
}

pub(super) fn replay(world: &mut World, rng: &mut fastrand::Rng) {
    let now = world.now();
    let letters = world
        .dead_lettered
        .as_mut()
        .expect("a schedule with replays keeps its dead letters");
    let n = rng.usize(0..=letters.len().min(20));
    let chosen: Vec<_> = letters.drain(..n).collect();
    for envelope in chosen {
        let due = match rng.u8(0..4) {
            0 => DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
                .expect("a valid date")
                .to_utc(),
            1 => now - chrono::Duration::seconds(5),
            _ => now,
        };
        redrive(world, envelope, due);
    }
}

/// `envelope`'s record on its group's redrive topic, due at `due`.
fn redrive(world: &mut World, envelope: crate::dlq::Envelope, due: chrono::DateTime<chrono::Utc>) {
    {
        let source = &envelope.source;
        let tp = (redrive_topic(&source.topic, &source.group), 0);
        let original = envelope.headers().expect("headers the simulation wrote");
        let mut redriven = Record::new(&tp.0, tp.1, 0);
        redriven.key = envelope.key_bytes().expect("a key the simulation wrote");
        redriven.payload = envelope
            .payload_bytes()
            .expect("a payload the simulation wrote");
        redriven.headers = crate::retry_tier::redrive_headers(&envelope, original, due);
        world.append(&tp, redriven);
    }
}
