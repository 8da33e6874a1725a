//! The inbox: outstanding dead letters grouped by cause — the service (consumer group), the
//! source topic, the DLT and the error fingerprint — with counts, ages and a trend. Its memory
//! grows with the number of causes, never with the number of dead letters: each cause keeps
//! counts per minute for its last two hours, per hour for its last seven days, and one count
//! for the rest; at most [`MAX_CAUSES`] causes per DLT are kept apart, the others are counted
//! in one row of fingerprint [`OTHER_CAUSES`]. Besides, it keeps where each dead letter that
//! is a parked key's head is (`key_order_after_failure = "park"`), so that a row can say what
//! waits behind its cause: memory that grows with the parked keys, as the park logs' own
//! tables do.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::parked::{Heads, Parked};
use crate::dlq_reader::DlqEntry;
use crate::park::resolve::HeadRef;

/// Causes kept apart per DLT; more are counted together as [`OTHER_CAUSES`].
pub const MAX_CAUSES: usize = 2_000;
/// The fingerprint of the row that counts the causes past [`MAX_CAUSES`].
pub const OTHER_CAUSES: &str = "(other causes)";
/// Sample dead letters a row names: the first ones seen and the latest one.
const SAMPLES: usize = 4;
/// A cause is new while its oldest outstanding dead letter is younger than this.
const NEW_FOR: Duration = Duration::hours(24);

/// What the inbox keeps of one dead letter: its cause, when, and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Sighting {
    /// The DLT.
    pub dlq_topic: String,
    /// The consumer group that dead-lettered it (`(unknown)` when the record does not say).
    pub group: String,
    /// Its source topic (`(unknown)` for a record that is not an envelope).
    pub source_topic: String,
    /// The error kind (`unreadable` for a record that is not an envelope).
    pub kind: String,
    /// Its error fingerprint.
    pub fingerprint: String,
    /// Its error message.
    pub message: String,
    /// Its record id.
    pub id: String,
    /// When it was dead-lettered (the record's timestamp for one that is not an envelope).
    pub at: DateTime<Utc>,
    /// Its DLQ partition.
    pub partition: i32,
    /// Its DLQ offset.
    pub offset: i64,
    /// Its source record, which may be a parked key's head: `None` for a record that is not
    /// an envelope or does not name its group.
    pub head: Option<HeadRef>,
}

impl Sighting {
    /// What the inbox keeps of `entry`.
    pub fn of(entry: &DlqEntry) -> Sighting {
        let (kind, message) = entry.content.cause();
        let envelope = entry.content.envelope();
        let unknown = || "(unknown)".to_string();
        Sighting {
            dlq_topic: entry.topic.clone(),
            group: envelope
                .map(|e| e.source.group.clone())
                .filter(|g| !g.is_empty())
                .unwrap_or_else(unknown),
            source_topic: envelope
                .map(|e| e.source.topic.clone())
                .unwrap_or_else(unknown),
            kind: kind.to_string(),
            fingerprint: crate::fingerprint::fingerprint(kind, &message),
            message: message.chars().take(500).collect(),
            id: entry.id(),
            at: envelope
                .map(|e| e.timestamp)
                .or(entry.timestamp)
                .unwrap_or(DateTime::UNIX_EPOCH),
            partition: entry.partition,
            offset: entry.offset,
            head: envelope.and_then(|e| crate::outstanding::parked::head_of(&e.source)),
        }
    }
}

/// The cause a row counts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Cause {
    dlq_topic: String,
    group: String,
    source_topic: String,
    fingerprint: String,
}

/// One dead letter a row names, with where to find it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Its record id.
    pub id: String,
    /// Its DLQ partition.
    pub partition: i32,
    /// Its DLQ offset.
    pub offset: i64,
}

