//! Committed positions of groups: commit (forward only), seek (anywhere valid), look up, list,
//! delete, and the backlog they leave (counted by `pending_deliveries` in
//! `volume/committer.rs`).
//!
//! A cursor keeps the metadata of the commit that set it (a Kafka offset commit's): a commit
//! that moves it without metadata clears it, one that does not move it changes nothing.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use super::read::check_offset;
use super::{LogStore, Sees, StoreError};
use crate::names::validate_group;

/// Most bytes of UTF-8 a cursor's metadata may have (Kafka's default
/// `offset.metadata.max.bytes`).
pub const MAX_CURSOR_METADATA_BYTES: usize = 4096;

/// A group's committed position in a partition, and the metadata string its commit carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The next offset the group will read.
    pub offset: u64,
    /// What the commit that set the cursor carried; `None` when it carried nothing.
    pub metadata: Option<String>,
}

/// The rule for a cursor's metadata: at most [`MAX_CURSOR_METADATA_BYTES`] bytes.
///
/// # Errors
/// [`StoreError::MetadataTooLong`].
pub fn check_metadata(metadata: Option<&str>) -> Result<(), StoreError> {
    match metadata {
        Some(text) if text.len() > MAX_CURSOR_METADATA_BYTES => Err(StoreError::MetadataTooLong {
            bytes: text.len(),
            max: MAX_CURSOR_METADATA_BYTES,
        }),
        _ => Ok(()),
    }
}

impl LogStore {
    /// Commits `group`'s position: "everything below `offset` is processed". Commits only
    /// move forward: an offset at or below the current cursor changes nothing. Returns the
    /// cursor in effect afterwards.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`], [`StoreError::InvalidOffset`] beyond `next_offset`, or a
    /// storage failure.
    pub fn commit(&self, group: &str, offset: u64) -> Result<u64, StoreError> {
        self.commit_with(group, offset, None)
    }

    /// [`commit`](Self::commit), keeping `metadata` with the cursor when the commit moves it
    /// (and clearing what an earlier commit kept when it moves it without any).
    ///
    /// # Errors
    /// As [`commit`](Self::commit), and [`StoreError::MetadataTooLong`].
    pub fn commit_with(
        &self,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
    ) -> Result<u64, StoreError> {
        validate_group(group)?;
        check_metadata(metadata)?;
        self.write(Sees::Published, |tx, tail| {
            check_offset(offset, tail.next_offset)?;
            let current: Option<u64> = tx
                .prepare_cached(
                    "SELECT offset FROM cursors WHERE partition = ?1 AND group_name = ?2",
                )?
                .query_row(params![self.key, group], |row| row.get(0))
                .optional()?;
            match current {
                Some(current) if current >= offset => Ok(current),
                _ => {
                    self.set_cursor(tx, group, offset, metadata)?;
                    Ok(offset)
                }
            }
        })
    }

    /// Sets `group`'s position to `offset`, forward or back (a seek: the records from
    /// `offset` on are read again), keeping `metadata` with it. Returns the cursor, `offset`.
    /// The group's leases are left as they are: a seek is a committed cursor's move.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`], [`StoreError::MetadataTooLong`],
    /// [`StoreError::InvalidOffset`] beyond `next_offset`, or a storage failure; each changes
    /// nothing.
    pub fn seek(
        &self,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
    ) -> Result<u64, StoreError> {
        validate_group(group)?;
        check_metadata(metadata)?;
        self.write(Sees::Published, |tx, tail| {
            check_offset(offset, tail.next_offset)?;
            self.set_cursor(tx, group, offset, metadata)?;
            Ok(offset)
        })
    }

