//! A deterministic simulation of share-group members: the real member loop and record
//! settling (`member.rs`, `delivery.rs`: calls, retries, lock renewals, releases, dead letters,
//! the breaker, shutdown) of one to three members run against a simulated share partition
//! ([`broker`]) on tokio's paused clock, with no broker.
//!
//! Each schedule is drawn from one seed ([`schedule`]): the records and what each call of
//! each does (finish without awaiting, yield, sleep, outlast the lock; succeed, fail
//! transiently n times or always, permanently, panic), how long each dead letter takes to be
//! acknowledged (up to longer than a lock), the group's delivery limit (or one the members
//! cannot read), `share_dlq`, the breaker, each member's fetch size and concurrency (often a
//! batch of up to 16 handled one to four at a time), and the steps: members killed mid-call or
//! mid-batch, stopped, started, outages of the downstream. It checks as it goes:
//! - a record is never in two members' handlers at once, and no lock expires while its
//!   member lives (locks are renewed, through slow calls, slow dead letters and waits for a
//!   turn behind them alike, and an acknowledgement kept for the next fetch is sent in time);
//! - a record handled in a delivery is never RELEASEd in it (not at shutdown either);
//! - no record is ACCEPTed before it was handled or its dead letter acknowledged;
//! - a member never fetches while it holds unacknowledged records, and never RELEASEs a
//!   record while its breaker is open (an outage is not the record's fault);
//! - a record whose retries are used up is released until its last delivery, and dead-lettered
//!   by us only on that one;
//! - a stopped member holds nothing once stopped;
//!
//! and at the end, with the outage over and a member running, that every record was
//! accepted or archived — archived only by the broker's dead-letter queue (`share_dlq =
//! "broker"`), or on a last delivery whose member was killed or whose call the shutdown
//! deadline cut: none lost, none stalled.
//!
//! It runs on the simulation kernel (`consumer::simulation`: seeds, runner, replay line): a
//! quarter of `KAFKA_DLQ_SIMULATION_SCHEDULES` (default 2,000, so 500) share schedules;
//! `KAFKA_DLQ_SIMULATION_SEED=S` replays one.

mod broker;
mod handler;
mod schedule;

use crate::consumer::simulation::{quiet, run_all, seeds};

#[test]
fn share_members_lose_no_record_across_kills_stops_outages_and_slow_calls() {
    run_all("share_members_lose_no_record", seeds(4), schedule::run);
}

/// A seed replays exactly: the same events, fields and simulated times, run twice.
#[test]
fn a_share_seed_replays_the_same_trace() {
    quiet();
    for seed in 0..20 {
        crate::consumer::simulation::trace::assert_replays(&format!("share seed {seed}"), || {
            schedule::run(seed)
        });
    }
}

#[test]
fn share_regressions_still_hold() {
    run_all(
        "share_regressions_still_hold",
        REGRESSIONS.iter().map(|(seed, _)| *seed),
        schedule::run,
    );
}

/// Seeds, and what each finds on the code before its fix. (First found as seeds 7 and 166;
/// renumbered to 25 and 25,065 when the simulated fetches came to hand over a few records more
/// than asked, as the broker's batch-aligned acquisition does, and to 38 and 63 when the share
/// members' calls moved onto the settle step shared with group workers, whose breaker hears
/// answered calls in bulk.)
const REGRESSIONS: &[(u64, &str)] = &[
    (
        38,
        "a member stopped while the dead letter of a record on its last delivery was being written: the write was cancelled and the record released, so the broker archived it without a dead letter",
    ),
    (
        6,
        "planted when batches were split from concurrency: the ACCEPTs kept for the next fetch sent as RELEASEs when the member stops, the records handled twice",
    ),
    (
        63,
        "a member stopped during a record's backoff on its last delivery and released it: the broker archived it without a dead letter (it is dead-lettered now)",
    ),
];
