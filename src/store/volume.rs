//! `Volume`: one SQLite database holding many partitions, with one committer thread.
//!
//! A node keeps a small, fixed number of volumes whatever its partition count, so threads,
//! file descriptors and fsyncs stay bounded. Each volume has one writing connection, used by
//! its committer thread for appends and under a lock by the partitions' other writes, and a
//! small pool of read-only connections that open on demand and close when idle.
//!
//! Appends of every partition of the volume that arrive while a commit runs are committed
//! together in the next transaction: one fsync for all of them (`docs/append-pipeline.md`
//! follows an append through it). Records are laid out in commit order, and the lookups by
//! offset and by deduplication key are written afterwards by the indexer (when the committer
//! has nothing to do, or every [`INDEX_EVERY_ROWS`] records), so a commit dirties a run of
//! record pages and no page per partition. Records committed since the last index pass are
//! found through [`Recent`], an in-memory index rebuilt by an index pass when the volume
//! opens.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::config::DbConfig;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use super::append::{AppendOutcome, AppendRejection, NewRecord, record_checksum};
use super::commit_queue::{CommitQueue, Next};
use super::damage::{self, DamageKind, DamageMark};
use super::due::{Due, oldest_hot, store_due_at};
use super::retention::Retention;
use super::{StoreError, SyncMode, schema};
use crate::clock::Clock;

/// How long a connection waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of a volume each reader maps into memory (address space, not resident memory: the
/// pages are the OS page cache's).
const READER_MMAP_BYTES: i64 = 1 << 32;
/// Most concurrent readers of one volume.
const MAX_READERS: u32 = 4;
/// A reader connection unused this long is closed.
const READER_IDLE: Duration = Duration::from_secs(30);
/// Records committed since the last index pass that make the committer index at once, even
/// under load. Bounds the in-memory index and the rows an open or a restart scans.
pub const INDEX_EVERY_ROWS: usize = 16_384;
/// The committer indexes when no append has arrived for this long.
const INDEX_WHEN_IDLE: Duration = Duration::from_millis(20);
/// The committer frees the writer's page cache after this long without an append, so an idle
/// node's memory goes back to where it started.
const RELEASE_CACHE_WHEN_IDLE: Duration = Duration::from_secs(5);
/// Pages (KiB, negative as SQLite wants it) of the writer's page cache: the index pages of
/// many partitions stay cached between index passes.
const WRITER_CACHE_KIB: i64 = -16_384;

/// Points where a test can make a volume fail, once each, as a failing disk would.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fault {
    /// Just before a write transaction commits.
    BeforeCommit = 0,
    /// In a trim pass, after the segment is indexed and before the hot records are deleted.
    AfterSegmentIndexed = 1,
    /// In a trim pass, after the segment is stored in the cold tier and before it is indexed.
    AfterSegmentStored = 2,
}

/// The log's end: the offset the next record gets and the running total of appended bytes.
/// Kept in memory, shared by the partition's store and the committer (which alone moves it),
/// so an append reads nothing before inserting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tail {
    pub next_offset: u64,
    pub end_bytes: u64,
}

/// One partition's log end, shared between its store and the committer.
#[derive(Debug)]
pub(super) struct PartitionTail {
    /// The partition's key in the volume (`partitions.id`).
    pub key: i64,
    pub tail: Mutex<Tail>,
    /// The partition's retention limits, by which a commit tells when it becomes due.
    pub retention: Retention,
    /// When its retention is due, and where its hot window starts; moved under the writer
    /// lock, by commits and trims.
    pub due: Mutex<Due>,
}

impl PartitionTail {
    pub fn get(&self) -> Tail {
        *lock(&self.tail)
    }
}

/// Records of one partition committed since the last index pass: `(offset, seq)` in offset
/// order, and their deduplication keys.
#[derive(Debug, Default)]
struct Recent {
    rows: VecDeque<(u64, i64)>,
    keys: HashMap<String, (u64, i64)>,
}

/// The writing connection and what the indexer knows.
struct Writer {
    conn: Connection,
    /// Every record up to this seq is in the indexes.
    indexed_through: i64,
    /// The newest seq handed out to a committed record. Seqs are assigned here, not by
    /// SQLite, which would reuse the seq of a deleted newest row.
    last_seq: i64,
}

/// A group commit's share of one caller: its batches, checked, and where the answer goes.
pub(super) struct AppendRequest {
    pub partition: Arc<PartitionTail>,
    pub clock: Arc<dyn Clock>,
    /// Each batch with its definite rejection, if any (rejected batches write nothing).
    pub batches: Vec<(Vec<NewRecord>, Option<AppendRejection>)>,
    pub reply: AppendReply,
}

