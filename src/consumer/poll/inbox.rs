//! A partition's inbox: the records the consumer has taken from librdkafka for one assigned
//! partition and its worker has not taken yet, counted in bytes against the partition's share
//! of the consumer's buffer (`max_buffered_bytes`).
//!
//! Bookkeeping, no I/O: [`Inbox::push`] and [`Inbox::poll_pop`] decide when the partition's
//! fetches should stop (a pause) or go on (a resume), and the caller's `pause` or `resume`
//! does it, called while the inbox is locked: a pause decided by a push and a resume decided
//! by a pop are done in the order they were decided (done after the lock, a resume could
//! overtake the pause before it and leave the partition paused for good).
//!
//! - **The budget** ([`Budget`]) is what all inboxes of the consumer may hold together.
//! - **The share** of a partition is half the budget divided by the partitions assigned now
//!   (so it is re-divided at each rebalance), at least one byte.
//! - **A partition's fetches stop** when its inbox holds its share or more *and* the inboxes
//!   together hold half the budget or more, or when it holds eight shares. So a partition may
//!   borrow what idle ones (an empty redrive topic's) leave unused, up to eight shares, and the
//!   inboxes never hold more than the budget: once they hold half of it, only partitions under
//!   their share still take records, at most a share each, which is the other half. An inbox
//!   always takes the record it is given, so no partition starves.
//! - **Fetches go on** once the worker has taken its inbox down to half its share, or the
//!   inboxes together hold a quarter of the budget or less.
//! - **A seek** (a retry partition started at its beginning) shows as a record at or below the
//!   last one pushed: the records queued from before it are dropped, since librdkafka fetches
//!   them again after the seek.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::record::Record;

/// How many shares a partition may hold while the inboxes together hold less than half their
/// budget: enough that a fast partition is rarely paused, few enough that the first partitions
/// fetched do not take the whole half and leave the others one share each.
const BORROW: usize = 8;

/// The bytes a record holds in memory, roughly: its key, value, header names and values, id
/// and topic, plus a fixed 128 for the record itself.
pub(crate) fn footprint(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len) + 32)
        .sum();
    128 + record.id.len()
        + record.topic.len()
        + record.key.as_ref().map_or(0, Vec::len)
        + record.payload.as_ref().map_or(0, Vec::len)
        + headers
}

/// What all inboxes of a consumer may hold together, and what they hold now.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    bytes: usize,
    held: AtomicUsize,
}

impl Budget {
    /// A budget of `bytes`.
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            bytes,
            held: AtomicUsize::new(0),
        }
    }

    /// A partition's share when `partitions` are assigned: half the budget divided among them,
    /// at least 1 byte.
    pub(crate) fn share(&self, partitions: usize) -> usize {
        (self.bytes / 2 / partitions.max(1)).max(1)
    }

    /// What the inboxes hold now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// One partition's inbox; see the module docs.
pub(crate) struct Inbox {
    state: Mutex<State>,
    budget: Arc<Budget>,
}

#[derive(Default)]
struct State {
    records: VecDeque<(Record, usize)>,
    bytes: usize,
    /// The share given at the last push.
    share: usize,
    /// Whether the last decision was a pause.
    paused: bool,
    /// Whether its worker holds the partition's fetches paused (a retry record waiting until it
    /// is due): a take that drains the inbox then resumes nothing, and the end of the hold
    /// resumes nothing while the inbox itself wants the partition paused — either alone would
    /// let the other's pause go, and a full inbox take one more record at every retry wait.
    held: bool,
    /// The offset where the last record pushed was delivered.
    last_offset: Option<i64>,
    /// The worker waiting for a record.
    waker: Option<Waker>,
    /// Set when its assignment ended: it takes and hands out nothing more.
    closed: bool,
}

impl Inbox {
    /// An empty inbox, counting against `budget`.
    pub(crate) fn new(budget: Arc<Budget>) -> Self {
        Self {
            state: Mutex::default(),
            budget,
        }
    }

