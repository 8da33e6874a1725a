//! What a replay did: each dead letter's [`Outcome`], and the [`ReplayReport`] of them all,
//! whose size does not grow with the DLQ's.

use serde::Serialize;

/// What a replay did with one dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Sent and acknowledged (in a dry run: would be sent) to topic `to`.
    Replayed {
        /// The record id.
        id: String,
        /// The destination topic.
        to: String,
    },
    /// Refused by the loop guard: replayed `replays` times already.
    Refused {
        /// The record id.
        id: String,
        /// How often it was replayed already.
        replays: u32,
    },
    /// Not an envelope (never replayed); `id` is its DLQ coordinates.
    NotAnEnvelope {
        /// `<dlq topic>-<partition>-<offset>`.
        id: String,
    },
    /// An envelope that parses but does not decode: passed over, not sent.
    Undecodable {
        /// The record id.
        id: String,
        /// Why.
        why: String,
    },
    /// A reference whose source record is gone for good: its payload is lost, so it is
    /// passed over, not sent, and stays outstanding ([`crate::dlq_reader::position`]).
    Lost {
        /// The record id.
        id: String,
        /// Why it is gone.
        why: String,
    },
    /// Already resolved by an earlier action (discarded, or sent by another replay): not
    /// sent again ([`crate::state::ledger`]).
    AlreadyResolved {
        /// The record id.
        id: String,
        /// What resolved it: `discarded by console:alice (run …)`, `redriven by … (run …)`,
        /// `replayed`.
        by: String,
    },
    /// Its destination is one no replay may write to (a state topic, a dead-letter or retry
    /// topic, an internal topic, a source topic whose dead letters go to another DLT):
    /// passed over unsent, still outstanding.
    DestinationRefused {
        /// The record id.
        id: String,
        /// The topic it would have gone to.
        to: String,
        /// Why not.
        why: String,
    },
    /// The bulk transformation failed on its payload ([`super::transform`]): passed over
    /// unsent, still outstanding.
    Untransformable {
        /// The record id.
        id: String,
        /// Why.
        why: String,
    },
    /// Not matched by the filter.
    FilteredOut,
}

/// How many dead letters passed over a [`ReplayReport`] names; the counts hold them all.
pub const REPORT_SAMPLE: usize = 20;

/// What a replay did: counts, and the first [`REPORT_SAMPLE`] dead letters it passed over, so
/// that a report stays small whatever the DLQ holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// DLQ records read.
    pub scanned: u64,
    /// Records sent and acknowledged (in a dry run: that would be sent).
    pub replayed: u64,
    /// Records the filter passed over.
    pub filtered_out: u64,
    /// Records refused by the loop guard.
    pub refused: u64,
    /// DLQ records that are not envelopes (never replayed).
    pub not_envelopes: u64,
    /// Dead letters whose envelope parses but does not decode (passed over, not sent).
    pub undecodable: u64,
    /// References whose source record is gone for good (passed over, not sent, still
    /// outstanding).
    pub lost: u64,
    /// Dead letters an earlier action resolved (discarded, or sent by another replay): not
    /// sent again.
    pub already_resolved: u64,
    /// Dead letters whose destination was refused (passed over, not sent, still outstanding).
    pub not_here: u64,
    /// Dead letters the bulk transformation failed on (passed over, not sent, still
    /// outstanding).
    pub untransformable: u64,
    /// With a bulk transformation: what it did.
    pub transform: Option<crate::state::audit::TransformSummary>,
    /// The first [`REPORT_SAMPLE`] refused, not-envelope, undecodable and lost dead letters.
    pub passed_over: Vec<Outcome>,
    /// Nothing was sent or committed.
    pub dry_run: bool,
    /// Stopped before the end; run it again to resume.
    pub interrupted: bool,
    /// The run's id on the audit topic (see [`super::audit`]); `None` for a dry run or no
    /// audit topic.
    pub run: Option<String>,
    /// Why the run's summary could not be written to the audit topic, when it could not (the
    /// replay itself stands).
    pub audit_error: Option<String>,
    /// With [`super::Destination::Source`]: each source topic sent to, with the consumer
    /// groups that read it ([`super::groups_reading`]) — every one of them handles the records
    /// again.
    pub source_readers: std::collections::BTreeMap<String, Vec<String>>,
    /// The partitions read only up to a transaction still open when the replay began: their
    /// position stops there, and the next run sends what the transaction committed.
    pub open_transactions: Vec<crate::dlq_reader::OpenTransaction>,
}

impl ReplayReport {
    /// Counts `outcome`, and keeps it in the sample when it is one passed over.
    pub(super) fn count(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Replayed { .. } => self.replayed += 1,
            Outcome::FilteredOut => self.filtered_out += 1,
            Outcome::Refused { .. } => self.refused += 1,
            Outcome::NotAnEnvelope { .. } => self.not_envelopes += 1,
            Outcome::Undecodable { .. } => self.undecodable += 1,
            Outcome::Lost { .. } => self.lost += 1,
            Outcome::AlreadyResolved { .. } => self.already_resolved += 1,
            Outcome::DestinationRefused { .. } => self.not_here += 1,
            Outcome::Untransformable { .. } => self.untransformable += 1,
        }
        let passed_over = !matches!(
            outcome,
            Outcome::Replayed { .. } | Outcome::FilteredOut | Outcome::AlreadyResolved { .. }
        );
        if passed_over && self.passed_over.len() < REPORT_SAMPLE {
            self.passed_over.push(outcome.clone());
        }
    }
}
