//! A deterministic simulation of the worker: the real worker code (in order, by key,
//! batches with bisection and partial responses, retry partitions waiting for their due
//! time, the outage breaker, the dead-letter window and budget, revocation and re-assignment)
//! runs against simulated partitions ([`world`]) on tokio's paused clock, with no broker.
//! Each member's poll loop ([`poll_loop`]) moves what its librdkafka queues fetched into the
//! partitions' real inboxes (`consumer::inbox`), which pause and resume the partitions as in
//! production, copying each source record into a settled record the workers gave back, as
//! production does; the workers take their records from there.
//!
//! Each schedule ([`schedule`]) is drawn from one seed: the mode and its settings, the retry
//! tiers, the size of the fetch queues, the inboxes' budget (from less than one record, so
//! that every record pauses its partition, to more than a schedule holds), the records and what each handler call of each does
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
//! - every partition a member owns is fetched unless the breaker, a retry wait (at most its
//!   tier's delay) or records in its inbox hold it now: a partition paused with an empty
//!   inbox is stuck;
//! - a member's inboxes never hold more than their budget and one record each (checked at
//!   every record the poll loop delivers);
//! - a revoked or stopped worker ends within its bound;
//! - once every worker has stopped, the handler time the workers measured
//!   (`kafka_dlq_handler_duration_seconds`) is what the calls that ended took on the simulated
//!   clock: a call timed from the end of the one before (the worker went straight on) had no
//!   wait in between;
//!
//! and at the end, with the outages over and every partition assigned, that every record is
//! settled and committed (none dropped, none stalled).
//!
//! The same seed gives the same schedule: one thread, tokio's paused clock, `biased`
//! selects in the worker, seeded jitter. `KAFKA_DLQ_SIMULATION_SCHEDULES=N` runs N schedules
//! (default 2,000) from `KAFKA_DLQ_SIMULATION_FIRST_SEED` (default 0);
//! `KAFKA_DLQ_SIMULATION_SEED=S` replays one.

mod client;
mod dead_letter_budget;
mod handler;
mod member;
mod plan;
mod poll_loop;
mod replay;
mod schedule;
mod world;
mod writes;

use schedule::Variant;

/// Keeps the simulated handlers' panics out of the test output.
pub(super) fn quiet_simulated_panics() {
    crate::consumer::simulated_panics::quiet();
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `seeds`, stopping at the first schedule that breaks a guarantee.
fn run_all(seeds: impl Iterator<Item = (u64, Variant)>) {
    quiet_simulated_panics();
    let (mut schedules, mut records, mut dead_letters) = (0, 0, 0);
    // The worker's log lines are not what is checked, and a global subscriber another test
    // installed would make each schedule many times slower.
    let _quiet = if std::env::var("KAFKA_DLQ_SIMULATION_TRACE").is_ok() {
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_test_writer()
                .finish(),
        )
    } else {
        tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default())
    };
    for (seed, variant) in seeds {
        match schedule::run(seed, variant) {
            Ok(report) => {
                schedules += 1;
                records += report.records;
                dead_letters += report.dead_letters;
                assert!(
                    report.handled > 0 || report.records == 0,
                    "seed {seed} handled nothing"
                );
            }
            Err(violation) => panic!("{violation}"),
        }
    }
    println!("{schedules} schedules, {records} records, {dead_letters} dead letters: every guarantee held");
}

/// The schedules of `variant`: the one of `KAFKA_DLQ_SIMULATION_SEED`, or
/// `KAFKA_DLQ_SIMULATION_SCHEDULES` (default 2,000) divided by `fraction`, from
/// `KAFKA_DLQ_SIMULATION_FIRST_SEED` (default 0).
fn run_variant(variant: Variant, fraction: u64) {
    if let Some(seed) = env("KAFKA_DLQ_SIMULATION_SEED") {
        return run_all(std::iter::once((seed, variant)));
    }
    let first = env("KAFKA_DLQ_SIMULATION_FIRST_SEED").unwrap_or(0);
    let n = env("KAFKA_DLQ_SIMULATION_SCHEDULES").unwrap_or(2_000) / fraction;
    run_all((first..first + n).map(|seed| (seed, variant)));
}

#[test]
fn every_schedule_keeps_the_guarantees() {
    run_variant(Variant::Plain, 1);
}

/// The same schedules with another service on the topic, whose retry records (some due in
/// 2099) share the retry topics: no handler is called for them and no partition waits for
/// them. A quarter as many.
#[test]
fn another_groups_retry_records_are_passed_over_in_every_schedule() {
    run_variant(Variant::OtherGroup, 4);
}

/// The same schedules with `dlq replay` now and then putting dead letters back on the
/// group's redrive topic (some claiming to be due in 2099): each is handled again as its
/// original record, at once, in order, and settles. A quarter as many.
#[test]
fn replayed_dead_letters_are_handled_from_the_redrive_topic_in_every_schedule() {
    run_variant(Variant::Redrive, 4);
}

/// A seed replays exactly: the same events, fields and simulated times, run twice. A schedule
/// that took another path the second time (a `select!` picking a branch at random, a wall
/// clock read) could not be replayed from its seed.
#[test]
fn a_seed_replays_the_same_trace() {
    quiet_simulated_panics();
    let seeds = (0..20).map(|seed| (seed, Variant::Plain));
    for (seed, variant) in seeds.chain([(2, Variant::Redrive), (3, Variant::OtherGroup)]) {
        crate::consumer::simulated_trace::assert_replays(
            &format!("seed {seed} ({variant:?})"),
            || schedule::run(seed, variant),
        );
    }
}

/// Schedules that found bugs before they were fixed; each fails on the code before its fix.
#[test]
fn schedules_that_found_bugs_keep_the_guarantees() {
    run_all(
        REGRESSIONS
            .iter()
            .map(|(seed, variant, _)| (*seed, *variant)),
    );
}

/// Seeds, their variant, and what each found (on the code before its fix).
const REGRESSIONS: &[(u64, Variant, &str)] = &[
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