    /// Adds `record`, whose partition's share is `share` bytes now, and calls `pause`
    /// whenever the inbox then holds its share or more and the inboxes together half the
    /// budget or more, or eight shares (records arriving past that mean fetching goes on, so
    /// pausing again is always right). The worker waiting for a record, if any, is added to
    /// `wake`, for the caller to wake once it has pushed what is ready (one wake-up for many
    /// records). Returns the change in the bytes the inbox holds (negative when a seek dropped
    /// records; 0 when closed).
    pub(crate) fn push(
        &self,
        record: Record,
        share: usize,
        pause: impl FnOnce(),
        wake: &mut Vec<Waker>,
    ) -> isize {
        let size = footprint(&record);
        let mut state = self.state.lock().expect("inbox lock");
        if state.closed {
            return 0;
        }
        let before = state.bytes;
        // Offsets where the records were delivered (a retry topic's own, for a record already
        // restored to the original it carries).
        let offset = record.delivered_offset();
        if state.last_offset.is_some_and(|last| offset <= last) {
            // Sought back: what is queued from at or after this offset is fetched again.
            let mut dropped = 0;
            state.records.retain(|(queued, size)| {
                let keep = queued.delivered_offset() < offset;
                if !keep {
                    dropped += size;
                }
                keep
            });
            state.bytes -= dropped;
        }
        state.last_offset = Some(offset);
        state.records.push_back((record, size));
        state.bytes += size;
        state.share = share;
        let change = state.bytes as isize - before as isize;
        let held = if change >= 0 {
            self.budget
                .held
                .fetch_add(change as usize, Ordering::Relaxed)
                + change as usize
        } else {
            let dropped = change.unsigned_abs();
            self.budget.held.fetch_sub(dropped, Ordering::Relaxed) - dropped
        };
        if state.bytes >= share && (held >= self.budget.bytes / 2 || state.bytes >= share * BORROW)
        {
            state.paused = true;
            pause();
        }
        wake.extend(state.waker.take());
        change
    }

