//! Which consumer groups read a topic, from the broker's own group listing: what a replay to
//! the source topic (`--to-source`) warns about, since every one of them handles the records
//! again.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::kafka::LogContext;

/// At most this many of the broker's groups are asked for their offsets.
pub const MAX_GROUPS_ASKED: usize = 500;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The consumer groups that read `topic`: the groups the brokers list (`ListGroups`, both
/// group protocols) that have a committed offset on any of its partitions (`OffsetFetch`),
/// sorted, less kafka-dlq's own replay groups (`kafka-dlq-replay…`). At most
/// [`MAX_GROUPS_ASKED`] groups are asked. Blocks: one listing, then one offset request per
/// group.
pub fn groups_reading(
    brokers: &str,
    librdkafka: &crate::kafka::ClientOptions,
    topic: &str,
) -> Result<Vec<String>, KafkaError> {
    let client = |group: Option<&str>| -> Result<BaseConsumer<LogContext>, KafkaError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        librdkafka.apply(&mut config);
        if let Some(group) = group {
            // Only asks for the group's offsets: never subscribes, so it never joins.
            config
                .set("group.id", group)
                .set("enable.auto.commit", "false");
        }
        crate::kafka::create_logged(&config)
    };
    let lister = client(None)?;
    let metadata = lister.fetch_metadata(Some(topic), TIMEOUT)?;
    let partitions = metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32);
    let listed = lister.fetch_group_list(None, TIMEOUT)?;
    let mut names: Vec<String> = listed
        .groups()
        .iter()
        .map(|g| g.name().to_string())
        .filter(|name| !name.starts_with(crate::dlq_reader::REPLAY_GROUP))
        .collect();
    names.sort();
    names.dedup();
    let mut reading = Vec::new();
    for name in names.into_iter().take(MAX_GROUPS_ASKED) {
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition(topic, partition);
        }
        let committed = client(Some(&name))?.committed_offsets(list, TIMEOUT)?;
        if committed
            .elements()
            .iter()
            .any(|e| matches!(e.offset(), Offset::Offset(_)))
        {
            reading.push(name);
        }
    }
    Ok(reading)
}
