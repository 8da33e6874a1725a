//! The consumer as a member's workers see it: its [`Client`] (positions, pauses, the clock)
//! over the [`World`](super::world::World).

use chrono::{DateTime, Utc};

use super::world::WorldRef;
use crate::consumer::client::{Client, TopicPartition};

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
        // A position never moves back within an assignment, nor before where it started: a
        // store behind the committed position would have it committed again and again.
        let member = &world.members[self.member];
        let floor = member.stored.get(&tp).max(member.starts.get(&tp)).copied();
        if let Some(floor) = floor.filter(|f| position < *f) {
            let violation = format!(
                "stored position {position} of {}-{} moves back from {floor}",
                tp.0, tp.1
            );
            world.violations.push(violation);
        }
        world.members[self.member].stored.insert(tp, position);
        Ok(())
    }

    /// A worker pauses through its feed (a retry wait, a trim), which notes why.
    fn pause(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        for tp in partitions {
            world.pause(self.member, tp);
        }
        Ok(())
    }

    fn resume(&self, partitions: &[TopicPartition]) -> Result<(), String> {
        let mut world = self.world.lock();
        for tp in partitions {
            world.resume(self.member, tp);
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

impl crate::consumer::poll::rewind::Seek for SimClient {
    fn seek<'a>(
        &'a self,
        partition: &'a TopicPartition,
        position: i64,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), rdkafka::error::KafkaError>> + Send + 'a>,
    > {
        let sought = self.world.lock().seek(self.member, partition, position);
        Box::pin(async move { sought })
    }

    fn resume_partition(&self, partition: &TopicPartition) {
        self.world.lock().resume(self.member, partition);
    }

    fn committed<'a>(
        &'a self,
        partition: &'a TopicPartition,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Option<i64>, rdkafka::error::KafkaError>>
                + Send
                + 'a,
        >,
    > {
        let committed = self.world.lock().committed.get(partition).copied();
        Box::pin(async move { Ok(committed) })
    }
}