    /// Takes the oldest record, registering `cx`'s waker while there is none (a no-op waker,
    /// of a look that does not wait, leaves the waiting one in place). Calls `resume` once,
    /// when a paused inbox is down to half its share or the inboxes together to a quarter of
    /// the budget. With the record: its footprint, taken off the inbox's bytes. Never ready
    /// once closed.
    pub(crate) fn poll_pop(
        &self,
        cx: &mut Context<'_>,
        resume: impl FnOnce(),
    ) -> Poll<(Record, usize)> {
        let mut state = self.state.lock().expect("inbox lock");
        if state.closed {
            return Poll::Pending;
        }
        match state.records.pop_front() {
            Some((record, size)) => {
                state.bytes -= size;
                let held = self.budget.held.fetch_sub(size, Ordering::Relaxed) - size;
                if state.paused && (state.bytes <= state.share / 2 || held <= self.budget.bytes / 4)
                {
                    state.paused = false;
                    if !state.held {
                        resume();
                    }
                }
                Poll::Ready((record, size))
            }
            None => {
                if !cx.waker().will_wake(Waker::noop()) {
                    state.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Takes up to `max` records that are ready, oldest first, into `into`, without waiting
    /// (no waker is registered), stopping once they come to `max_bytes` or more (so it takes
    /// one record of any size when `max_bytes` > 0); calls `resume` as [`Inbox::poll_pop`]
    /// does, at most once. Returns their footprint, taken off the inbox's bytes. Takes nothing
    /// once closed.
    pub(crate) fn pop_ready(
        &self,
        max: usize,
        max_bytes: usize,
        into: &mut Vec<Record>,
        resume: impl FnOnce(),
    ) -> usize {
        let mut state = self.state.lock().expect("inbox lock");
        if state.closed {
            return 0;
        }
        let mut taken = 0;
        for _ in 0..max {
            if taken >= max_bytes {
                break;
            }
            let Some((record, size)) = state.records.pop_front() else {
                break;
            };
            into.push(record);
            taken += size;
        }
        if taken == 0 {
            return 0;
        }
        state.bytes -= taken;
        let held = self.budget.held.fetch_sub(taken, Ordering::Relaxed) - taken;
        if state.paused && (state.bytes <= state.share / 2 || held <= self.budget.bytes / 4) {
            state.paused = false;
            if !state.held {
                resume();
            }
        }
        taken
    }

    /// Holds the partition's fetches paused for its worker (calls `pause` unless the inbox
    /// has them paused already), until [`Inbox::release`].
    pub(crate) fn hold(&self, pause: impl FnOnce()) {
        let mut state = self.state.lock().expect("inbox lock");
        state.held = true;
        if !state.paused {
            pause();
        }
    }

    /// Ends a [`Inbox::hold`]: calls `resume` unless the inbox wants the partition paused
    /// (its own pop resumes it once it drains).
    pub(crate) fn release(&self, resume: impl FnOnce()) {
        let mut state = self.state.lock().expect("inbox lock");
        state.held = false;
        if !state.paused {
            resume();
        }
    }

    /// The partition's share, as of the last record pushed (0 before the first).
    pub(crate) fn share(&self) -> usize {
        self.state.lock().expect("inbox lock").share
    }

    /// Ends its assignment: drops the records it holds (their offsets were not stored, so the
    /// partition's next owner consumes them) and returns their bytes. Nothing is pushed or
    /// popped after it.
    pub(crate) fn close(&self) -> usize {
        let mut state = self.state.lock().expect("inbox lock");
        state.closed = true;
        state.records.clear();
        let bytes = std::mem::take(&mut state.bytes);
        self.budget.held.fetch_sub(bytes, Ordering::Relaxed);
        bytes
    }

    /// The bytes it holds.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.state.lock().expect("inbox lock").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn record(offset: i64, bytes: usize) -> Record {
        let mut record = Record::new("t", 0, offset);
        record.payload = Some(vec![0; bytes]);
        record
    }

    /// A waker that sets the flag it comes with.
    fn flag_waker() -> (std::sync::Arc<std::sync::atomic::AtomicBool>, Waker) {
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        (flag.clone(), Waker::from(std::sync::Arc::new(Flag(flag))))
    }

    /// What a push or a pop decided for the partition's fetches.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Flow {
        Keep,
        Pause,
        Resume,
    }

    /// Pushes a record of `bytes` at `offset` with `share`: what it decided.
    fn push(inbox: &Inbox, offset: i64, bytes: usize, share: usize) -> Flow {
        let mut flow = Flow::Keep;
        inbox.push(
            record(offset, bytes),
            share,
            || flow = Flow::Pause,
            &mut Vec::new(),
        );
        flow
    }

    /// Pops a record without waiting: its offset and what it decided.
    fn pop(inbox: &Inbox) -> Option<(i64, Flow)> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut flow = Flow::Keep;
        match inbox.poll_pop(&mut cx, || flow = Flow::Resume) {
            Poll::Ready((record, _)) => Some((record.offset, flow)),
            Poll::Pending => None,
        }
    }

    /// An inbox of a budget of `bytes`.
    fn inbox(bytes: usize) -> Inbox {
        Inbox::new(Arc::new(Budget::new(bytes)))
    }

    #[test]
    fn fetches_pause_at_the_share_and_resume_at_half_of_it() {
        let size = footprint(&record(0, 1_000));
        let inbox = inbox(size * 8);
        let share = size * 4;
        for offset in 0..3 {
            assert_eq!(push(&inbox, offset, 1_000, share), Flow::Keep);
        }
        assert_eq!(push(&inbox, 3, 1_000, share), Flow::Pause);
        assert_eq!(
            push(&inbox, 4, 1_000, share),
            Flow::Pause,
            "a record past the share pauses again"
        );
        assert_eq!(inbox.bytes(), size * 5);
        assert_eq!(pop(&inbox), Some((0, Flow::Keep)));
        assert_eq!(pop(&inbox), Some((1, Flow::Keep)));
        assert_eq!(
            pop(&inbox),
            Some((2, Flow::Resume)),
            "down to half the share"
        );
        assert_eq!(pop(&inbox), Some((3, Flow::Keep)), "resumed once");
        assert_eq!(pop(&inbox), Some((4, Flow::Keep)));
        assert_eq!(pop(&inbox), None);
        assert_eq!(inbox.bytes(), 0);
    }

    #[test]
    fn a_workers_hold_and_the_inboxs_pause_never_undo_each_other() {
        let size = footprint(&record(0, 1_000));
        let inbox = inbox(size * 4);
        let share = size * 2;
        let calls = |f: &dyn Fn(&mut dyn FnMut())| {
            let mut called = false;
            f(&mut || called = true);
            called
        };
        // Full: the inbox paused the partition. A retry wait's hold and its end resume nothing.
        assert_eq!(push(&inbox, 0, 1_000, share), Flow::Keep);
        assert_eq!(push(&inbox, 1, 1_000, share), Flow::Pause);
        assert!(!calls(&|p| inbox.hold(p)), "paused already");
        assert!(
            !calls(&|r| inbox.release(r)),
            "the inbox still holds its share"
        );
        assert_eq!(
            pop(&inbox),
            Some((0, Flow::Resume)),
            "drained: resumed by the take"
        );
        // Held by a wait: a take that drains the inbox resumes nothing; the hold's end does.
        assert!(calls(&|p| inbox.hold(p)));
        assert_eq!(push(&inbox, 2, 1_000, share), Flow::Pause);
        assert_eq!(pop(&inbox), Some((1, Flow::Keep)), "held: not resumed");
        assert!(calls(&|r| inbox.release(r)));
    }

    #[test]
    fn an_inbox_always_takes_the_record_it_is_given() {
        let inbox = inbox(2);
        assert_eq!(push(&inbox, 0, 10_000, 1), Flow::Pause);
        assert_eq!(pop(&inbox), Some((0, Flow::Resume)));
    }

    #[test]
    fn the_share_divides_half_the_budget_by_the_partitions_assigned() {
        let budget = Budget::new(32 << 20);
        assert_eq!(budget.share(1), 16 << 20);
        assert_eq!(budget.share(1_000), 16_777);
        assert_eq!(budget.share(0), 16 << 20, "between rebalances");
        assert_eq!(Budget::new(20).share(100), 1, "at least a byte: one record");
    }

    #[test]
    fn a_partition_borrows_eight_shares_at_most() {
        let size = footprint(&record(0, 1_000));
        let inbox = inbox(size * 1_000);
        let flows: Vec<Flow> = (0..9).map(|o| push(&inbox, o, 1_000, size)).collect();
        assert_eq!(flows[..7], [Flow::Keep; 7]);
        assert_eq!(flows[7..], [Flow::Pause; 2], "at eight shares");
    }

    #[test]
    fn a_partition_borrows_what_idle_ones_leave_until_the_inboxes_hold_half_the_budget() {
        let size = footprint(&record(0, 1_000));
        let budget = Arc::new(Budget::new(size * 20));
        let busy = Inbox::new(budget.clone());
        let other = Inbox::new(budget.clone());
        let share = size * 2;
        for offset in 0..9 {
            assert_eq!(
                push(&busy, offset, 1_000, share),
                Flow::Keep,
                "past its share, with the budget mostly free"
            );
        }
        push(&other, 0, 1_000, share);
        assert_eq!(budget.held(), size * 10, "half the budget");
        assert_eq!(
            push(&busy, 9, 1_000, share),
            Flow::Pause,
            "over its share with half the budget held"
        );
        assert_eq!(push(&other, 1, 1_000, share), Flow::Pause, "at its share");
        // The busy one drains until the inboxes hold a quarter of the budget.
        let flows: Vec<Flow> = (0..7).map(|_| pop(&busy).unwrap().1).collect();
        assert_eq!(flows.iter().filter(|f| **f == Flow::Resume).count(), 1);
        assert_eq!(flows[6], Flow::Resume, "at 5 records held of 20: a quarter");
    }

    #[test]
    fn a_seek_back_drops_the_records_queued_from_before_it() {
        let inbox = inbox(usize::MAX);
        for offset in 100..103 {
            push(&inbox, offset, 10, usize::MAX);
        }
        let queued: usize = (100..103).map(|o| footprint(&record(o, 10))).sum();
        let change = inbox.push(record(0, 10), usize::MAX, || {}, &mut Vec::new());
        assert_eq!(change, footprint(&record(0, 10)) as isize - queued as isize);
        push(&inbox, 1, 10, usize::MAX);
        assert_eq!(pop(&inbox), Some((0, Flow::Keep)));
        assert_eq!(pop(&inbox), Some((1, Flow::Keep)));
        assert_eq!(pop(&inbox), None);
    }

    #[test]
    fn a_seek_to_the_middle_keeps_what_comes_before_it() {
        let inbox = inbox(usize::MAX);
        for offset in 0..5 {
            push(&inbox, offset, 10, usize::MAX);
        }
        push(&inbox, 3, 10, usize::MAX);
        let offsets: Vec<i64> = std::iter::from_fn(|| pop(&inbox).map(|(o, _)| o)).collect();
        assert_eq!(offsets, [0, 1, 2, 3]);
    }

    #[test]
    fn pause_and_resume_are_done_as_they_are_decided() {
        let size = footprint(&record(0, 10));
        let inbox = inbox(size * 2);
        let acted = std::cell::RefCell::new(Vec::new());
        inbox.push(
            record(0, 10),
            size,
            || acted.borrow_mut().push(Flow::Pause),
            &mut Vec::new(),
        );
        assert_eq!(*acted.borrow(), [Flow::Pause], "before the push returns");
        let mut cx = Context::from_waker(Waker::noop());
        let _ = inbox.poll_pop(&mut cx, || acted.borrow_mut().push(Flow::Resume));
        let _ = inbox.poll_pop(&mut cx, || acted.borrow_mut().push(Flow::Resume));
        assert_eq!(*acted.borrow(), [Flow::Pause, Flow::Resume]);
    }

    #[test]
    fn records_taken_at_once_come_in_order_and_resume_a_paused_partition_once() {
        let size = footprint(&record(0, 1_000));
        let inbox = inbox(size * 8);
        for offset in 0..5 {
            push(&inbox, offset, 1_000, size * 4);
        }
        let mut taken = Vec::new();
        let mut resumes = 0;
        assert_eq!(
            inbox.pop_ready(2, usize::MAX, &mut taken, || resumes += 1),
            size * 2
        );
        assert_eq!(resumes, 0, "three of four shares left");
        assert_eq!(
            inbox.pop_ready(10, size + 1, &mut taken, || resumes += 1),
            size * 2,
            "up to the bytes asked for, and the record that passes them"
        );
        assert_eq!(resumes, 1, "down to half the share");
        assert_eq!(
            inbox.pop_ready(10, 0, &mut taken, || resumes += 1),
            0,
            "no bytes asked"
        );
        assert_eq!(inbox.pop_ready(10, 1, &mut taken, || resumes += 1), size);
        assert_eq!(resumes, 1);
        let offsets: Vec<i64> = taken.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 2, 3, 4]);
        assert_eq!(inbox.bytes(), 0);
        assert_eq!(inbox.budget.held(), 0);
        assert_eq!(
            inbox.pop_ready(10, usize::MAX, &mut taken, || resumes += 1),
            0
        );
        inbox.close();
        push(&inbox, 5, 10, usize::MAX);
        assert_eq!(
            inbox.pop_ready(10, usize::MAX, &mut taken, || {}),
            0,
            "closed"
        );
    }

    #[test]
    fn a_look_that_does_not_wait_leaves_the_waiting_worker_registered() {
        let (flag, waker) = flag_waker();
        let inbox = inbox(usize::MAX);
        let _ = inbox.poll_pop(&mut Context::from_waker(&waker), || {});
        let _ = inbox.poll_pop(&mut Context::from_waker(Waker::noop()), || {});
        let mut wake = Vec::new();
        inbox.push(record(0, 1), usize::MAX, || {}, &mut wake);
        wake.into_iter().for_each(Waker::wake);
        assert!(flag.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_closed_inbox_takes_and_hands_out_nothing() {
        let inbox = inbox(usize::MAX);
        push(&inbox, 0, 10, usize::MAX);
        assert_eq!(inbox.close(), footprint(&record(0, 10)));
        assert_eq!(inbox.budget.held(), 0, "its bytes given back to the budget");
        assert_eq!(
            inbox.push(record(1, 10), usize::MAX, || {}, &mut Vec::new()),
            0
        );
        assert_eq!(pop(&inbox), None);
        assert_eq!(inbox.bytes(), 0);
    }

    #[test]
    fn pushes_wake_the_waiting_worker_once_when_the_caller_says() {
        let (flag, waker) = flag_waker();
        let inbox = inbox(usize::MAX);
        assert!(inbox
            .poll_pop(&mut Context::from_waker(&waker), || {})
            .is_pending());
        let mut wake = Vec::new();
        inbox.push(record(0, 1), usize::MAX, || {}, &mut wake);
        inbox.push(record(1, 1), usize::MAX, || {}, &mut wake);
        assert_eq!(wake.len(), 1, "one wake-up for both records");
        assert!(
            !flag.load(std::sync::atomic::Ordering::SeqCst),
            "left to the caller"
        );
        wake.into_iter().for_each(Waker::wake);
        assert!(flag.load(std::sync::atomic::Ordering::SeqCst));
    }
}
