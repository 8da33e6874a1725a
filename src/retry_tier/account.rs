//! A retry record's account of itself: the JSON of its `kafka_dlq-retry` header (what
//! [`super::delivery`] writes and reads back, and what [`super::spring`] rebuilds from Spring's
//! headers when a Spring application wrote the record).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::retry::RetryStage;
use crate::record::TimestampType;

/// The JSON of the `kafka_dlq-retry` header.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct RetryHeader {
    pub(super) id: String,
    pub(super) source: Origin,
    pub(super) tier: u32,
    pub(super) due: DateTime<Utc>,
    pub(super) attempts: u32,
    pub(super) history: Vec<RetryStage>,
}

/// Where the record came from.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Origin {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) timestamp_type: Option<TimestampType>,
}
