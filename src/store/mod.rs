//! `LogStore`: every rule of one partition's log, as plain synchronous Rust over one SQLite
//! database file.
//!
//! The store knows nothing of actors or HTTP. Writes go through one dedicated connection (the
//! partition is the single writer, which is what keeps offsets contiguous); reads use a small
//! r2d2 pool of read-only connections, so they can run on any thread while a write commits.
//! Every method blocks on SQLite; call it from a thread that may block.

mod append;
mod cursors;
mod error;
mod leases;
mod read;
mod retention;
mod schema;
mod segment;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use serde::Deserialize;

pub use append::{AppendOutcome, AppendRejection, MAX_KEY_BYTES, NewRecord, check_batch};
pub use error::StoreError;
pub use leases::{Lease, LeaseOptions, LeaseOutcome, LeaseRow, LeaseState};
pub use read::{Bounds, Page, Record};
pub use retention::{ColdFlushCounters, ColdTier, Retention};

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

/// How long a connection waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of a partition's database each reader maps into memory (address space, not
/// resident memory: the pages are the OS page cache's).
const READER_MMAP_BYTES: i64 = 1 << 32;
/// Most concurrent readers of one partition.
const MAX_READERS: u32 = 4;

/// The single writing connection and what it knows of the log's end.
#[derive(Debug)]
struct Writer {
    conn: Connection,
    tail: Tail,
}

/// The log's end: the offset the next record gets and the running total of appended bytes.
/// Kept in memory by the writer (it is the only one moving it) so an append reads nothing
/// before inserting.
#[derive(Debug, Clone, Copy)]
struct Tail {
    next_offset: u64,
    end_bytes: u64,
}

impl Tail {
    fn load(conn: &Connection) -> Result<Self, StoreError> {
        let (next_offset, end_bytes) = conn
            .prepare_cached(schema::LOG_END)?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(Self {
            next_offset,
            end_bytes,
        })
    }
}

/// The thread pool that every reader pool uses for its maintenance (opening idle connections,
/// reaping old ones): shared, so the thread count does not grow with partitions.
fn reader_maintenance() -> Arc<scheduled_thread_pool::ScheduledThreadPool> {
    static POOL: std::sync::OnceLock<Arc<scheduled_thread_pool::ScheduledThreadPool>> =
        std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        Arc::new(
            scheduled_thread_pool::ScheduledThreadPool::builder()
                .num_threads(2)
                .thread_name_pattern("durability-readers-{}")
                .build(),
        )
    })
    .clone()
}

/// One partition's log in one SQLite database (WAL mode). See the module docs.
#[derive(Debug)]
pub struct LogStore {
    path: PathBuf,
    options: StoreOptions,
    writer: Mutex<Writer>,
    readers: r2d2::Pool<SqliteConnectionManager>,
    /// Set when a write failed with an unknown outcome: from then on writes are refused.
    poisoned: AtomicBool,
    /// Set while a trim runs, so two trims never flush the same records.
    trimming: AtomicBool,
    /// Recently read cold segments, so paging through one segment fetches it once.
    segment_cache: read::SegmentCache,
    #[cfg(any(test, feature = "test-util"))]
    faults: Faults,
}

/// Points where a test can make the store fail, once each, as a failing disk would.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Just before a write transaction commits.
    BeforeCommit = 0,
    /// In a trim pass, after the segment is indexed and before the hot records are deleted.
    AfterSegmentIndexed = 1,
}

/// The armed [`Fault`]s.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
struct Faults([AtomicBool; 2]);

