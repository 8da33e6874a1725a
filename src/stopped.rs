//! The one way work ends early: [`Stopped`].

use std::fmt;

/// The work was given up because its cancellation token fired: the partition was revoked or
/// the service is stopping. Nothing was settled by it, no offset stored past it, so the record
/// it was for is consumed again (by this member or the partition's next owner).
///
/// Returned by every wait that a cancellation cuts short: the backoff's
/// [`retry`](crate::backoff::retry) loop, a dead-letter or retry-topic write
/// ([`DeadLetterPublisher`](crate::dlq::DeadLetterPublisher)), and a partition's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stopped: the partition was revoked or the service is stopping")
    }
}

impl std::error::Error for Stopped {}
