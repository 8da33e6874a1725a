//! The group's park log in the world: each source partition's events, appended as they are
//! handed over (in that order, as one producer's writes to one partition land), acknowledged
//! after a delay drawn from the seed; a parked record is in the log, and so settled, from
//! then on. A head that `park_max_age` expired is one whose order is given up. Trimmed events
//! are gone for every reader. Read by the workers' real `PartitionPark` through the same seam
//! as Kafka's.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::world::{WorldRef, SOURCE};
use crate::consumer::park::log::{ParkLog, ParkRead, ParkReader, PendingPark};
use crate::park::{How, ParkEvent};

/// The park log of the world's source topic.
pub(super) struct SimParkLog {
    pub world: WorldRef,
}

impl ParkLog for SimParkLog {
    fn write(
        &self,
        source: &str,
        partition: i32,
        event: &ParkEvent,
        _cancel: CancellationToken,
    ) -> PendingPark {
        assert_eq!(source, SOURCE, "a park event of the source topic");
        let (at, delay) = {
            let mut world = self.world.lock();
            let max = world.max_ack.as_millis() as u64;
            let delay = Duration::from_millis(world.rng.u64(0..=max));
            let log = world.park_logs.entry(partition).or_default();
            log.push(event.clone());
            let at = log.len() as i64 - 1;
            let tp = (SOURCE.to_string(), partition);
            match event {
                ParkEvent::Parked { offset, .. } => {
                    world
                        .partitions
                        .entry(tp)
                        .or_default()
                        .exited
                        .insert(*offset);
                }
                // `park_max_age` gave the head's order up: the key's later records go on.
                ParkEvent::Resolved {
                    head,
                    how: How::Expired,
                    ..
                } => {
                    world
                        .partitions
                        .entry(tp)
                        .or_default()
                        .gave_up
                        .insert(*head);
                }
                _ => {}
            }
            (at, delay)
        };
        // Handed to the producer now: the acknowledgement comes `delay` after this call,
        // however late the future is first polled (as the dead-letter writes' do).
        let acknowledged = tokio::time::Instant::now() + delay;
        Box::pin(async move {
            tokio::time::sleep_until(acknowledged).await;
            Ok(at)
        })
    }

    fn trim(&self, source: &str, partition: i32, before: i64) {
        assert_eq!(source, SOURCE, "a park log of the source topic");
        let mut world = self.world.lock();
        let end = world.park_logs.get(&partition).map_or(0, Vec::len) as i64;
        assert!(
            before <= end,
            "a trim of park partition {partition} before {before}, past its end {end}"
        );
        let start = world.park_log_starts.entry(partition).or_default();
        *start = (*start).max(before);
    }

    fn reader(&self, _source: &str, partition: i32) -> Box<dyn ParkReader> {
        Box::new(SimParkReader {
            world: self.world.clone(),
            partition,
        })
    }
}

/// A reader of one partition's park log.
struct SimParkReader {
    world: WorldRef,
    partition: i32,
}

impl ParkReader for SimParkReader {
    fn read(&mut self, from: i64) -> ParkRead {
        let world = self.world.lock();
        let log = world
            .park_logs
            .get(&self.partition)
            .map_or(&[][..], Vec::as_slice);
        // Trimmed events are gone, as Kafka's are after DeleteRecords.
        let start = world
            .park_log_starts
            .get(&self.partition)
            .copied()
            .unwrap_or(0);
        let from = from.max(start).max(0) as usize;
        let events = log
            .iter()
            .enumerate()
            .skip(from)
            .map(|(at, event)| (at as i64, event.clone()))
            .collect();
        let next = log.len().max(from) as i64;
        Box::pin(std::future::ready(Ok((events, next))))
    }
}
