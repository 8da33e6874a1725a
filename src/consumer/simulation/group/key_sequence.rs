//! The order of a key's records as the handler applies them, across members, retries and
//! redrives: a record of a key is handled (its call returns success) only once every earlier
//! record of its key on the partition has been handled. This is the promise a Kafka key makes
//! and a dead-letter topic breaks: when `order-42 created` is dead-lettered, `order-42 paid`
//! is handled against a state that never saw the creation.
//!
//! Today's consumer does not keep it, and this file shows where: with a record dead-lettered
//! or waiting in a retry tier, the records of its key behind it are handled. The world
//! records each such handling (`World::key_sequence_breaks`); it is not one of the guarantees
//! a schedule must keep, until parking a key behind its failed record (issue #52) makes it
//! one. What every schedule must keep already: the earlier record was called first (its call
//! failed, or it is waiting for its next).

use crate::record::Record;

/// The first record of a source partition's `log` before `offset`, with the key of the record
/// at `offset`, that is not `settled` for its key's order (handled, from wherever it was
/// delivered, or given up by `park_max_age`): the record whose key order handling `offset`
/// now would break.
pub(super) fn earlier_unapplied(
    log: &[Record],
    settled: impl Fn(i64) -> bool,
    offset: i64,
) -> Option<i64> {
    let key = &log.get(offset as usize)?.key;
    log[..offset as usize]
        .iter()
        .zip(0..)
        .find(|(record, earlier)| &record.key == key && !settled(*earlier))
        .map(|(_, earlier)| earlier)
}

#[cfg(test)]
mod tests {
    use super::super::schedule::{run, Variant};
    use crate::consumer::simulation::seeds;

    /// Without parking, the schedules' dead letters and retry records break their keys'
    /// order: a later record of the key is handled while the earlier one waits in a retry
    /// tier or sits in the dead-letter topic (every such earlier record was called first:
    /// checked in every schedule).
    #[test]
    fn without_parking_a_failed_record_lets_the_later_records_of_its_key_through() {
        crate::consumer::simulation::quiet();
        let (mut broken, mut schedules) = (0, 0);
        for variant in [Variant::Plain, Variant::Redrive] {
            for seed in seeds(40) {
                let report = run(seed, variant).unwrap_or_else(|violation| {
                    panic!("seed {seed} ({variant:?}) broke a guarantee: {violation}")
                });
                schedules += 1;
                if let Some(first) = report.key_sequence_break {
                    if broken == 0 {
                        println!("seed {seed} ({variant:?}): {first}");
                    }
                    broken += 1;
                }
            }
        }
        println!(
            "{broken} of {schedules} schedules handled a record past an earlier one of its key"
        );
        assert!(
            broken > 0,
            "no schedule of {schedules} handled a record of a key past a failed earlier one"
        );
    }
}
