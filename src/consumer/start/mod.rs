//! What a consumer checks and prepares once the cluster admits it and before it subscribes,
//! each check refusing to start rather than lose a record:
//!
//! | file | what |
//! |---|---|
//! | [`cluster`] | waiting until the cluster admits the consumer (reachable, authorised) |
//! | [`retry_topics`] | the retry and redrive topics to follow, created when missing; records stranded in a tier no longer configured |
//! | [`dlq_topics`] | the dead-letter topics, created when missing (or why not) |
//! | [`park_topics`] | the park logs (parking keys after a failure), created when missing; refused when they would lose parked records |
//! | [`partitions`] | how many partitions the topics have: each partition's queue gets its share of the buffer |
//! | [`topic_retention`] | retry and redrive topics that keep records long enough to handle them |

pub(in crate::consumer) mod cluster;
pub(in crate::consumer) mod dlq_topics;
pub(in crate::consumer) mod park_topics;
pub(in crate::consumer) mod partitions;
pub(in crate::consumer) mod retry_topics;
pub(in crate::consumer) mod topic_retention;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::ConsumerConfig;
use crate::consumer::progress::transaction::Transaction;
use crate::consumer::{ConsumerError, TransactionError};

/// Checks and prepares `config`'s topics, and starts the transactional producer (exactly
/// once: fencing an earlier producer of its id); the topics to subscribe to. `stop` ends the
/// wait for retry topics being created.
pub(in crate::consumer) async fn prepare(
    config: &ConsumerConfig,
    stop: &CancellationToken,
    transaction: Option<Arc<Transaction>>,
) -> Result<Vec<String>, ConsumerError> {
    // The source topics, then their retry topics (none without retry tiers) and this
    // group's redrive topics.
    let mut topics = config.topics.clone();
    topics.extend(
        retry_topics::follow_up_topics(config)
            .into_iter()
            .map(|(topic, _)| topic),
    );
    match retry_topics::stranded(config).await {
        Some(retry_topics::Stranded {
            topic,
            records,
            removed_source: None,
        }) => return Err(ConsumerError::StrandedRetryRecords { topic, records }),
        Some(retry_topics::Stranded {
            topic,
            records,
            removed_source: Some(source),
        }) => {
            return Err(ConsumerError::StrandedSourceRecords {
                source_topic: source,
                topic,
                records,
            })
        }
        None => {}
    }
    dlq_topics::ensure(config).await?;
    park_topics::ensure(config).await?;
    retry_topics::ensure(config, stop).await;
    topic_retention::check(config).await?;
    if let Some(transaction) = transaction {
        // Fences an earlier producer of the id, and opens the first transaction.
        tokio::task::spawn_blocking(move || transaction.start())
            .await
            .expect("init_transactions does not panic")
            .map_err(|e| TransactionError::Start { why: e.to_string() })?;
    }
    Ok(topics)
}
