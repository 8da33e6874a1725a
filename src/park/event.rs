//! The events of a park log, as Kafka records: the key is the source record's key; the first
//! headers say which event it is and its fields (a fixed number per event, so that a parked
//! record's own headers, which follow, are never mistaken for ours); a parked record's value
//! is the source record's value.

use chrono::{DateTime, Utc};
use thiserror::Error;

use crate::record::RecordHeader;

/// The header naming the event: `head`, `parked`, `resolved` or `released`.
pub const EVENT: &str = "kafka_dlq-park-event";
/// The source offset of the key's head: the record whose failure parked the key.
pub const HEAD: &str = "kafka_dlq-park-head";
/// A head's dead letter or retry record id.
pub const HEAD_ID: &str = "kafka_dlq-park-head-id";
/// Where a head went: `dead_letter` or `retry_tier`.
pub const CAUSE: &str = "kafka_dlq-park-cause";
/// When the event happened, RFC 3339 UTC.
pub const AT: &str = "kafka_dlq-park-at";
/// A parked record's source offset.
pub const OFFSET: &str = "kafka_dlq-park-offset";
/// A parked record's id.
pub const ID: &str = "kafka_dlq-park-id";
/// A parked record's timestamp, milliseconds since the epoch; absent value when it had none.
pub const TIMESTAMP: &str = "kafka_dlq-park-timestamp";
/// How a head was resolved: `handled`, `discarded` or `expired`.
pub const HOW: &str = "kafka_dlq-park-how";
/// Who resolved a head: the redrive or retry worker's group, or the operator.
pub const BY: &str = "kafka_dlq-park-by";
/// The park-log offset through which a key's parked records were released.
pub const THROUGH: &str = "kafka_dlq-park-through";

/// Where a key's head went when it parked the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// To the dead-letter topic: the key stays parked until the dead letter is redriven and
    /// handled, or discarded, or `park_max_age` passes.
    DeadLetter,
    /// To a retry tier: the key stays parked until a retry of it is handled (or it is
    /// dead-lettered from the last tier, and parks the key as a dead letter).
    RetryTier,
}

impl Cause {
    /// `dead_letter` or `retry_tier`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::DeadLetter => "dead_letter",
            Cause::RetryTier => "retry_tier",
        }
    }
}

/// How a head was resolved, which says what becomes of the records parked behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Its redriven dead letter or its retry record was handled: the parked records go to
    /// the handler, in order.
    Handled,
    /// An operator discarded its dead letter: the parked records go to the handler, in order.
    Discarded,
    /// `park_max_age` passed: the parked records follow their head to the dead-letter topic,
    /// in order, each with kind `parked`.
    Expired,
}

impl How {
    /// `handled`, `discarded` or `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            How::Handled => "handled",
            How::Discarded => "discarded",
            How::Expired => "expired",
        }
    }
}

/// One event of a park log partition, which is the story of its source partition's parked
/// keys. `key` is the source record's key in each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkEvent {
    /// The record at source offset `offset` left for the dead-letter topic or a retry tier:
    /// every later record of its key waits behind it. Written again, with the same offset,
    /// when a head that was redriven or retried leaves again.
    Head {
        /// The source record's key.
        key: Vec<u8>,
        /// Its source offset.
        offset: i64,
        /// Its dead letter's (or retry record's) id.
        id: String,
        /// Where it went.
        cause: Cause,
        /// When it left.
        at: DateTime<Utc>,
    },
    /// A record of a parked key, kept whole until its key is released.
    Parked {
        /// The source record's key.
        key: Vec<u8>,
        /// Its source offset.
        offset: i64,
        /// Its record id.
        id: String,
        /// Its timestamp (milliseconds since the epoch), if it had one.
        timestamp: Option<i64>,
        /// Its headers, in order.
        headers: Vec<RecordHeader>,
        /// Its value.
        value: Option<Vec<u8>>,
    },
    /// The head at source offset `head` was resolved: the key's parked records may go to the
    /// handler, in order. A resolution of another head than the key's current one is stale
    /// and changes nothing.
    Resolved {
        /// The source record's key.
        key: Vec<u8>,
        /// The resolved head's source offset.
        head: i64,
        /// How.
        how: How,
        /// By whom.
        by: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// The key's parked records up to source offset `offset` (park-log offset `through`)
    /// were settled (handled, or dead-lettered by `park_max_age`), in order.
    Released {
        /// The source record's key.
        key: Vec<u8>,
        /// The source offset of the last of them.
        offset: i64,
        /// The park-log offset of the last of them.
        through: i64,
    },
}

