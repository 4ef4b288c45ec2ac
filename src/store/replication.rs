//! The store's side of replication: a write is answered only once it landed in the replica's
//! stream.
//!
//! With a [`Stream`], every write transaction of a volume (each of its three doors, see
//! `volume/mod.rs`) hands what it changed (its redo, see `redo.rs`) to the stream just before
//! it commits, and records in the same transaction the window it goes to (its position, table
//! `replica`). The committer's group commits then commit locally at once and stage the next
//! group while the window is stored; their callers are answered, and readers see the records,
//! only once it landed (`volume/committer.rs`). So does the index pass, which indexes only
//! published records (`volume/index.rs`). The other doors wait for the landing before they
//! commit. So callers and readers only ever see landed state, and a copy rebuilt from the
//! stream holds everything acknowledged; a file that holds a window that never landed (the
//! node stopped first) is set aside when the node starts again (`replica/take.rs`).
//!
//! A landing that takes longer than the stream's retry time answers the callers `unavailable`,
//! but the window may still land: until its outcome is known the volume refuses writes, and
//! once it is, the volume applies the window itself if its file lacks it and reloads what
//! memory holds (`volume/landing.rs`). A stream fenced by another owner refuses every later
//! write. This file holds what the volume and the replica share: the [`Stream`], positions,
//! [`StreamError`], and [`LocalCopy`], the file as a take sees it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction};

use super::{StoreError, redo, schema};

/// A window of a node's stream: the writer's node, its incarnation, and the window's number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    /// The node that wrote the stream.
    pub node: String,
    /// The node's incarnation (one stream per process start).
    pub inc: u64,
    /// The window's number in the stream.
    pub seq: u64,
}

/// Why a volume's changes did not land in the stream, or will not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Another node took this node's volumes and sealed its stream with a fence at `key`: the
    /// stream lands nothing more.
    #[error(
        "another node took this node's volumes (its stream is sealed at {key}); this node \
         accepts no more writes"
    )]
    Sealed {
        /// The fence's key in the bucket.
        key: String,
    },
    /// A window's key holds another writer's window: two processes write one stream.
    #[error("{key} holds another writer's window")]
    Usurped {
        /// The window's key in the bucket.
        key: String,
    },
    /// The stream stopped: the node stops serving, or the stream's thread ended.
    #[error("the replica's stream stopped: {reason}")]
    Stopped {
        /// Why.
        reason: String,
    },
    /// The landing's answer did not come within `replication.put_retry_ms`: the write may still
    /// land, and the volume's writes wait until that is known.
    #[error(
        "the replica's stream did not answer in time (replication.put_retry_ms); the write may \
         still land, and writes wait until that is known"
    )]
    NotInTime,
    /// An earlier write's landing is not known yet: the volume takes no write before it is.
    #[error("a write's landing in the replica's stream is not known yet")]
    Unsettled,
    /// The volume reloaded its file before the write's landing was answered: the write may
    /// have landed.
    #[error("the volume reloaded before the write's answer")]
    Reloaded,
}

impl StreamError {
    /// Whether the stream lands nothing more: the volume refuses writes for good.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Sealed { .. } | Self::Usurped { .. } | Self::Stopped { .. }
        )
    }
}

/// The outcome of a landing, once known: where it landed, or why it never will (the stream is
/// fenced by another owner, or stopped).
pub type Landed = Result<Position, StreamError>;

/// Where a landing's outcome goes: called once, on the stream's thread.
pub type OnLanded = Box<dyn FnOnce(Landed) + Send>;

/// Where a volume's changes land before they are answered: a node's write-ahead stream.
pub trait Stream: Send + Sync {
    /// Queues `redo`, the changes of one transaction of volume `volume`, for the stream's next
    /// window and answers that window's position at once, without waiting: `on_landed` gets
    /// the outcome. Windows land in order, and a volume's submissions in the order submitted.
    ///
    /// # Errors
    /// Why the stream lands nothing more (fenced by another owner, or stopped); `on_landed`
    /// is then never called.
    fn submit(
        &self,
        volume: usize,
        redo: Arc<[u8]>,
        on_landed: OnLanded,
    ) -> Result<Position, StreamError>;

    /// How long a write waits for its landing before its callers are answered unavailable.
    fn put_retry(&self) -> Duration;

    /// Whether a volume found damaged is rebuilt from the stream's bucket, which holds its
    /// whole history (a single node's replica does; a cluster's node leaves it to the next take).
    fn heals(&self) -> bool;

    /// Volume `volume` was just found damaged and marked: asks for its rebuild. Answers whether
    /// the request was taken (not when the node is stopping).
    fn damaged(&self, volume: usize) -> bool;
}

/// What a node's replication has done since it started, read by the server's metrics.
#[derive(Debug, Default)]
pub struct ReplicaCounters {
    pub(crate) windows: AtomicU64,
    pub(crate) window_bytes: AtomicU64,
    pub(crate) put_failures: AtomicU64,
    pub(crate) snapshots: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) deleted: AtomicU64,
    pub(crate) fenced: AtomicBool,
}

impl ReplicaCounters {
    /// Windows stored in the bucket.
    pub fn windows(&self) -> u64 {
        self.windows.load(Ordering::Relaxed)
    }

    /// Bytes of those windows.
    pub fn window_bytes(&self) -> u64 {
        self.window_bytes.load(Ordering::Relaxed)
    }

    /// Attempts to store a window that failed (each was retried).
    pub fn put_failures(&self) -> u64 {
        self.put_failures.load(Ordering::Relaxed)
    }

