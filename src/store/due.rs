//! When each partition's retention is due, kept where a sweep finds it in time that follows the
//! partitions due, not the partitions stored.
//!
//! Every `partitions` row has a `due_at` (ms since the Unix epoch; `NULL` when no record can
//! come due without another append), indexed. It is written only when it moves earlier or
//! retention settled it:
//! - a group commit writes it when an append makes the partition due sooner: the first record
//!   of an empty hot window (due at its age limit), or the record that breaks the count or
//!   byte limit (due at once). In steady state a commit writes nothing more;
//! - a trim settles it from what is left: the oldest hot record's age limit, or `NULL`.
//!
//! Both happen under the volume's writer lock, against [`Due`], the partition's copy in
//! memory, so a commit never needs to read the row. A sweep asks each volume for the rows due
//! ([`Volume::due`]), a range of the index.

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use super::retention::Retention;
use super::volume::{Shared, Tail, Volume};

/// A partition's due time as stored, and where its hot window starts: what a commit needs to
/// tell whether its records make retention due sooner. Moved under the volume's writer lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Due {
    /// The partition's `due_at` as stored.
    pub at: Option<i64>,
    /// The oldest hot record: its offset and the bytes appended before it. The log's end when
    /// the hot window is empty.
    pub start: Tail,
    /// When the oldest hot record was appended; `None` when the hot window is empty.
    pub oldest_at: Option<i64>,
}

impl Due {
    /// The due state of a hot window starting at `oldest` (offset, bytes before it, append
    /// time), or empty when `None`, ending at `end`; `at` as stored.
    pub fn of(at: Option<i64>, oldest: Option<(u64, u64, i64)>, end: Tail) -> Self {
        match oldest {
            Some((next_offset, end_bytes, appended_at)) => Self {
                at,
                start: Tail {
                    next_offset,
                    end_bytes,
                },
                oldest_at: Some(appended_at),
            },
            None => Self {
                at,
                start: end,
                oldest_at: None,
            },
        }
    }

    /// When retention of this hot window, ending at `end`, is due under `limits`: at once
    /// (`now`) when it breaks the count or byte limit, else when its oldest record breaks the
    /// age limit; `None` when it is empty or nothing in it can come due.
    pub fn computed(&self, limits: &Retention, end: Tail, now: i64) -> Option<i64> {
        let oldest_at = self.oldest_at?;
        let records = end.next_offset.saturating_sub(self.start.next_offset);
        let bytes = end.end_bytes.saturating_sub(self.start.end_bytes);
        let over = limits.max_records.is_some_and(|max| records > max)
            || limits.max_bytes.is_some_and(|max| bytes > max);
        if over {
            return Some(now);
        }
        limits
            .max_age_ms
            .map(|age| oldest_at.saturating_add(i64::try_from(age).unwrap_or(i64::MAX)))
    }

    /// The state after a commit appended records, first at `appended_at`, moving the log's end
    /// from `before` to `after`: due no later than it was.
    pub fn after_append(
        &self,
        limits: &Retention,
        before: Tail,
        after: Tail,
        appended_at: i64,
    ) -> Self {
        if after.next_offset <= before.next_offset {
            return *self; // every record was a duplicate: nothing appended
        }
        let mut due = *self;
        if due.oldest_at.is_none() {
            // The window was empty: it starts with this commit's first record.
            due.start = before;
            due.oldest_at = Some(appended_at);
        }
        due.at = match (due.at, due.computed(limits, after, appended_at)) {
            (Some(stored), Some(computed)) => Some(stored.min(computed)),
            (stored, computed) => stored.or(computed),
        };
        due
    }
}

