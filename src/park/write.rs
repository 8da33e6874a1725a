//! Writing a park event to its park log: the one way one is handed to a producer, by the
//! partition's owner ([`crate::consumer`]'s park log) or by a discard ([`super::resolve`]).

use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::kafka::send::Sent;
use crate::kafka::LogContext;
use crate::record::RecordHeader;

/// Hands an event, encoded (`key`, `headers`, `value`: [`super::ParkEvent::encode`]), to `producer`
/// for partition `partition` of park log `topic`.
pub(crate) fn send(
    producer: &FutureProducer<LogContext>,
    topic: &str,
    partition: i32,
    key: &[u8],
    headers: &[RecordHeader],
    value: Option<&[u8]>,
) -> Sent {
    let mut owned = rdkafka::message::OwnedHeaders::new_with_capacity(headers.len());
    for h in headers {
        owned = crate::kafka::headers::add(owned, &h.key, h.value.as_deref());
    }
    let mut out = FutureRecord::<[u8], [u8]>::to(topic)
        .partition(partition)
        .key(key)
        .headers(owned);
    if let Some(value) = value {
        out = out.payload(value);
    }
    producer.send_result(out).map_err(|(error, _)| error)
}
