//! A volume's due times as a whole: the partitions due (a range of the `due_at` index), and a
//! review of every partition's due time when the retention limits changed (the rules are told
//! in `store/due.rs`).

use rusqlite::{Connection, OptionalExtension, params};

use super::{Shared, Volume};
use crate::store::StoreError;
use crate::store::due::{DuePartition, DuePosition};

impl Volume {
    /// Up to `limit` partitions whose retention is due at `now`, after `after` in order of due
    /// time. One range of the `due_at` index: the cost follows the partitions due.
    ///
    /// # Errors
    /// A storage failure.
    pub fn due(
        &self,
        now: i64,
        after: DuePosition,
        limit: usize,
    ) -> Result<Vec<DuePartition>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.shared().snapshot(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT topic, partition, due_at, id FROM partitions
                 WHERE due_at <= ?1 AND (due_at, id) > (?2, ?3)
                 ORDER BY due_at, id LIMIT ?4",
            )?;
            let rows = statement.query_map(params![now, after.0, after.1, limit], |row| {
                Ok(DuePartition {
                    topic: row.get(0)?,
                    partition: row.get(1)?,
                    position: DuePosition(row.get(2)?, row.get(3)?),
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Makes every partition with hot records due at once if the retention limits changed
    /// since the due times were computed (`limits` describes the limits in force, and is
    /// recorded), so that a lowered limit reaches partitions nobody touches. Costs one pass
    /// over the hot records' index, only when the limits changed. A damaged volume is left as
    /// it is (it is never written). Answers whether the limits changed.
    ///
    /// # Errors
    /// A storage failure.
    pub fn review_due_times(&self, limits: &str) -> Result<bool, StoreError> {
        let shared = self.shared();
        if self.damage().is_some() {
            return Ok(false);
        }
        shared.write(shared.epoch(), super::Sees::InFlight, |tx| {
            let recorded: Option<String> = tx
                .prepare_cached("SELECT limits FROM due_limits WHERE id = 1")?
                .query_row([], |row| row.get(0))
                .optional()?;
            if recorded.as_deref() == Some(limits) {
                return Ok(false);
            }
            tx.prepare_cached(
                "UPDATE partitions SET due_at = 0 WHERE id IN (
                     SELECT partition FROM record_index
                     UNION SELECT partition FROM records
                           WHERE seq > (SELECT through_seq FROM indexed WHERE id = 1))",
            )?
            .execute([])?;
            tx.prepare_cached("INSERT OR REPLACE INTO due_limits (id, limits) VALUES (1, ?1)")?
                .execute([limits])?;
            Ok(true)
        })
    }
}

impl Shared {
    /// The oldest hot record of partition `key`: its offset, the bytes appended before it and
    /// when it was appended. Called under the writer lock, so no index pass moves records
    /// meanwhile.
    pub(in crate::store) fn oldest_hot(
        &self,
        conn: &Connection,
        key: i64,
    ) -> Result<Option<(u64, u64, i64)>, StoreError> {
        // Indexed records are older than recent ones.
        let indexed = conn
            .prepare_cached(
                "SELECT i.offset, r.end_bytes - r.bytes, r.appended_at FROM record_index AS i
                 JOIN records AS r ON r.seq = i.seq
                 WHERE i.partition = ?1 ORDER BY i.offset LIMIT 1",
            )?
            .query_row([key], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .optional()?;
        if indexed.is_some() {
            return Ok(indexed);
        }
        let Some((offset, seq)) = self.oldest_recent(key) else {
            return Ok(None);
        };
        Ok(conn
            .prepare_cached("SELECT end_bytes - bytes, appended_at FROM records WHERE seq = ?1")?
            .query_row([seq], |row| Ok((offset, row.get(0)?, row.get(1)?)))
            .optional()?)
    }
}
