//! `LogStore`: every rule of one partition's log, as plain synchronous Rust over its share of a
//! SQLite [`Volume`] (one database holding many partitions).
//!
//! The store knows nothing of actors or HTTP. Appends go to the volume's committer,
//! which commits the appends of every partition of the volume that queued meanwhile in one
//! transaction; other writes use the volume's writing connection under its lock (the partition
//! is the single writer of its offsets, cursors and leases, which keeps offsets contiguous);
//! reads use a small pool of read-only connections, so they run on any thread while a write
//! commits. Every method blocks on SQLite; call it from a thread that may block.

mod append;
mod batch;
mod commit_queue;
mod cursors;
mod damage;
mod due;
mod error;
mod leases;
mod read;
mod record;
mod redo;
mod replication;
mod retention;
mod schema;
mod scrub;
mod segment;
mod tail;
mod volume;
mod volumes;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub(crate) use crate::sync::{lock, read_lock, write_lock};

use rusqlite::{Connection, Transaction};
use serde::Deserialize;

pub use batch::{AppendOutcome, AppendRejection, MAX_KEY_BYTES, NewRecord, check_batch};
pub use cursors::{Committed, GroupPosition, MAX_CURSOR_METADATA_BYTES, check_metadata};
pub use damage::{AcceptError, AcceptedDamage, DamageKind, DamageMark, accept_damage};
pub(crate) use damage::{mark_damaged_file, mark_path as damage_mark_path};
pub use due::{DuePartition, DuePosition};
pub use error::StoreError;
pub use leases::{Lease, LeaseOptions, LeaseOutcome, LeaseRow, LeaseState};
pub use read::{Bounds, Page, Record, check_offset, page_limit, unsigned_offset};
pub use record::{Header, MAX_HEADER_BYTES, MAX_HEADERS, MAX_MESSAGE_KEY_BYTES, Payload};
pub use replication::{
    Landed, LocalCopy, OnLanded, Position, ReplicaCounters, Stream, StreamError, VolumeReplica,
};
pub use retention::{ColdFlushCounters, ColdTier};
pub use scrub::ScrubCounters;
pub use tail::Retention;
pub(crate) use volume::Gone;
pub use volume::{CommitterPool, INDEX_EVERY_ROWS, Volume};
pub(crate) use volumes::Volumes;

use tail::{Due, PartitionTail, Tail};
use volume::{Fault, Sees, TrimLock};

use crate::clock::{Clock, SystemClock};

/// How hard a commit pushes data to disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// fsync on every commit: an acknowledged append survives power loss.
    #[default]
    Full,
    /// fsync only at WAL checkpoints: may lose the last acknowledged appends on power loss,
    /// never corrupts.
    Normal,
}

impl SyncMode {
    fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// How a [`LogStore`] behaves. Built from the configuration's `[storage]` and `[log]` sections.
#[derive(Debug, Clone)]
#[must_use]
pub struct StoreOptions {
    /// Commit durability. Default: [`SyncMode::Full`].
    pub sync: SyncMode,
    /// Most records in one append, and the largest page a read returns. Default: 100.
    pub max_batch_size: usize,
    /// Largest payload of one record, in bytes of its stored text. Default: 1 MiB.
    pub max_record_bytes: usize,
    /// Source of timestamps. Default: the system clock.
    pub clock: Arc<dyn Clock>,
    /// Limits of the hot window, enforced by [`LogStore::trim`]. Default: none.
    pub retention: Retention,
    /// Where expired records go; `None` deletes them. Default: `None`.
    pub cold: Option<ColdTier>,
    /// How groups lease ranges.
    pub leases: LeaseOptions,
    /// Where [`LogStore::trim`] counts its cold flushes, if anywhere. Default: `None`.
    pub flush_counters: Option<Arc<ColdFlushCounters>>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sync: SyncMode::Full,
            max_batch_size: 100,
            max_record_bytes: 1 << 20,
            clock: Arc::new(SystemClock),
            retention: Retention::default(),
            cold: None,
            leases: LeaseOptions::default(),
            flush_counters: None,
        }
    }
}

