//! What each handler call of a simulated record does: its plan, drawn from the seed.

/// What a record's handler calls do, drawn from the seed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    pub wait: Wait,
    pub outcome: Outcome,
}

/// How a call waits before it answers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    /// Finishes without awaiting anything.
    None,
    /// Yields to the scheduler once.
    Yield,
    /// Sleeps this many milliseconds (long ones outlive a revocation).
    Sleep(u64),
}

/// How a record's calls end.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    Ok,
    /// Fails transiently on its first n calls, then succeeds.
    Transient(u32),
    Permanent,
    Panic,
    /// Succeeds with an output larger than its topic accepts (exactly once).
    TooLarge,
    /// Succeeds with an output the broker refuses for good for another reason (a compacted
    /// topic and no key: INVALID_RECORD) (exactly once).
    Invalid,
    /// Succeeds with an output larger than its topic accepts, and its dead letter with the
    /// payload is too large too: only the reference fits (exactly once).
    Huge,
}