#[derive(Debug, Clone)]
struct Row {
    kind: String,
    message: String,
    count: u64,
    first_seen: DateTime<Utc>,
    last_seen: DateTime<Utc>,
    samples: Vec<Sample>,
    /// Counts by minute (Unix minutes) for the last two hours, by hour (the hour's last
    /// minute) for the last seven days; older ones in `older`.
    ages: BTreeMap<i64, u64>,
    older: u64,
}

/// How many of a row's dead letters are how old.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Ages {
    /// Younger than an hour.
    pub hour: u64,
    /// An hour to a day old.
    pub day: u64,
    /// A day to a week old.
    pub week: u64,
    /// Older than a week.
    pub older: u64,
}

/// One row of the inbox, as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboxRow {
    /// The consumer group: the service whose failure it is.
    pub group: String,
    /// The source topic.
    pub source_topic: String,
    /// The DLT.
    pub dlq_topic: String,
    /// The error fingerprint.
    pub fingerprint: String,
    /// The error kind.
    pub kind: String,
    /// The error message of the first dead letter seen.
    pub message: String,
    /// Outstanding dead letters of this cause.
    pub count: u64,
    /// When the oldest was dead-lettered.
    pub first_seen: DateTime<Utc>,
    /// When the newest was dead-lettered.
    pub last_seen: DateTime<Utc>,
    /// The ids of the first dead letters seen and of the latest.
    pub sample_ids: Vec<String>,
    /// The same, with where each is.
    pub samples: Vec<Sample>,
    /// Their ages (past the first two hours, to the hour: up to 59 minutes younger than they are).
    pub ages: Ages,
    /// Dead letters per hour over the last 24 hours, oldest first (the last is the current
    /// hour so far).
    pub trend: Vec<u64>,
    /// The cause's oldest outstanding dead letter is less than 24 hours old.
    pub new: bool,
    /// The keys parked behind its dead letters, the records waiting behind them and when the
    /// oldest of those left (`key_order_after_failure = "park"`; zero for a group that does
    /// not park).
    pub parked: Parked,
}

/// Which rows: every field set must match. Another field (`id`, `records`: those pick dead
/// letters, not causes) is refused, never passed over as if it had filtered.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxFilter {
    /// The DLT.
    pub dlq_topic: Option<String>,
    /// The consumer group.
    pub group: Option<String>,
    /// The source topic (`topic` in the query).
    #[serde(alias = "topic")]
    pub source_topic: Option<String>,
    /// The error kind.
    pub kind: Option<String>,
    /// The fingerprint.
    pub fingerprint: Option<String>,
    /// Text anywhere in the fingerprint, the message, the group or the topics (case
    /// insensitive).
    pub text: Option<String>,
    /// Only causes with a dead letter older than this (`30m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// Only causes with a dead letter newer than this.
    pub newer_than: Option<String>,
}

/// The outstanding dead letters by cause.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    rows: BTreeMap<Cause, Row>,
    causes_per_topic: BTreeMap<String, usize>,
    total: u64,
    /// The dead letters that were parked keys' heads when counted, and their causes.
    heads: BTreeMap<HeadRef, Cause>,
}

const MINUTE: i64 = 60;
const HOUR_MINUTES: i64 = 60;
const KEEP_MINUTES: i64 = 2 * HOUR_MINUTES;
const KEEP_HOURS: i64 = 7 * 24 * HOUR_MINUTES;