/// What a group commit answers each caller: one outcome per batch, and the partition's
/// backlog after the commit.
pub type AppendResult = Result<(Vec<AppendOutcome>, u64), StoreError>;
/// Where a group commit's answer goes (called on the committer thread).
pub type AppendReply = Box<dyn FnOnce(AppendResult) + Send>;

/// What the volume's threads share.
pub(super) struct Shared {
    path: PathBuf,
    sync: SyncMode,
    writer: Mutex<Writer>,
    readers: r2d2::Pool<SqliteConnectionManager>,
    recent: Mutex<HashMap<i64, Recent>>,
    queue: CommitQueue,
    /// Set when a write failed with an unknown outcome: from then on writes are refused until
    /// [`Volume::recover`] reopens the writer.
    poisoned: AtomicBool,
    /// Bumped by every recovery; a store opened under an older epoch refuses writes.
    epoch: AtomicU64,
    /// What was found wrong with the volume, once something was: from then on it refuses
    /// writes for good (see [`DamageKind`] for what it still serves), across restarts too
    /// (see [`damage`]).
    damaged: std::sync::OnceLock<Damage>,
    faults: [AtomicBool; 3],
    /// The trim lock of each partition that has a store open, shared by all of them (see
    /// [`Shared::trim_lock`]); an entry goes with the last store that holds it.
    trim_locks: Mutex<HashMap<i64, Weak<TrimLock>>>,
}

/// What was found wrong with a volume, and the reason its callers are given.
#[derive(Debug)]
struct Damage {
    kind: DamageKind,
    reason: String,
}

/// Held while a partition trims or removes unindexed uploads.
pub(super) type TrimLock = tokio::sync::Mutex<()>;

/// One SQLite database of many partitions. See the module docs.
pub struct Volume {
    shared: Arc<Shared>,
    /// The committer thread, joined by [`Volume::close`].
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Volume {
    fn drop(&mut self) {
        self.shared.queue.close();
    }
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("path", &self.shared.path)
            .finish()
    }
}

/// The thread pool that every reader pool uses for its maintenance: shared, so the thread
/// count does not grow with volumes.
fn reader_maintenance() -> Arc<scheduled_thread_pool::ScheduledThreadPool> {
    static POOL: std::sync::OnceLock<Arc<scheduled_thread_pool::ScheduledThreadPool>> =
        std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        Arc::new(
            scheduled_thread_pool::ScheduledThreadPool::builder()
                .num_threads(1)
                .thread_name_pattern("durability-readers-{}")
                .build(),
        )
    })
    .clone()
}

/// Locks `mutex`, carrying on after a panic elsewhere: every guarded value here is replaced
/// whole or only after a commit, so it is consistent.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Makes `conn` keep each cached statement's query plan whatever values are bound to it.
/// Without this, SQLite (built with STAT4) marks a statement stale whenever a parameter that
/// could steer its plan is bound (`LIMIT ?` is one), and parses it again on its next step:
/// that was 4 % of a page read. Our plans do not depend on the values (there are no ANALYZE
/// statistics), so nothing is lost.
fn keep_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(drop)
}

fn open_writer(path: &Path, sync: SyncMode) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    keep_plans(&conn)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    debug_assert_eq!(mode.to_ascii_lowercase(), "wal");
    conn.pragma_update(None, "synchronous", sync.pragma())?;
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

