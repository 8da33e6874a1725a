//! A key-ordered worker counts its calls in each call's slot and adds them to the shared
//! metrics every 100 ms (`by_key::FLUSH_EVERY`): the counts of a worker left idle after its
//! last records still show up, within that period, not only when the partition is revoked.

use std::time::Duration;

use super::member::{one_member, produce, Mode};
use super::plan::Outcome;
use super::world::SOURCE;

#[test]
fn an_idle_key_ordered_workers_counts_show_within_the_flush_period() {
    let mode = Mode::ByKey { max_in_flight: 4 };
    one_member(mode, 8, Duration::from_millis(5), async |world, member| {
        produce(&world, 0, &[Outcome::Ok; 5]);
        member.assign(&world, 0, &(SOURCE.to_string(), 0));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let succeeded = member
            .shared
            .out
            .metrics
            .succeeded
            .with_label_values(&[SOURCE]);
        assert_eq!(
            world
                .lock()
                .partitions
                .values()
                .map(|p| p.handled.len())
                .sum::<usize>(),
            5
        );
        assert_eq!(
            succeeded.get(),
            5,
            "the idle worker's five calls are counted within 100 ms of their end"
        );
    });
}