impl Inbox {
    /// Counts one outstanding dead letter; `parked`, the heads parked now, says whether it is
    /// one.
    pub fn add(&mut self, s: &Sighting, now: DateTime<Utc>, parked: &Heads) {
        self.total += 1;
        let mut cause = Cause {
            dlq_topic: s.dlq_topic.clone(),
            group: s.group.clone(),
            source_topic: s.source_topic.clone(),
            fingerprint: s.fingerprint.clone(),
        };
        if !self.rows.contains_key(&cause) {
            let causes = self
                .causes_per_topic
                .entry(s.dlq_topic.clone())
                .or_default();
            if *causes >= MAX_CAUSES {
                cause = Cause {
                    dlq_topic: s.dlq_topic.clone(),
                    group: "(various)".into(),
                    source_topic: "(various)".into(),
                    fingerprint: OTHER_CAUSES.into(),
                };
            } else {
                *causes += 1;
            }
        }
        if let Some(head) = s.head.as_ref().filter(|h| parked.head(h).is_some()) {
            self.heads.insert(head.clone(), cause.clone());
        }
        let row = self.rows.entry(cause).or_insert_with(|| Row {
            kind: s.kind.clone(),
            message: s.message.clone(),
            count: 0,
            first_seen: s.at,
            last_seen: s.at,
            samples: Vec::new(),
            ages: BTreeMap::new(),
            older: 0,
        });
        row.count += 1;
        row.first_seen = row.first_seen.min(s.at);
        let sample = Sample {
            id: s.id.clone(),
            partition: s.partition,
            offset: s.offset,
        };
        if row.samples.len() < SAMPLES {
            row.samples.push(sample);
        } else if s.at >= row.last_seen {
            row.samples[SAMPLES - 1] = sample;
        }
        row.last_seen = row.last_seen.max(s.at);
        let minute = s.at.timestamp().div_euclid(MINUTE);
        *row.ages.entry(minute).or_default() += 1;
        compact(row, now);
    }

    /// The (source topic, group) pairs of the causes counted: whose park logs may hold heads.
    pub fn pairs(&self) -> std::collections::BTreeSet<(String, String)> {
        self.rows
            .keys()
            .filter(|c| c.group != "(unknown)" && c.group != "(various)")
            .map(|c| (c.source_topic.clone(), c.group.clone()))
            .collect()
    }

    /// Dead letters counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Causes counted.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No dead letter counted.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows `filter` selects, most dead letters first, ages and trend as of `now`, what
    /// is parked behind them as `parked` says.
    pub fn rows(
        &mut self,
        filter: &InboxFilter,
        now: DateTime<Utc>,
        parked: &Heads,
    ) -> Result<Vec<InboxRow>, String> {
        let mut behind: BTreeMap<&Cause, Parked> = BTreeMap::new();
        if !parked.is_empty() {
            for (head, cause) in &self.heads {
                if let Some(state) = parked.head(head) {
                    behind.entry(cause).or_default().add(state);
                }
            }
        }
        let older = filter.older_than.as_deref().map(parse_age).transpose()?;
        let newer = filter.newer_than.as_deref().map(parse_age).transpose()?;
        let text = filter.text.as_ref().map(|t| t.to_lowercase());
        let mut out = Vec::new();
        for (cause, row) in &mut self.rows {
            compact(row, now);
            let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
            if !(is(&filter.dlq_topic, &cause.dlq_topic)
                && is(&filter.group, &cause.group)
                && is(&filter.source_topic, &cause.source_topic)
                && is(&filter.kind, &row.kind)
                && is(&filter.fingerprint, &cause.fingerprint))
            {
                continue;
            }
            if let Some(text) = &text {
                let hay = [
                    &cause.fingerprint,
                    &row.message,
                    &cause.group,
                    &cause.source_topic,
                    &cause.dlq_topic,
                ];
                if !hay.iter().any(|h| h.to_lowercase().contains(text.as_str())) {
                    continue;
                }
            }
            if older.is_some_and(|age| row.first_seen > now - age) {
                continue;
            }
            if newer.is_some_and(|age| row.last_seen < now - age) {
                continue;
            }
            out.push(InboxRow {
                group: cause.group.clone(),
                source_topic: cause.source_topic.clone(),
                dlq_topic: cause.dlq_topic.clone(),
                fingerprint: cause.fingerprint.clone(),
                kind: row.kind.clone(),
                message: row.message.clone(),
                count: row.count,
                first_seen: row.first_seen,
                last_seen: row.last_seen,
                sample_ids: row.samples.iter().map(|s| s.id.clone()).collect(),
                samples: row.samples.clone(),
                ages: ages(row, now),
                trend: trend(row, now),
                new: row.first_seen > now - NEW_FOR,
                parked: behind.get(cause).copied().unwrap_or_default(),
            });
        }
        out.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_seen.cmp(&a.last_seen)));
        Ok(out)
    }
}