    /// Volume snapshots stored.
    pub fn snapshots(&self) -> u64 {
        self.snapshots.load(Ordering::Relaxed)
    }

    /// Batches of landed windows stored (see `replica/format.rs`).
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Objects deleted by garbage collection.
    pub fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Relaxed)
    }

    /// Whether another node took this node's volumes: it refuses writes from then on.
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::Relaxed)
    }
}

/// A volume's link to its stream.
#[derive(Clone)]
pub struct VolumeReplica {
    /// Where the volume's changes land.
    pub stream: Arc<dyn Stream>,
    /// The volume's number in its data folder and in the bucket.
    pub volume: usize,
}

impl std::fmt::Debug for VolumeReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeReplica")
            .field("volume", &self.volume)
            .finish_non_exhaustive()
    }
}

/// Records in `tx` that the file holds every window through `position`.
pub(super) fn record_position(tx: &Transaction<'_>, position: &Position) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO replica (id, node, inc, seq) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET node = excluded.node, inc = excluded.inc, seq = excluded.seq",
    )?
    .execute(rusqlite::params![position.node, position.inc, position.seq])?;
    Ok(())
}

/// The last window the file of `conn` holds, if any.
fn read_position(conn: &Connection) -> Result<Option<Position>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT node, inc, seq FROM replica WHERE id = 1",
            [],
            |row| {
                Ok(Position {
                    node: row.get(0)?,
                    inc: row.get(1)?,
                    seq: row.get(2)?,
                })
            },
        )
        .optional()?)
}

/// A volume's file as the replica's taker sees it before the volume opens: where it stands on
/// the stream, and what replaying windows onto it takes.
pub struct LocalCopy {
    conn: Connection,
}

impl LocalCopy {
    /// Opens (creating if needed) the volume file at `path` and brings its schema up to date.
    /// Windows apply without an fsync each (SQLite's `NORMAL` in WAL mode): the checkpoint of
    /// [`LocalCopy::close`] syncs the file once, and a copy that a crash cuts short before
    /// stands at an earlier window of its history, from which the next take replays.
    ///
    /// # Errors
    /// A storage failure, or a file of a newer version.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        schema::migrate(&mut conn)?;
        Ok(Self { conn })
    }

    /// The last window the file holds; `None` for a file that never held one.
    ///
    /// # Errors
    /// A storage failure.
    pub fn position(&self) -> Result<Option<Position>, StoreError> {
        read_position(&self.conn)
    }

    /// Whether the file holds any partition.
    ///
    /// # Errors
    /// A storage failure.
    pub fn holds_data(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM partitions)", [], |row| {
                row.get(0)
            })?)
    }

    /// Applies one window's changes (`redo`) and records `position`, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Corrupted`] when the changes do not apply cleanly: nothing is applied.
    pub fn apply(&mut self, redo: &[u8], position: &Position) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        redo::apply(&tx, redo)?;
        record_position(&tx, position)?;
        tx.commit()?;
        Ok(())
    }

    /// Records `position` without changes (a fresh copy starting a chain there).
    ///
    /// # Errors
    /// A storage failure.
    pub fn set_position(&mut self, position: &Position) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        record_position(&tx, position)?;
        tx.commit()?;
        Ok(())
    }

    /// Writes a consistent copy of the volume file at `path` to `target` (which must not
    /// exist) while the volume may be open and writing, and answers the last window the copy
    /// holds. The file is checked first (SQLite's `integrity_check`; `quick_check` misses a
    /// page of an index overwritten with its neighbour): a copy of a damaged page would carry
    /// the damage into the bucket, and every copy made from it.
    ///
    /// # Errors
    /// [`StoreError::Corrupted`] when the file fails the check; a storage failure.
    pub fn snapshot(path: &Path, target: &Path) -> Result<Option<Position>, StoreError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let check: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
        if check != "ok" {
            return Err(StoreError::Corrupted {
                reason: format!("{} fails SQLite's check: {check}", path.display()),
            });
        }
        conn.execute("VACUUM INTO ?1", [target.to_string_lossy()])?;
        let copy = Connection::open_with_flags(target, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        read_position(&copy)
    }

    /// Closes the file, moving every change into the database file proper, synced.
    ///
    /// # Errors
    /// A storage failure.
    pub fn close(self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        self.conn.close().map_err(|(_, err)| err)?;
        Ok(())
    }
}

#[cfg(test)]
impl LocalCopy {
    /// The redo of a write that adds partition `id` (topic `w{id}`) and sets
    /// `indexed.through_seq` to `id`, captured as a volume's writes are: the replica's tests
    /// write volumes without opening them, and `through_seq` tells which write a copy applied
    /// last.
    pub(crate) fn test_write(id: i64) -> Vec<u8> {
        thread_local! {
            /// An empty volume capturing its changes; every write is rolled back.
            static SCRATCH: Connection = {
                let mut conn = Connection::open_in_memory().expect("a scratch volume");
                schema::migrate(&mut conn).expect("the volume schema");
                redo::install(&conn).expect("the capture");
                conn
            };
        }
        SCRATCH.with(|conn| {
            let tx = Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)
                .expect("a transaction");
            tx.execute(
                "INSERT INTO partitions (id, topic, partition) VALUES (?1, ?2, 0)",
                rusqlite::params![id, format!("w{id}")],
            )
            .expect("a partition");
            tx.execute("UPDATE indexed SET through_seq = ?1", [id])
                .expect("the mark");
            let redo = redo::take(&tx).expect("the redo");
            tx.rollback().expect("a rollback");
            redo
        })
    }
}
