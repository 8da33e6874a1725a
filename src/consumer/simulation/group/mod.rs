//! A deterministic simulation of the worker: the real worker code (in order, by key,
//! batches with bisection and partial responses, retry partitions waiting for their due
//! time, the outage breaker, the dead-letter window and budget, revocation and re-assignment)
//! runs against simulated partitions ([`world`]) on tokio's paused clock, with no broker.
//! Each member runs the consumer's real poll loop (`consumer::poll_loop`), which starts each
//! assigned partition's worker and, exactly once, rewinds the partitions of an aborted
//! transaction; each worker reads its partition's queue in the world ([`fetcher`]: what
//! librdkafka fetched, dropped when the partition is paused, as in production) through its
//! real intake, copying each record into one it settled before.
//! Rebalances go through the rebalance callback's real decisions (`consumer::poll::rebalance`):
//! the revoked assignment ends, then the member's stored positions (or its transaction) are
//! committed.
//!
//! Each schedule ([`schedule`]) is drawn from one seed: the mode and its settings, the retry
//! tiers, the size of the fetch queues, each partition's share of the buffer (from less than
//! one record, so that every chunk is one record, to more than a schedule holds), the records and what each handler call of each does
//! (finish without awaiting, yield, sleep, outlive a revocation; succeed, fail transiently n
//! times, permanently, panic), and the steps: revocations and assignments to either of two
//! members at any point, outages of the downstream (the breaker opens and closes across
//! rebalances) and of the dead-letter topic (writes acknowledged late, failing, out of order),
//! retry records of another group on the shared retry topics (due far ahead), dead letters
//! replayed to the group's redrive topic (some claiming a due time in 2099), new records,
//! commits, time. After every step it checks:
//! - no stored or committed position passes a record that is neither handled nor
//!   acknowledged by its dead-letter or retry topic (checked at every store and commit);
//! - first calls come in offset order per partition (per key in key order), and no handler
//!   is called for another group's retry record;
//! - a record handled while an earlier record of its key (on its source partition) is not
//!   yet handled comes after that record's call at least ([`key_sequence`]: such records are
//!   noted, not a violation, until parking (#52) keeps keys in order after a failure);
//! - every partition a member owns is fetched unless the breaker, a retry wait (at most its
//!   tier's delay) or its worker's chunk (a trim of a queue a large batch overshot, until the
//!   worker waits for records again) holds it now: a partition paused otherwise is stuck;
//! - a revoked or stopped worker ends within its bound;
//! - once every worker has stopped, the handler time the workers measured
//!   (`kafka_dlq_handler_duration_seconds`) is what the calls that ended took on the simulated
//!   clock: a call timed from the end of the one before (the worker went straight on) had no
//!   wait in between;
//!
//! and at the end, with the outages over and every partition assigned, that every record is
//! settled and committed (none dropped, none stalled).
//!
//! Exactly once ([`schedule::Variant::ExactlyOnce`]) the members' workers settle into the
//! real transaction over a simulated coordinator ([`coordinator`], [`producer`]), committed by the real
//! committer and rewound by the real rewind; commits are refused, producers fenced, members
//! lose partitions without knowing (zombies) and outputs are too large, in every schedule. At
//! every commit: a committed offset implies exactly one committed effect (output, dead letter
//! or retry record) of each record before it, and no record has two. Handler calls that go
//! round without the simulated clock moving are a violation too (a loop no step would end).
//!
//! The same seed gives the same schedule: one thread, tokio's paused clock, `biased`
//! selects in the worker, seeded jitter. It runs on the simulation kernel
//! (`consumer::simulation`): `KAFKA_DLQ_SIMULATION_SCHEDULES=N` runs N schedules (default
//! 2,000) from `KAFKA_DLQ_SIMULATION_FIRST_SEED` (default 0); `KAFKA_DLQ_SIMULATION_SEED=S`
//! replays one.

mod client;
mod coordinator;
mod dead_letter_budget;
mod fetcher;
mod handler;
mod key_order_counts;
mod key_sequence;
mod member;
mod park_log;
mod plan;
mod producer;
mod replay;
mod schedule;
mod world;
mod writes;

use schedule::Variant;

use crate::consumer::simulation::{run_all, seeds};

/// The schedules of `variant`: a `fraction` of the kernel's seeds; `test` replays one.
fn run_variant(test: &str, variant: Variant, fraction: u64) {
    run_all(test, seeds(fraction), |seed| schedule::run(seed, variant));
}

#[test]
fn every_schedule_keeps_the_guarantees() {
    run_variant("every_schedule_keeps_the_guarantees", Variant::Plain, 1);
}

/// The same schedules with another service on the topic, whose retry records (some due in
/// 2099) share the retry topics: no handler is called for them and no partition waits for
/// them. A quarter as many.
#[test]
fn another_groups_retry_records_are_passed_over_in_every_schedule() {
    run_variant(
        "another_groups_retry_records_are_passed_over",
        Variant::OtherGroup,
        4,
    );
}