/// Folds minutes older than two hours into their hour, hours older than a week into `older`.
fn compact(row: &mut Row, now: DateTime<Utc>) {
    let now_minute = now.timestamp().div_euclid(MINUTE);
    let first = match row.ages.first_key_value() {
        Some((&k, _)) => k,
        None => return,
    };
    if first >= now_minute - KEEP_MINUTES {
        return;
    }
    let old: Vec<(i64, u64)> = row
        .ages
        .range(..now_minute - KEEP_MINUTES)
        .map(|(k, v)| (*k, *v))
        .collect();
    for (minute, count) in old {
        // Kept at the hour's last minute: an age read from it is at most 59 minutes short,
        // never longer than the dead letter's.
        let hour = minute - minute.rem_euclid(HOUR_MINUTES) + HOUR_MINUTES - 1;
        if hour < now_minute - KEEP_HOURS {
            row.ages.remove(&minute);
            row.older += count;
        } else if hour != minute {
            row.ages.remove(&minute);
            *row.ages.entry(hour).or_default() += count;
        }
    }
}

fn ages(row: &Row, now: DateTime<Utc>) -> Ages {
    let now_minute = now.timestamp().div_euclid(MINUTE);
    let mut ages = Ages {
        older: row.older,
        ..Ages::default()
    };
    for (&minute, &count) in &row.ages {
        let age = now_minute - minute;
        if age < HOUR_MINUTES {
            ages.hour += count;
        } else if age < 24 * HOUR_MINUTES {
            ages.day += count;
        } else if age < 7 * 24 * HOUR_MINUTES {
            ages.week += count;
        } else {
            ages.older += count;
        }
    }
    ages
}

fn trend(row: &Row, now: DateTime<Utc>) -> Vec<u64> {
    let now_minute = now.timestamp().div_euclid(MINUTE);
    let this_hour = now_minute - now_minute.rem_euclid(HOUR_MINUTES);
    let mut trend = vec![0; 24];
    for (&minute, &count) in row.ages.range(this_hour - 23 * HOUR_MINUTES..) {
        let back =
            ((this_hour - (minute - minute.rem_euclid(HOUR_MINUTES))) / HOUR_MINUTES) as usize;
        if back < 24 {
            trend[23 - back] += count;
        }
    }
    trend
}

