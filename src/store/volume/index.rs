//! The volume's indexes: the lookups by offset and by deduplication key are written by an
//! index pass from the records committed since the last one (when the committer is idle, or
//! every [`INDEX_EVERY_ROWS`](super::INDEX_EVERY_ROWS) records), and until then those records
//! are found through [`Recent`], kept in memory.

use std::collections::{HashMap, VecDeque};

use super::{Shared, Writer};
use crate::store::{StoreError, lock};

/// Records of one partition committed since the last index pass: `(offset, seq)` in offset
/// order, and their deduplication keys.
#[derive(Debug, Default)]
pub(super) struct Recent {
    pub(super) rows: VecDeque<(u64, i64)>,
    pub(super) keys: HashMap<String, (u64, i64)>,
}

impl Shared {
    /// Up to `limit` recent `(offset, seq)` of a partition from `from` on, in offset order.
    pub(in crate::store) fn recent_from(
        &self,
        key: i64,
        from: u64,
        limit: usize,
    ) -> Vec<(u64, i64)> {
        let recent = lock(&self.recent);
        let Some(recent) = recent.get(&key) else {
            return Vec::new();
        };
        let start = recent.rows.partition_point(|&(offset, _)| offset < from);
        recent.rows.range(start..).take(limit).copied().collect()
    }

    /// The oldest recent record of a partition: `(offset, seq)`.
    pub(in crate::store) fn oldest_recent(&self, key: i64) -> Option<(u64, i64)> {
        lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.rows.front().copied())
    }

    /// The newest recent record of a partition: `(offset, seq)`.
    pub(super) fn newest_recent(&self, key: i64) -> Option<(u64, i64)> {
        lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.rows.back().copied())
    }

    /// Indexes every record committed since the last index pass, then forgets them from the
    /// in-memory index. Not synced on its own: the indexes can be rebuilt from the records, and
    /// the next durable commit syncs them. On a replicated volume it does not wait for its
    /// window: it indexes only published records, so readers find nothing through it that
    /// has not landed, and it joins the groups in flight (see `committer.rs`).
    pub(in crate::store) fn index(&self) -> Result<(), StoreError> {
        let mut writer = self.door();
        self.index_locked(&mut writer)
    }

    pub(super) fn index_locked(&self, writer: &mut Writer) -> Result<(), StoreError> {
        self.settle_landing(writer)?;
        // Groups in flight are not indexed: readers must not find them.
        let (through, last) = (writer.indexed_through, writer.published_seq);
        if last <= through || self.damaged.get().is_some() {
            return Ok(());
        }
        let result = self.commit_unsynced_in_flight(writer, |tx| {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO record_index (partition, offset, seq)
                 SELECT partition, offset, seq FROM records WHERE seq > ?1 AND seq <= ?2",
            )?
            .execute([through, last])?;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO key_index (partition, dedup_key, offset)
                 SELECT partition, dedup_key, offset FROM records
                 WHERE seq > ?1 AND seq <= ?2 AND dedup_key IS NOT NULL",
            )?
            .execute([through, last])?;
            tx.prepare_cached("UPDATE indexed SET through_seq = ?1 WHERE id = 1")?
                .execute([last])?;
            Ok(())
        });
        if let Err(err) = result {
            return Err(self.write_failed(err));
        }
        writer.indexed_through = last;
        let mut recent = lock(&self.recent);
        recent.retain(|_, recent| {
            while recent.rows.front().is_some_and(|&(_, seq)| seq <= last) {
                recent.rows.pop_front();
            }
            recent.keys.retain(|_, &mut (_, seq)| seq > last);
            !recent.rows.is_empty()
        });
        recent.shrink_to_fit();
        Ok(())
    }

    /// Indexes what was committed since the last index pass, into an empty in-memory index.
    /// Nothing is written to damaged files, not even the indexes: the in-memory index is filled
    /// with those records instead.
    pub(super) fn index_or_remember(&self, writer: &mut Writer) -> Result<(), StoreError> {
        if self.damaged.get().is_none() {
            return self.index_locked(writer);
        }
        let mut statement = writer.conn.prepare(
            "SELECT partition, offset, seq, dedup_key FROM records WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = statement.query([writer.indexed_through])?;
        // Built whole, then swapped in: readers never see it half filled.
        let mut recent: HashMap<i64, Recent> = HashMap::new();
        while let Some(row) = rows.next()? {
            let (partition, offset, seq): (i64, u64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let entry = recent.entry(partition).or_default();
            entry.rows.push_back((offset, seq));
            if let Some(key) = row.get::<_, Option<String>>(3)? {
                entry.keys.insert(key, (offset, seq));
            }
        }
        *lock(&self.recent) = recent;
        Ok(())
    }
}