/// The same schedules with `dlq replay` now and then putting dead letters back on the
/// group's redrive topic (some claiming to be due in 2099): each is handled again as its
/// original record, at once, in order, and settles. A quarter as many.
#[test]
fn replayed_dead_letters_are_handled_from_the_redrive_topic_in_every_schedule() {
    run_variant(
        "replayed_dead_letters_are_handled_from_the_redrive_topic",
        Variant::Redrive,
        4,
    );
}

/// The same schedules with `key_order_after_failure = "park"` (in order, one record at a
/// time), dead letters replayed after the fix is deployed (a redriven record's call
/// succeeds): a record is handled only once every earlier record of its key was, across
/// members, rebalances, retry tiers and redrives; the parked records settle once in the park
/// log, and are released in order once their head is handled; the owners trim the park log
/// below what is still needed; and at the end, every dead letter replayed, every record was
/// applied (none lost in the park log). A quarter as many.
#[test]
fn keys_stay_in_order_after_a_failure_when_parked_in_every_schedule() {
    let test = "keys_stay_in_order_after_a_failure_when_parked";
    let total = std::cell::RefCell::new(schedule::Report::default());
    run_all(test, seeds(4), |seed| {
        let one = schedule::run(seed, Variant::Park)?;
        crate::consumer::simulation::Summary::add(&mut *total.borrow_mut(), &one);
        Ok(one)
    });
    let total = total.into_inner();
    if seeds(4).count() > 20 {
        assert!(
            total.parked > 0 && total.released > 0 && total.trimmed > 0,
            "the schedules parked {} records, released {} and trimmed {} park-log events",
            total.parked,
            total.released,
            total.trimmed
        );
    }
}

/// The same schedules exactly once: every settled record's output, dead letter or retry
/// record goes into its member's transaction with its offset; commits are refused (the
/// transaction aborts and its partitions rewind), producers are fenced (a new one takes
/// over), members lose partitions without knowing (their commits are refused), outputs are
/// too large. In every schedule at least one transaction aborts and one producer is fenced,
/// and a committed offset implies exactly one committed effect of each record before it. A
/// quarter as many.
#[test]
fn every_committed_offset_has_exactly_one_committed_effect_in_every_schedule() {
    run_variant(
        "every_committed_offset_has_exactly_one_committed_effect",
        Variant::ExactlyOnce,
        4,
    );
}

/// A seed replays exactly: the same events, fields and simulated times, run twice. A schedule
/// that took another path the second time (a `select!` picking a branch at random, a wall
/// clock read) could not be replayed from its seed.
#[test]
fn a_seed_replays_the_same_trace() {
    crate::consumer::simulation::quiet();
    let seeds = (0..20).map(|seed| (seed, Variant::Plain));
    let others = [
        (2, Variant::Redrive),
        (3, Variant::OtherGroup),
        (4, Variant::ExactlyOnce),
        (5, Variant::ExactlyOnce),
        (3, Variant::Park),
        (367, Variant::Park),
        (0, Variant::Park),
        (199, Variant::Park),
        (280, Variant::Park),
        (9, Variant::Park),
        (97, Variant::Park),
    ];
    for (seed, variant) in seeds.chain(others) {
        crate::consumer::simulation::trace::assert_replays(
            &format!("seed {seed} ({variant:?})"),
            || schedule::run(seed, variant),
        );
    }
}

/// Schedules that found bugs before they were fixed; each fails on the code before its fix.
#[test]
fn schedules_that_found_bugs_keep_the_guarantees() {
    for (test, variant) in [
        ("every_schedule_keeps_the_guarantees", Variant::Plain),
        (
            "another_groups_retry_records_are_passed_over",
            Variant::OtherGroup,
        ),
        (
            "replayed_dead_letters_are_handled_from_the_redrive_topic",
            Variant::Redrive,
        ),
        (
            "every_committed_offset_has_exactly_one_committed_effect",
            Variant::ExactlyOnce,
        ),
        (
            "keys_stay_in_order_after_a_failure_when_parked",
            Variant::Park,
        ),
    ] {
        let seeds = REGRESSIONS.iter().filter(|r| r.1 == variant).map(|r| r.0);
        run_all(test, seeds, |seed| schedule::run(seed, variant));
    }
}

