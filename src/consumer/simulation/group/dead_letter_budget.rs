//! The dead-letter budget (bytes of dead letters in flight, for the whole consumer) under the
//! interleavings that broke it: a worker revoked while it waits for budget that other
//! partitions' stuck writes hold, and a partition whose acknowledged writes kept their budget
//! while it sat in a long backoff.

use super::member::{one_member, produce, Mode};
use super::plan::Outcome;
use super::world::SOURCE;

#[test]
fn a_worker_revoked_while_it_waits_for_the_dead_letter_budget_ends() {
    use std::time::Duration;
    one_member(
        Mode::InOrder,
        1,
        Duration::from_millis(5),
        async |world, member| {
            world.lock().dlq_down = true;
            produce(&world, 0, &[Outcome::Permanent]);
            produce(&world, 1, &[Outcome::Permanent]);
            let (t0, t1) = ((SOURCE.to_string(), 0), (SOURCE.to_string(), 1));
            member.assign(&world, 0, &t0);
            member.assign(&world, 0, &t1);
            // One dead letter holds the whole budget while the dead-letter topic is down; the
            // other partition's waits for it.
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(member.shared.out.budget.available_permits(), 0);
            let started = member.started.lock().expect("started lock").clone();
            let (_, w1) = started
                .into_iter()
                .find(|(tp, _)| *tp == t1)
                .expect("the poll loop started t-1's worker");
            member.revoke(&world, 0, &t1);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                w1.is_finished(),
                "the revoked worker ended though the budget is still spent"
            );
        },
    );
}

#[test]
fn a_partition_in_backoff_gives_its_acknowledged_dead_letters_budget_back() {
    use std::time::Duration;
    one_member(
        Mode::InOrder,
        1,
        Duration::from_secs(60),
        async |world, member| {
            // t-0: a dead letter (acknowledged within 300 ms), then a record in a minute's backoff.
            produce(&world, 0, &[Outcome::Permanent, Outcome::Transient(2)]);
            let t0 = (SOURCE.to_string(), 0);
            member.assign(&world, 0, &t0);
            tokio::time::sleep(Duration::from_millis(10)).await;
            // t-1's dead letter needs the budget t-0's acknowledged write held.
            produce(&world, 1, &[Outcome::Permanent]);
            let t1 = (SOURCE.to_string(), 1);
            member.assign(&world, 0, &t1);
            tokio::time::sleep(Duration::from_secs(2)).await;
            let w = world.lock();
            assert!(
                w.partitions[&t0].exited.contains(&0),
                "t-0's dead letter was acknowledged"
            );
            assert!(
                w.partitions[&t1].exited.contains(&0),
                "t-1's dead letter was written meanwhile"
            );
            assert_eq!(
                w.members[0].stored.get(&t0),
                Some(&1),
                "and t-0's position stored past its own"
            );
        },
    );
}
