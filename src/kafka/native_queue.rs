//! A partition's own librdkafka queue, read through librdkafka's C API where rust-rdkafka
//! costs more than the record: its length (`rd_kafka_queue_length`, which rust-rdkafka does not
//! offer), and its messages popped many at a time (`rd_kafka_consume_batch_queue`).
//!
//! rust-rdkafka pops one message per call: each reads the clock three times, takes the
//! poll-interval mutex and allocates a reference count for the message's event — about 250 ns
//! a record of the 385 a worker spent popping its queue (`docs/benchmark.md`). A batch pays
//! that once. The library's only unsafe code: the calls below, each on a queue reference or a
//! message this module owns.
#![allow(unsafe_code)]

use std::any::Any;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::Arc;

use rdkafka::bindings::{
    rd_kafka_consume_batch_queue, rd_kafka_message_destroy, rd_kafka_message_headers,
    rd_kafka_message_t, rd_kafka_message_timestamp, rd_kafka_queue_destroy,
    rd_kafka_queue_get_partition, rd_kafka_queue_length, rd_kafka_queue_t, rd_kafka_resp_err_t,
    rd_kafka_t, rd_kafka_timestamp_type_t, rd_kafka_topic_name,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedHeaders, Message, Timestamp};

/// Messages popped in one call at most: a worker's chunk is 256, and a run of 64 already
/// spreads the call's fixed cost below 10 ns a message.
const AT_ONCE: usize = 64;

/// A reference to one partition's librdkafka queue.
pub(crate) struct NativeQueue {
    queue: NonNull<rd_kafka_queue_t>,
    /// The client the queue belongs to, kept alive as long as the reference.
    _client: Arc<dyn Any + Send + Sync>,
}

// librdkafka's queue functions lock the queue; a reference may be used from any thread.
unsafe impl Send for NativeQueue {}
unsafe impl Sync for NativeQueue {}

impl NativeQueue {
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
    pub(crate) fn length(&self) -> usize {
        // SAFETY: the reference is live until `Drop`.
        unsafe { rd_kafka_queue_length(self.queue.as_ptr()) }
    }

    /// Pops up to `max` messages that are in the queue now (no more than 64 in one call),
    /// without waiting, and calls `each` with each in offset order: the message, or the
    /// partition's error it carries (an offset out of range, a batch librdkafka cannot
    /// decode). Each message is freed after its call. Returns how
    /// many were popped. librdkafka moves the partition's application position past them, as
    /// it does for a message popped alone.
    pub(crate) fn pop(
        &self,
        max: usize,
        mut each: impl FnMut(Result<NativeMessage<'_>, PartitionError>),
    ) -> usize {
        let mut popped = [std::ptr::null_mut::<rd_kafka_message_t>(); AT_ONCE];
        // SAFETY: the queue reference is live; librdkafka writes at most `AT_ONCE` messages
        // into the array and returns how many (or -1 on a bad argument, which these are not).
        let count = unsafe {
            rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                0,
                popped.as_mut_ptr(),
                max.min(AT_ONCE),
            )
        };
        let popped = Popped(&popped[..usize::try_from(count).unwrap_or(0)]);
        for &message in popped.0 {
            // SAFETY: a message librdkafka just handed over, freed only when `popped` drops.
            let message = unsafe { &*message };
            each(match message.err {
                rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(NativeMessage(message)),
                code => Err(PartitionError {
                    code: code.into(),
                    partition: message.partition,
                    // librdkafka puts the error's text where the payload would be.
                    reason: String::from_utf8_lossy(
                        bytes(message.payload, message.len).unwrap_or_default(),
                    )
                    .trim()
                    .to_owned(),
                }),
            });
        }
        popped.0.len()
    }
}

impl Drop for NativeQueue {
    fn drop(&mut self) {
        // SAFETY: the reference `of` took, given back once; the client is still alive (its
        // `Arc` drops after this).
        unsafe { rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}

/// A partition's error, where a message would be: an offset out of range, a batch librdkafka
/// cannot decode, the end of the partition (when `enable.partition.eof` is set).
#[derive(Debug)]
pub(crate) struct PartitionError {
    pub code: RDKafkaErrorCode,
    pub partition: i32,
    /// librdkafka's words.
    pub reason: String,
}

impl PartitionError {
    /// The error as rust-rdkafka's consumer returns it for the same message.
    pub(crate) fn to_kafka_error(&self) -> KafkaError {
        match self.code {
            RDKafkaErrorCode::PartitionEOF => KafkaError::PartitionEOF(self.partition),
            code => KafkaError::MessageConsumption(code),
        }
    }
}

/// Messages popped by one call, freed when dropped (whether or not `each` returned).
struct Popped<'a>(&'a [*mut rd_kafka_message_t]);

impl Drop for Popped<'_> {
    fn drop(&mut self) {
        for &message in self.0 {
            // SAFETY: each message was handed over by librdkafka once and is freed once; the
            // client is alive (the queue reference holds it).
            unsafe { rd_kafka_message_destroy(message) }
        }
    }
}

/// A message as librdkafka holds it, for the length of [`NativeQueue::pop`]'s call.
pub(crate) struct NativeMessage<'a>(&'a rd_kafka_message_t);

/// The bytes at `ptr`, `len` of them, borrowed for the message's lifetime; `None` for null.
fn bytes<'a>(ptr: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: librdkafka's key and payload pointers point at `len` bytes the message owns.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
}

impl Message for NativeMessage<'_> {
    type Headers = BorrowedHeaders;

    fn key(&self) -> Option<&[u8]> {
        bytes(self.0.key, self.0.key_len)
    }

    fn payload(&self) -> Option<&[u8]> {
        bytes(self.0.payload, self.0.len)
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        // Never needed: the message is only read.
        None
    }

    fn topic(&self) -> &str {
        // SAFETY: a message's topic handle lives as long as the message; its name is a
        // NUL-terminated string. Kafka's topic names are ASCII (rust-rdkafka expects the same).
        unsafe { CStr::from_ptr(rd_kafka_topic_name(self.0.rkt)) }
            .to_str()
            .unwrap_or_default()
    }

    fn partition(&self) -> i32 {
        self.0.partition
    }

    fn offset(&self) -> i64 {
        self.0.offset
    }

    fn timestamp(&self) -> Timestamp {
        let mut kind = rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message; librdkafka writes the timestamp's type.
        let at = unsafe { rd_kafka_message_timestamp(self.0, &mut kind) };
        match kind {
            _ if at == -1 => Timestamp::NotAvailable,
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => Timestamp::NotAvailable,
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(at),
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                Timestamp::LogAppendTime(at)
            }
        }
    }

    fn headers(&self) -> Option<&BorrowedHeaders> {
        let mut headers = std::ptr::null_mut();
        // SAFETY: a live message; librdkafka parses its headers once and keeps the list with
        // the message.
        let found = unsafe { rd_kafka_message_headers(self.0, &mut headers) };
        if found != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
            return None;
        }
        // SAFETY: `BorrowedHeaders` is librdkafka's header list seen through a reference;
        // rust-rdkafka makes it by the same cast. The list lives as long as the message.
        Some(unsafe { &*(headers as *const BorrowedHeaders) })
    }
}
