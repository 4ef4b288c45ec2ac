//! Retention: trimming the hot window (flushing to the cold tier first when there is one) and
//! forgetting cold segments.
//!
//! A trim pass takes the oldest hot records that break a limit, at most `max_batch_size` of
//! them, and then, in this order: records the segment's key as an upload in progress
//! (`cold_uploads`, committed), writes the segment to the cold store (create-only), and in one
//! transaction records the segment in the index, deletes the hot records and deletes the upload
//! row. A crash or a failure at any point loses nothing: before the index is written the
//! records are still hot, and a retried pass finds the identical object already stored and
//! accepts it.
//!
//! Nor does it leave garbage for ever. A pass interrupted after its write leaves an object that
//! no index entry names, and the pass after a restart may choose another range (the limits or
//! the hot window changed), so nothing would ever name it. Its upload row does: the first trim
//! after a store opens, and the first after a failed trim, deletes the object of every upload
//! row that the index does not name, then the row ([`LogStore::remove_unindexed_uploads`]).
//! An object that the index names is never deleted. This costs one committed write per flush
//! and, per store opened, one indexed query (usually answered by no row); it never lists the
//! cold store. Removing `.tmp-*` files that killed writes left in a folder store is
//! [`FsColdStore`](crate::cold::FsColdStore)'s part.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, params};

use super::due::store_due_at;
use super::read::StoredRow;
use super::segment::{self, Encoded};
use super::tail::{Due, Retention};
use super::{Fault, LogStore, Record, Sees, StoreError, Tail, lock};
use crate::cold::{ColdStore, ColdStoreError, PutOutcome, SegmentKey};

/// Where a partition's expired records go: a cold store, under keys
/// `{prefix}/{topic}/{partition}/{first}-{last}`.
#[derive(Debug, Clone)]
pub struct ColdTier {
    /// The object storage.
    pub store: Arc<dyn ColdStore>,
    /// Key prefix shared by every partition (may be empty).
    pub prefix: String,
    /// The partition's topic, written into keys and segments.
    pub topic: String,
    /// The partition's index, written into keys and segments.
    pub partition: u32,
}

/// Counts of cold flushes (segment uploads) made by [`LogStore::trim`], shared by every
/// partition of a [`Log`](crate::Log) through [`StoreOptions`](super::StoreOptions)'s
/// `flush_counters` and read through [`Log::cold_flushes`](crate::Log::cold_flushes).
/// Lock-free: counting never blocks.
#[derive(Debug, Default)]
pub struct ColdFlushCounters {
    flushed: AtomicU64,
    failed: AtomicU64,
}

