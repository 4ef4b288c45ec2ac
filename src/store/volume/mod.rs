//! `Volume`: one SQLite database holding many partitions, with one committer.
//!
//! A node keeps a small, fixed number of volumes whatever its partition count, so file
//! descriptors and fsyncs stay bounded; the committers of all its volumes share one pool of
//! threads (`pool.rs`), so its threads do not grow with its volumes either. Each volume has one
//! writing connection, used by its committer for appends and under a lock by the partitions' other writes, and a
//! small pool of read-only connections that open on demand and close when idle.
//!
//! Appends of every partition of the volume that arrive while a commit runs are committed
//! together in the next transaction: one fsync for all of them (`docs/append-pipeline.md`
//! follows an append through it). Records are laid out in commit order, and the lookups by
//! offset and by deduplication key are written afterwards by the indexer (when the committer
//! has nothing to do, or every [`INDEX_EVERY_ROWS`] records), so a commit dirties a run of
//! record pages and no page per partition. Records committed since the last index pass are
//! found through `Recent`, an in-memory index rebuilt by an index pass when the volume
//! opens.
//!
//! The code is split by concern: this file opens the volume and runs its transactions
//! (connections, reads, writes, opening partitions, trim locks); `committer.rs` is the
//! committer and its group commits; `pool.rs` the threads that run committers; `index.rs` the
//! background index and the in-memory index of recent records; `landing.rs` each write's
//! landing in the replica's stream; `due.rs` the partitions due and the review of due times;
//! `health.rs` what can go wrong (poisoning, damage, injected faults); `scrub.rs` the check one
//! scrub pass makes of the volume, and its pace. The folder depends on the store's leaf
//! modules (batches, tails, damage marks, the stream's types, the schema), never on the files
//! that use a volume.
//!
//! Every write to a volume goes through one of three doors, each a transaction of the writing
//! connection under its lock: the committer's group commit (`committer.rs`: appends, and the
//! due times they move), `Shared::write` (cursors, leases, trims and the cold index, settled
//! due times, reviewed limits), and `Shared::unsynced` (what can be rebuilt or forgotten: a new
//! partition's row before its first durable write, index passes). Migrations run once at open.
//! When the volume is replicated, each door hands its transaction's changes to the node's
//! stream just before it commits, and first settles what waits for the stream (see
//! `replication.rs`): the committer's groups are answered once landed, the other doors commit
//! only once landed, after the groups in flight.
//!
//! The committer never waits for the writer: its threads are shared by every volume, and
//! another door may hold the writer for as long as its window takes to land. A committer step
//! that finds it held ends at once, its shares back in the queue, and the door wakes the
//! committer when it lets the writer go ([`Door`]); only the final drain of a closing volume
//! waits. (The door itself still holds the writer while its window lands, so a cursor commit
//! on a slow bucket delays the next group commit of its own volume, not of the others.)
//!
//! Lock order: `Shared::writer` before `Shared::recent` and `Shared::pending`, and before a
//! partition's `PartitionTail` locks (`tail`, `due`); `recent` is never held while taking
//! `writer`. The commit queue's and the trim locks' own locks are never held while taking any
//! other.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};

mod committer;
mod due;
mod health;
mod index;
mod landing;
mod pool;
mod scrub;

use super::commit_queue::{AppendRequest, CommitQueue};
use super::damage::{self, DamageKind};
use super::damage::{high_water_path, read_high_water};
use super::replication::{StreamError, VolumeReplica};
use super::tail::{Due, Tail};
use super::{StoreError, SyncMode, lock, schema};
use health::Damage;
use index::Recent;
use landing::PendingLanding;

pub(super) use committer::pending_deliveries;
use committer::{CommitterState, InFlight};
pub(super) use health::Fault;
pub use pool::CommitterPool;
pub use scrub::ScrubCounters;
pub(super) use scrub::{Pace, Scrubbed, Stop};

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
/// Pages (KiB, negative as SQLite wants it) of the writer's page cache: the index pages of
/// many partitions stay cached between index passes.
const WRITER_CACHE_KIB: i64 = -16_384;

/// The writing connection and what the indexer knows.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// Every record up to this seq is in the indexes.
    indexed_through: i64,
    /// The newest seq handed out to a committed record. Seqs are assigned here, not by
    /// SQLite, which would reuse the seq of a deleted newest row.
    last_seq: i64,
    /// The newest seq readers may see: below it every group commit landed (equal to
    /// `last_seq` when nothing is in flight). Index passes stop here.
    published_seq: i64,
    /// Group commits committed locally whose window has not landed yet, oldest first (see
    /// `committer.rs`).
    in_flight: VecDeque<InFlight>,
}