/// Why a record of a park log is not an event kafka-dlq wrote.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParkEventError {
    /// A record of a park log must have its key's bytes.
    #[error("a park event has no key")]
    NoKey,
    /// The first header must be `kafka_dlq-park-event`, with a known event.
    #[error(
        "not a park event: the first header is not {EVENT} with head, parked, resolved or released"
    )]
    NotAnEvent,
    /// A field's header is missing (it must come at its place) or does not parse.
    #[error("the {event} event's header {header} is missing or malformed")]
    Field {
        /// The event.
        event: &'static str,
        /// The header.
        header: &'static str,
    },
}

impl ParkEvent {
    /// The source record's key.
    pub fn key(&self) -> &[u8] {
        match self {
            ParkEvent::Head { key, .. }
            | ParkEvent::Parked { key, .. }
            | ParkEvent::Resolved { key, .. }
            | ParkEvent::Released { key, .. } => key,
        }
    }

    /// `head`, `parked`, `resolved` or `released`.
    pub fn name(&self) -> &'static str {
        match self {
            ParkEvent::Head { .. } => "head",
            ParkEvent::Parked { .. } => "parked",
            ParkEvent::Resolved { .. } => "resolved",
            ParkEvent::Released { .. } => "released",
        }
    }

    /// The record's headers (ours first, then a parked record's own) and value.
    pub fn encode(&self) -> (Vec<RecordHeader>, Option<Vec<u8>>) {
        let mut headers = vec![header(EVENT, self.name())];
        let value = match self {
            ParkEvent::Head {
                offset,
                id,
                cause,
                at,
                ..
            } => {
                headers.extend([
                    header(HEAD, &offset.to_string()),
                    header(HEAD_ID, id),
                    header(CAUSE, cause.as_str()),
                    header(AT, &rfc3339(at)),
                ]);
                None
            }
            ParkEvent::Parked {
                offset,
                id,
                timestamp,
                headers: own,
                value,
                ..
            } => {
                headers.push(header(OFFSET, &offset.to_string()));
                headers.push(header(ID, id));
                headers.push(RecordHeader {
                    key: TIMESTAMP.as_bytes().to_vec(),
                    value: timestamp.map(|t| t.to_string().into_bytes()),
                });
                headers.extend(own.iter().cloned());
                value.clone()
            }
            ParkEvent::Resolved {
                head, how, by, at, ..
            } => {
                headers.extend([
                    header(HEAD, &head.to_string()),
                    header(HOW, how.as_str()),
                    header(BY, by),
                    header(AT, &rfc3339(at)),
                ]);
                None
            }
            ParkEvent::Released {
                offset, through, ..
            } => {
                headers.extend([
                    header(OFFSET, &offset.to_string()),
                    header(THROUGH, &through.to_string()),
                ]);
                None
            }
        };
        (headers, value)
    }

    /// The event a park log's record holds, from its key, headers and value.
    pub fn decode(
        key: Option<&[u8]>,
        headers: &[RecordHeader],
        value: Option<&[u8]>,
    ) -> Result<ParkEvent, ParkEventError> {
        let key = key.ok_or(ParkEventError::NoKey)?.to_vec();
        let event = match headers.first() {
            Some(h) if h.key == EVENT.as_bytes() => h.value.as_deref().unwrap_or_default(),
            _ => return Err(ParkEventError::NotAnEvent),
        };
        let fields = Fields { headers, event: "" };
        Ok(match event {
            b"head" => {
                let f = Fields {
                    event: "head",
                    ..fields
                };
                ParkEvent::Head {
                    key,
                    offset: f.parse(1, HEAD)?,
                    id: f.text(2, HEAD_ID)?.to_string(),
                    cause: match f.text(3, CAUSE)? {
                        "dead_letter" => Cause::DeadLetter,
                        "retry_tier" => Cause::RetryTier,
                        _ => return Err(f.error(CAUSE)),
                    },
                    at: f.time(4, AT)?,
                }
            }
            b"parked" => {
                let f = Fields {
                    event: "parked",
                    ..fields
                };
                let timestamp = match headers.get(3) {
                    Some(h) if h.key == TIMESTAMP.as_bytes() => match &h.value {
                        None => None,
                        Some(v) => Some(
                            std::str::from_utf8(v)
                                .ok()
                                .and_then(|t| t.parse().ok())
                                .ok_or(f.error(TIMESTAMP))?,
                        ),
                    },
                    _ => return Err(f.error(TIMESTAMP)),
                };
                ParkEvent::Parked {
                    key,
                    offset: f.parse(1, OFFSET)?,
                    id: f.text(2, ID)?.to_string(),
                    timestamp,
                    headers: headers[4..].to_vec(),
                    value: value.map(<[u8]>::to_vec),
                }
            }
            b"resolved" => {
                let f = Fields {
                    event: "resolved",
                    ..fields
                };
                ParkEvent::Resolved {
                    key,
                    head: f.parse(1, HEAD)?,
                    how: match f.text(2, HOW)? {
                        "handled" => How::Handled,
                        "discarded" => How::Discarded,
                        "expired" => How::Expired,
                        _ => return Err(f.error(HOW)),
                    },
                    by: f.text(3, BY)?.to_string(),
                    at: f.time(4, AT)?,
                }
            }
            b"released" => {
                let f = Fields {
                    event: "released",
                    ..fields
                };
                ParkEvent::Released {
                    key,
                    offset: f.parse(1, OFFSET)?,
                    through: f.parse(2, THROUGH)?,
                }
            }
            _ => return Err(ParkEventError::NotAnEvent),
        })
    }
}

