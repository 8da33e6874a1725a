//! How many messages wait in a partition's own librdkafka queue: the one thing a worker needs
//! to know of its queue that rust-rdkafka does not say (`rd_kafka_queue_length`). The only
//! unsafe code in the library: three calls of librdkafka's C API, each on a queue reference
//! this type owns.
#![allow(unsafe_code)]

use std::any::Any;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use rdkafka::bindings::{
    rd_kafka_queue_destroy, rd_kafka_queue_get_partition, rd_kafka_queue_length, rd_kafka_queue_t,
    rd_kafka_t,
};

/// A reference to one partition's librdkafka queue, for its length.
pub(crate) struct QueueLength {
    queue: NonNull<rd_kafka_queue_t>,
    /// The client the queue belongs to, kept alive as long as the reference.
    _client: Arc<dyn Any + Send + Sync>,
}

// librdkafka's queue functions lock the queue; a reference may be used from any thread.
unsafe impl Send for QueueLength {}
unsafe impl Sync for QueueLength {}

impl QueueLength {
    /// The queue of `topic`/`partition` of the client `native` (its `native_ptr`), kept alive
    /// by `client`; `None` when librdkafka does not know the partition or the topic's name is
    /// not a C string.
    pub(crate) fn of(
        client: Arc<dyn Any + Send + Sync>,
        native: *mut rd_kafka_t,
        topic: &str,
        partition: i32,
    ) -> Option<Self> {
        let topic = CString::new(topic).ok()?;
        // SAFETY: `native` is the live client `client` keeps alive; the call returns a new
        // reference to the partition's queue (or null), which `Drop` gives back.
        let queue = unsafe { rd_kafka_queue_get_partition(native, topic.as_ptr(), partition) };
        Some(Self {
            queue: NonNull::new(queue)?,
            _client: client,
        })
    }

    /// Messages (and other events) waiting in the queue now.
    pub(crate) fn get(&self) -> usize {
        // SAFETY: the reference is live until `Drop`.
        unsafe { rd_kafka_queue_length(self.queue.as_ptr()) }
    }
}

impl Drop for QueueLength {
    fn drop(&mut self) {
        // SAFETY: the reference `of` took, given back once; the client is still alive (its
        // `Arc` drops after this).
        unsafe { rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}
