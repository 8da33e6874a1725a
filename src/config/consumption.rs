//! How the consumer takes its records: as a member of a consumer group, which owns whole
//! partitions, or of a share group (KIP-932), whose members share every partition and
//! acknowledge each record on its own.

use std::fmt;

use serde::Deserialize;

/// Which kind of group the consumer joins (`consumption`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Consumption {
    /// A consumer group: each partition has one owner, records are committed by offset, in
    /// order ([`crate::Consumer`]).
    Group,
    /// A share group (KIP-932, Apache Kafka 4.2+): every member may take records of every
    /// partition, each record is acquired under a lock and acknowledged on its own, in no
    /// order (`kafka_dlq::consumer::share`, feature `share`).
    Share,
}

impl Consumption {
    /// The name in the config file: `group` or `share`.
    pub fn as_str(self) -> &'static str {
        match self {
            Consumption::Group => "group",
            Consumption::Share => "share",
        }
    }
}

impl std::str::FromStr for Consumption {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "group" => Ok(Consumption::Group),
            "share" => Ok(Consumption::Share),
            other => Err(format!("expected `group` or `share`, got `{other}`")),
        }
    }
}

impl fmt::Display for Consumption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who writes a share group's dead letters (`share_dlq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ShareDlq {
    /// kafka-dlq writes the dead letter to `dlq_topic` (the envelope or Spring's layout, with
    /// the error, its kind, the calls and the delivery count) and ACCEPTs the record only once
    /// the dead-letter topic acknowledged it.
    Ours,
    /// kafka-dlq REJECTs the record and the broker's own dead-letter queue (KIP-1191, Apache
    /// Kafka 4.4 with `share.version=2` and the group's `errors.deadletterqueue.topic.name`)
    /// takes it: headers only, without the application's error.
    Broker,
}

impl ShareDlq {
    /// The name in the config file: `ours` or `broker`.
    pub fn as_str(self) -> &'static str {
        match self {
            ShareDlq::Ours => "ours",
            ShareDlq::Broker => "broker",
        }
    }
}

impl std::str::FromStr for ShareDlq {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ours" => Ok(ShareDlq::Ours),
            "broker" => Ok(ShareDlq::Broker),
            other => Err(format!("expected `ours` or `broker`, got `{other}`")),
        }
    }
}

impl fmt::Display for ShareDlq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::{Consumption, ShareDlq};

    #[test]
    fn consumption_and_share_dlq_read_their_names_and_refuse_others() {
        assert_eq!("share".parse::<Consumption>(), Ok(Consumption::Share));
        assert_eq!("group".parse::<Consumption>(), Ok(Consumption::Group));
        assert!("queue"
            .parse::<Consumption>()
            .unwrap_err()
            .contains("`queue`"));
        assert_eq!("broker".parse::<ShareDlq>(), Ok(ShareDlq::Broker));
        assert_eq!(ShareDlq::Ours.to_string(), "ours");
        assert!("kafka".parse::<ShareDlq>().is_err());
    }
}
