//! The consumer as a member's workers see it: its [`Client`] (positions, pauses, the clock)
//! and the [`RecordSource`] of each partition it reads, over the [`World`]'s fetch queues.

use std::task::{Context, Poll};

use chrono::{DateTime, Utc};

use super::super::client::{Client, TopicPartition};
use super::super::source::RecordSource;
use super::world::{delivered, WorldRef};
use crate::record::Record;

/// A member's consumer, as its workers see it.
pub(super) struct SimClient {
    pub world: WorldRef,
    pub member: usize,
}

impl Client for SimClient {
    fn store_position(&self, topic: &str, partition: i32, position: i64) -> Result<(), String> {
        let mut world = self.world.lock();
        let tp = (topic.to_string(), partition);
        if !world.members[self.member].assigned.contains(&tp) {
            return Err("not assigned".into());
        }
        world.check_position(&tp, position, "stored");
        world.members[self.member].stored.insert(tp, position);
        Ok(())
    }

    fn pause(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        let member = &mut world.members[self.member];
        for tp in partitions {
            member.paused.insert(tp.clone());
            // Pausing drops what was fetched; it is fetched again from the app position.
            if let Some(queue) = member.queues.get_mut(tp) {
                queue.records.clear();
                queue.fetch = queue.app;
            }
        }
        Ok(())
    }

    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        for tp in partitions {
            world.members[self.member].paused.remove(tp);
            world.fetch(self.member, tp);
        }
        Ok(())
    }

    fn start_at_beginning_unless_committed(
        &self,
        _topic: &str,
        _partition: i32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        // Simulated partitions without a committed position always start at their beginning.
        Box::pin(async {})
    }

    fn now(&self) -> DateTime<Utc> {
        self.world.lock().now()
    }
}

/// One member's reader of one partition's queue.
pub(super) struct SimSource {
    pub world: WorldRef,
    pub member: usize,
    pub tp: TopicPartition,
}

impl RecordSource for SimSource {
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<Record> {
        let mut world = self.world.lock();
        let member = &mut world.members[self.member];
        let queue = member.queues.entry(self.tp.clone()).or_default();
        match queue.records.pop_front() {
            Some(record) => {
                let delivered = delivered(&record).1;
                queue.app = delivered + 1;
                if record.retry.is_some() {
                    member
                        .handed_retry
                        .insert(self.tp.clone(), (delivered, tokio::time::Instant::now()));
                }
                let tp = self.tp.clone();
                world.fetch(self.member, &tp);
                Poll::Ready(record)
            }
            None => {
                queue.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