/// What the volume's threads share.
pub(super) struct Shared {
    pub(super) path: PathBuf,
    sync: SyncMode,
    writer: Mutex<Writer>,
    readers: r2d2::Pool<SqliteConnectionManager>,
    recent: Mutex<HashMap<i64, Recent>>,
    pub(super) queue: Arc<CommitQueue>,
    /// What the committer carries between its steps (see `committer.rs`).
    committer: Mutex<CommitterState>,
    /// Set when a write failed with an unknown outcome: from then on writes are refused until
    /// [`Volume::recover`] reopens the writer.
    pub(super) poisoned: AtomicBool,
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
    /// Where every write lands before it commits, when the volume is replicated (see
    /// `replication.rs`).
    pub(super) replica: Option<VolumeReplica>,
    /// A landing whose outcome was not known in time; taken under the writer lock.
    pub(super) pending: Mutex<Option<PendingLanding>>,
    /// Why the volume refuses writes for good: its stream was fenced by another owner.
    pub(super) fenced: std::sync::OnceLock<StreamError>,
    /// Set when a step of the committer found the writer held by another write and ended (see
    /// `committer.rs`): that write wakes the committer when it lets the writer go.
    pub(super) committer_yielded: AtomicBool,
}

/// The writer, held by a door other than the committer's (see the module docs): letting it go
/// wakes a committer that yielded to it meanwhile, so that no committer thread ever waits for
/// another write (which may wait for its window to land).
pub(super) struct Door<'a> {
    shared: &'a Shared,
    writer: Option<std::sync::MutexGuard<'a, Writer>>,
}

impl std::ops::Deref for Door<'_> {
    type Target = Writer;

    fn deref(&self) -> &Writer {
        self.writer.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Door<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        self.writer.as_mut().expect("held until dropped")
    }
}

impl Drop for Door<'_> {
    fn drop(&mut self) {
        // Let go first: the committer woken below takes it.
        drop(self.writer.take());
        if self.shared.committer_yielded.swap(false, Ordering::SeqCst) {
            self.shared.queue.wake();
        }
    }
}

/// What a write's work depends on of the memory that the committer's groups in flight bring
/// (the partitions' ends and due states, the recent records).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Sees {
    /// Only what is published (a cursor, a lease: checked against what readers see): it runs
    /// beside the groups in flight.
    Published,
    /// What they bring, which it may change too (retention, due times): they land first.
    InFlight,
}

/// Held while a partition trims or removes unindexed uploads.
pub(super) type TrimLock = tokio::sync::Mutex<()>;

/// One SQLite database of many partitions. See the module docs.
pub struct Volume {
    shared: Arc<Shared>,
}

impl Drop for Volume {
    fn drop(&mut self) {
        self.shared.queue.close();
    }
}

/// Tells when every connection of a volume has closed (see [`Volume::gone`]).
pub(crate) struct Gone(Weak<Shared>);

impl Gone {
    /// Whether nothing holds the volume's connections any more.
    pub(crate) fn is_gone(&self) -> bool {
        self.0.strong_count() == 0
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
    /// what was committed since the last index pass, and starts its committer on a pool of its
    /// own.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] when the file cannot be opened or migrated,
    /// [`StoreError::SchemaTooNew`] when a newer version wrote it.
    pub fn open(path: impl AsRef<Path>, sync: SyncMode) -> Result<Arc<Self>, StoreError> {
        Self::open_in(path, sync, None, &CommitterPool::new(1))
    }

    /// [`Volume::open`], with its committer on `pool`, and landing every write in `replica`'s
    /// stream before it commits when one is given (see `replication.rs`).
    ///
    /// # Errors
    /// As [`Volume::open`].
    pub fn open_in(
        path: impl AsRef<Path>,
        sync: SyncMode,
        replica: Option<VolumeReplica>,
        pool: &CommitterPool,
    ) -> Result<Arc<Self>, StoreError> {
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
            published_seq: 0,
            in_flight: VecDeque::new(),
        };
        writer.load_positions()?;
        let high_water = writer.last_seq;
        let shared = Arc::new_cyclic(|shared: &Weak<Shared>| {
            let (shared, pool) = (shared.clone(), pool.clone());
            let schedule = move || {
                if let Some(shared) = shared.upgrade() {
                    pool.run(shared);
                }
            };
            Shared {
                path,
                sync,
                writer: Mutex::new(writer),
                readers,
                recent: Mutex::default(),
                queue: Arc::new(CommitQueue::new(Box::new(schedule))),
                committer: Mutex::new(CommitterState::new(high_water)),
                poisoned: AtomicBool::new(false),
                epoch: AtomicU64::new(0),
                damaged: std::sync::OnceLock::new(),
                faults: Default::default(),
                trim_locks: Mutex::default(),
                replica,
                pending: Mutex::default(),
                fenced: std::sync::OnceLock::new(),
                committer_yielded: AtomicBool::new(false),
            }
        });
        shared.capture(&lock(&shared.writer).conn)?;
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
        pool.register()?;
        Ok(Arc::new(Self { shared }))
    }

