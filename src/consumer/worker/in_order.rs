//! In-order mode: a partition's records one at a time (or one batch at a time) in offset
//! order; a retry topic's records one at a time, each once it is due. A record handler takes
//! what is ready in chunks and stores the position once per chunk; its dead letters are
//! written while the partition goes on ([`crate::consumer::progress`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::attempt::settle_record;
use super::bisect::settle_batch;
use super::intake::Intake;
use super::release::park_turn;
use super::retry_wait::wait_until_due;
use super::Shared;
use crate::consumer::park::partition::CATCH_UP_EVERY;
use crate::consumer::park::PartitionPark;
use crate::consumer::progress::{Progress, Way};
use crate::handler::BatchHandler;
use crate::park::Decision;
use crate::stopped::Stopped;

/// Settles the records of one partition in offset order until `cancel` fires.
pub(super) async fn run<H: BatchHandler>(
    shared: Arc<Shared<H>>,
    mut input: Intake,
    cancel: CancellationToken,
) {
    // A record handler takes what is ready in chunks and handles the records one by one,
    // storing the offset once per chunk; a batch handler takes one batch at a time.
    // A retry topic's records go one at a time whatever the batch size.
    let batch_size = if input.stage.is_retry() {
        1
    } else {
        shared.batch_size
    };
    let (take, linger) = if batch_size == 1 {
        (256, Duration::ZERO)
    } else {
        (batch_size, shared.batch_linger)
    };
    // A batch's dead letters are written before its position moves on; a record's while
    // the partition goes on.
    let way = match (&shared.transaction, batch_size) {
        (Some(transaction), _) => Way::Transaction(transaction.clone()),
        (None, 1) => Way::pipelined(),
        (None, _) => Way::Inline,
    };
    let mut settled = Progress::new(
        &input.topic,
        input.partition,
        way,
        input.revoked.clone(),
        shared.out.clone(),
    );
    let mut metrics = input.metrics.local(&shared.caller.breaker);
    // A chunk of records, settled one by one, stays within the partition's share.
    if batch_size == 1 {
        input.bounded_by_share();
    }
    // A source partition that parks reads its park log before its first record.
    if let (Some(parking), false) = (&shared.out.park, input.stage.is_retry()) {
        let log = parking.log.clone();
        let metrics = shared.out.metrics.clone();
        match PartitionPark::open(log, &input.topic, input.partition, metrics, &cancel).await {
            Ok(park) => settled.set_park(park),
            Err(Stopped) => return,
        }
    }
    'work: while !cancel.is_cancelled() {
        let parked = settled.park().is_some_and(|p| !p.table().is_empty());
        let took = if parked {
            // While keys are parked, the park log is read again now and then, records or not.
            match tokio::time::timeout(CATCH_UP_EVERY, input.take(take, linger, &cancel)).await {
                Ok(took) => took,
                Err(_) => {
                    if park_turn(&shared, &mut metrics, &mut settled, &cancel)
                        .await
                        .is_err()
                    {
                        break;
                    }
                    settled.store();
                    // No take starts with writes in flight: none would be driven.
                    if wait_writing(&mut settled, &mut input, &cancel)
                        .await
                        .is_err()
                    {
                        break;
                    }
                    continue;
                }
            }
        } else {
            input.take(take, linger, &cancel).await
        };
        let Some((records, taken)) = took else {
            break;
        };
        for record in &records {
            settled.take(record);
        }
        if batch_size == 1 {
            for record in &records {
                if let Some(retry) = record.retry.as_ref().filter(|r| !r.is_for(&shared.group)) {
                    // Another service's retry record, on the retry topic they share: not
                    // this group's to handle, nor to wait for.
                    tracing::debug!(event = "retry_record_of_another_group", topic = %retry.topic,
                        partition = retry.partition, offset = retry.offset,
                        written_by = retry.group.as_deref().unwrap_or_default());
                    settled.settle(record);
                    continue;
                }
                match settled.park().map_or(Decision::Pass, |p| p.decide(record)) {
                    Decision::Pass => {}
                    Decision::AlreadyParked => {
                        settled.settle(record);
                        continue;
                    }
                    Decision::Park => {
                        // The next call does not follow the last one straight on.
                        metrics.follows = None;
                        let park = settled.park_record(record, taken, &cancel);
                        if input.alongside(park, &cancel).await.is_err() {
                            break 'work;
                        }
                        continue;
                    }
                }
                // No call starts once `cancel` fired (`settle_record` asks the breaker's
                // permit, which checks it), nor a retry record's wait.
                if record.retry.is_some() {
                    // It waits until it is due: its call does not follow the last one.
                    metrics.flush();
                    if cancel.is_cancelled()
                        || wait_until_due(&shared, record, &input, &mut settled, &cancel)
                            .await
                            .is_err()
                    {
                        break 'work;
                    }
                }
                settled.make_room().await;
                let settle =
                    settle_record(&shared, &mut metrics, record, taken, &mut settled, &cancel);
                if input.alongside(settle, &cancel).await.is_err() {
                    break 'work;
                }
            }
        } else if settle_batch(
            &shared,
            &mut metrics,
            &records,
            taken,
            &mut settled,
            &cancel,
        )
        .await
        .is_err()
        {
            break;
        }
        settled.store();
        metrics.flush();
        input.give_back(records);
        if settled.park().is_some()
            && park_turn(&shared, &mut metrics, &mut settled, &cancel)
                .await
                .is_err()
        {
            break;
        }
        // A worker whose queue is never empty would otherwise run tokio's whole budget (4,096
        // records) before its thread's other tasks get a turn: other workers' dead-letter
        // acknowledgements and the transaction's commits waited behind it, the p99 from fetch
        // to settle of `poison1` and the `eos-*` scenarios 25-51 ms instead of 2-6.
        tokio::task::yield_now().await;
        if wait_writing(&mut settled, &mut input, &cancel)
            .await
            .is_err()
        {
            break;
        }
    }
    settled.finish().await;
}

/// Until the next record comes, stores the offsets of the writes in flight as they are
/// acknowledged (an idle partition's last dead letters get committed too); while keys are
/// parked, only until the park log is due to be read again. `Err` once `cancel` fired.
async fn wait_writing(
    settled: &mut Progress,
    input: &mut Intake,
    cancel: &CancellationToken,
) -> Result<(), Stopped> {
    if !settled.writing() {
        return Ok(());
    }
    let parked = settled.park().is_some_and(|p| !p.table().is_empty());
    let next = input.next(cancel);
    let waited = if parked {
        let next = tokio::time::timeout(CATCH_UP_EVERY, next);
        settled.meanwhile(next).await.ok()
    } else {
        Some(settled.meanwhile(next).await)
    };
    match waited {
        Some(Some(record)) => input.peeked = Some(record),
        Some(None) => return Err(Stopped),
        None => {}
    }
    Ok(())
}