impl Volume {
    /// Opens (creating if needed) the volume at `path`, brings its schema up to date, indexes
    /// what was committed since the last index pass, and starts its committer thread.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the file cannot be opened or migrated,
    /// [`StoreError::SchemaTooNew`] when a newer version wrote it.
    pub fn open(path: impl AsRef<Path>, sync: SyncMode) -> Result<Arc<Self>, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = open_writer(&path, sync)?;
        let manager = SqliteConnectionManager::file(&path)
            .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(|conn| {
                conn.busy_timeout(BUSY_TIMEOUT)?;
                keep_plans(conn)?;
                // Pages are read through the OS page cache mapped into memory instead of copied
                // by a read() each.
                conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES)
            });
        let readers = r2d2::Pool::builder()
            .thread_pool(reader_maintenance())
            .max_size(MAX_READERS)
            .min_idle(Some(0))
            .idle_timeout(Some(READER_IDLE))
            .build_unchecked(manager);
        let mut writer = Writer {
            conn,
            indexed_through: 0,
            last_seq: 0,
        };
        writer.load_positions()?;
        let shared = Arc::new(Shared {
            path,
            sync,
            writer: Mutex::new(writer),
            readers,
            recent: Mutex::default(),
            queue: CommitQueue::default(),
            poisoned: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            damaged: std::sync::OnceLock::new(),
            faults: Default::default(),
            trim_locks: Mutex::default(),
        });
        let high_water = read_high_water(&shared.path);
        let durable = lock(&shared.writer).last_seq;
        if high_water > durable {
            let _ = shared.mark_damaged(
                DamageKind::Lost,
                &format!(
                    "holds commits up to {durable}, but {high_water} were acknowledged before \
                     (recorded in {}): its write-ahead log or database file was lost or cut \
                     short",
                    high_water_path(&shared.path).display()
                ),
            );
        } else if let Some(mark) = damage::read_mark(&shared.path) {
            shared.remember_damage(&mark);
        }
        shared.index_or_remember(&mut lock(&shared.writer))?;
        let name = format!(
            "durability-commit-{}",
            shared
                .path
                .file_stem()
                .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned())
        );
        let thread_shared = shared.clone();
        let committer = std::thread::Builder::new()
            .name(name)
            .spawn(move || thread_shared.run_committer())
            .map_err(StoreError::Thread)?;
        Ok(Arc::new(Self {
            shared,
            committer: Mutex::new(Some(committer)),
        }))
    }

    /// Closes the volume for writes: the committer commits what is queued and stops, the WAL
    /// is checkpointed into the database file, and the high-water mark records the result, so
    /// the database file is complete on its own (to copy, move or rebuild elsewhere). Appends
    /// after it are refused; reads go on.
    ///
    /// # Errors
    /// A storage failure of the checkpoint.
    pub fn close(&self) -> Result<(), StoreError> {
        self.shared.queue.close();
        if let Some(committer) = lock(&self.committer).take() {
            let _ = committer.join();
        }
        self.shared.checkpoint()
    }

    /// The file name of volume `index` in a data folder: `volume-{index}.sqlite`.
    pub fn file_name(index: usize) -> String {
        format!("volume-{index}.sqlite")
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Every partition stored here: `(key, topic, partition)`.
    ///
    /// # Errors
    /// A storage failure.
    pub fn partitions(&self) -> Result<Vec<(i64, String, u32)>, StoreError> {
        let conn = self.shared.readers.get()?;
        let mut statement = conn.prepare_cached("SELECT id, topic, partition FROM partitions")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What was found wrong with the volume, if anything.
    pub fn damage(&self) -> Option<DamageKind> {
        self.shared.damaged.get().map(|damage| damage.kind)
    }

    /// Why nothing the volume holds can be vouched for, when it holds fewer commits than it
    /// acknowledged (see [`DamageKind::Lost`]).
    pub fn known_loss(&self) -> Option<&str> {
        self.shared.known_loss()
    }

    /// Up to `limit` topics with at least one partition stored here whose names sort after
    /// `after` (every name sorts after `""`), by name. One range of the `(topic, partition)`
    /// index: the cost follows the page, not the topics stored.
    ///
    /// # Errors
    /// A storage failure.
    pub fn topics_after(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let conn = self.shared.readers.get()?;
        let mut statement = conn.prepare_cached(
            "SELECT DISTINCT topic FROM partitions WHERE topic > ?1 ORDER BY topic LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = statement.query_map(rusqlite::params![after, limit], |row| row.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Queues a group-commit share; the reply comes from the committer thread (or at once, with
    /// [`StoreError::Poisoned`], from a closed volume).
    pub(super) fn submit(&self, request: AppendRequest) {
        if let Err(request) = self.shared.queue.push(request) {
            (request.reply)(Err(StoreError::Poisoned));
        }
    }
}

impl Writer {
    fn load_positions(&mut self) -> Result<(), StoreError> {
        self.indexed_through =
            self.conn
                .query_row("SELECT through_seq FROM indexed WHERE id = 1", [], |row| {
                    row.get(0)
                })?;
        let newest: i64 =
            self.conn
                .query_row("SELECT COALESCE(MAX(seq), 0) FROM records", [], |row| {
                    row.get(0)
                })?;
        // Trims delete indexed records, possibly the newest: a seq is never handed out twice,
        // or a record could hide below `indexed_through` and never be indexed.
        self.last_seq = newest.max(self.indexed_through);
        Ok(())
    }
}

impl Shared {
    /// The trim lock of partition `key`, shared by every store open on it. A store reopened
    /// after a failed commit must not start a trim, or remove unindexed uploads, while the
    /// store it replaced still finishes one: that one's upload may land after the removal.
    pub(super) fn trim_lock(&self, key: i64) -> Arc<TrimLock> {
        let mut locks = lock(&self.trim_locks);
        if let Some(shared) = locks.get(&key).and_then(Weak::upgrade) {
            return shared;
        }
        let fresh = Arc::new(TrimLock::new(()));
        locks.insert(key, Arc::downgrade(&fresh));
        fresh
    }

    /// Called by a store closing with its trim lock `held`: forgets the lock if no other store
    /// holds it.
    pub(super) fn release_trim_lock(&self, key: i64, held: &Arc<TrimLock>) {
        let mut locks = lock(&self.trim_locks);
        // Under the map's lock nobody else can take a new hold of it.
        if Arc::strong_count(held) == 1 {
            locks.remove(&key);
        }
    }

    /// How many partitions' trim locks are kept.
    #[cfg(test)]
    pub(super) fn trim_locks_kept(&self) -> usize {
        lock(&self.trim_locks).len()
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether writes under `epoch` must be refused.
    pub(super) fn refuses_writes(&self, epoch: u64) -> bool {
        self.poisoned.load(Ordering::SeqCst) || self.epoch() != epoch
    }

    fn poison(&self, err: &StoreError) {
        log::error!(
            "{}: write failed, refusing writes until reopened: {err:?}",
            self.path.display()
        );
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// Refuses writes to a damaged volume.
    pub(super) fn check_intact(&self) -> Result<(), StoreError> {
        refuse(self.damaged.get().map(|damage| damage.reason.as_str()))
    }

    /// See [`Volume::known_loss`].
    pub(super) fn known_loss(&self) -> Option<&str> {
        self.damaged
            .get()
            .filter(|damage| damage.kind == DamageKind::Lost)
            .map(|damage| damage.reason.as_str())
    }

    /// Refuses every read of a volume with a known loss: what it holds may be older than what
    /// it acknowledged, and serving it as the log would hide the loss.
    pub(super) fn check_complete(&self) -> Result<(), StoreError> {
        refuse(self.known_loss())
    }

    /// Marks the volume damaged, logging it once and recording it beside the volume (see
    /// [`damage`]), and answers the error its callers get.
    fn mark_damaged(&self, kind: DamageKind, cause: &str) -> StoreError {
        let mut first = false;
        let damage = self.damaged.get_or_init(|| {
            first = true;
            Damage {
                kind,
                reason: format!("the volume {} is damaged: {cause}", self.path.display()),
            }
        });
        if first {
            let mark = DamageMark::now(kind, cause);
            if let Err(err) = damage::write_mark(&self.path, &mark) {
                log::error!(
                    "{}: cannot record the damage mark: {err}",
                    damage::mark_path(&self.path).display()
                );
            }
            log::error!(
                "{}; its partitions refuse writes from now on, also after a restart, until an \
                 operator accepts the damage",
                damage.reason
            );
        }
        StoreError::Corrupted {
            reason: damage.reason.clone(),
        }
    }

    /// Takes up the damage an earlier process recorded.
    fn remember_damage(&self, mark: &DamageMark) {
        let reason = format!(
            "the volume {} is damaged: {} (marked {} in {})",
            self.path.display(),
            mark.cause,
            mark.marked_at,
            damage::mark_path(&self.path).display()
        );
        log::error!(
            "{reason}; its partitions refuse writes until an operator accepts the damage \
             (`durability accept-damage`)"
        );
        let _ = self.damaged.set(Damage {
            kind: mark.kind,
            reason,
        });
    }

    /// `err`, or `corrupted` when SQLite found the files malformed (the volume is then marked
    /// damaged).
    fn classify(&self, err: StoreError) -> StoreError {
        match &err {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
                if matches!(
                    failure.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                let cause = std::error::Error::source(&err)
                    .map_or_else(|| err.to_string(), ToString::to_string);
                self.mark_damaged(DamageKind::Malformed, &cause)
            }
            StoreError::Corrupted { reason } if self.damaged.get().is_none() => {
                self.mark_damaged(DamageKind::Malformed, reason)
            }
            _ => err,
        }
    }

    /// Arms a fault (tests of recovery).
    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn arm(&self, fault: Fault) {
        self.faults[fault as usize].store(true, Ordering::SeqCst);
    }

    /// Fails with an I/O error, as a failing disk would, if the chosen fault is armed.
    pub(super) fn injected_fault(&self, fault: Fault) -> Result<(), StoreError> {
        if self.faults[fault as usize].swap(false, Ordering::SeqCst) {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some("injected fault".into()),
            )));
        }
        Ok(())
    }

    /// Runs `work` on a pooled reader inside one read transaction (one consistent snapshot).
    ///
    /// The transaction is begun and ended with cached statements: rusqlite's `Transaction`
    /// parses `BEGIN` and `ROLLBACK` anew each time, which cost a read of one page of 100
    /// small records about 4 % of its time.
    pub(super) fn snapshot<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_complete()?;
        let conn = self.readers.get()?;
        let read = ReadTransaction::begin(&conn).map_err(|err| self.classify(err.into()))?;
        let result = work(read.0).map_err(|err| self.classify(err));
        drop(read);
        result
    }

    /// Runs `work` in one write transaction of the writer connection and commits it. A storage
    /// error anywhere poisons the volume (SQLite's state after one is nothing to continue
    /// from); definite errors returned by `work` roll back and change nothing.
    pub(super) fn write<T>(
        &self,
        epoch: u64,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut writer = lock(&self.writer);
        // Checked under the lock: a writer queued behind a failing one must not commit after it.
        self.check_intact()?;
        if self.refuses_writes(epoch) {
            return Err(StoreError::Poisoned);
        }
        let result = (|| -> Result<T, StoreError> {
            let tx = writer
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx)?;
            self.injected_fault(Fault::BeforeCommit)?;
            tx.commit()?;
            Ok(value)
        })()
        .map_err(|err| self.classify(err));
        if let Err(err) = &result
            && err.is_uncertain()
        {
            self.poison(err);
        }
        result
    }

    /// Finds a partition (adding it if `create`) and loads where its log ends and when its
    /// retention is due, under one hold of the writer lock: an open waits for at most one
    /// commit. Recovers a poisoned volume first. Answers the partition's key, its log end, its
    /// due state, and the epoch it was opened under.
    ///
    /// Adding a partition is not synced on its own: the partition's first durable write syncs
    /// it (the WAL is written in order), and a partition that never got one may as well be
    /// forgotten by a crash.
    pub(super) fn open_partition(
        &self,
        topic: &str,
        partition: u32,
        create: bool,
    ) -> Result<Option<(i64, Tail, Due, u64)>, StoreError> {
        let mut writer = lock(&self.writer);
        if self.poisoned.load(Ordering::SeqCst) {
            self.recover(&mut writer)?;
        }
        let opened = (|| {
            let found: Option<i64> = writer
                .conn
                .prepare_cached("SELECT id FROM partitions WHERE topic = ?1 AND partition = ?2")?
                .query_row(params![topic, partition], |row| row.get(0))
                .optional()?;
            let key = match found {
                Some(key) => key,
                None if create => {
                    self.check_intact()?;
                    self.unsynced(&mut writer.conn, |tx| {
                        tx.prepare_cached(
                            "INSERT INTO partitions (topic, partition) VALUES (?1, ?2)",
                        )?
                        .execute(params![topic, partition])?;
                        Ok(tx.last_insert_rowid())
                    })?
                }
                None => return Ok(None),
            };
            let (tail, due) = self.load_tail(&writer.conn, key)?;
            Ok(Some((key, tail, due, self.epoch())))
        })();
        opened.map_err(|err| self.classify(err))
    }

    /// Where a partition's log ends, from its newest record (indexed or recent) or else its
    /// `partitions` row, and its due state (see [`Due`]). Called under the writer lock, so no
    /// index pass moves records meanwhile.
    fn load_tail(&self, conn: &Connection, key: i64) -> Result<(Tail, Due), StoreError> {
        let (mut next_offset, mut end_bytes, due_at): (u64, u64, Option<i64>) = conn
            .prepare_cached("SELECT next_offset, end_bytes, due_at FROM partitions WHERE id = ?1")?
            .query_row([key], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        let newest: Option<(u64, u64)> = match self.newest_recent(key) {
            Some((offset, seq)) => conn
                .prepare_cached("SELECT end_bytes FROM records WHERE seq = ?1")?
                .query_row([seq], |row| Ok((offset, row.get(0)?)))
                .optional()?,
            None => conn
                .prepare_cached(
                    "SELECT i.offset, r.end_bytes FROM record_index AS i
                     JOIN records AS r ON r.seq = i.seq
                     WHERE i.partition = ?1 ORDER BY i.offset DESC LIMIT 1",
                )?
                .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?,
        };
        if let Some((offset, end)) = newest {
            next_offset = next_offset.max(offset + 1);
            end_bytes = end_bytes.max(end);
        }
        let tail = Tail {
            next_offset,
            end_bytes,
        };
        let oldest = oldest_hot(conn, key, self.oldest_recent(key))?;
        Ok((tail, Due::of(due_at, oldest, tail)))
    }

    /// Runs `work` in one transaction that is not synced on its own (the next durable commit
    /// syncs it, the WAL being written in order): for what can be rebuilt or may be forgotten.
    fn unsynced<T>(
        &self,
        conn: &mut Connection,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        conn.pragma_update(None, "synchronous", "OFF")?;
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx)?;
            tx.commit()?;
            Ok(value)
        })();
        conn.pragma_update(None, "synchronous", self.sync.pragma())?;
        result
    }

    /// Up to `limit` recent `(offset, seq)` of a partition from `from` on, in offset order.
    pub(super) fn recent_from(&self, key: i64, from: u64, limit: usize) -> Vec<(u64, i64)> {
        let recent = lock(&self.recent);
        let Some(recent) = recent.get(&key) else {
            return Vec::new();
        };
        let start = recent.rows.partition_point(|&(offset, _)| offset < from);
        recent.rows.range(start..).take(limit).copied().collect()
    }

    /// The oldest recent record of a partition: `(offset, seq)`.
    pub(super) fn oldest_recent(&self, key: i64) -> Option<(u64, i64)> {
        lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.rows.front().copied())
    }

    /// The newest recent record of a partition: `(offset, seq)`.
    fn newest_recent(&self, key: i64) -> Option<(u64, i64)> {
        lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.rows.back().copied())
    }

    /// Indexes every record committed since the last index pass, then forgets them from the
    /// in-memory index. Not synced on its own: the indexes can be rebuilt from the records, and
    /// the next durable commit syncs them.
    pub(super) fn index(&self) -> Result<(), StoreError> {
        let mut writer = lock(&self.writer);
        self.index_locked(&mut writer)
    }

    fn index_locked(&self, writer: &mut Writer) -> Result<(), StoreError> {
        let (through, last) = (writer.indexed_through, writer.last_seq);
        if last <= through || self.damaged.get().is_some() {
            return Ok(());
        }
        let result = self.unsynced(&mut writer.conn, |tx| {
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
            let err = self.classify(err);
            if err.is_uncertain() {
                self.poison(&err);
            }
            return Err(err);
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
    fn index_or_remember(&self, writer: &mut Writer) -> Result<(), StoreError> {
        if self.damaged.get().is_none() {
            return self.index_locked(writer);
        }
        let mut statement = writer.conn.prepare(
            "SELECT partition, offset, seq, dedup_key FROM records WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = statement.query([writer.indexed_through])?;
        let mut recent = lock(&self.recent);
        while let Some(row) = rows.next()? {
            let (partition, offset, seq): (i64, u64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            let entry = recent.entry(partition).or_default();
            entry.rows.push_back((offset, seq));
            if let Some(key) = row.get::<_, Option<String>>(3)? {
                entry.keys.insert(key, (offset, seq));
            }
        }
        Ok(())
    }

    /// Clears a poisoned volume: reopens the writer connection (SQLite rolls back whatever the
    /// failed transaction left), reindexes, and starts a new epoch. Stores opened before keep
    /// refusing writes; reopening them loads their log's end anew.
    fn recover(&self, writer: &mut Writer) -> Result<(), StoreError> {
        writer.conn = open_writer(&self.path, self.sync)?;
        writer.load_positions()?;
        lock(&self.recent).clear();
        // The in-memory index starts empty: index everything the reopened file holds.
        self.poisoned.store(false, Ordering::SeqCst);
        self.index_or_remember(writer)?;
        self.epoch.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The committer thread: takes every queued share, commits them in one transaction, answers
    /// each, and indexes when idle or when enough records wait.
    fn run_committer(self: Arc<Self>) {
        let (mut expected, mut last_commit) = (0, Duration::ZERO);
        let (mut last_group, mut cache_released) = (Instant::now(), false);
        let mut high_water = lock(&self.writer).last_seq;
        loop {
            let group = match self
                .queue
                .next_group(INDEX_WHEN_IDLE, expected, last_commit / 2)
            {
                Next::Group(group) => group,
                Next::Idle => {
                    let _ = self.index();
                    self.record_high_water(&mut high_water);
                    if !cache_released && last_group.elapsed() >= RELEASE_CACHE_WHEN_IDLE {
                        self.release_cache();
                        cache_released = true;
                    }
                    continue;
                }
                Next::Closed => break,
            };
            (last_group, cache_released) = (Instant::now(), false);
            expected = group.iter().map(|share| share.batches.len()).sum();
            let mut writer = lock(&self.writer);
            let started = Instant::now();
            self.commit_group(&mut writer, group);
            last_commit = started.elapsed();
            if (writer.last_seq - writer.indexed_through) as usize >= INDEX_EVERY_ROWS {
                let _ = self.index_locked(&mut writer);
            }
        }
        let _ = self.index();
    }

    /// Records the newest durable seq beside the database when it moved (see
    /// [`read_high_water`]). Only where every commit is synced: with `sync = normal` the last
    /// commits may be lost on power loss by design, and that must not read as damage.
    fn record_high_water(&self, recorded: &mut i64) {
        let last = lock(&self.writer).last_seq;
        if self.sync != SyncMode::Full || last <= *recorded || self.damaged.get().is_some() {
            return;
        }
        if self.write_high_water(last) {
            *recorded = last;
        }
    }

    /// Writes the high-water mark `seq`; a failure is logged (the check it feeds is then
    /// weaker, nothing else).
    fn write_high_water(&self, seq: i64) -> bool {
        let written = write_high_water(&self.path, seq);
        if let Err(err) = &written {
            log::warn!(
                "{}: cannot record the high-water mark: {err}",
                high_water_path(&self.path).display()
            );
        }
        written.is_ok()
    }

    /// Moves every committed page into the database file and empties the WAL, then records the
    /// high-water mark (the checkpoint synced the database file, whatever `sync` is).
    fn checkpoint(&self) -> Result<(), StoreError> {
        let writer = lock(&self.writer);
        if self.damaged.get().is_some() {
            return Ok(());
        }
        let busy: i64 = writer
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
            .map_err(|err| self.classify(err.into()))?;
        if busy == 0 {
            self.write_high_water(writer.last_seq);
        }
        Ok(())
    }

    /// Frees the writer's page cache (SQLite's copy of pages the OS caches anyway).
    fn release_cache(&self) {
        let writer = lock(&self.writer);
        if let Err(err) = writer.conn.execute_batch("PRAGMA shrink_memory") {
            log::warn!(
                "{}: cannot release the page cache: {err}",
                self.path.display()
            );
        }
    }

    fn commit_group(&self, writer: &mut Writer, group: Vec<AppendRequest>) {
        if let Some(damage) = self.damaged.get() {
            for request in group {
                (request.reply)(Err(StoreError::Corrupted {
                    reason: damage.reason.clone(),
                }));
            }
            return;
        }
        if self.poisoned.load(Ordering::SeqCst) {
            for request in group {
                (request.reply)(Err(StoreError::Poisoned));
            }
            return;
        }
        let mut staged: HashMap<i64, Staged> = HashMap::new();
        let mut last_seq = writer.last_seq;
        let result = (|| {
            let tx = writer
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut outcomes = Vec::with_capacity(group.len());
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO records (seq, partition, offset, dedup_key, payload, bytes, end_bytes, appended_at, checksum)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?;
                for request in &group {
                    let key = request.partition.key;
                    let staged = staged.entry(key).or_insert_with(|| Staged {
                        partition: request.partition.clone(),
                        tail: request.partition.get(),
                        due: *lock(&request.partition.due),
                        pending: 0,
                        rows: Vec::new(),
                        keys: HashMap::new(),
                    });
                    // Taken under the writer lock, so later offsets never get earlier timestamps.
                    let appended_at = request.clock.now_ms();
                    let mut answers = Vec::with_capacity(request.batches.len());
                    for (batch, rejection) in &request.batches {
                        answers.push(match rejection {
                            Some(rejection) => AppendOutcome::Rejected(rejection.clone()),
                            None => {
                                let before = staged.tail;
                                let offsets = self.insert_batch(
                                    &tx,
                                    &mut insert,
                                    staged,
                                    &mut last_seq,
                                    batch,
                                    appended_at,
                                )?;
                                staged.due = staged.due.after_append(
                                    &staged.partition.retention,
                                    before,
                                    staged.tail,
                                    appended_at,
                                );
                                AppendOutcome::Appended { offsets }
                            }
                        });
                    }
                    outcomes.push(answers);
                }
            }
            // Inside the transaction: one read of the cursors per partition, under no lock of
            // its own (cursors move only under the writer lock, which the committer holds).
            for staged in staged.values_mut() {
                staged.pending =
                    pending_deliveries(&tx, staged.partition.key, staged.tail.next_offset)?;
                // Written only when these records make retention due sooner (see `due.rs`).
                if staged.due.at != lock(&staged.partition.due).at {
                    store_due_at(&tx, staged.partition.key, staged.due.at)?;
                }
            }
            self.injected_fault(Fault::BeforeCommit)?;
            tx.commit()?;
            Ok::<_, StoreError>(outcomes)
        })();
        match result {
            Ok(outcomes) => {
                writer.last_seq = last_seq;
                {
                    let mut recent = lock(&self.recent);
                    for (key, staged) in &mut staged {
                        if staged.rows.is_empty() {
                            continue;
                        }
                        let entry = recent.entry(*key).or_default();
                        entry.rows.extend(staged.rows.drain(..));
                        entry.keys.extend(staged.keys.drain());
                    }
                }
                // The tail moves after the recent records are findable: a reader that sees the
                // new end finds every record below it.
                for staged in staged.values() {
                    *lock(&staged.partition.tail) = staged.tail;
                    *lock(&staged.partition.due) = staged.due;
                }
                for (request, outcomes) in group.into_iter().zip(outcomes) {
                    let pending = staged[&request.partition.key].pending;
                    (request.reply)(Ok((outcomes, pending)));
                }
            }
            Err(err) => {
                let err = self.classify(err);
                if err.is_uncertain() {
                    self.poison(&err);
                }
                // The first caller gets the cause; the others learn that the volume refuses writes.
                let mut err = Some(err);
                for request in group {
                    (request.reply)(Err(err.take().unwrap_or(StoreError::Poisoned)));
                }
            }
        }
    }

    /// Writes one validated batch, returning each input record's offset.
    fn insert_batch(
        &self,
        tx: &Transaction<'_>,
        insert: &mut rusqlite::CachedStatement<'_>,
        staged: &mut Staged,
        last_seq: &mut i64,
        batch: &[NewRecord],
        appended_at: i64,
    ) -> Result<Vec<u64>, StoreError> {
        let key = staged.partition.key;
        let mut offsets = Vec::with_capacity(batch.len());
        for record in batch {
            let dedup_key = record.key.as_deref();
            if let Some(dedup_key) = dedup_key
                && let Some(offset) = self.offset_of_key(tx, staged, dedup_key)?
            {
                offsets.push(offset);
                continue;
            }
            let offset = staged.tail.next_offset;
            let bytes = record.payload.len() as u64;
            staged.tail.next_offset += 1;
            staged.tail.end_bytes += bytes;
            *last_seq += 1;
            let seq = *last_seq;
            insert.execute(params![
                seq,
                key,
                offset,
                dedup_key,
                record.payload,
                bytes,
                staged.tail.end_bytes,
                appended_at,
                record_checksum(offset, dedup_key, &record.payload)
            ])?;
            staged.rows.push((offset, seq));
            if let Some(dedup_key) = dedup_key {
                staged.keys.insert(dedup_key.to_owned(), (offset, seq));
            }
            offsets.push(offset);
        }
        Ok(offsets)
    }

    /// The offset of the hot record carrying `dedup_key`: staged in this commit, recent, or
    /// indexed.
    fn offset_of_key(
        &self,
        tx: &Transaction<'_>,
        staged: &Staged,
        dedup_key: &str,
    ) -> Result<Option<u64>, StoreError> {
        if let Some(&(offset, _)) = staged.keys.get(dedup_key) {
            return Ok(Some(offset));
        }
        let key = staged.partition.key;
        if let Some(&(offset, _)) = lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.keys.get(dedup_key))
        {
            return Ok(Some(offset));
        }
        Ok(tx
            .prepare_cached("SELECT offset FROM key_index WHERE partition = ?1 AND dedup_key = ?2")?
            .query_row(params![key, dedup_key], |row| row.get(0))
            .optional()?)
    }
}

/// `corrupted` with `reason`, if there is one.
fn refuse(reason: Option<&str>) -> Result<(), StoreError> {
    reason.map_or(Ok(()), |reason| {
        Err(StoreError::Corrupted {
            reason: reason.to_owned(),
        })
    })
}

/// The file beside a volume that holds its high-water mark: the newest seq known durable.
fn high_water_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-hwm");
    name.into()
}

/// The volume's high-water mark, 0 when it has none (or an unreadable one). A volume that
/// opens holding fewer commits than this lost some: its WAL or database file was deleted,
/// truncated or replaced, and handing out its offsets again would reuse acknowledged ones.
fn read_high_water(path: &Path) -> i64 {
    let file = high_water_path(path);
    match std::fs::read_to_string(&file) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            log::warn!("{}: not a high-water mark, ignored", file.display());
            0
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
        Err(err) => {
            log::warn!("{}: cannot read the high-water mark: {err}", file.display());
            0
        }
    }
}

/// Writes the high-water mark in place, fixed width (one small write: never half old, half
/// new), and syncs it.
pub(super) fn write_high_water(path: &Path, seq: i64) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(high_water_path(path))?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(format!("{seq:020}\n").as_bytes())?;
    file.sync_data()
}