fn header(key: &str, value: &str) -> RecordHeader {
    RecordHeader {
        key: key.as_bytes().to_vec(),
        value: Some(value.as_bytes().to_vec()),
    }
}

fn rfc3339(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// An event's headers by place: each field at its own.
struct Fields<'a> {
    headers: &'a [RecordHeader],
    event: &'static str,
}

impl Fields<'_> {
    fn error(&self, header: &'static str) -> ParkEventError {
        ParkEventError::Field {
            event: self.event,
            header,
        }
    }

    fn text(&self, at: usize, name: &'static str) -> Result<&str, ParkEventError> {
        match self.headers.get(at) {
            Some(RecordHeader {
                key,
                value: Some(value),
            }) if key == name.as_bytes() => {
                std::str::from_utf8(value).map_err(|_| self.error(name))
            }
            _ => Err(self.error(name)),
        }
    }

    fn parse(&self, at: usize, name: &'static str) -> Result<i64, ParkEventError> {
        self.text(at, name)?.parse().map_err(|_| self.error(name))
    }

    fn time(&self, at: usize, name: &'static str) -> Result<DateTime<Utc>, ParkEventError> {
        DateTime::parse_from_rfc3339(self.text(at, name)?)
            .map(|t| t.to_utc())
            .map_err(|_| self.error(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-07T10:00:00.123Z")
            .unwrap()
            .to_utc()
    }

    fn round_trip(event: ParkEvent) {
        let (headers, value) = event.encode();
        let back = ParkEvent::decode(Some(event.key()), &headers, value.as_deref());
        assert_eq!(back, Ok(event));
    }

    #[test]
    fn every_event_reads_back_as_written() {
        let key = b"order-42\xff\x00".to_vec();
        round_trip(ParkEvent::Head {
            key: key.clone(),
            offset: 7,
            id: "orders-0-7".into(),
            cause: Cause::DeadLetter,
            at: at(),
        });
        round_trip(ParkEvent::Head {
            key: key.clone(),
            offset: 7,
            id: "orders-0-7".into(),
            cause: Cause::RetryTier,
            at: at(),
        });
        round_trip(ParkEvent::Resolved {
            key: key.clone(),
            head: 7,
            how: How::Discarded,
            by: "alice".into(),
            at: at(),
        });
        round_trip(ParkEvent::Released {
            key,
            offset: 9,
            through: 12,
        });
    }

    #[test]
    fn a_parked_record_keeps_its_headers_value_and_timestamp_whatever_their_bytes() {
        let own = vec![
            // A header of the record's own that looks like ours stays the record's.
            RecordHeader {
                key: TIMESTAMP.as_bytes().to_vec(),
                value: Some(b"not ours".to_vec()),
            },
            RecordHeader {
                key: b"\xff\xfe name".to_vec(),
                value: None,
            },
        ];
        for (timestamp, value) in [
            (Some(1_700_000_000_000), Some(vec![0, 159, 146, 150])),
            (None, None),
        ] {
            round_trip(ParkEvent::Parked {
                key: b"k".to_vec(),
                offset: 8,
                id: "orders-0-8".into(),
                timestamp,
                headers: own.clone(),
                value,
            });
        }
    }

    #[test]
    fn a_record_that_is_not_a_park_event_is_named_as_such() {
        let (headers, _) = ParkEvent::Released {
            key: b"k".to_vec(),
            offset: 1,
            through: 2,
        }
        .encode();
        assert_eq!(
            ParkEvent::decode(None, &headers, None),
            Err(ParkEventError::NoKey)
        );
        assert_eq!(
            ParkEvent::decode(Some(b"k"), &[], None),
            Err(ParkEventError::NotAnEvent)
        );
        assert_eq!(
            ParkEvent::decode(Some(b"k"), &[header(EVENT, "moved")], None),
            Err(ParkEventError::NotAnEvent)
        );
        let mut broken = headers.clone();
        broken[2] = header(THROUGH, "twelve");
        assert_eq!(
            ParkEvent::decode(Some(b"k"), &broken, None),
            Err(ParkEventError::Field {
                event: "released",
                header: THROUGH
            })
        );
        assert_eq!(
            ParkEvent::decode(Some(b"k"), &headers[..2], None),
            Err(ParkEventError::Field {
                event: "released",
                header: THROUGH
            })
        );
    }
}
