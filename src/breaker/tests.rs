//! Tests of the outage breaker: its window, probes and states, on tokio's paused clock.

use super::*;

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        window: Duration::from_secs(10),
        min_calls: 4,
        failure_ratio: 0.5,
        probe_initial: Duration::from_secs(1),
        probe_max: Duration::from_secs(4),
    }
}

fn open(b: &Breaker) {
    for i in 0..4 {
        b.record(Permit::Normal, CallOutcome::Transient, i);
    }
    assert!(b.is_open());
}

#[tokio::test(start_paused = true)]
async fn opens_when_transient_failures_reach_the_ratio() {
    let b = Breaker::new(Some(policy()));
    let t = CallOutcome::Transient;
    let a = CallOutcome::Answered;
    assert_eq!(b.record(Permit::Normal, t, 1), None, "too few calls");
    assert_eq!(b.record(Permit::Normal, a, 2), None);
    assert_eq!(b.record(Permit::Normal, a, 3), None);
    assert_eq!(
        b.record(Permit::Normal, t, 4),
        Some(BreakerState::Open),
        "2 of 4 transient, from two records"
    );
    assert!(b.is_open());
}

#[tokio::test(start_paused = true)]
async fn opens_below_min_calls_when_nothing_gets_through() {
    // One partition in backoff makes a few calls a window, far below min_calls.
    let b = Breaker::new(Some(BreakerPolicy {
        min_calls: 20,
        ..policy()
    }));
    let t = CallOutcome::Transient;
    assert_eq!(b.record(Permit::Normal, t, 1), None);
    assert_eq!(b.record(Permit::Normal, t, 1), None, "one record only");
    assert_eq!(
        b.record(Permit::Normal, t, 2),
        Some(BreakerState::Open),
        "3 calls, none answered, two records"
    );
    let b = Breaker::new(Some(BreakerPolicy {
        min_calls: 20,
        ..policy()
    }));
    b.record(Permit::Normal, CallOutcome::Answered, 9);
    for r in [1, 2, 3] {
        assert_eq!(
            b.record(Permit::Normal, t, r),
            None,
            "an answered call in the window: min_calls applies"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_probe_lets_the_next_caller_probe() {
    let b = std::sync::Arc::new(Breaker::new(Some(policy())));
    open(&b);
    assert_eq!(b.permit().await, Permit::Probe);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.permit().await })
    };
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(!waiter.is_finished(), "the probe is out");
    b.abandon_probe();
    assert_eq!(waiter.await.unwrap(), Permit::Probe, "probed again at once");
}

#[tokio::test(start_paused = true)]
async fn one_record_failing_again_and_again_does_not_open_it() {
    let b = Breaker::new(Some(policy()));
    for _ in 0..10 {
        assert_eq!(b.record(Permit::Normal, CallOutcome::Transient, 7), None);
    }
    assert_eq!(
        b.record(Permit::Normal, CallOutcome::Transient, 8),
        Some(BreakerState::Open),
        "a second record failing too: an outage"
    );
}

#[tokio::test(start_paused = true)]
async fn answered_calls_counted_in_bulk_weigh_like_single_ones() {
    let b = Breaker::new(Some(policy()));
    b.record(Permit::Normal, CallOutcome::Transient, 1);
    tokio::time::advance(SLOT).await;
    b.record_answered(3, Instant::now());
    assert_eq!(
        b.record(Permit::Normal, CallOutcome::Transient, 2),
        None,
        "2 of 5 transient: below the ratio"
    );
    tokio::time::advance(Duration::from_secs(11)).await;
    b.record(Permit::Normal, CallOutcome::Answered, 10);
    b.record(Permit::Normal, CallOutcome::Answered, 11);
    b.record(Permit::Normal, CallOutcome::Transient, 3);
    assert_eq!(
        b.record(Permit::Normal, CallOutcome::Transient, 4),
        Some(BreakerState::Open),
        "2 of 4: the bulk count left the window with its slot"
    );
}

#[tokio::test(start_paused = true)]
async fn old_outcomes_leave_the_window() {
    let b = Breaker::new(Some(policy()));
    for i in 0..3 {
        b.record(Permit::Normal, CallOutcome::Transient, i);
    }
    tokio::time::advance(Duration::from_secs(11)).await;
    for i in 0..3 {
        assert_eq!(b.record(Permit::Normal, CallOutcome::Answered, i), None);
    }
    assert_eq!(
        b.record(Permit::Normal, CallOutcome::Transient, 9),
        None,
        "1 of 4"
    );
}

#[tokio::test(start_paused = true)]
async fn probes_at_growing_intervals_and_closes_on_an_answer() {
    let b = Breaker::new(Some(policy()));
    open(&b);
    let start = Instant::now();
    let mut expected = Duration::ZERO;
    for wait in [1, 2, 4, 4] {
        assert_eq!(b.permit().await, Permit::Probe);
        expected += Duration::from_secs(wait);
        assert_eq!(
            start.elapsed(),
            expected,
            "1 s, then 2 s, then 4 s (the cap)"
        );
        assert_eq!(b.record(Permit::Probe, CallOutcome::Transient, 0), None);
    }
    assert_eq!(b.permit().await, Permit::Probe);
    assert_eq!(
        b.record(Permit::Probe, CallOutcome::Answered, 0),
        Some(BreakerState::Closed)
    );
    assert_eq!(b.permit().await, Permit::Normal);
}

#[tokio::test(start_paused = true)]
async fn only_one_probe_at_a_time_and_waiters_go_on_after_closing() {
    let b = std::sync::Arc::new(Breaker::new(Some(policy())));
    open(&b);
    assert_eq!(b.permit().await, Permit::Probe);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.permit().await })
    };
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(!waiter.is_finished(), "no second probe while one is out");
    b.record(Permit::Probe, CallOutcome::Answered, 0);
    assert_eq!(waiter.await.unwrap(), Permit::Normal);
}

#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_never_opens() {
    let b = Breaker::new(None);
    for i in 0..100 {
        assert_eq!(b.record(Permit::Normal, CallOutcome::Transient, i), None);
    }
    assert_eq!(b.permit().await, Permit::Normal);
}
