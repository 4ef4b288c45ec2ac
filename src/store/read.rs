//! Reads: bounds, pages of records, and the offsets that make a read valid.

use rusqlite::Transaction;

use super::{LogStore, StoreError, schema};

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Position in the partition's log.
    pub offset: u64,
    /// The deduplication key it was appended with, if any.
    pub key: Option<String>,
    /// The record's body, as JSON text.
    pub payload: String,
    /// When its batch was appended, in ms since the Unix epoch.
    pub appended_at: i64,
}

/// A page of records and where to continue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// Records in offset order.
    pub records: Vec<Record>,
    /// The offset to read from next: one past the last record, or the requested offset when
    /// the page is empty.
    pub next_offset: u64,
    /// Records between `next_offset` and the end of the log.
    pub lag: u64,
}

/// Which offsets a partition can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounds {
    /// The oldest readable offset, counting cold segments; equals `next_offset` when nothing
    /// is readable.
    pub oldest_offset: u64,
    /// The oldest offset still in the hot window (SQLite); `next_offset` when it is empty.
    pub hot_offset: u64,
    /// The offset the next appended record will get.
    pub next_offset: u64,
}

impl LogStore {
    /// The partition's bounds.
    ///
    /// # Errors
    /// A storage failure.
    pub fn bounds(&self) -> Result<Bounds, StoreError> {
        self.snapshot(bounds_in)
    }

    /// Reads up to `limit` records from `from` (default: the oldest readable offset). `limit`
    /// defaults to, and is capped at, `max_batch_size`.
    ///
    /// # Errors
    /// [`StoreError::InvalidLimit`] for a zero limit, [`StoreError::InvalidOffset`] when
    /// `from` is beyond `next_offset`, [`StoreError::Truncated`] when `from` is below what the
    /// log still holds, or a storage failure.
    pub fn read(&self, from: Option<u64>, limit: Option<usize>) -> Result<Page, StoreError> {
        let limit = self.page_limit(limit)?;
        self.snapshot(|tx| {
            let bounds = bounds_in(tx)?;
            let from = from.unwrap_or(bounds.oldest_offset);
            if from > bounds.next_offset {
                return Err(StoreError::InvalidOffset {
                    offset: from,
                    next_offset: bounds.next_offset,
                });
            }
            if from < bounds.hot_offset {
                // Below the hot window and no cold copy is served: the records are gone.
                return Err(StoreError::Truncated {
                    requested_offset: from,
                    oldest_offset: bounds.hot_offset,
                });
            }
            let records = hot_records(tx, from, limit)?;
            let next_offset = records.last().map_or(from, |last| last.offset + 1);
            Ok(Page {
                lag: bounds.next_offset.saturating_sub(next_offset),
                records,
                next_offset,
            })
        })
    }

    /// The effective page size for a requested `limit`.
    fn page_limit(&self, limit: Option<usize>) -> Result<usize, StoreError> {
        match limit {
            Some(0) => Err(StoreError::InvalidLimit),
            Some(limit) => Ok(limit.min(self.options.max_batch_size)),
            None => Ok(self.options.max_batch_size),
        }
    }
}

pub(super) fn bounds_in(tx: &Transaction<'_>) -> Result<Bounds, StoreError> {
    let next_offset: u64 = tx
        .prepare_cached(schema::LOG_END)?
        .query_row([], |row| row.get(0))?;
    let (hot, cold): (Option<u64>, Option<u64>) = tx
        .prepare_cached(
            "SELECT (SELECT MIN(offset) FROM records), (SELECT MIN(first_offset) FROM segments)",
        )?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let hot_offset = hot.unwrap_or(next_offset);
    Ok(Bounds {
        oldest_offset: cold.map_or(hot_offset, |cold| cold.min(hot_offset)),
        hot_offset,
        next_offset,
    })
}

fn hot_records(tx: &Transaction<'_>, from: u64, limit: usize) -> Result<Vec<Record>, StoreError> {
    let mut statement = tx.prepare_cached(
        "SELECT offset, dedup_key, payload, appended_at FROM records
         WHERE offset >= ?1 ORDER BY offset LIMIT ?2",
    )?;
    let rows = statement.query_map(rusqlite::params![from, limit as u64], |row| {
        Ok(Record {
            offset: row.get(0)?,
            key: row.get(1)?,
            payload: row.get(2)?,
            appended_at: row.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