    /// Writes `group`'s cursor: `offset`, committed now, with `metadata`.
    fn set_cursor(
        &self,
        tx: &Transaction<'_>,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(
            "INSERT INTO cursors (partition, group_name, offset, committed_at, metadata)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (partition, group_name) DO UPDATE
             SET offset = excluded.offset, committed_at = excluded.committed_at,
                 metadata = excluded.metadata",
        )?
        .execute(params![self.key, group, offset, self.now_ms(), metadata])?;
        Ok(())
    }

    /// `group`'s committed position, or `None` if it never committed.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`] or a storage failure.
    pub fn cursor(&self, group: &str) -> Result<Option<u64>, StoreError> {
        validate_group(group)?;
        self.snapshot(|tx| {
            Ok(tx
                .prepare_cached(
                    "SELECT offset FROM cursors WHERE partition = ?1 AND group_name = ?2",
                )?
                .query_row(params![self.key, group], |row| row.get(0))
                .optional()?)
        })
    }

    /// `group`'s committed position with the metadata its commit carried, or `None` if it
    /// never committed.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`] or a storage failure.
    pub fn committed(&self, group: &str) -> Result<Option<Committed>, StoreError> {
        validate_group(group)?;
        self.snapshot(|tx| {
            Ok(tx
                .prepare_cached(
                    "SELECT offset, metadata FROM cursors
                     WHERE partition = ?1 AND group_name = ?2",
                )?
                .query_row(params![self.key, group], |row| {
                    Ok(Committed {
                        offset: row.get(0)?,
                        metadata: row.get(1)?,
                    })
                })
                .optional()?)
        })
    }

    /// Every group's committed position, by group name.
    ///
    /// # Errors
    /// A storage failure.
    pub fn cursors(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        self.snapshot(|tx| {
            let mut statement =
                tx.prepare_cached("SELECT group_name, offset FROM cursors WHERE partition = ?1")?;
            let rows =
                statement.query_map(params![self.key], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Deletes `group`'s cursor and its leases, so it stops holding back the backlog and a
    /// later commit may start anywhere valid. Returns whether there was a cursor.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`] or a storage failure.
    pub fn delete_cursor(&self, group: &str) -> Result<bool, StoreError> {
        validate_group(group)?;
        self.write(Sees::Published, |tx, _| {
            let deleted = tx
                .prepare_cached("DELETE FROM cursors WHERE partition = ?1 AND group_name = ?2")?
                .execute(params![self.key, group])?;
            tx.prepare_cached("DELETE FROM leases WHERE partition = ?1 AND group_name = ?2")?
                .execute(params![self.key, group])?;
            tx.prepare_cached("DELETE FROM allocations WHERE partition = ?1 AND group_name = ?2")?
                .execute(params![self.key, group])?;
            Ok(deleted > 0)
        })
    }

    /// The partition's backlog, reported as `pendingDeliveries`: records its slowest group has
    /// not processed (0 when no group has a cursor). The rule is `pending_deliveries` in
    /// `volume/committer.rs`, which every group commit also applies for the load it answers with.
    ///
    /// # Errors
    /// A storage failure.
    pub fn pending_deliveries(&self) -> Result<u64, StoreError> {
        let next_offset = self.tail().next_offset;
        self.snapshot(|tx| super::volume::pending_deliveries(tx, self.key, next_offset))
    }
}

/// One group's position in one partition: what `GET /metrics` shows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPosition {
    /// The group.
    pub group: String,
    /// Its committed cursor; `None` for a group that leases without having committed.
    pub cursor: Option<u64>,
    /// Records between the group's position (its cursor, or else the first offset it leased)
    /// and the partition's next offset.
    pub lag: u64,
    /// Its lease rows per state ([`LeaseState::ALL`](super::LeaseState::ALL)); `None` for a
    /// group with no lease row.
    pub leases: Option<[u64; 4]>,
}

impl LogStore {
    /// Every group of the partition: those with a cursor, and those that lease without having
    /// committed yet.
    ///
    /// # Errors
    /// A storage failure.
    pub fn group_positions(&self) -> Result<Vec<GroupPosition>, StoreError> {
        let cursors = self.cursors()?;
        let mut leases = self.lease_counts()?;
        if cursors.is_empty() && leases.is_empty() {
            return Ok(Vec::new());
        }
        let next_offset = self.bounds()?.next_offset;
        let mut groups = Vec::with_capacity(cursors.len() + leases.len());
        for (group, cursor) in cursors {
            let leased = leases.remove(&group);
            groups.push(GroupPosition {
                cursor: Some(cursor),
                lag: next_offset.saturating_sub(cursor),
                leases: leased.map(|counts| counts.by_state),
                group,
            });
        }
        for (group, counts) in leases {
            groups.push(GroupPosition {
                cursor: None,
                lag: next_offset.saturating_sub(counts.first_offset),
                leases: Some(counts.by_state),
                group,
            });
        }
        Ok(groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewRecord, StoreOptions, SyncMode};

    /// A store of one partition holding `records` records, in a temporary folder.
    fn store_with(records: usize) -> (LogStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = StoreOptions::default().sync(SyncMode::Normal);
        let store = LogStore::open(dir.path().join("volume.sqlite"), options).expect("open");
        if records > 0 {
            let batch = vec![NewRecord::new("{}"); records];
            assert!(store.append(&batch).expect("append").is_appended());
        }
        (store, dir)
    }

    fn committed(offset: u64, metadata: Option<&str>) -> Option<Committed> {
        Some(Committed {
            offset,
            metadata: metadata.map(str::to_owned),
        })
    }

    /// A seek moves the cursor back (where a commit would not) and forward, each time keeping
    /// its own metadata, none included.
    #[test]
    fn a_seek_moves_the_cursor_back_or_forward_with_its_metadata() {
        let (store, _dir) = store_with(5);
        assert_eq!(store.commit("g", 4).unwrap(), 4);
        assert_eq!(store.committed("g").unwrap(), committed(4, None));

        assert_eq!(store.seek("g", 1, Some("back")).unwrap(), 1);
        assert_eq!(store.cursor("g").unwrap(), Some(1));
        assert_eq!(store.committed("g").unwrap(), committed(1, Some("back")));

        assert_eq!(store.seek("g", 5, Some("")).unwrap(), 5);
        assert_eq!(store.committed("g").unwrap(), committed(5, Some("")));
        assert_eq!(store.seek("g", 5, None).unwrap(), 5);
        assert_eq!(store.committed("g").unwrap(), committed(5, None));
        assert_eq!(store.committed("other").unwrap(), None);
    }

    /// A commit after a seek is forward only from the sought cursor: one that does not move it
    /// keeps the seek's metadata, one that moves it clears it (or keeps its own).
    #[test]
    fn a_commit_after_a_seek_keeps_its_metadata_unless_it_moves_the_cursor() {
        let (store, _dir) = store_with(5);
        store.commit("g", 4).unwrap();
        store.seek("g", 2, Some("m")).unwrap();
        assert_eq!(
            store.commit("g", 1).unwrap(),
            2,
            "forward only from the seek"
        );
        assert_eq!(store.commit("g", 2).unwrap(), 2);
        assert_eq!(store.committed("g").unwrap(), committed(2, Some("m")));

        assert_eq!(store.commit("g", 3).unwrap(), 3);
        assert_eq!(store.committed("g").unwrap(), committed(3, None));
        assert_eq!(store.commit_with("g", 4, Some("n")).unwrap(), 4);
        assert_eq!(store.commit_with("g", 4, Some("o")).unwrap(), 4);
        assert_eq!(store.committed("g").unwrap(), committed(4, Some("n")));
    }

    /// A seek beyond the next offset, with metadata too long, or of a bad group name is
    /// refused and changes nothing; a seek to the next offset, with metadata of exactly the
    /// most bytes, is taken.
    #[test]
    fn a_refused_seek_changes_nothing() {
        let (store, _dir) = store_with(3);
        store.seek("g", 2, Some("m")).unwrap();

        let err = store.seek("g", 4, Some("x")).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::InvalidOffset {
                    offset: 4,
                    next_offset: 3
                }
            ),
            "{err:?}"
        );
        let long = "é".repeat(MAX_CURSOR_METADATA_BYTES / 2 + 1);
        let err = store.seek("g", 0, Some(&long)).unwrap_err();
        assert!(
            matches!(err, StoreError::MetadataTooLong { bytes, .. } if bytes == long.len()),
            "{err:?}"
        );
        assert_eq!(err.code(), crate::error_code::ErrorCode::InvalidRequest);
        let err = store.commit_with("g", 3, Some(&long)).unwrap_err();
        assert!(matches!(err, StoreError::MetadataTooLong { .. }), "{err:?}");
        let err = store.seek("bad group", 0, None).unwrap_err();
        assert!(matches!(err, StoreError::InvalidName(_)), "{err:?}");
        assert_eq!(store.committed("g").unwrap(), committed(2, Some("m")));
        assert_eq!(store.cursors().unwrap().len(), 1);

        let most = "m".repeat(MAX_CURSOR_METADATA_BYTES);
        assert_eq!(store.seek("g", 3, Some(&most)).unwrap(), 3);
        assert_eq!(store.committed("g").unwrap(), committed(3, Some(&most)));
    }

    /// A partition never written takes a seek to 0, its next offset, and no further.
    #[test]
    fn an_empty_partition_takes_a_seek_to_zero_only() {
        let (store, _dir) = store_with(0);
        assert!(matches!(
            store.seek("g", 1, None),
            Err(StoreError::InvalidOffset { .. })
        ));
        assert_eq!(store.seek("g", 0, Some("m")).unwrap(), 0);
        assert_eq!(store.committed("g").unwrap(), committed(0, Some("m")));
    }
}