impl LogStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the file cannot be opened or migrated,
    /// [`StoreError::SchemaTooNew`] when a newer version wrote it.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut writer = Connection::open(&path)?;
        writer.busy_timeout(BUSY_TIMEOUT)?;
        let mode: String = writer.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        debug_assert_eq!(mode.to_ascii_lowercase(), "wal");
        writer.pragma_update(None, "synchronous", options.sync.pragma())?;
        schema::migrate(&mut writer)?;
        let tail = Tail::load(&writer)?;

        let manager = SqliteConnectionManager::file(&path)
            .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(|conn| {
                conn.busy_timeout(BUSY_TIMEOUT)?;
                // Pages are read through the OS page cache mapped into memory instead of copied
                // by a read() each: a large partition read at random offsets no longer pays a
                // system call per page missing from SQLite's small per-connection cache.
                conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES)
            });
        let readers = r2d2::Pool::builder()
            .thread_pool(reader_maintenance())
            .max_size(MAX_READERS)
            .min_idle(Some(1))
            .build(manager)?;

        Ok(Self {
            path,
            options,
            writer: Mutex::new(Writer { conn: writer, tail }),
            readers,
            poisoned: AtomicBool::new(false),
            trimming: AtomicBool::new(false),
            segment_cache: read::SegmentCache::default(),
            #[cfg(any(test, feature = "test-util"))]
            faults: Faults::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Whether a failed write left the store refusing writes.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Makes the next write transaction fail just before its commit, as a failing disk would.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_commit(&self) {
        self.faults.0[Fault::BeforeCommit as usize].store(true, Ordering::SeqCst);
    }

    /// Makes the next trim pass fail after it indexed its segment and before it deleted the hot
    /// records, as a crash there would.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_trim_after_index(&self) {
        self.faults.0[Fault::AfterSegmentIndexed as usize].store(true, Ordering::SeqCst);
    }

    fn now_ms(&self) -> i64 {
        self.options.clock.now_ms()
    }

    /// Runs `work` in one write transaction and commits it. `work` gets the log's end and
    /// moves it as it appends; the move is kept only if the transaction commits.
    ///
    /// This is the one place that enforces "a failed commit leaves the store refusing writes":
    /// a storage error anywhere in the transaction poisons the store, because SQLite's state
    /// after such an error is not something to continue from. Definite errors returned by
    /// `work` roll back and change nothing.
    fn write<T>(
        &self,
        work: impl FnOnce(&Transaction<'_>, &mut Tail) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut writer = self.lock_writer();
        // Checked under the lock: a writer queued behind a failing one must not commit after it.
        if self.is_poisoned() {
            return Err(StoreError::Poisoned);
        }
        let Writer { conn, tail } = &mut *writer;
        let mut new_tail = *tail;
        let result = (|| -> Result<T, StoreError> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx, &mut new_tail)?;
            self.injected_fault(Fault::BeforeCommit)?;
            tx.commit()?;
            Ok(value)
        })();
        match &result {
            Ok(_) => *tail = new_tail,
            Err(err) if err.is_uncertain() => {
                log::error!(
                    "{}: write failed, refusing writes until reopened: {err:?}",
                    self.path.display()
                );
                self.poisoned.store(true, Ordering::SeqCst);
            }
            Err(_) => {}
        }
        result
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        // A panic while holding the lock happened before that transaction committed (a dropped
        // transaction rolls back, and the tail is only replaced after a commit), so the writer
        // is still consistent.
        self.writer
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Fails with an I/O error, as a failing disk would, if the chosen fault is armed.
    #[cfg(any(test, feature = "test-util"))]
    fn injected_fault(&self, fault: Fault) -> Result<(), StoreError> {
        if self.faults.0[fault as usize].swap(false, Ordering::SeqCst) {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some("injected fault".into()),
            )));
        }
        Ok(())
    }

    #[cfg(not(any(test, feature = "test-util")))]
    #[inline(always)]
    fn injected_fault(&self, _fault: Fault) -> Result<(), StoreError> {
        Ok(())
    }

    /// Runs `work` against one consistent snapshot of the database, on a pooled reader.
    fn snapshot<T>(
        &self,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.readers.get()?;
        let tx = conn.transaction()?;
        work(&tx)
    }
}
