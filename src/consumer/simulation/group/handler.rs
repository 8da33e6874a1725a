//! The handler of a schedule: what each call of each record does is its plan, drawn from the
//! seed — wait (not at all, a yield, a sleep, one that outlives a revocation), then succeed,
//! fail transiently n times, fail permanently or panic; while the downstream is down every
//! call fails transiently. In a batch, a failure fails the batch, or half the time comes back
//! as a partial response naming the failed records. Exactly once, a successful call outputs
//! one record per input, naming where the input was delivered (some too large for its
//! topic, some invalid, some too large with a dead letter too large too).

use std::time::Duration;

use super::plan::{Outcome, Wait};
use super::world::WorldRef;
use crate::failure::HandlerError;
use crate::handler::BatchHandler;
use crate::record::Record;

/// The handler: each call does what its records' plans say.
pub(super) struct SimHandler {
    pub world: WorldRef,
}

/// The marker of a simulated panic, kept out of the test output.
pub(super) use crate::consumer::simulation::SIMULATED_PANIC;

/// Adds how long a handler call took to the world's handler time when the call ends: when it
/// returns or panics, not when it is dropped before its end (the worker does not time those).
struct Timed<'a> {
    world: &'a WorldRef,
    started: tokio::time::Instant,
    returned: bool,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if self.returned || std::thread::panicking() {
            self.world.lock().handler_time += self.started.elapsed();
        }
    }
}

impl BatchHandler for SimHandler {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let mut timed = Timed {
            world: &self.world,
            started: tokio::time::Instant::now(),
            returned: false,
        };
        let result = self.call(records).await;
        timed.returned = true;
        result
    }
}

impl SimHandler {
    /// One call of `records`, as their plans say.
    async fn call(&self, records: &[Record]) -> Result<(), HandlerError> {
        // What an earlier, failed call produced is not this call's.
        crate::handler::output::set(Vec::new());
        let (results, wait, down, partial, outputs) = {
            let mut world = self.world.lock();
            let down = world.downstream_down;
            let mut wait = Wait::None;
            let mut results = Vec::with_capacity(records.len());
            let mut outputs = world.exactly_once.is_some().then(Vec::new);
            for record in records {
                let (mut plan, call) = world.called(record);
                // With parking, a dead letter is replayed after the fix is deployed.
                if world.parking && record.retry.as_ref().is_some_and(|r| r.tier.is_none()) {
                    plan.outcome = Outcome::Ok;
                }
                if let Some(outputs) = outputs.as_mut() {
                    outputs.push(super::producer::output_of(record, plan.outcome));
                }
                wait = match (wait, plan.wait) {
                    (Wait::Sleep(a), Wait::Sleep(b)) => Wait::Sleep(a.max(b)),
                    (Wait::Sleep(a), _) | (_, Wait::Sleep(a)) => Wait::Sleep(a),
                    (Wait::Yield, _) | (_, Wait::Yield) => Wait::Yield,
                    _ => Wait::None,
                };
                results.push(match plan.outcome {
                    Outcome::Ok | Outcome::TooLarge | Outcome::Invalid | Outcome::Huge => Ok(()),
                    Outcome::Transient(n) if call <= n => {
                        Err(HandlerError::transient(format!("try {call} of {n}")))
                    }
                    Outcome::Transient(_) => Ok(()),
                    Outcome::Permanent => Err(HandlerError::permanent("rejected")),
                    Outcome::Panic => Err(HandlerError::permanent(SIMULATED_PANIC)),
                });
            }
            let partial = records.len() > 1 && world.rng.bool();
            if world.looping() {
                // Time passes, so the schedule's next check reports the loop.
                wait = Wait::Sleep(1_000);
            }
            (results, wait, down, partial, outputs)
        };
        match wait {
            Wait::None => {}
            Wait::Yield => tokio::task::yield_now().await,
            Wait::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        if down {
            return Err(HandlerError::transient("downstream down"));
        }
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if e.message() == SIMULATED_PANIC))
        {
            panic!("{SIMULATED_PANIC}");
        }
        let mut world = self.world.lock();
        if results.iter().all(Result::is_ok) {
            for record in records {
                world.handled(record);
            }
            if let Some(outputs) = outputs {
                crate::handler::output::set(outputs);
            }
            return Ok(());
        }
        if partial {
            let mut failures = Vec::new();
            for (record, result) in records.iter().zip(results) {
                match result {
                    Ok(()) => {
                        world.handled(record);
                    }
                    Err(error) => failures.push((record.offset, error)),
                }
            }
            return Err(HandlerError::partial(failures));
        }
        let mut errors = results.into_iter().filter_map(Result::err);
        let first = errors.next().expect("one failed");
        Err(errors
            .find(|e| e.kind() == crate::failure::FailureKind::Permanent)
            .unwrap_or(first))
    }
}