    /// What tells when every connection of this volume has closed: only then may its files be
    /// replaced, since SQLite deletes a database's WAL by name when its last connection
    /// closes.
    pub(crate) fn gone(&self) -> Gone {
        Gone(Arc::downgrade(&self.shared))
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
        self.shared.queue.wait_stopped();
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

    /// The volume's shared parts, for a test's own thread.
    #[cfg(test)]
    pub(super) fn shared_arc(&self) -> Arc<Shared> {
        self.shared.clone()
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

    /// Queues a group-commit share; the reply comes from the committer's thread (or at once, with
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
        self.published_seq = self.last_seq;
        Ok(())
    }
}

impl Shared {
    /// The writer, for a door other than the committer's (see [`Door`]).
    pub(super) fn door(&self) -> Door<'_> {
        Door {
            shared: self,
            writer: Some(lock(&self.writer)),
        }
    }

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
    ///
    /// On a replicated volume the answer waits for the write's window to land, holding neither
    /// the writer nor any thread but the caller's: the transaction commits at once and joins
    /// the committer's groups in flight (see [`Shared::commit_in_flight`]), so that the
    /// volume's other writes, and the opening of its partitions, go on meanwhile. `sees` tells
    /// whether `work` depends on what the groups in flight bring to memory.
    pub(super) fn write<T>(
        &self,
        epoch: u64,
        sees: Sees,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (value, settling) = {
            let mut writer = self.door();
            // Checked under the lock: a writer queued behind a failing one must not commit
            // after it.
            self.check_intact()?;
            if sees == Sees::InFlight {
                self.drain_in_flight(&mut writer)?;
            }
            self.settle_landing(&mut writer)?;
            if self.refuses_writes(epoch) {
                return Err(StoreError::Poisoned);
            }
            self.commit_in_flight(&mut writer, |tx| {
                let value = work(tx)?;
                self.injected_fault(Fault::BeforeCommit)?;
                Ok(value)
            })
            .map_err(|err| self.write_failed(err))?
        };
        match settling {
            Some(settling) => settling.wait(self).map(|()| value),
            None => Ok(value),
        }
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
        let mut writer = self.door();
        self.settle_landing(&mut writer)?;
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
                    self.commit_unsynced_in_flight(&mut writer, |tx| {
                        tx.prepare_cached(
                            "INSERT INTO partitions (topic, partition) VALUES (?1, ?2)",
                        )?
                        .execute(params![topic, partition])?;
                        Ok(tx.last_insert_rowid())
                    })?
                }
                None => return Ok(None),
            };
            // Its end as readers see it, once the groups in flight that write to it landed.
            if writer.in_flight.iter().any(|group| group.writes_to(key)) {
                self.drain_in_flight(&mut writer)?;
            }
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
        let oldest = self.oldest_hot(conn, key)?;
        Ok((tail, Due::of(due_at, oldest, tail)))
    }

    /// Clears a poisoned volume: reopens the writer connection (SQLite rolls back whatever the
    /// failed transaction left), reindexes, and starts a new epoch. Stores opened before keep
    /// refusing writes; reopening them loads their log's end anew.
    pub(super) fn recover(&self, writer: &mut Writer) -> Result<(), StoreError> {
        // What memory would take from them is reloaded from the file instead.
        self.fail_in_flight(writer, &StreamError::Reloaded);
        writer.conn = open_writer(&self.path, self.sync)?;
        self.capture(&writer.conn)?;
        writer.load_positions()?;
        // The in-memory index keeps serving readers meanwhile: it names committed records
        // only, and the index pass below takes in everything the reopened file holds.
        self.poisoned.store(false, Ordering::SeqCst);
        self.index_or_remember(writer)?;
        self.epoch.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
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
