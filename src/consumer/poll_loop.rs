//! The member's poll loop: it serves the consumer's own queue (rebalances, errors; each
//! partition's records go to its worker's own queue), starts the worker of each partition the
//! rebalance callback assigned, and, exactly once, rewinds the partitions of an aborted
//! transaction. It knows librdkafka only as a [`Fetcher`] and a [`Seek`], so the simulation
//! runs this loop over its world.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::client::TopicPartition;
use super::poll::assignments::{Assigned, Assignments};
use super::poll::fetcher::{Fetcher, Polled};
use super::poll::rewind::{rewind, Seek};
use super::worker::{self, Shared};
use super::ConsumerError;
use crate::handler::BatchHandler;

/// Each worker the loop started, with its partition, in order: for a watcher of the workers
/// (the simulation checks each ends in time once its partition is revoked).
pub(in crate::consumer) type Started = Arc<Mutex<Vec<(TopicPartition, AbortHandle)>>>;

/// See the module docs.
pub(in crate::consumer) struct PollLoop<H: BatchHandler> {
    shared: Arc<Shared<H>>,
    assignments: Arc<Assignments>,
    /// Partitions assigned by the rebalance callback (or a rewind), waiting for their worker.
    assigned: mpsc::UnboundedReceiver<Assigned>,
    /// The topics subscribed to (a retry topic's worker finds its source among them).
    sources: Vec<String>,
    /// The workers started, and the transaction's committer.
    workers: JoinSet<()>,
    /// Each worker's partition, to name it when it dies.
    names: HashMap<tokio::task::Id, String>,
    started: Option<Started>,
}

impl<H: BatchHandler> PollLoop<H> {
    /// A loop starting the workers of `shared` for the partitions `assigned` sends (of
    /// `assignments`), of the subscribed topics `sources`; each worker started is also
    /// pushed to `started`, when given.
    pub(in crate::consumer) fn new(
        shared: Arc<Shared<H>>,
        assignments: Arc<Assignments>,
        assigned: mpsc::UnboundedReceiver<Assigned>,
        sources: Vec<String>,
        started: Option<Started>,
    ) -> Self {
        Self {
            shared,
            assignments,
            assigned,
            sources,
            workers: JoinSet::new(),
            names: HashMap::new(),
            started,
        }
    }

    /// Runs `task` beside the workers, to end with them at shutdown (the transaction's
    /// committer).
    pub(in crate::consumer) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.workers.spawn(task);
    }

    /// The workers and tasks started, for the shutdown to wait for.
    pub(in crate::consumer) fn into_workers(self) -> JoinSet<()> {
        self.workers
    }

    /// Polls `fetcher` until `shutdown` completes, starting workers as partitions are
    /// assigned and rewinding with `seek` when a transaction aborted. `Err` when the client
    /// hits a fatal error, a record comes to the consumer's own queue (its partition's queue
    /// was not split: it would be handled by no one), or a rewind fails (its records would be
    /// skipped); the caller then shuts down as usual.
    pub(in crate::consumer) async fn run(
        &mut self,
        fetcher: &mut impl Fetcher,
        seek: &dyn Seek,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), ConsumerError> {
        let rewinds = self.shared.transaction.clone();
        loop {
            let polled = tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(()),
                Some(assigned) = self.assigned.recv() => {
                    self.start(assigned);
                    continue;
                }
                _ = async { rewinds.as_ref().expect("checked").rewound.notified().await }, if rewinds.is_some() => {
                    let transaction = rewinds.as_ref().expect("checked");
                    rewind(transaction, seek, &self.assignments)
                        .await
                        .map_err(ConsumerError::Transaction)?;
                    continue;
                }
                Some(polled) = fetcher.next() => polled,
            };
            match polled {
                Polled::Stray(topic, partition, offset) => {
                    tracing::error!(event = "record_on_consumer_queue", %topic, partition, offset,
                        "a partition's records came to the consumer's own queue, where no worker reads them; stopping (its offset was not stored)");
                    return Err(ConsumerError::Fatal {
                        code: rdkafka::types::RDKafkaErrorCode::State,
                        reason: format!("record {topic}-{partition}-{offset} came to the consumer's own queue: its partition's queue was not split"),
                    });
                }
                Polled::Failed(error) => {
                    if let Some((code, reason)) = fetcher.fatal() {
                        tracing::error!(event = "consumer_fatal_error", error = %code, %reason,
                            "the Kafka client cannot go on; stopping");
                        return Err(ConsumerError::Fatal { code, reason });
                    }
                    // A partition's error (a batch it cannot decode, an offset out of range)
                    // is that partition's: the others go on at once. The context has placed
                    // and reported it already (`undecodable`).
                    crate::kafka::warn_gated("poll_failed", &error, "polling on");
                }
            }
            self.reap();
        }
    }

    /// Starts the worker of `assigned`.
    fn start(&mut self, assigned: Assigned) {
        let partition = (assigned.topic.clone(), assigned.partition);
        let worker = worker::start(&self.shared, assigned, &self.sources);
        let handle = self.workers.spawn(worker);
        self.names
            .insert(handle.id(), format!("{}-{}", partition.0, partition.1));
        if let Some(started) = &self.started {
            started
                .lock()
                .expect("started lock")
                .push((partition, handle));
        }
    }

    /// Takes the workers that ended; one that panicked is reported (its partition is no
    /// longer consumed here).
    fn reap(&mut self) {
        while let Some(done) = self.workers.try_join_next_with_id() {
            let (id, error) = match done {
                Ok((id, ())) => (id, None),
                Err(e) => (e.id(), Some(e)),
            };
            let name = self.names.remove(&id).unwrap_or_default();
            if let Some(e) = error.filter(|e| e.is_panic()) {
                let panic = crate::failure::panic_message(&e.into_panic());
                tracing::error!(event = "worker_died", partition = %name, error = %panic,
                    "the partition is no longer consumed here; /healthz fails until the process restarts");
                self.shared.out.metrics.worker_died(&name, &panic);
            }
        }
    }
}
