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
mod read;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use serde::Deserialize;

pub use append::{AppendOutcome, AppendRejection, MAX_KEY_BYTES, NewRecord};
pub use error::StoreError;
pub use read::{Bounds, Page, Record};

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
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sync: SyncMode::Full,
            max_batch_size: 100,
            max_record_bytes: 1 << 20,
            clock: Arc::new(SystemClock),
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

    /// Sets the clock (tests pass a [`ManualClock`](crate::clock::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// How long a connection waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
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

/// One partition's log in one SQLite database (WAL mode). See the module docs.
#[derive(Debug)]
pub struct LogStore {
    path: PathBuf,
    options: StoreOptions,
    writer: Mutex<Writer>,
    readers: r2d2::Pool<SqliteConnectionManager>,
    /// Set when a write failed with an unknown outcome: from then on writes are refused.
    poisoned: AtomicBool,
    #[cfg(any(test, feature = "test-util"))]
    fail_next_commit: AtomicBool,
}

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
            .with_init(|conn| conn.busy_timeout(BUSY_TIMEOUT));
        let readers = r2d2::Pool::builder()
            .max_size(MAX_READERS)
            .min_idle(Some(1))
            .build(manager)?;

        Ok(Self {
            path,
            options,
            writer: Mutex::new(Writer { conn: writer, tail }),
            readers,
            poisoned: AtomicBool::new(false),
            #[cfg(any(test, feature = "test-util"))]
            fail_next_commit: AtomicBool::new(false),
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
        self.fail_next_commit.store(true, Ordering::SeqCst);
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
            self.injected_fault()?;
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

    #[cfg(any(test, feature = "test-util"))]
    fn injected_fault(&self) -> Result<(), StoreError> {
        if self.fail_next_commit.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some("injected commit failure".into()),
            )));
        }
        Ok(())
    }

    #[cfg(not(any(test, feature = "test-util")))]
    fn injected_fault(&self) -> Result<(), StoreError> {
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
