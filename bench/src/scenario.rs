//! The scenarios: who runs (the bare loop, kafka-dlq, a peer), on which records, what its
//! ratio compares it with, and which peer does the same job.

use kafka_dlq::config::Ordering;

use crate::handler::Behaviour;

/// Who runs a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// The plain rdkafka loop.
    Baseline,
    /// The plain rdkafka loop split by partition, a task per partition queue.
    BaselineSplit,
    /// kafka-dlq.
    Ours(Behaviour, Ordering),
    /// kafka-dlq with `exactly_once` (in partition order): offsets and dead letters in
    /// transactions.
    OursExactlyOnce(Behaviour),
    /// kafka-dlq with `key_order_after_failure = "park"` (in partition order): each record
    /// that leaves parks its key in the group's park log. The main topic's keys are unique,
    /// so nothing waits behind a head: what it costs the other keys, and what the parked keys
    /// cost in memory.
    OursParking(Behaviour),
    /// Spring Kafka (`bench/peers/spring-kafka`) with this scenario name.
    Spring(&'static str),
    /// Parallel Consumer in KEY order (`bench/peers/parallel-consumer`) with this scenario.
    ParallelConsumer(&'static str),
}

impl Runner {
    /// Whether a Java peer runs it.
    pub fn is_peer(self) -> bool {
        matches!(self, Runner::Spring(_) | Runner::ParallelConsumer(_))
    }

    /// Whether kafka-dlq runs it.
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Runner::Ours(..) | Runner::OursExactlyOnce(_) | Runner::OursParking(_)
        )
    }
}

/// Which records a scenario consumes, and when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    /// The whole main topic.
    Whole,
    /// The whole main topic but partition 0, whose first record is stuck.
    AllButPartition0,
    /// The first `--slow-records` of the main topic.
    Slow,
    /// The first `--transactional-records` of the main topic.
    Transactional,
    /// The README topic (Parallel Consumer's workload), whole.
    Readme,
}

/// What a scenario's ratio is to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatioTo {
    /// Nothing (shown as `-`).
    Nothing,
    /// Another scenario's rate.
    Rate(&'static str),
    /// The share of another scenario's rate that the unstuck partitions had in it.
    Share(&'static str),
}

/// One scenario.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub runner: Runner,
    pub data: Data,
    pub ratio_to: RatioTo,
    /// The peer scenario doing the same job, for kafka-dlq's rows.
    pub peer: Option<&'static str>,
}

const fn s(
    name: &'static str,
    runner: Runner,
    data: Data,
    ratio_to: RatioTo,
    peer: Option<&'static str>,
) -> Scenario {
    Scenario {
        name,
        runner,
        data,
        ratio_to,
        peer,
    }
}

use Data::{AllButPartition0, Whole};
use Ordering::{Key, Partition};
use RatioTo::*;

/// Every scenario, in the order they run in each pass: each peer right after the kafka-dlq
/// scenario it is compared with, and the dead-letter scenarios last, because their dead
/// letters slow a broker down for a while after them.
pub const ALL: [Scenario; 22] = [
    s("baseline", Runner::Baseline, Whole, Nothing, None),
    s(
        "baseline-split",
        Runner::BaselineSplit,
        Whole,
        Rate("baseline"),
        None,
    ),
    s(
        "noop",
        Runner::Ours(Behaviour::Noop, Partition),
        Whole,
        Rate("baseline"),
        Some("spring-noop"),
    ),
    s(
        "spring-noop",
        Runner::Spring("noop"),
        Whole,
        Rate("baseline"),
        None,
    ),
    s(
        "eos-noop",
        Runner::OursExactlyOnce(Behaviour::Noop),
        Data::Transactional,
        Rate("noop"),
        Some("spring-tx-noop"),
    ),
    s(
        "spring-tx-noop",
        Runner::Spring("tx-noop"),
        Data::Transactional,
        Rate("spring-noop"),
        None,
    ),
    s(
        "stalled",
        Runner::Ours(Behaviour::Stalled, Partition),
        AllButPartition0,
        Share("noop"),
        Some("spring-stalled"),
    ),
    s(
        "spring-stalled",
        Runner::Spring("stalled"),
        AllButPartition0,
        Share("spring-noop"),
        None,
    ),
    s(
        "slow",
        Runner::Ours(Behaviour::Slow, Partition),
        Data::Slow,
        Nothing,
        Some("spring-slow"),
    ),
    s(
        "spring-slow",
        Runner::Spring("slow"),
        Data::Slow,
        Nothing,
        None,
    ),
    s(
        "slow-keyed",
        Runner::Ours(Behaviour::Slow, Key),
        Data::Slow,
        Rate("slow"),
        Some("pc-slow-keyed"),
    ),
    s(
        "pc-slow-keyed",
        Runner::ParallelConsumer("slow"),
        Data::Slow,
        Rate("slow"),
        None,
    ),
    s(
        "readme-partition",
        Runner::Ours(Behaviour::Readme, Partition),
        Data::Readme,
        Nothing,
        None,
    ),
    s(
        "readme-keyed",
        Runner::Ours(Behaviour::Readme, Key),
        Data::Readme,
        Rate("readme-partition"),
        Some("pc-readme"),
    ),
    s(
        "pc-readme",
        Runner::ParallelConsumer("readme"),
        Data::Readme,
        Rate("readme-partition"),
        None,
    ),
    s(
        "poison1",
        Runner::Ours(Behaviour::Poison1, Partition),
        Whole,
        Rate("noop"),
        Some("spring-poison1"),
    ),
    s(
        "spring-poison1",
        Runner::Spring("poison1"),
        Whole,
        Rate("spring-noop"),
        None,
    ),
    s(
        "poison1-park",
        Runner::OursParking(Behaviour::Poison1),
        Whole,
        Rate("poison1"),
        None,
    ),
    s(
        "poison10",
        Runner::Ours(Behaviour::Poison10, Partition),
        Whole,
        Rate("noop"),
        None,
    ),
    s(
        "poison10-park",
        Runner::OursParking(Behaviour::Poison10),
        Whole,
        Rate("poison10"),
        None,
    ),
    s(
        "eos-poison1",
        Runner::OursExactlyOnce(Behaviour::Poison1),
        Data::Transactional,
        Rate("eos-noop"),
        Some("spring-tx-poison1"),
    ),
    s(
        "spring-tx-poison1",
        Runner::Spring("tx-poison1"),
        Data::Transactional,
        Rate("spring-tx-noop"),
        None,
    ),
];

/// The scenario called `name`.
pub fn named(name: &str) -> Option<Scenario> {
    ALL.iter().copied().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_names_a_scenario_that_runs_before_it() {
        for (i, s) in ALL.iter().enumerate() {
            let refs = [
                match s.ratio_to {
                    Rate(n) | Share(n) => Some(n),
                    Nothing => None,
                },
                s.peer,
            ];
            for name in refs.into_iter().flatten() {
                let at = ALL.iter().position(|o| o.name == name);
                assert!(at.is_some(), "{} refers to unknown {name}", s.name);
                if Some(name) != s.peer {
                    assert!(at.unwrap() < i, "{} runs before {name}", s.name);
                }
            }
        }
    }
}