impl ColdFlushCounters {
    /// Segments written to the cold store (or found there already, from a retried pass).
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Relaxed)
    }

    /// Flushes that failed (the cold store erred, or held a different object under the key).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    fn count<T, E>(&self, result: &Result<T, E>) {
        let counter = if result.is_ok() {
            &self.flushed
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One pass: the hot records to remove, oldest first.
struct Pass {
    records: Vec<Record>,
    bytes: u64,
}

impl LogStore {
    /// Enforces retention now: removes the oldest hot records that break a limit, in passes of
    /// at most `max_batch_size`, flushing each pass to the cold tier (when there is one) before
    /// deleting it. Returns how many records left the hot window (0 when no limit is set). A
    /// trim already running is waited for first, so that when this one answers the hot window
    /// is within its limits, whoever trimmed it.
    ///
    /// The first trim after the store opens, and the first after a failed (or dropped) trim,
    /// first removes the cold objects that earlier flushes stored without indexing them (see
    /// the module docs); that removal failing is logged and retried by the next trim, and fails
    /// nothing.
    ///
    /// Blocks the calling thread for SQLite work; awaits cold-store I/O.
    ///
    /// # Errors
    /// [`StoreError::Cold`] when the cold store fails: passes already done stay done, the
    /// failed pass removes nothing. A storage failure.
    pub async fn trim(&self) -> Result<u64, StoreError> {
        // A damaged volume is never written, and what it says is uploaded is not trusted to
        // delete objects by.
        self.volume.shared().check_intact()?;
        let trimmed = self.trim_to_limits().await?;
        // A failed trim leaves the partition due: the next sweep tries again.
        self.settle_due()?;
        Ok(trimmed)
    }

    /// What [`LogStore::trim`] removes: the uploads left unindexed, then the records that break
    /// a limit. The due time is settled by the caller.
    async fn trim_to_limits(&self) -> Result<u64, StoreError> {
        let retention = self.options.retention;
        if retention.is_unlimited() && !self.may_have_unindexed_uploads() {
            return Ok(0);
        }
        // Released however this future ends: finished, failed, panicked or dropped mid-flush.
        let _one_at_a_time = self.trimming.lock().await;
        if self.may_have_unindexed_uploads()
            && let Err(err) = self.remove_unindexed_uploads_now().await
        {
            log::warn!(
                "{}: cannot remove cold uploads left unindexed, will retry: {err}",
                self.describe()
            );
        }
        if retention.is_unlimited() {
            return Ok(0);
        }
        // A pass that fails, or whose future is dropped mid-flush, may leave its segment stored
        // and unindexed: the flag says so until the passes are over.
        let settled_before = !self.uploads_unsettled.swap(true, Ordering::SeqCst);
        let trimmed = self.trim_passes(retention).await?;
        if settled_before {
            self.uploads_unsettled.store(false, Ordering::SeqCst);
        }
        Ok(trimmed)
    }

    /// Stores when retention is next due, from the hot window the trim left (see `due.rs`).
    fn settle_due(&self) -> Result<(), StoreError> {
        // Without limits nothing is ever due: only a stored due time needs clearing.
        if self.options.retention.is_unlimited() && lock(&self.tail.due).at.is_none() {
            return Ok(());
        }
        let shared = self.volume.shared();
        self.write(Sees::InFlight, |tx, tail| {
            let oldest = shared.oldest_hot(tx, self.key)?;
            let mut settled = Due::of(None, oldest, *tail);
            settled.at = settled.computed(&self.options.retention, *tail, self.now_ms());
            let mut due = lock(&self.tail.due);
            if settled.at != due.at {
                store_due_at(tx, self.key, settled.at)?;
            }
            // Set under the writer lock, which the committer needs to read it.
            *due = settled;
            Ok(())
        })
    }

    /// Removes the cold objects that flushes of this partition stored and never indexed (a
    /// crash or a failure between the write and the index), each object first and then its
    /// upload row; an object that the index names is never deleted, only its stale row. Returns
    /// how many unindexed uploads it removed (deleting a missing object counts: the write may
    /// never have happened). [`LogStore::trim`] calls it when needed; it waits for a running
    /// trim, so that no flush is in flight meanwhile.
    ///
    /// Blocks the calling thread for SQLite work; awaits cold-store I/O.
    ///
    /// # Errors
    /// [`StoreError::Cold`] when the cold store fails to delete: the rows not yet settled stay,
    /// for the next call. A storage failure.
    pub async fn remove_unindexed_uploads(&self) -> Result<u64, StoreError> {
        let _one_at_a_time = self.trimming.lock().await;
        self.remove_unindexed_uploads_now().await
    }

    /// Whether an object of this partition may be stored without an index entry: not checked
    /// since the store opened, or a trim failed (or was dropped) since the last check.
    fn may_have_unindexed_uploads(&self) -> bool {
        self.options.cold.is_some() && self.uploads_unsettled.load(Ordering::SeqCst)
    }

    /// [`LogStore::remove_unindexed_uploads`], under the trim lock already held.
    async fn remove_unindexed_uploads_now(&self) -> Result<u64, StoreError> {
        let Some(cold) = &self.options.cold else {
            return Ok(0);
        };
        // Whether the index names each upload is decided here, in SQL. No upload can become
        // indexed before the deletes below: only a trim pass adds to the index, and the trim
        // lock is held.
        let uploads: Vec<(String, bool)> = self.snapshot(|tx| {
            let mut statement = tx.prepare_cached(
                "SELECT u.locator, EXISTS (SELECT 1 FROM segments AS s
                                           WHERE s.partition = u.partition AND s.locator = u.locator)
                 FROM cold_uploads AS u WHERE u.partition = ?1",
            )?;
            let rows = statement.query_map([self.key], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        let mut removed = 0;
        for (locator, indexed) in uploads {
            if !indexed {
                let key = SegmentKey::from_stored(locator.clone());
                cold.store.delete(&key).await?;
                log::info!("{}: removed unindexed cold upload {key}", self.describe());
                removed += 1;
            }
            self.write(Sees::InFlight, |tx, _| {
                tx.prepare_cached(
                    "DELETE FROM cold_uploads WHERE partition = ?1 AND locator = ?2",
                )?
                .execute(params![self.key, locator])?;
                Ok(())
            })?;
        }
        self.uploads_unsettled.store(false, Ordering::SeqCst);
        Ok(removed)
    }

    async fn trim_passes(&self, retention: Retention) -> Result<u64, StoreError> {
        let cutoff = retention
            .max_age_ms
            .map(|age| self.now_ms().saturating_sub(age as i64));
        let mut removed = 0;
        // Trims find the oldest records through the index: index what is recent first.
        if self.volume.shared().oldest_recent(self.key).is_some() {
            self.volume.shared().index()?;
        }
        loop {
            let tail = self.tail();
            let pass = self.snapshot(|tx| {
                plan_pass(
                    tx,
                    self,
                    tail,
                    &retention,
                    cutoff,
                    self.options.max_batch_size,
                )
            })?;
            let Some(pass) = pass else { break };
            let flushed = match &self.options.cold {
                Some(cold) => {
                    let flushed = self.flush(cold, &pass).await;
                    if let Some(counters) = &self.options.flush_counters {
                        counters.count(&flushed);
                    }
                    let flushed = flushed?;
                    self.injected_fault(Fault::AfterSegmentStored)?;
                    Some(flushed)
                }
                None => None,
            };
            let deleted = self.complete_pass(&pass, flushed)?;
            removed += deleted;
            if deleted < pass.records.len() as u64 {
                break;
            }
        }
        Ok(removed)
    }

    /// Writes the pass's segment create-only, after recording the upload (see the module docs).
    /// An object already under its key is accepted only if it is this very segment (a retried
    /// pass), never overwritten.
    async fn flush(
        &self,
        cold: &ColdTier,
        pass: &Pass,
    ) -> Result<(SegmentKey, Encoded), StoreError> {
        let (first, last) = (
            pass.records[0].offset,
            pass.records[pass.records.len() - 1].offset,
        );
        let key = SegmentKey::new(&cold.prefix, &cold.topic, cold.partition, first, last);
        let encoded = segment::encode(&cold.topic, cold.partition, &pass.records);
        let recorded_now = self.record_upload(&key)?;
        if cold.store.put(&key, &encoded.bytes).await? == PutOutcome::AlreadyExists {
            let existing = cold.store.get(&key).await?;
            if existing.as_deref() != Some(encoded.bytes.as_slice()) {
                if recorded_now {
                    // The object was there before this partition claimed the key: it is not
                    // one of its uploads, and removing leftovers must never delete it.
                    self.forget_upload(&key)?;
                }
                return Err(ColdStoreError::Conflict {
                    key: key.to_string(),
                }
                .into());
            }
        }
        Ok((key, encoded))
    }

    /// Records that an object may be stored under `key`, before it is written; `false` when an
    /// earlier pass had recorded it already.
    fn record_upload(&self, key: &SegmentKey) -> Result<bool, StoreError> {
        self.write(Sees::InFlight, |tx, _| {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO cold_uploads (partition, locator) VALUES (?1, ?2)
                     ON CONFLICT DO NOTHING",
                )?
                .execute(params![self.key, key.as_str()])?;
            Ok(inserted == 1)
        })
    }

    /// Drops the upload row of `key` without deleting the object.
    fn forget_upload(&self, key: &SegmentKey) -> Result<(), StoreError> {
        self.write(Sees::InFlight, |tx, _| {
            tx.prepare_cached("DELETE FROM cold_uploads WHERE partition = ?1 AND locator = ?2")?
                .execute(params![self.key, key.as_str()])?;
            Ok(())
        })
    }

    /// Indexes the flushed segment (if any), settles its upload row and deletes the pass's hot
    /// records, atomically.
    fn complete_pass(
        &self,
        pass: &Pass,
        flushed: Option<(SegmentKey, Encoded)>,
    ) -> Result<u64, StoreError> {
        let (first, last) = (
            pass.records[0].offset,
            pass.records[pass.records.len() - 1].offset,
        );
        self.write(Sees::InFlight, |tx, tail| {
            if let Some((key, encoded)) = &flushed {
                tx.prepare_cached(
                    "INSERT INTO segments (partition, first_offset, last_offset, locator, checksum, bytes, flushed_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (partition, first_offset) DO UPDATE SET last_offset = excluded.last_offset,
                        locator = excluded.locator, checksum = excluded.checksum,
                        bytes = excluded.bytes, flushed_at = excluded.flushed_at",
                )?
                .execute(params![self.key, first, last, key.as_str(), encoded.checksum, pass.bytes, self.now_ms()])?;
                tx.prepare_cached("DELETE FROM cold_uploads WHERE partition = ?1 AND locator = ?2")?
                    .execute(params![self.key, key.as_str()])?;
                self.injected_fault(Fault::AfterSegmentIndexed)?;
            }
            tx.prepare_cached(
                "DELETE FROM key_index WHERE partition = ?1 AND offset BETWEEN ?2 AND ?3",
            )?
            .execute(params![self.key, first, last])?;
            tx.prepare_cached(
                "DELETE FROM records WHERE seq IN
                 (SELECT seq FROM record_index WHERE partition = ?1 AND offset BETWEEN ?2 AND ?3)",
            )?
            .execute(params![self.key, first, last])?;
            let deleted = tx
                .prepare_cached(
                    "DELETE FROM record_index WHERE partition = ?1 AND offset BETWEEN ?2 AND ?3",
                )?
                .execute(params![self.key, first, last])?;
            // The hot window may now be empty: keep the log's end where appends will find it.
            tx.prepare_cached("UPDATE partitions SET next_offset = ?2, end_bytes = ?3 WHERE id = ?1")?
                .execute(params![self.key, tail.next_offset, tail.end_bytes])?;
            Ok(deleted as u64)
        })
    }

    /// Forgets the cold segments that end below `before` (their objects are left to the cold
    /// store's own lifecycle). Reads below the new oldest offset then report truncation.
    /// Returns how many segments were forgotten.
    ///
    /// # Errors
    /// A storage failure.
    pub fn forget_cold_before(&self, before: u64) -> Result<u64, StoreError> {
        self.write(Sees::InFlight, |tx, _| {
            let forgotten = tx
                .prepare_cached("DELETE FROM segments WHERE partition = ?1 AND last_offset < ?2")?
                .execute(params![self.key, before])?;
            Ok(forgotten as u64)
        })
    }
}

/// Picks the longest prefix of the oldest hot records (at most `max_batch`) in which every
/// record breaks a limit: it is among the `excess` oldest, or bytes are still over budget
/// before it is counted, or it is older than `cutoff`.
fn plan_pass(
    tx: &Connection,
    store: &LogStore,
    tail: Tail,
    retention: &Retention,
    cutoff: Option<i64>,
    max_batch: usize,
) -> Result<Option<Pass>, StoreError> {
    let Tail {
        next_offset,
        end_bytes,
    } = tail;
    let mut statement = tx.prepare_cached(
        "SELECT i.offset, r.dedup_key, r.payload, r.appended_at, r.bytes, r.end_bytes, r.checksum,
                r.meta
         FROM record_index AS i JOIN records AS r ON r.seq = i.seq
         WHERE i.partition = ?1 ORDER BY i.offset LIMIT ?2",
    )?;
    let mut rows = statement.query(params![store.key, max_batch as u64])?;
    let mut pass = Pass {
        records: Vec::new(),
        bytes: 0,
    };
    let mut over_bytes: Option<i128> = None;
    let mut excess = 0;
    while let Some(row) = rows.next()? {
        let (offset, appended_at, bytes, record_end): (u64, i64, u64, u64) =
            (row.get(0)?, row.get(3)?, row.get(4)?, row.get(5)?);
        if pass.records.is_empty() {
            // The hot window is the contiguous run from this record to the log's end.
            excess = retention
                .max_records
                .map_or(0, |max| (next_offset - offset).saturating_sub(max));
            let hot_bytes = end_bytes - (record_end - bytes);
            over_bytes = retention
                .max_bytes
                .map(|max| i128::from(hot_bytes) - i128::from(max));
        }
        let by_count = (pass.records.len() as u64) < excess;
        let by_bytes = over_bytes.is_some_and(|over| over > 0);
        let by_age = cutoff.is_some_and(|cutoff| appended_at < cutoff);
        if !(by_count || by_bytes || by_age) {
            break;
        }
        over_bytes = over_bytes.map(|over| over - i128::from(bytes));
        pass.bytes += bytes;
        // Checked before it is flushed: a cold segment gets a checksum of its own.
        pass.records.push(store.checked(StoredRow {
            offset,
            key: row.get(1)?,
            payload: row.get(2)?,
            meta: row.get(7)?,
            appended_at,
            checksum: row.get(6)?,
        })?);
    }
    // A flush never writes a segment with a hole.
    if let Some(first) = pass.records.first() {
        store.check_contiguous(&pass.records, first.offset, 0)?;
    }
    Ok((!pass.records.is_empty()).then_some(pass))
}
