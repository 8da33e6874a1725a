//! Sending the dead letters: decoding each envelope, its destination (the groups reading the
//! source topic named, a redrive topic made sure of), the headers it goes with, the loop guard,
//! the rate, and the send whose acknowledgement the replay awaits later.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use super::destination::RedriveTopics;
use super::transform::{Tally, Transformed};
use super::HEADER_REPLAY_COUNT;
use super::{audit, groups_reading, Destination, Outcome, ReplayError, ReplayOptions};
use crate::dlq::{Envelope, EnvelopeDecodeError};
use crate::dlq_reader::DlqEntry;
use crate::kafka::LogContext;
use crate::record::RecordHeader;

/// What sends a replay's dead letters: the producer, the redrive topics made sure of, the rate.
pub(super) struct Sender<'a> {
    options: &'a ReplayOptions,
    started: &'a audit::Started,
    producer: FutureProducer<LogContext>,
    /// With [`Destination::Group`] (and not a dry run): the redrive topics made sure of.
    redrive: Option<RedriveTopics>,
    /// With `--rate`: the pause between two sends.
    pause: Option<Duration>,
    /// When the next send may go.
    next_send: tokio::time::Instant,
    /// With a bulk transformation: what it did so far.
    tally: Option<Tally>,
}

impl<'a> Sender<'a> {
    /// The idempotent `acks=all` producer of `options`, and with [`Destination::Group`] the
    /// cluster's topics read once.
    pub(super) async fn new(
        options: &'a ReplayOptions,
        started: &'a audit::Started,
    ) -> Result<Self, ReplayError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &options.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all");
        options.librdkafka.apply(&mut config);
        let producer: FutureProducer<LogContext> =
            crate::kafka::create_logged(&config).map_err(ReplayError::CreateProducer)?;
        // Read for a dry run too: it refuses what a real run would refuse.
        let redrive = match options.destination {
            Destination::Group => Some(RedriveTopics::read(&config).await.map_err(|source| {
                ReplayError::RedriveTopic {
                    topic: options.dlq_topic.clone(),
                    source,
                }
            })?),
            _ => None,
        };
        Ok(Self {
            options,
            started,
            producer,
            redrive,
            pause: options
                .rate_per_sec
                .filter(|r| *r > 0)
                .map(|r| Duration::from_secs_f64(1.0 / f64::from(r))),
            next_send: tokio::time::Instant::now(),
            tally: options
                .transform
                .clone()
                .filter(|_| options.edit.is_none())
                .map(Tally::new),
        })
    }

    /// What the bulk transformation did, when there is one.
    pub(super) fn transform_summary(&self) -> Option<super::transform::TransformSummary> {
        self.tally.as_ref().map(Tally::summary)
    }

    /// With `--rate` (and not a dry run): when the next send may go.
    pub(super) fn next_slot(&self) -> Option<tokio::time::Instant> {
        self.pause
            .filter(|_| !self.options.dry_run)
            .map(|_| self.next_send)
    }

    /// Sends the dead letter `envelope` (of `entry`) where the destination says, or in a dry
    /// run says it would; with [`Destination::Source`], first names the groups reading its
    /// source topic (kept in `readers`). Its outcome, with the acknowledgement to await.
    pub(super) async fn send(
        &mut self,
        entry: &DlqEntry,
        envelope: &Envelope,
        readers: &mut BTreeMap<String, Vec<String>>,
    ) -> Result<(Outcome, Option<DeliveryFuture>), ReplayError> {
        let options = self.options;
        let (mut headers, key, payload) = match decoded(envelope) {
            Ok((headers, key, _)) if options.edit.is_some() => (
                headers,
                key,
                options.edit.as_ref().map(|e| e.edited_bytes()),
            ),
            Ok(decoded) => decoded,
            Err(e) => {
                tracing::warn!(event = "replay_undecodable", id = %envelope.id,
                    dlq_partition = entry.partition, dlq_offset = entry.offset,
                    error = %e, "passed over: its envelope does not decode");
                let why = e.to_string();
                return Ok((
                    Outcome::Undecodable {
                        id: envelope.id.clone(),
                        why,
                    },
                    None,
                ));
            }
        };
        let payload = match self.tally.as_mut() {
            None => payload,
            Some(tally) => {
                let result = tally.transform().apply(entry, payload.as_deref());
                let before = payload.as_deref().unwrap_or_default();
                match result {
                    Ok(Transformed::Unchanged) => {
                        tally.count(before, Some(before));
                        payload
                    }
                    Ok(Transformed::Changed(after)) => {
                        tally.count(before, Some(&after));
                        Some(after)
                    }
                    Err(why) => {
                        tally.count(before, None);
                        tracing::warn!(event = "replay_untransformable", id = %envelope.id,
                            dlq_partition = entry.partition, dlq_offset = entry.offset,
                            error = %why, "passed over unsent: the transformation failed");
                        let id = envelope.id.clone();
                        return Ok((Outcome::Untransformable { id, why }, None));
                    }
                }
            }
        };
        let Some(to) = options.destination.topic_of(envelope) else {
            return Err(ReplayError::NoGroup {
                id: envelope.id.clone(),
                topic: options.dlq_topic.clone(),
                partition: entry.partition,
                offset: entry.offset,
            });
        };
        if let Some(why) = self.refusal(envelope, &to) {
            tracing::warn!(event = "replay_destination_refused", id = %envelope.id, %to,
                dlq_partition = entry.partition, dlq_offset = entry.offset, %why,
                "passed over unsent: it stays outstanding");
            let refused = Outcome::DestinationRefused {
                id: envelope.id.clone(),
                to,
                why,
            };
            return Ok((refused, None));
        }
        if options.destination == Destination::Source {
            warn_readers(options, &to, readers).await;
        }
        if let Some(redrive) = &mut self.redrive {
            if let Some(writer) = foreign_writer(entry).filter(|_| !redrive.exists(&to)) {
                return Err(ReplayError::NotAKafkaDlqGroup {
                    id: envelope.id.clone(),
                    topic: options.dlq_topic.clone(),
                    partition: entry.partition,
                    offset: entry.offset,
                    writer,
                    group: envelope.source.group.clone(),
                    redrive: to,
                });
            }
            if !options.dry_run {
                if let Err(source) = redrive.ensure(&to, &envelope.source.topic).await {
                    return Err(ReplayError::RedriveTopic { topic: to, source });
                }
            }
        }
        headers.retain(|h| !audit::is_audit_header(&h.key));
        let stamp = self.started.headers(
            &options.operator,
            &options.dlq_topic,
            entry.partition,
            entry.offset,
        );
        headers.extend(stamp.into_iter().map(|(k, v)| RecordHeader {
            key: k.as_bytes().to_vec(),
            value: Some(v.into_bytes()),
        }));
        if options.destination == Destination::Group {
            headers = crate::retry_tier::redrive_headers(envelope, headers, chrono::Utc::now());
        }
        let outgoing = Outgoing {
            to,
            headers,
            key,
            payload,
        };
        send_one(
            options,
            &self.producer,
            envelope,
            outgoing,
            self.pause,
            &mut self.next_send,
        )
        .await
    }
}

