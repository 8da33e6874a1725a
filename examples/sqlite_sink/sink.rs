//! An idempotent sink on SQLite (bundled): each batch is one transaction, and the record id is
//! the primary key.
//!
//! A record may reach the sink twice: the consumer crashed after the rows were committed but
//! before the offset was, or the call reported a timeout although the database had committed.
//! The second insert of the same record id does nothing (`ON CONFLICT DO NOTHING`): the record
//! is recognised, counted in [`SqliteSink::duplicates`] and acknowledged, without a second row.
//!
//! One bad row (malformed JSON, a status the `CHECK` constraint rejects) fails the whole
//! transaction, as a bulk INSERT does; kafka-dlq then bisects the batch to find it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kafka_dlq::handler::BatchHandler;
use kafka_dlq::{HandlerError, Record};

/// Parcel events stored in SQLite.
#[derive(Clone)]
pub struct SqliteSink {
    conn: Arc<Mutex<rusqlite::Connection>>,
    duplicates: Arc<AtomicU64>,
}

#[derive(serde::Deserialize)]
struct Event {
    parcel_id: String,
    status: String,
}

impl SqliteSink {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = rusqlite::Connection::open(path)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS deliveries (
                 record_id TEXT PRIMARY KEY,
                 parcel_id TEXT NOT NULL,
                 status    TEXT NOT NULL
                     CHECK (status IN ('picked_up', 'in_transit', 'out_for_delivery', 'delivered'))
             );",
        )?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            duplicates: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Rows stored.
    pub fn rows(&self) -> u64 {
        let conn = self.conn.lock().unwrap();
        conn.query_row("SELECT COUNT(*) FROM deliveries", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap() as u64
    }

    /// Redelivered records recognised and acknowledged without a second row.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::SeqCst)
    }

    fn insert(&self, rows: Vec<(String, Option<Vec<u8>>)>) -> Result<(), HandlerError> {
        let mut conn = self.conn.lock().unwrap();
        let tx = conn
            .transaction()
            .map_err(|e| HandlerError::transient(format!("cannot begin a transaction: {e}")))?;
        let mut recognised = 0;
        for (id, payload) in &rows {
            let event: Event = serde_json::from_slice(payload.as_deref().unwrap_or_default())
                .map_err(|e| {
                    HandlerError::permanent(format!("record {id}: malformed JSON: {e}"))
                })?;
            let inserted = tx
                .execute(
                    "INSERT INTO deliveries (record_id, parcel_id, status) VALUES (?1, ?2, ?3)
                     ON CONFLICT (record_id) DO NOTHING",
                    (id, &event.parcel_id, &event.status),
                )
                .map_err(|e| match e {
                    rusqlite::Error::SqliteFailure(f, _)
                        if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        HandlerError::permanent(format!(
                            "record {id}: rejected by the database: {e}"
                        ))
                    }
                    other => HandlerError::transient(format!("record {id}: {other}")),
                })?;
            if inserted == 0 {
                recognised += 1;
            }
        }
        tx.commit()
            .map_err(|e| HandlerError::transient(format!("commit failed: {e}")))?;
        self.duplicates.fetch_add(recognised, Ordering::SeqCst);
        Ok(())
    }
}

impl BatchHandler for SqliteSink {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        let rows: Vec<(String, Option<Vec<u8>>)> = records
            .iter()
            .map(|r| (r.id.clone(), r.payload.clone()))
            .collect();
        let sink = self.clone();
        // SQLite blocks: keep it off the async threads.
        tokio::task::spawn_blocking(move || sink.insert(rows))
            .await
            .map_err(|e| HandlerError::transient(format!("database task failed: {e}")))?
    }
}