/// Seeds, their variant, and what each found (on the code before its fix). Checked again in
/// #37 by reverting each fix: 7302864, 3 (both variants), 8, 105 and 7 fail again; 24, 21,
/// 173, 412 and 870 did not, already on the code before #37 (their paths have changed since
/// they were found), and 10023956 stopped finding its bug when the simulation came to run the
/// real hand-off (none of seeds 0–10,000 and 10,020,000–10,040,000 finds it again): they stay
/// as schedules that must keep the guarantees. In #51 a bug was planted in the progress of a
/// transaction's partition (its records also settled in the group ledger, their position
/// stored in the consumer and committed outside the transaction, before it): seeds 0 and 11
/// catch it (a position stored past a record not yet handled; an effect committed twice).
/// Once the simulation ran the real poll loop (#51), two bugs planted there were caught: the
/// hand-off's cached inbox kept across a rebalance (seed 0 of the plain, other-group and
/// exactly-once variants, seed 3 of the redrive one: a first call out of order), and a
/// rewind that did not count as a rebalance (seeds 0 and 11 of exactly once). Both went with
/// the hand-off and the inboxes when each worker came to read its partition's own queue
/// (#51): the loop carries no records since. The inbox's bug of 10023956 (a retry wait's end
/// resuming a partition its full inbox had paused) cannot happen either: a partition's
/// fetches are held only by its retry wait, or by its worker's trim of a queue overshot by a
/// large batch, now; a trim that never resumed the partition, planted, fails seed 2 of every
/// variant (not fetched though nothing holds it). One bug this simulation cannot catch, for
/// what one thread cannot model: the revocation committing before the revoked assignment
/// ends (no worker runs between the two here).
const REGRESSIONS: &[(u64, Variant, &str)] = &[
    (
        0,
        Variant::Park,
        "after a turn of the park log with no record to take, the worker waited for records with a head's dead letter and a parked record in flight, which nothing drove: a stall (#52)",
    ),
    (
        199,
        Variant::Park,
        "a revoked worker went on releasing a key's parked records, past its stop bound (#52)",
    ),
    (
        280,
        Variant::Park,
        "a release settled one parked record per read of the park log and waited for each one's acknowledgements: hundreds of expired records took longer than the schedule, and the partition's positions stalled behind them (#52)",
    ),
    (
        367,
        Variant::Park,
        "a head whose exit was given up at a revocation, and an earlier record of its key that failed again when delivered again, made the new owner take the head for parked already: its offset passed with no dead letter (#52)",
    ),
    (
        3,
        Variant::Park,
        "a release removed a waiting record by park-log offset while its owner's estimate of that offset was still in the table: a newer record of the key was called before it (#52); and, replayed by a_seed_replays_the_same_trace, the parked keys' table iterated in a hasher's random order, so which key was released first changed from run to run (#52, in CI)",
    ),
    (
        2,
        Variant::Park,
        "a release's calls were timed from the end of the call before, across the wait for the park log (#52)",
    ),
    (
        9,
        Variant::Park,
        "a parked record that failed again on its release was taken off the waiting records when its head was written; its member stopped before its dead letter landed, and the next owner had a head with no dead letter and no record to release: lost (#52, the check that every record is applied after the fix)",
    ),
    (
        97,
        Variant::Park,
        "expired records followed their head to the dead-letter topic pipelined: a later one's dead letter landed while an earlier one's was retried, the member stopped, and the next owner wrote the earlier one after it, so the replay applied them out of order (#52, park-log acknowledgements timed from the write)",
    ),
    (
        11,
        Variant::ExactlyOnce,
        "planted (#49): after a commit whose answers were lost, the partitions rewound to the transaction's first records although it had committed: an effect committed twice",
    ),
    (
        2,
        Variant::ExactlyOnce,
        "a record whose output the broker refuses (INVALID_RECORD) forgot it when it came again, and a transaction aborted for another record's refusal brought it back: two records took turns aborting every transaction for ever (#49)",
    ),
    (
        0,
        Variant::ExactlyOnce,
        "planted (#49): a record whose output was too large, and then its dead letter too, went back to its outputs: refused again, for ever",
    ),
    (
        21,
        Variant::ExactlyOnce,
        "a rewind waiting when its partition was revoked and assigned to the same member again moved the new assignment back behind what another member had committed: an effect committed twice (#38)",
    ),
    (
        14,
        Variant::ExactlyOnce,
        "a zombie's refused commits aborted and rewound with no pause, calling the handler again and again (#38)",
    ),
    (
        10023956,
        Variant::Plain,
        "a retry wait's end resumed a partition its full inbox had paused: one more record per wait, past the inboxes' budget (#36.9)",
    ),
    (
        7302864,
        Variant::Redrive,
        "a revoked worker's late dead-letter acknowledgement stored its position into the next assignment of the partition to the same member, moving it back (#36.9)",
    ),
    (
        24,
        Variant::Redrive,
        "a replayed dead letter of a retry record claiming another source topic was routed by that claim (#24)",
    ),
    (
        3,
        Variant::OtherGroup,
        "another group's retry record, due in 2099, was handled from the shared retry topic (#24)",
    ),
    (
        173,
        Variant::Plain,
        "key order: a take dropped in select! when the budget ran out lost records (#22.1)",
    ),
    (
        412,
        Variant::Plain,
        "key order: records lost by a dropped take (#22.1)",
    ),
    (
        870,
        Variant::Plain,
        "key order: records lost by a dropped take (#22.1)",
    ),
    (
        8,
        Variant::Plain,
        "a partition revoked while the breaker was open came back paused (#22.2)",
    ),
    (
        21,
        Variant::Plain,
        "a partition revoked while the breaker was open stalled for good (#22.2)",
    ),
    (
        105,
        Variant::Plain,
        "a partition revoked while the breaker was open stalled for good (#22.2)",
    ),
    (
        7,
        Variant::Plain,
        "a retry record due far ahead held its partition past its tier's delay (#22.5)",
    ),
    (
        3,
        Variant::Plain,
        "a retry record claiming another source topic was routed to it (#22.7)",
    ),
];