/// The oldest hot record of partition `key`: its offset, the bytes appended before it and when
/// it was appended. `oldest_recent` is its oldest record not yet indexed (`(offset, seq)`).
/// Called under the writer lock, so no index pass moves records meanwhile.
pub(super) fn oldest_hot(
    conn: &Connection,
    key: i64,
    oldest_recent: Option<(u64, i64)>,
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
    let Some((offset, seq)) = oldest_recent else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached("SELECT end_bytes - bytes, appended_at FROM records WHERE seq = ?1")?
        .query_row([seq], |row| Ok((offset, row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// Stores partition `key`'s due time.
pub(super) fn store_due_at(conn: &Connection, key: i64, at: Option<i64>) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE partitions SET due_at = ?2 WHERE id = ?1")?
        .execute(params![key, at])?;
    Ok(())
}

/// A partition whose retention is due, and its place in its volume's order of due times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePartition {
    /// The partition's topic.
    pub topic: String,
    /// The partition's index.
    pub partition: u32,
    /// Where the next page of due partitions starts after this one.
    pub position: DuePosition,
}

/// A place in a volume's order of due times: `(due_at, key)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DuePosition(i64, i64);

impl DuePosition {
    /// Before every partition.
    pub const START: Self = Self(i64::MIN, i64::MIN);
}

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
        self.shared().due(now, after, limit)
    }
}

impl Volume {
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
        shared.write(shared.epoch(), |tx| {
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
    fn due(
        &self,
        now: i64,
        after: DuePosition,
        limit: usize,
    ) -> Result<Vec<DuePartition>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.snapshot(|conn| {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(next_offset: u64, end_bytes: u64) -> Tail {
        Tail {
            next_offset,
            end_bytes,
        }
    }

    const AGE: Retention = Retention {
        max_age_ms: Some(1_000),
        max_records: Some(3),
        max_bytes: Some(100),
    };

    /// The first record of an empty window makes it due at its age limit; later records do
    /// not move it, until one breaks the count limit, which makes it due at once.
    #[test]
    fn appends_make_a_partition_due_no_later() {
        let empty = Due::of(None, None, end(5, 50));
        let first = empty.after_append(&AGE, end(5, 50), end(6, 60), 10_000);
        assert_eq!(first.at, Some(11_000));
        assert_eq!(first.start, end(5, 50));
        let second = first.after_append(&AGE, end(6, 60), end(8, 80), 10_500);
        assert_eq!(second.at, Some(11_000), "the oldest record decides the age");
        let over = second.after_append(&AGE, end(8, 80), end(9, 90), 10_700);
        assert_eq!(
            over.at,
            Some(10_700),
            "four records break the count limit of three"
        );
    }

    /// Bytes past the limit make a window due at once; without limits nothing is ever due.
    #[test]
    fn bytes_over_the_limit_are_due_at_once_and_no_limit_is_never_due() {
        let empty = Due::of(None, None, end(0, 0));
        let big = empty.after_append(&AGE, end(0, 0), end(1, 101), 7);
        assert_eq!(big.at, Some(7));
        let unlimited = Retention::default();
        let kept = empty.after_append(&unlimited, end(0, 0), end(1, 101), 7);
        assert_eq!(kept.at, None);
    }

    /// A volume from before due times were kept makes each partition with hot records due
    /// once, and no other: one with records is listed, one emptied by retention is not.
    #[test]
    fn an_earlier_volume_makes_its_partitions_with_records_due_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(Volume::file_name(0));
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &super::super::schema::MIGRATIONS[..4] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 4).unwrap();
            conn.execute_batch(
                "INSERT INTO partitions (id, topic, partition, next_offset) VALUES
                     (1, 'kept', 0, 0), (2, 'emptied', 0, 5);
                 INSERT INTO records (seq, partition, offset, payload, bytes, end_bytes, appended_at)
                     VALUES (1, 1, 0, '1', 1, 1, 0);",
            )
            .unwrap();
        }
        let volume = Volume::open(&path, crate::store::SyncMode::Normal).unwrap();
        assert!(volume.review_due_times("*=1/0/0").unwrap());
        let due = volume.due(1, DuePosition::START, 10).unwrap();
        let topics: Vec<&str> = due.iter().map(|due| due.topic.as_str()).collect();
        assert_eq!(topics, ["kept"]);
        assert!(!volume.review_due_times("*=1/0/0").unwrap(), "same limits");
    }

    /// What a trim leaves is due at its oldest record's age limit, or never when it is empty.
    #[test]
    fn a_settled_window_is_due_at_its_oldest_records_age() {
        let left = Due::of(None, Some((7, 70, 2_000)), end(9, 90));
        assert_eq!(left.computed(&AGE, end(9, 90), 2_500), Some(3_000));
        let empty = Due::of(Some(1), None, end(9, 90));
        assert_eq!(empty.computed(&AGE, end(9, 90), 2_500), None);
    }
}
