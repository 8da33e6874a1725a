//! The topics kafka-dlq creates itself (dead-letter, retry and redrive topics): which exist,
//! and creating the missing ones with as many partitions as the topic they serve and the
//! broker's default replication.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::LogContext;

/// Why the cluster's topics could not be read or a topic could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopicsError {
    /// The admin client could not be created (a bad setting).
    #[error("could not create the admin client: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    /// The cluster's topics could not be read (a broker down, a timeout).
    #[error("could not read the cluster's topics: {0}")]
    Metadata(#[source] rdkafka::error::KafkaError),
    /// The request to create topics failed as a whole.
    #[error("could not create {topic}: {source}")]
    Request {
        /// The first topic of the request.
        topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A topic's configuration could not be read (`DescribeConfigs`: no permission, a
    /// timeout).
    #[error("could not read the configuration of {topic}: {source}")]
    Describe {
        /// The (first) topic asked about.
        topic: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker refused to create this topic (e.g. no permission).
    #[error("could not create {topic}: {code}")]
    Create {
        /// The topic.
        topic: String,
        /// The broker's answer.
        code: RDKafkaErrorCode,
    },
}

/// The cluster's topics, as one metadata read saw them.
pub(crate) struct Topics {
    admin: AdminClient<LogContext>,
    /// Each topic the cluster has, with its partition count.
    partitions: HashMap<String, i32>,
}

impl Topics {
    /// Reads the cluster's topics through an admin client of `config` (off the async threads:
    /// the read blocks, for at most 10 s).
    pub(crate) async fn read(config: &ClientConfig) -> Result<Self, TopicsError> {
        let admin: AdminClient<LogContext> =
            super::create_logged(config).map_err(TopicsError::Client)?;
        let (admin, metadata) = tokio::task::spawn_blocking(move || {
            let metadata = admin.inner().fetch_metadata(None, Duration::from_secs(10));
            (admin, metadata)
        })
        .await
        .expect("metadata fetch does not panic");
        let partitions = metadata
            .map_err(TopicsError::Metadata)?
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len() as i32))
            .collect();
        Ok(Self { admin, partitions })
    }

    /// Whether `topic` exists.
    pub(crate) fn exists(&self, topic: &str) -> bool {
        self.partitions.contains_key(topic)
    }

    /// Of `wanted` (each a topic and the topic it serves, whose partition count it takes), the
    /// ones that do not exist, each once, with that partition count (`-1`, the broker's
    /// default, when the served topic does not exist either).
    pub(crate) fn missing<'a>(
        &self,
        wanted: impl IntoIterator<Item = (String, &'a str)>,
    ) -> BTreeMap<String, i32> {
        let mut missing = BTreeMap::new();
        for (topic, serves) in wanted {
            if !self.exists(&topic) {
                let count = self.partitions.get(serves).copied().unwrap_or(-1);
                missing.entry(topic).or_insert(count);
            }
        }
        missing
    }

    /// Creates `topics` (each with its partition count), with the broker's default
    /// replication and the `retention.ms` that `retention_ms` gives each (`-1`: for ever;
    /// `None`: the broker's default); one that exists by now counts as created. Logs each one
    /// created as `event`.
    pub(crate) async fn create(
        &self,
        topics: &BTreeMap<String, i32>,
        retention_ms: impl Fn(&str) -> Option<i64>,
        event: &'static str,
    ) -> Result<(), TopicsError> {
        let Some(first) = topics.keys().next() else {
            return Ok(());
        };
        let retention: Vec<Option<String>> = topics
            .keys()
            .map(|topic| retention_ms(topic).map(|ms| ms.to_string()))
            .collect();
        let new: Vec<NewTopic> = topics
            .iter()
            .zip(&retention)
            .map(|((topic, count), retention)| {
                let topic = NewTopic::new(topic, *count, TopicReplication::Fixed(-1));
                match retention {
                    Some(ms) => topic.set("retention.ms", ms),
                    None => topic,
                }
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self
            .admin
            .create_topics(&new, &options)
            .await
            .map_err(|source| TopicsError::Request {
                topic: first.clone(),
                source,
            })?;
        for result in results {
            match result {
                Ok(topic) => {
                    let partitions = topics.get(&topic).copied().unwrap_or(-1);
                    let retention_ms = retention_ms(&topic);
                    tracing::info!(event, %topic, partitions, ?retention_ms);
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(TopicsError::Create { topic, code }),
            }
        }
        Ok(())
    }

    /// The `retention.ms` of each of `topics` that exists (`-1`: for ever), from one
    /// `DescribeConfigs` request.
    pub(crate) async fn retention_ms(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, i64>, TopicsError> {
        let existing: Vec<&String> = topics.iter().filter(|t| self.exists(t)).collect();
        let Some(first) = existing.first() else {
            return Ok(HashMap::new());
        };
        let specifiers: Vec<ResourceSpecifier> = existing
            .iter()
            .map(|t| ResourceSpecifier::Topic(t.as_str()))
            .collect();
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
        let results = self
            .admin
            .describe_configs(&specifiers, &options)
            .await
            .map_err(|source| TopicsError::Describe {
                topic: first.to_string(),
                source,
            })?;
        let mut found = HashMap::new();
        for (topic, result) in existing.iter().zip(results) {
            let resource = result.map_err(|code| TopicsError::Describe {
                topic: topic.to_string(),
                source: rdkafka::error::KafkaError::AdminOp(code),
            })?;
            let retention = resource
                .get("retention.ms")
                .and_then(|e| e.value.as_deref())
                .and_then(|v| v.parse::<i64>().ok());
            if let Some(ms) = retention {
                found.insert(topic.to_string(), ms);
            }
        }
        Ok(found)
    }
}