/// What a group commit wrote for one partition, applied to memory only once it committed.
struct Staged {
    partition: Arc<PartitionTail>,
    tail: Tail,
    due: Due,
    /// The partition's backlog after the commit (see [`pending_deliveries`]).
    pending: u64,
    rows: Vec<(u64, i64)>,
    keys: HashMap<String, (u64, i64)>,
}

/// Records not yet processed by a partition's slowest group: `next_offset` minus the lowest
/// cursor, or 0 when no group has a cursor.
pub(super) fn pending_deliveries(
    conn: &Connection,
    key: i64,
    next_offset: u64,
) -> Result<u64, StoreError> {
    let slowest: Option<u64> = conn
        .prepare_cached("SELECT MIN(offset) FROM cursors WHERE partition = ?1")?
        .query_row([key], |row| row.get(0))?;
    Ok(slowest.map_or(0, |slowest| next_offset.saturating_sub(slowest)))
}

/// An open read transaction on a pooled reader, ended (rolled back: it wrote nothing) when
/// dropped, however the work inside it ended.
struct ReadTransaction<'c>(&'c Connection);

impl<'c> ReadTransaction<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(Self(conn))
    }
}

impl Drop for ReadTransaction<'_> {
    fn drop(&mut self) {
        let ended = self
            .0
            .prepare_cached("ROLLBACK")
            .and_then(|mut statement| statement.execute([]));
        if let Err(err) = ended {
            log::warn!("ending a read transaction failed: {err}");
        }
    }
}
