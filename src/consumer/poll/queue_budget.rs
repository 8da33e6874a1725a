//! What a consumer's partition queues hold together, as each partition's worker last counted
//! its own: each assignment's [`QueuePart`], given to it by the consumer's assignments and held
//! by its worker's intake.
//!
//! A queue holds more than its bound only for a record batch larger than a fetch (a broker
//! never splits one), and librdkafka's producer writes batches of up to 1 MB: on a busy topic
//! most fetches bring one. Dropped at once, such a batch is fetched again, whole, at every
//! chunk its worker takes of it (the benchmark's no-op consumer dropped about 150 queues of
//! 2,300-4,700 records a run: half its records fetched twice). So a queue is dropped only
//! while the queues together hold more than the consumer's budget for them: half of
//! `max_buffered_bytes` and a fetch per partition. Memory stays within that budget; a
//! partition holding a whole batch while others hold less is no longer a reason to fetch it
//! again.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A consumer's budget for its partition queues, and what they hold.
#[derive(Debug)]
pub(crate) struct QueueBudget {
    held: AtomicUsize,
    limit: usize,
}

impl QueueBudget {
    /// A budget of `limit` bytes for all the consumer's queues.
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            limit,
        })
    }

    /// One partition's part of the budget: what its queue holds, counted in the whole until
    /// the part drops.
    pub(crate) fn part(self: &Arc<Self>) -> QueuePart {
        QueuePart {
            budget: self.clone(),
            counted: 0,
        }
    }

    /// What the queues hold together, as last counted.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Relaxed)
    }
}

/// A partition queue's part of its consumer's [`QueueBudget`], held by the worker of one
/// assignment of the partition.
#[derive(Debug)]
pub(crate) struct QueuePart {
    budget: Arc<QueueBudget>,
    counted: usize,
}

impl QueuePart {
    /// Counts `bytes` as what the queue holds now, in place of what it counted before; true
    /// when the queues together hold more than the budget.
    pub(crate) fn count(&mut self, bytes: usize) -> bool {
        let delta = bytes.wrapping_sub(std::mem::replace(&mut self.counted, bytes));
        let held = self
            .budget
            .held
            .fetch_add(delta, Relaxed)
            .wrapping_add(delta);
        held > self.budget.limit
    }
}

impl Drop for QueuePart {
    /// A revoked partition's worker has ended: what it counted is no longer its to hold.
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.counted, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_only_while_the_queues_together_hold_more_than_the_limit() {
        let budget = QueueBudget::new(100);
        let (mut a, mut b) = (budget.part(), budget.part());
        assert!(!a.count(80), "one queue of 80");
        assert!(b.count(30), "80 + 30 > 100");
        assert!(!a.count(10), "a read its queue down: 10 + 30");
        assert!(!b.count(90), "10 + 90 = 100: the limit");
        assert_eq!(budget.held(), 100);
    }

    #[test]
    fn a_dropped_part_gives_back_what_it_counted() {
        let budget = QueueBudget::new(100);
        let mut a = budget.part();
        a.count(70);
        {
            let mut b = budget.part();
            b.count(50);
            assert_eq!(budget.held(), 120);
        }
        assert_eq!(budget.held(), 70);
        drop(a);
        assert_eq!(budget.held(), 0);
    }
}
