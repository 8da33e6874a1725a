//! How much reading of the cluster the console does at once. Each list, dead letter, export,
//! history read, discard and dry run opens Kafka clients and scans a topic; without a bound,
//! one viewer's script (or anyone, with `--anonymous viewer`) could hold thousands of them.
//! A caller may run [`PER_CALLER`] of them at once and all callers together [`IN_ALL`]; past
//! either, the API answers 429 at once. Reading the inbox, the status and a redrive's progress
//! is memory only and never limited.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Scans one caller may run at once.
pub const PER_CALLER: usize = 4;
/// Scans the console runs at once, every caller together.
pub const IN_ALL: usize = 16;

/// The scans running, by caller.
#[derive(Debug, Default)]
pub struct Limits {
    running: Mutex<HashMap<String, usize>>,
}

/// Why a scan may not start now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    /// The caller runs [`PER_CALLER`] already.
    #[error("{0} runs {PER_CALLER} reads of the cluster (lists, exports, dry runs, discards, history) already: wait for one to end")]
    Caller(String),
    /// The console runs [`IN_ALL`] already.
    #[error("the console runs {IN_ALL} reads of the cluster already: try again in a moment")]
    Console,
}

/// One scan running; ends when dropped.
#[derive(Debug)]
pub struct Permit {
    limits: Arc<Limits>,
    caller: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut running = self.limits.running.lock().expect("limits");
        if let Some(n) = running.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.caller);
            }
        }
    }
}

impl Limits {
    /// A scan for `caller`, if one may start now.
    pub fn start(self: &Arc<Self>, caller: &str) -> Result<Permit, Busy> {
        let mut running = self.running.lock().expect("limits");
        if running.values().sum::<usize>() >= IN_ALL {
            return Err(Busy::Console);
        }
        let mine = running.entry(caller.to_string()).or_default();
        if *mine >= PER_CALLER {
            return Err(Busy::Caller(caller.to_string()));
        }
        *mine += 1;
        Ok(Permit {
            limits: self.clone(),
            caller: caller.to_string(),
        })
    }

    /// Scans running now.
    pub fn running(&self) -> usize {
        self.running.lock().expect("limits").values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_runs_a_few_scans_at_once_and_the_console_a_few_more() {
        let limits = Arc::new(Limits::default());
        let alice: Vec<Permit> = (0..PER_CALLER)
            .map(|_| limits.start("alice").unwrap())
            .collect();
        assert_eq!(
            limits.start("alice").unwrap_err(),
            Busy::Caller("alice".into())
        );
        let mut others = Vec::new();
        for i in 0..IN_ALL - PER_CALLER {
            others.push(limits.start(&format!("bob{}", i / PER_CALLER)).unwrap());
        }
        assert_eq!(limits.start("carol").unwrap_err(), Busy::Console);
        drop(alice);
        assert_eq!(limits.running(), IN_ALL - PER_CALLER);
        assert!(limits.start("alice").is_ok(), "room again once they end");
        drop(others);
        assert_eq!(limits.running(), 0);
    }
}