impl Sender<'_> {
    /// Why `envelope`'s record may not go to `to`, when it may not: its source (which its
    /// envelope names, and whoever writes the DLT writes) is not one whose dead letters go to
    /// the DLT read, or `to` is never a destination ([`super::destination::refusal`]).
    fn refusal(&self, envelope: &Envelope, to: &str) -> Option<String> {
        let o = self.options;
        let source = &envelope.source.topic;
        let from_source = matches!(o.destination, Destination::Group | Destination::Source);
        if from_source && !super::destination::source_belongs(source, &o.dlq_topic, &o.dlq_template)
        {
            return Some(format!(
                "its envelope names the source topic `{source}`, whose dead letters go to `{}`, not to `{}`",
                o.dlq_template.for_topic(source),
                o.dlq_topic
            ));
        }
        super::destination::refusal(to, &o.dlq_topic, &o.dlq_template, &o.state)
    }
}

/// Who wrote `entry`, when another tool did: its group is then not known to be one a
/// kafka-dlq consumer runs. A record waiting in a retry topic is kafka-dlq's own.
fn foreign_writer(entry: &DlqEntry) -> Option<&'static str> {
    use crate::dlq_reader::foreign::ForeignFormat;
    match &entry.content {
        crate::dlq_reader::DlqContent::Foreign { format, .. }
            if *format != ForeignFormat::RetryTopic =>
        {
            Some(format.as_str())
        }
        _ => None,
    }
}

/// The first time a replay sends to the source topic `topic`: finds the groups that read it,
/// logs them (`replay_to_source`) and keeps them in `readers`.
async fn warn_readers(
    options: &ReplayOptions,
    topic: &str,
    readers: &mut BTreeMap<String, Vec<String>>,
) {
    if readers.contains_key(topic) {
        return;
    }
    let (brokers, raw, t) = (
        options.brokers.clone(),
        options.librdkafka.clone(),
        topic.to_string(),
    );
    let found = tokio::task::spawn_blocking(move || groups_reading(&brokers, &raw, &t))
        .await
        .expect("group listing task");
    match &found {
        Ok(groups) => tracing::warn!(event = "replay_to_source", %topic,
            groups = %groups.join(", "),
            "every group reading the source topic handles these records again: {}",
            if groups.is_empty() { "none found".to_string() } else { groups.join(", ") }),
        Err(error) => tracing::warn!(event = "replay_to_source", %topic, %error,
            "every group reading the source topic handles these records again (could not list them)"),
    }
    readers.insert(topic.to_string(), found.unwrap_or_default());
}

/// An envelope's headers, key and payload, decoded.
type Decoded = (Vec<RecordHeader>, Option<Vec<u8>>, Option<Vec<u8>>);

