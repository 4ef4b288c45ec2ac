//! Committed positions of groups: commit (forward only), look up, list, delete, and the backlog
//! they leave (counted by `pending_deliveries` in `volume/committer.rs`).

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use super::read::check_offset;
use super::{LogStore, Sees, StoreError};
use crate::names::validate_group;

impl LogStore {
    /// Commits `group`'s position: "everything below `offset` is processed". Commits only
    /// move forward: an offset at or below the current cursor changes nothing. Returns the
    /// cursor in effect afterwards.
    ///
    /// # Errors
    /// [`StoreError::InvalidName`], [`StoreError::InvalidOffset`] beyond `next_offset`, or a
    /// storage failure.
    pub fn commit(&self, group: &str, offset: u64) -> Result<u64, StoreError> {
        validate_group(group)?;
        self.write(Sees::Published, |tx, tail| {
            let now = self.now_ms();
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
                    tx.prepare_cached(
                        "INSERT INTO cursors (partition, group_name, offset, committed_at)
                         VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (partition, group_name) DO UPDATE
                         SET offset = excluded.offset, committed_at = excluded.committed_at",
                    )?
                    .execute(params![self.key, group, offset, now])?;
                    Ok(offset)
                }
            }
        })
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
                lag: next_offset.saturating_sub(cursor),
                leases: leased.map(|counts| counts.by_state),
                group,
            });
        }
        for (group, counts) in leases {
            groups.push(GroupPosition {
                lag: next_offset.saturating_sub(counts.first_offset),
                leases: Some(counts.by_state),
                group,
            });
        }
        Ok(groups)
    }
}