impl StoreOptions {
    /// Sets the commit durability.
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.sync = sync;
        self
    }

    /// Sets the largest batch and page.
    pub fn max_batch_size(mut self, max: usize) -> Self {
        self.max_batch_size = max;
        self
    }

    /// Sets the largest payload.
    pub fn max_record_bytes(mut self, max: usize) -> Self {
        self.max_record_bytes = max;
        self
    }

    /// Sets the clock (tests pass a `ManualClock`, feature `test-util`).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the hot window's limits.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Sets how groups lease ranges.
    pub fn leases(mut self, leases: LeaseOptions) -> Self {
        self.leases = leases;
        self
    }

    /// Sets the cold tier that expired records are flushed to.
    pub fn cold(mut self, cold: ColdTier) -> Self {
        self.cold = Some(cold);
        self
    }

    /// Sets where cold flushes are counted (one set of counters may serve many stores).
    pub fn flush_counters(mut self, counters: Arc<ColdFlushCounters>) -> Self {
        self.flush_counters = Some(counters);
        self
    }
}

/// One partition's log: its share of a [`Volume`]. See the module docs.
#[derive(Debug)]
pub struct LogStore {
    volume: Arc<Volume>,
    /// The partition's key in the volume (`partitions.id`).
    key: i64,
    options: StoreOptions,
    /// The log's end, moved by the volume's committer only.
    tail: Arc<PartitionTail>,
    /// The volume's epoch when this store opened: after a failed commit the volume recovers
    /// under a new epoch, and this store refuses writes until it is reopened.
    epoch: u64,
    /// Set while a trim runs, so two trims never flush the same records; shared with any other
    /// store open on the partition (see `Shared::trim_lock`).
    trimming: Arc<TrimLock>,
    /// A cold object of this partition may be stored without an index entry: set at open (an
    /// earlier process may have died mid-flush) and by a failed trim, cleared once the upload
    /// rows are settled (see `retention.rs`).
    uploads_unsettled: AtomicBool,
    /// Recently read cold segments, so paging through one segment fetches it once.
    segment_cache: read::SegmentCache,
}

impl Drop for LogStore {
    fn drop(&mut self) {
        self.volume
            .shared()
            .release_trim_lock(self.key, &self.trimming);
    }
}

