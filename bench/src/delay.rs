//! A precise async delay for the benchmark's emulated downstream calls.
//!
//! `tokio::time::sleep` runs on a 1 ms timer wheel, so a 1 ms sleep lasts 1 to 2 ms (about
//! 2 ms on average): the `slow` scenario ran at half Spring's rate for that alone, where the
//! Java peers' `Thread.sleep(1)` lasts about 1.06 ms. A real downstream call wakes its task by
//! I/O, not by a timer. So here one thread keeps the deadlines and wakes each task when its
//! deadline passes (a futex wait with a nanosecond timeout, as `Thread.sleep` does): the delay
//! lasts as long as the Java peers' and costs the task one cross-thread wake, as an I/O
//! completion does.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Waits `duration`, precisely (see the module docs).
pub fn delay(duration: Duration) -> Delay {
    Delay {
        deadline: Instant::now() + duration,
        registered: false,
    }
}

/// The future of [`delay`].
pub struct Delay {
    deadline: Instant,
    registered: bool,
}

impl Future for Delay {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        if !self.registered {
            timer().add(self.deadline, cx.waker().clone());
            self.registered = true;
        }
        Poll::Pending
    }
}

struct Entry {
    at: Instant,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Earliest first in a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

struct Timer {
    deadlines: Mutex<BinaryHeap<Entry>>,
    changed: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            deadlines: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("bench-delay".into())
            .spawn(move || timer.run())
            .expect("start the delay thread");
        timer
    })
}

impl Timer {
    fn add(&self, at: Instant, waker: Waker) {
        let mut deadlines = self.deadlines.lock().unwrap();
        let earliest = deadlines.peek().is_none_or(|e| at < e.at);
        deadlines.push(Entry { at, waker });
        if earliest {
            self.changed.notify_one();
        }
    }

    /// Wakes the tasks whose deadlines passed with the lock let go: a task adding its delay
    /// meanwhile would otherwise block on it, its thread put to sleep and woken again.
    fn run(&self) {
        let mut due = Vec::new();
        let mut deadlines = self.deadlines.lock().unwrap();
        loop {
            let now = Instant::now();
            while deadlines.peek().is_some_and(|e| e.at <= now) {
                due.push(deadlines.pop().expect("peeked").waker);
            }
            if !due.is_empty() {
                drop(deadlines);
                due.drain(..).for_each(Waker::wake);
                deadlines = self.deadlines.lock().unwrap();
                continue;
            }
            deadlines = match deadlines.peek().map(|e| e.at - now) {
                Some(wait) => self.changed.wait_timeout(deadlines, wait).unwrap().0,
                None => self.changed.wait(deadlines).unwrap(),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_delay_lasts_its_duration_and_little_more() {
        for _ in 0..20 {
            let start = Instant::now();
            delay(Duration::from_millis(1)).await;
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(1), "{took:?}");
        }
    }
}
