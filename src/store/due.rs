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
//! ([`Volume::due`]), a range of the index; an open partition's alarm reads the copy in memory
//! ([`LogStore::due_at`]), so it costs no query.

use rusqlite::{Connection, params};

use super::{LogStore, StoreError, lock};

impl LogStore {
    /// When this partition's retention is next due (ms since the Unix epoch, by the store's
    /// clock), or `None` when nothing can come due without another append: the partition's
    /// `due_at` as its copy in memory holds it. That copy is loaded when the store opens and
    /// moved by whatever writes the row (a commit that makes retention due sooner, a trim that
    /// settles it), so reading it costs no query: an open partition's alarm reads it at every
    /// tick. A trim that failed leaves it as it was, due.
    ///
    /// Blocks only while a commit or a trim moves that copy, never across an fsync.
    pub(crate) fn due_at(&self) -> Option<i64> {
        lock(&self.tail.due).at
    }
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
pub struct DuePosition(pub(in crate::store) i64, pub(in crate::store) i64);

impl DuePosition {
    /// Before every partition.
    pub const START: Self = Self(i64::MIN, i64::MIN);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Volume;

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
}