fn decoded(envelope: &Envelope) -> Result<Decoded, EnvelopeDecodeError> {
    Ok((
        envelope.headers()?,
        envelope.key_bytes()?,
        envelope.payload_bytes()?,
    ))
}

/// How often the dead letter `envelope` (its record's `headers`) was replayed already: the
/// count the last replay put in its header, trusted only when the consumer says the record
/// came back through its group's redrive topic (a stage of the envelope's history, which the
/// consumer writes) — the header itself is one any producer of the source topic can set, and
/// a forged count would make a dead letter un-replayable. 0 otherwise.
fn replays_so_far(envelope: &Envelope, headers: &[RecordHeader]) -> u32 {
    let redrive =
        crate::record::retry::redrive_topic(&envelope.source.topic, &envelope.source.group);
    if !envelope.history.iter().any(|stage| stage.topic == redrive) {
        return 0;
    }
    headers
        .iter()
        .rev()
        .find(|h| h.key == HEADER_REPLAY_COUNT.as_bytes())
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0)
}

/// One record a replay sends: where, and what.
struct Outgoing {
    to: String,
    headers: Vec<RecordHeader>,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
}

/// Sends one decoded dead letter (or, in a dry run, does not), unless the loop guard refuses
/// it; says which, with the send's acknowledgement to await.
async fn send_one(
    options: &ReplayOptions,
    producer: &FutureProducer<LogContext>,
    envelope: &Envelope,
    outgoing: Outgoing,
    pause: Option<Duration>,
    next_send: &mut tokio::time::Instant,
) -> Result<(Outcome, Option<DeliveryFuture>), ReplayError> {
    let Outgoing {
        to: destination,
        mut headers,
        key,
        payload,
    } = outgoing;
    let replays = replays_so_far(envelope, &headers);
    if replays >= options.max_replays {
        tracing::warn!(event = "replay_refused", id = %envelope.id, replays,
            max_replays = options.max_replays,
            "replayed too often already; fix the cause or raise --max-replays");
        let refused = Outcome::Refused {
            id: envelope.id.clone(),
            replays,
        };
        return Ok((refused, None));
    }
    let replayed = Outcome::Replayed {
        id: envelope.id.clone(),
        to: destination.clone(),
    };
    if options.dry_run {
        return Ok((replayed, None));
    }
    if let Some(pause) = pause {
        tokio::time::sleep_until(*next_send).await;
        *next_send = tokio::time::Instant::now() + pause;
    }
    headers.retain(|h| h.key != HEADER_REPLAY_COUNT.as_bytes());
    let count = (replays + 1).to_string();
    let mut out_headers = OwnedHeaders::new_with_capacity(headers.len() + 1);
    for h in headers.iter() {
        out_headers = crate::kafka::headers::add(out_headers, &h.key, h.value.as_deref());
    }
    out_headers = out_headers.insert(Header {
        key: HEADER_REPLAY_COUNT,
        value: Some(count.as_bytes()),
    });
    let mut record = FutureRecord::<[u8], [u8]>::to(&destination).headers(out_headers);
    if let Some(k) = key.as_deref() {
        record = record.key(k);
    }
    if let Some(p) = payload.as_deref() {
        record = record.payload(p);
    }
    // At most WINDOW sends are in flight, far below the producer's queue: enqueuing does not
    // fail for want of room.
    let delivery = producer
        .send_result(record)
        .map_err(|(source, _)| ReplayError::Send {
            id: envelope.id.clone(),
            topic: destination.clone(),
            source,
        })?;
    tracing::debug!(event = "record_replayed", id = %envelope.id,
        to = %destination, replay_count = replays + 1);
    Ok((replayed, Some(delivery)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::DeadLetterKind;
    use crate::record::retry::RetryStage;
    use crate::record::Record;

    fn count(n: &str) -> Vec<RecordHeader> {
        vec![RecordHeader {
            key: HEADER_REPLAY_COUNT.as_bytes().to_vec(),
            value: Some(n.as_bytes().to_vec()),
        }]
    }

    #[test]
    fn a_replay_count_is_trusted_only_from_a_record_that_came_back_through_the_redrive_topic() {
        let record = Record::new("orders", 0, 7);
        // A producer of `orders` set the header itself: not a replay count.
        let forged = Envelope::new(&record, DeadLetterKind::Permanent, "e", 1, "billing");
        assert_eq!(replays_so_far(&forged, &count("999")), 0);
        // Dead-lettered again after coming back through billing's redrive topic.
        let mut replayed = forged.clone();
        replayed.history.push(RetryStage {
            topic: "orders-redrive-billing".into(),
            attempts: 1,
            error: "e".into(),
            at: chrono::Utc::now(),
        });
        assert_eq!(replays_so_far(&replayed, &count("2")), 2);
        assert_eq!(replays_so_far(&replayed, &[]), 0);
    }
}