impl LogStore {
    /// Opens a store of its own: a volume at `path` (created if needed) holding this one
    /// partition, named after the cold tier's topic and partition (or `log`, 0).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the file cannot be opened or migrated,
    /// [`StoreError::SchemaTooNew`] when a newer version wrote it.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, StoreError> {
        let volume = Volume::open(path, options.sync)?;
        let (topic, partition) = options.cold.as_ref().map_or(("log".to_owned(), 0), |cold| {
            (cold.topic.clone(), cold.partition)
        });
        Self::open_in(&volume, &topic, partition, options, true)?.ok_or(StoreError::Poisoned)
    }

    /// Opens partition `partition` of `topic` in `volume`, adding it if `create`; `None` when
    /// it is not there and `create` is false. Cheap: it loads the log's end and nothing else.
    ///
    /// # Errors
    /// A storage failure.
    pub fn open_in(
        volume: &Arc<Volume>,
        topic: &str,
        partition: u32,
        options: StoreOptions,
        create: bool,
    ) -> Result<Option<Self>, StoreError> {
        let Some((key, tail, due, epoch)) =
            volume.shared().open_partition(topic, partition, create)?
        else {
            return Ok(None);
        };
        Ok(Some(Self::opened(volume, key, (tail, due), epoch, options)))
    }

    /// A stand-in for a partition found in no volume while `volume` has a known loss (see
    /// [`Volume::known_loss`]): it may have been stored there. Like every partition of such a
    /// volume it refuses everything but the reads that intact cold segments serve. `None` when
    /// `volume` has no known loss.
    pub fn open_unlisted(volume: &Arc<Volume>, options: StoreOptions) -> Option<Self> {
        volume.known_loss()?;
        // No `partitions` row has key 0 (SQLite's row ids start at 1).
        let epoch = volume.shared().epoch();
        let empty = (Tail::default(), Due::default());
        Some(Self::opened(volume, 0, empty, epoch, options))
    }

    fn opened(
        volume: &Arc<Volume>,
        key: i64,
        (tail, due): (Tail, Due),
        epoch: u64,
        options: StoreOptions,
    ) -> Self {
        Self {
            volume: volume.clone(),
            key,
            tail: Arc::new(PartitionTail::new(key, tail, options.retention, due)),
            options,
            epoch,
            trimming: volume.shared().trim_lock(key),
            uploads_unsettled: AtomicBool::new(true),
            segment_cache: read::SegmentCache::default(),
        }
    }

    /// The volume's database file.
    pub fn path(&self) -> &Path {
        self.volume.path()
    }

    /// The volume this partition lives in.
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Group commits that wrote records of this partition since the store opened: fewer than
    /// its appends when group commit grouped them.
    pub fn commits(&self) -> u64 {
        self.tail.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether its writes wait for their window to land in the replica's stream (its volume is
    /// replicated): such a wait may last up to `replication.put_retry_ms`.
    pub(crate) fn waits_for_landings(&self) -> bool {
        self.volume.shared().replica.is_some()
    }

    /// Whether a failed write left the store refusing writes (until it is reopened).
    pub fn is_poisoned(&self) -> bool {
        self.volume.shared().refuses_writes(self.epoch)
    }

    /// Makes the volume's next write transaction fail just before its commit, as a failing
    /// disk would.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_commit(&self) {
        self.volume.shared().arm(Fault::BeforeCommit);
    }

    /// Makes the next trim pass fail after it indexed its segment and before it deleted the hot
    /// records, as a crash there would.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_trim_after_index(&self) {
        self.volume.shared().arm(Fault::AfterSegmentIndexed);
    }

    /// Makes the next trim pass fail after it stored its segment in the cold tier and before it
    /// indexed it, as a crash there would.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_trim_after_put(&self) {
        self.volume.shared().arm(Fault::AfterSegmentStored);
    }

    fn now_ms(&self) -> i64 {
        self.options.clock.now_ms()
    }

    /// The log's end as last committed.
    fn tail(&self) -> Tail {
        self.tail.get()
    }

    /// Runs `work` in one write transaction of the volume and commits it. `work` gets the log's
    /// end, read under the volume's writer lock: once the appends in flight landed when it
    /// `sees` them ([`Sees::InFlight`]: it may change what they bring to memory), else the end
    /// as published ([`Sees::Published`]: a cursor, a lease, checked against what readers see).
    /// A storage error poisons the volume (see [`Volume`]); definite errors roll back and change
    /// nothing.
    fn write<T>(
        &self,
        sees: Sees,
        work: impl FnOnce(&Transaction<'_>, &Tail) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.volume
            .shared()
            .write(self.epoch, sees, |tx| work(tx, &self.tail()))
    }

    fn injected_fault(&self, fault: Fault) -> Result<(), StoreError> {
        self.volume.shared().injected_fault(fault)
    }

    /// Runs `work` against one consistent snapshot of the database, on a pooled reader.
    fn snapshot<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.volume.shared().snapshot(work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stores open on one partition (one reopened after a failure while the other still
    /// finishes its work) share the partition's trim lock, other partitions have their own,
    /// and the lock is forgotten with the last store holding it.
    #[test]
    fn stores_of_one_partition_share_its_trim_lock() {
        let dir = tempfile::tempdir().expect("temp dir");
        let volume = Volume::open(dir.path().join("volume.sqlite"), SyncMode::Normal)
            .expect("open a volume");
        let open = |partition| {
            LogStore::open_in(&volume, "events", partition, StoreOptions::default(), true)
                .expect("open a partition")
                .expect("created")
        };
        let (first, reopened, other) = (open(0), open(0), open(1));

        let held = first.trimming.try_lock().expect("no trim runs");
        assert!(
            reopened.trimming.try_lock().is_err(),
            "one lock per partition"
        );
        assert!(
            other.trimming.try_lock().is_ok(),
            "another partition's lock"
        );
        drop(held);
        assert_eq!(volume.shared().trim_locks_kept(), 2);
        drop((first, other));
        assert_eq!(volume.shared().trim_locks_kept(), 1);
        drop(reopened);
        assert_eq!(volume.shared().trim_locks_kept(), 0);
    }
}