/// `90s`, `30m`, `2h`, `7d` as a duration, or why not.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad =
        || format!("`{text}` is not an age: expected a number and s, m, h or d (`30m`, `7d`)");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds)
        .filter(|s| *s <= 100 * 365 * 86_400)
        .map(Duration::seconds)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes_ago: i64, now: DateTime<Utc>) -> DateTime<Utc> {
        now - Duration::minutes(minutes_ago)
    }

    fn sighting(group: &str, fp: &str, at: DateTime<Utc>, offset: i64) -> Sighting {
        Sighting {
            dlq_topic: "orders-dlt".into(),
            group: group.into(),
            source_topic: "orders".into(),
            kind: "permanent".into(),
            fingerprint: fp.into(),
            message: format!("{fp} at offset {offset}"),
            id: format!("o-{offset}"),
            at,
            partition: 0,
            offset,
            head: Some(HeadRef {
                source: "orders".into(),
                group: group.into(),
                partition: 0,
                offset: offset + 1000,
            }),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-12-04T12:30:00Z".parse().unwrap()
    }

    #[test]
    fn groups_by_service_topic_and_cause() {
        let now = now();
        let mut inbox = Inbox::default();
        inbox.add(
            &sighting("billing", "permanent: bad json", at(5, now), 1),
            now,
            &Heads::default(),
        );
        inbox.add(
            &sighting("billing", "permanent: bad json", at(3, now), 2),
            now,
            &Heads::default(),
        );
        inbox.add(
            &sighting("shipping", "permanent: bad json", at(3, now), 3),
            now,
            &Heads::default(),
        );
        inbox.add(
            &sighting("billing", "permanent: no such sku #", at(1, now), 4),
            now,
            &Heads::default(),
        );
        let rows = inbox
            .rows(&InboxFilter::default(), now, &Heads::default())
            .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(inbox.total(), 4);
        let top = &rows[0];
        assert_eq!((top.group.as_str(), top.count), ("billing", 2));
        assert_eq!(top.sample_ids, ["o-1", "o-2"]);
        assert_eq!(top.first_seen, at(5, now));
        assert_eq!(top.last_seen, at(3, now));
        assert!(top.new);
    }

    #[test]
    fn ages_fall_in_their_buckets_at_the_edges() {
        let now = now();
        let mut inbox = Inbox::default();
        for (i, minutes) in [
            0,
            59,
            60,
            24 * 60 - 1,
            24 * 60 + 60,
            7 * 24 * 60 + 60,
            30 * 24 * 60,
        ]
        .into_iter()
        .enumerate()
        {
            inbox.add(
                &sighting("g", "f", at(minutes, now), i as i64),
                now,
                &Heads::default(),
            );
        }
        let row = &inbox
            .rows(&InboxFilter::default(), now, &Heads::default())
            .unwrap()[0];
        assert_eq!(
            row.ages,
            Ages {
                hour: 2,
                day: 2,
                week: 1,
                older: 2
            }
        );
        assert!(!row.new, "its oldest dead letter is a month old");
        // An hour later the youngest two are past the hour.
        let later = now + Duration::hours(1);
        let row = &inbox
            .rows(&InboxFilter::default(), later, &Heads::default())
            .unwrap()[0];
        assert_eq!(row.ages.hour, 0);
        assert_eq!(row.ages.day, 3);
    }

    #[test]
    fn the_trend_counts_each_of_the_last_24_hours() {
        let now = now(); // 12:30
        let mut inbox = Inbox::default();
        inbox.add(&sighting("g", "f", at(10, now), 1), now, &Heads::default()); // 12:20, this hour
        inbox.add(&sighting("g", "f", at(40, now), 2), now, &Heads::default()); // 11:50
        inbox.add(&sighting("g", "f", at(45, now), 3), now, &Heads::default()); // 11:45
        inbox.add(
            &sighting("g", "f", at(23 * 60 + 29, now), 4),
            now,
            &Heads::default(),
        ); // 13:01 yesterday
        inbox.add(
            &sighting("g", "f", at(25 * 60, now), 5),
            now,
            &Heads::default(),
        ); // out of the window
        let row = &inbox
            .rows(&InboxFilter::default(), now, &Heads::default())
            .unwrap()[0];
        assert_eq!(row.trend.len(), 24);
        assert_eq!(row.trend[23], 1);
        assert_eq!(row.trend[22], 2);
        assert_eq!(row.trend[0], 1);
        assert_eq!(row.trend.iter().sum::<u64>(), 4);
    }

    #[test]
    fn memory_grows_with_causes_not_dead_letters() {
        let now = now();
        let mut inbox = Inbox::default();
        for i in 0..100_000 {
            inbox.add(
                &sighting("g", "f", at(i % (30 * 24 * 60), now), i),
                now,
                &Heads::default(),
            );
        }
        let row = inbox.rows.values().next().unwrap();
        assert!(
            row.ages.len() <= (KEEP_MINUTES + KEEP_HOURS / 60 + 2) as usize,
            "{}",
            row.ages.len()
        );
        assert_eq!(row.samples.len(), SAMPLES);
        for i in 0..(MAX_CAUSES as i64 + 10) {
            inbox.add(
                &sighting("g", &format!("cause {i}"), now, i),
                now,
                &Heads::default(),
            );
        }
        assert_eq!(inbox.len(), MAX_CAUSES + 1);
        let rows = inbox
            .rows(
                &InboxFilter {
                    fingerprint: Some(OTHER_CAUSES.into()),
                    ..InboxFilter::default()
                },
                now,
                &Heads::default(),
            )
            .unwrap();
        assert_eq!(rows[0].count, 11);
    }

    #[test]
    fn filters_by_each_field() {
        let now = now();
        let mut inbox = Inbox::default();
        inbox.add(
            &sighting("billing", "permanent: bad json", at(5, now), 1),
            now,
            &Heads::default(),
        );
        inbox.add(
            &sighting("shipping", "permanent: Timeout", at(3 * 24 * 60, now), 2),
            now,
            &Heads::default(),
        );
        let count = |inbox: &mut Inbox, f: InboxFilter| {
            inbox.rows(&f, now, &Heads::default()).unwrap().len()
        };
        let f = InboxFilter::default;
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    group: Some("billing".into()),
                    ..f()
                }
            ),
            1
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    source_topic: Some("orders".into()),
                    ..f()
                }
            ),
            2
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    dlq_topic: Some("x".into()),
                    ..f()
                }
            ),
            0
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    kind: Some("permanent".into()),
                    ..f()
                }
            ),
            2
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    text: Some("TIMEOUT".into()),
                    ..f()
                }
            ),
            1
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    older_than: Some("1d".into()),
                    ..f()
                }
            ),
            1
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    newer_than: Some("1h".into()),
                    ..f()
                }
            ),
            1
        );
        assert_eq!(
            count(
                &mut inbox,
                InboxFilter {
                    fingerprint: Some("permanent: bad json".into()),
                    ..f()
                }
            ),
            1
        );
        assert!(inbox
            .rows(
                &InboxFilter {
                    older_than: Some("soon".into()),
                    ..f()
                },
                now,
                &Heads::default(),
            )
            .unwrap_err()
            .contains("`soon` is not an age"));
    }

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("90s").unwrap(), Duration::seconds(90));
        assert_eq!(parse_age("7d").unwrap(), Duration::days(7));
        assert!(parse_age("7").is_err());
        assert!(parse_age("d").is_err());
        assert!(parse_age("99999999999999d").is_err());
    }

    #[test]
    fn a_row_says_what_is_parked_behind_its_dead_letters_now() {
        use super::super::parked::HeadState;
        let now = now();
        let head = |offset| HeadRef {
            source: "orders".into(),
            group: "billing".into(),
            partition: 0,
            offset: offset + 1000i64,
        };
        let state = |waiting, minutes_ago| HeadState {
            waiting,
            since: at(minutes_ago, now),
            first: true,
        };
        let parked = Heads::of_heads([(head(1), state(3, 30)), (head(2), state(1, 90))]);
        let mut inbox = Inbox::default();
        inbox.add(&sighting("billing", "a", at(30, now), 1), now, &parked);
        inbox.add(&sighting("billing", "a", at(90, now), 2), now, &parked);
        // Not a head when counted (its group does not park, or its head was resolved).
        inbox.add(&sighting("billing", "b", at(5, now), 3), now, &parked);
        let rows = inbox.rows(&InboxFilter::default(), now, &parked).unwrap();
        let a = rows.iter().find(|r| r.fingerprint == "a").unwrap();
        assert_eq!((a.parked.keys, a.parked.records), (2, 4));
        assert_eq!(a.parked.oldest, Some(at(90, now)));
        let b = rows.iter().find(|r| r.fingerprint == "b").unwrap();
        assert_eq!(b.parked, Parked::default());
        // One head resolved since: the row says what is parked now.
        let now_parked = Heads::of_heads([(head(2), state(1, 90))]);
        let rows = inbox
            .rows(&InboxFilter::default(), now, &now_parked)
            .unwrap();
        let a = rows.iter().find(|r| r.fingerprint == "a").unwrap();
        assert_eq!((a.parked.keys, a.parked.records), (1, 1));
        assert_eq!(inbox.pairs().len(), 1);
    }
}
