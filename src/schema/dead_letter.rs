//! A dead letter's payload decoded: what `dlq list / show` and the console show beside the
//! bytes that failed.

use super::codec::{Codec, DecodeError, Decoded, Field};
use super::framing;
use crate::dlq::Envelope;

/// `envelope`'s payload decoded with `codec`, with the headers the record failed with.
///
/// `None` when there is nothing to decode: a tombstone, a payload the envelope cannot give
/// back, or bytes not framed for a registry (neither a schema-id prefix nor a
/// `__value_schema_id` header) — those are shown as bytes. `Some(Err(..))` when the payload is
/// framed but its schema cannot be fetched or the bytes do not decode with it.
pub async fn decode_payload(
    codec: &Codec,
    envelope: &Envelope,
) -> Option<Result<Decoded, DecodeError>> {
    let (Ok(Some(payload)), Ok(headers)) = (envelope.payload_bytes(), envelope.headers()) else {
        return None;
    };
    let header = headers
        .iter()
        .find(|h| h.key == framing::VALUE_SCHEMA_ID_HEADER.as_bytes())
        .and_then(|h| h.value.as_deref());
    framing::locate(&payload, header).ok()?;
    codec
        .decode(Field::Value, Some(&payload), &headers)
        .await
        .transpose()
}
