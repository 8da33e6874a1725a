//! Tests only: the kernel both seeded simulations run on — the group workers'
//! (`group`, the members of a consumer group) and the share members' (`share/simulation`). Which seeds a test runs
//! (the environment variables), the runner that stops at the first broken guarantee and says
//! how to replay it, what the schedules did in sum, and the deliberate handler panics kept
//! out of the test output. One seed replays one schedule exactly (`trace` checks
//! it).
//!
//! - `KAFKA_DLQ_SIMULATION_SEED=S` runs seed S alone, in each test that draws schedules;
//! - `KAFKA_DLQ_SIMULATION_SCHEDULES=N` (default 2,000) sets how many a test runs (some run a
//!   fraction of them), from `KAFKA_DLQ_SIMULATION_FIRST_SEED` (default 0);
//! - `KAFKA_DLQ_SIMULATION_TRACE=1` prints each schedule's log at debug level.

mod group;
pub(crate) mod trace;

/// The marker every simulated handler panic's message contains.
pub(crate) const SIMULATED_PANIC: &str = "simulated handler panic";

/// What schedules did, summed over a run: shown when every guarantee held.
pub(crate) trait Summary: Default + std::fmt::Display {
    /// Adds one schedule's summary.
    fn add(&mut self, one: &Self);
    /// Whether no record was handled at all: a run that tested nothing.
    fn handled_nothing(&self) -> bool;
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The seeds a test runs: the one of `KAFKA_DLQ_SIMULATION_SEED`, or
/// `KAFKA_DLQ_SIMULATION_SCHEDULES` (default 2,000) divided by `fraction` (at least one), from
/// `KAFKA_DLQ_SIMULATION_FIRST_SEED` (default 0).
pub(crate) fn seeds(fraction: u64) -> std::ops::Range<u64> {
    if let Some(seed) = env("KAFKA_DLQ_SIMULATION_SEED") {
        return seed..seed + 1;
    }
    let first = env("KAFKA_DLQ_SIMULATION_FIRST_SEED").unwrap_or(0);
    let n = env("KAFKA_DLQ_SIMULATION_SCHEDULES").unwrap_or(2_000) / fraction;
    first..first + n.max(1)
}

/// Runs the schedule of each of `seeds` with `run`, and fails at the first that breaks a
/// guarantee with the violation and the command that replays it (`test`: the test to name).
pub(crate) fn run_all<S: Summary>(
    test: &str,
    seeds: impl IntoIterator<Item = u64>,
    run: impl Fn(u64) -> Result<S, String>,
) {
    quiet();
    // The code's log lines are not what is checked, and a global subscriber another test
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
    let mut total = S::default();
    for seed in seeds {
        match run(seed) {
            Ok(one) => total.add(&one),
            Err(violation) => panic!(
                "seed {seed} broke a guarantee: {violation}\n\
                 replay it with KAFKA_DLQ_SIMULATION_SEED={seed} cargo test --lib {test}"
            ),
        }
    }
    println!("{total}: every guarantee held");
    assert!(!total.handled_nothing(), "the schedules handled nothing");
}

/// Installs, once, a panic hook that stays silent for messages containing [`SIMULATED_PANIC`]
/// and reports every other panic as usual.
pub(crate) fn quiet() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.contains(SIMULATED_PANIC));
            if !simulated {
                default(info);
            }
        }));
    });
}
