//! Tests only: a hash of everything a simulated schedule logs, each event with its fields and
//! the time on the schedule's paused clock, so that a test can run one seed twice and see
//! that it took the same path (a `select!` that picks a branch at random would not).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The hash of a run's events and how many there were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trace {
    pub hash: u64,
    pub events: u64,
}

#[derive(Default)]
struct State {
    /// `DefaultHasher::new()` has fixed keys: the same events hash the same in every process.
    hasher: std::hash::DefaultHasher,
    events: u64,
    /// The paused clock at the first event; later events hash their time since.
    start: Option<tokio::time::Instant>,
}

struct Hashing(Arc<Mutex<State>>);

struct Fields<'a>(&'a mut std::hash::DefaultHasher);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        field.name().hash(self.0);
        format!("{value:?}").hash(self.0);
    }
}

impl<S: tracing::Subscriber> Layer<S> for Hashing {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut state = self.0.lock().expect("trace lock");
        let now = tokio::time::Instant::now();
        let since = now - *state.start.get_or_insert(now);
        let state = &mut *state;
        state.events += 1;
        since.as_nanos().hash(&mut state.hasher);
        event.metadata().target().hash(&mut state.hasher);
        event.metadata().level().as_str().hash(&mut state.hasher);
        event.record(&mut Fields(&mut state.hasher));
    }
}

/// Runs `run` with every event it logs on this thread hashed, at every level.
pub(crate) fn traced<T>(run: impl FnOnce() -> T) -> (T, Trace) {
    let state = Arc::new(Mutex::new(State::default()));
    let subscriber = tracing_subscriber::registry().with(Hashing(state.clone()));
    let out = tracing::subscriber::with_default(subscriber, run);
    let state = state.lock().expect("trace lock");
    let trace = Trace {
        hash: state.hasher.finish(),
        events: state.events,
    };
    (out, trace)
}

/// Runs the schedule `run` (named `what` in the failure) twice and checks that it kept the
/// guarantees and logged the same trace both times.
pub(crate) fn assert_replays<T, E: std::fmt::Display>(what: &str, run: impl Fn() -> Result<T, E>) {
    let ((first, once), (second, again)) = (traced(&run), traced(&run));
    if let Err(e) = first.and(second) {
        panic!("{what} broke a guarantee: {e}");
    }
    assert!(once.events > 0, "{what} logged nothing");
    assert_eq!(once, again, "{what} took another path the second time");
}
