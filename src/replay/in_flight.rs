//! The dead letters a replay has dealt with whose sends are not acknowledged yet, in the order
//! they were read. A replay keeps up to [`WINDOW`] sends in flight instead of awaiting each:
//! a record is counted, reported and made committable only once it and every record read before
//! it are acknowledged, so the committed position never passes an unacknowledged send.

use std::collections::{BTreeMap, VecDeque};

use futures_util::FutureExt as _;
use rdkafka::error::KafkaError;
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::DeliveryFuture;

use super::Outcome;

/// How many sends a replay keeps in flight.
pub(super) const WINDOW: usize = 1_000;

/// One dead letter dealt with.
pub(super) struct Dealt {
    /// Its DLQ partition and offset.
    pub partition: i32,
    pub offset: i64,
    pub outcome: Outcome,
    /// The send's acknowledgement, for a record sent.
    pub delivery: Option<DeliveryFuture>,
    /// Its failure, once the acknowledgement came and said so.
    pub failed: Option<KafkaError>,
}

/// A delivery's failure: `None` when acknowledged.
fn failure<E>(delivered: Result<OwnedDeliveryResult, E>) -> Option<KafkaError> {
    match delivered {
        Ok(Ok(_)) => None,
        Ok(Err((source, _))) => Some(source),
        Err(_) => Some(KafkaError::Canceled),
    }
}

/// Why a send failed: the record's id and destination, and the cause.
pub(super) struct SendFailed {
    pub id: String,
    pub to: String,
    pub source: KafkaError,
}

/// The dead letters dealt with and not finished, and the positions the finished ones allow.
#[derive(Default)]
pub(super) struct InFlight {
    dealt: VecDeque<Dealt>,
    /// Per DLQ partition, the offset after its last finished record, not yet committed.
    committable: BTreeMap<i32, i64>,
}

impl InFlight {
    /// Adds `dealt`, the record read after every one added before.
    pub(super) fn push(&mut self, dealt: Dealt) {
        self.dealt.push_back(dealt);
    }

    /// How many are not finished.
    pub(super) fn len(&self) -> usize {
        self.dealt.len()
    }

    /// Waits for the oldest one's acknowledgement and returns its outcome, making its position
    /// committable; `None` when there is none. A failed send is returned as such, and neither
    /// it nor anything read after it becomes committable.
    pub(super) async fn finish_oldest(&mut self) -> Option<Result<Outcome, SendFailed>> {
        let mut dealt = self.dealt.pop_front()?;
        if let Some(delivery) = dealt.delivery.take() {
            dealt.failed = failure(delivery.await);
        }
        if let Some(source) = dealt.failed.take() {
            let (id, to) = match &dealt.outcome {
                Outcome::Replayed { id, to } => (id.clone(), to.clone()),
                _ => (String::new(), String::new()),
            };
            self.dealt.clear();
            return Some(Err(SendFailed { id, to, source }));
        }
        self.committable.insert(dealt.partition, dealt.offset + 1);
        Some(Ok(dealt.outcome))
    }

    /// Whether the oldest one can finish without waiting: not a send, or its acknowledgement
    /// came.
    pub(super) fn oldest_is_done(&mut self) -> bool {
        let Some(oldest) = self.dealt.front_mut() else {
            return false;
        };
        let Some(delivery) = oldest.delivery.as_mut() else {
            return true;
        };
        match delivery.now_or_never() {
            Some(delivered) => {
                oldest.failed = failure(delivered);
                oldest.delivery = None;
                true
            }
            None => false,
        }
    }

    /// The positions to commit (partition, next offset) since the last call.
    pub(super) fn take_committable(&mut self) -> BTreeMap<i32, i64> {
        std::mem::take(&mut self.committable)
    }
}
