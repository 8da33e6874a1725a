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

    /// How many partitions `topic` has, if it exists.
    pub(crate) fn partitions(&self, topic: &str) -> Option<i32> {
        self.partitions.get(topic).copied()
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
        self.create_with(
            topics,
            |topic| match retention_ms(topic) {
                Some(ms) => vec![("retention.ms", ms.to_string())],
                None => Vec::new(),
            },
            event,
        )
        .await
    }

    /// Creates `topics` as [`Topics::create`] does, each with the settings `configs` gives it
    /// (none: the broker's defaults).
    pub(crate) async fn create_with<V: AsRef<str>>(
        &self,
        topics: &BTreeMap<String, i32>,
        configs: impl Fn(&str) -> Vec<(&'static str, V)>,
        event: &'static str,
    ) -> Result<(), TopicsError> {
        let Some(first) = topics.keys().next() else {
            return Ok(());
        };
        let settings: Vec<Vec<(&'static str, V)>> =
            topics.keys().map(|topic| configs(topic)).collect();
        let new: Vec<NewTopic> = topics
            .iter()
            .zip(&settings)
            .map(|((topic, count), settings)| {
                let mut topic = NewTopic::new(topic, *count, TopicReplication::Fixed(-1));
                for (key, value) in settings {
                    topic = topic.set(key, value.as_ref());
                }
                topic
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
                    let settings: Vec<String> = configs(&topic)
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_ref()))
                        .collect();
                    tracing::info!(event, %topic, partitions, settings = %settings.join(","));
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
        Ok(self
            .configs(topics)
            .await?
            .into_iter()
            .filter_map(|(topic, settings)| {
                let ms = settings.get("retention.ms")?.parse::<i64>().ok()?;
                Some((topic, ms))
            })
            .collect())
    }

    /// The configuration of each of `topics` that exists (every setting with a value), from
    /// one `DescribeConfigs` request.
    pub(crate) async fn configs(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, HashMap<String, String>>, TopicsError> {
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
            let settings = resource
                .entries
                .iter()
                .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
                .collect();
            found.insert(topic.to_string(), settings);
        }
        Ok(found)
    }
}
