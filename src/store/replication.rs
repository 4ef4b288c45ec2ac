//! The store's side of replication: a write lands in the replica's stream before it commits.
//!
//! With a [`Stream`], every write transaction of a volume (each of its three doors, see
//! `volume/mod.rs`) hands what it changed (its redo, see `redo.rs`) to the stream just before
//! it commits, and commits only once the stream holds it; so readers and callers only ever see
//! landed state, and a copy rebuilt from the stream holds everything acknowledged. The file
//! records the last window it holds (its position, table `replica`) in the same transaction.
//!
//! A landing that takes longer than the stream's retry time answers the callers `unavailable`
//! and rolls the transaction back, but the window may still land: until its outcome is known
//! the volume refuses writes, and once it is, the volume applies the window itself when it
//! landed ([`Shared::settle`]). A stream fenced by another owner refuses every later write.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::volume::{Shared, Writer};
use super::{StoreError, lock, redo, schema};

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

/// The outcome of a landing, once known: where it landed, or why it never will (the stream is
/// fenced by another owner, or stopped).
pub type Landed = Result<Position, String>;

/// What [`Stream::land`] answers.
pub enum Landing {
    /// Known within the retry time.
    Known(Landed),
    /// Not known yet: the outcome comes later on this channel.
    Pending(Receiver<Landed>),
}

/// Where a volume's changes land before they commit: a node's write-ahead stream.
pub trait Stream: Send + Sync {
    /// Lands `redo`, the changes of one transaction of volume `volume`, blocking until its
    /// outcome is known or the retry time has passed.
    fn land(&self, volume: usize, redo: Arc<[u8]>) -> Landing;
}

/// What a node's replication has done since it started, read by the server's metrics.
#[derive(Debug, Default)]
pub struct ReplicaCounters {
    pub(crate) windows: AtomicU64,
    pub(crate) window_bytes: AtomicU64,
    pub(crate) put_failures: AtomicU64,
    pub(crate) snapshots: AtomicU64,
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

/// A landing whose outcome was not known in time, and the changes it carried.
pub(super) struct PendingLanding {
    outcome: Receiver<Landed>,
    redo: Arc<[u8]>,
}

fn unavailable(reason: impl Into<String>) -> StoreError {
    StoreError::Replica {
        reason: reason.into(),
    }
}

/// Records in `tx` that the file holds every window through `position`.
fn record_position(tx: &Transaction<'_>, position: &Position) -> Result<(), StoreError> {
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

impl Shared {
    /// Makes the writing connection capture its changes, when the volume is replicated.
    pub(super) fn capture(&self, conn: &Connection) -> Result<(), StoreError> {
        match &self.replica {
            Some(_) => redo::install(conn),
            None => Ok(()),
        }
    }

    /// Lands what `tx` changed in the stream and records where; called by every write door
    /// just before it commits. An error leaves `tx` to roll back.
    pub(super) fn land(&self, tx: &Transaction<'_>) -> Result<(), StoreError> {
        let Some(replica) = &self.replica else {
            return Ok(());
        };
        let redo: Arc<[u8]> = redo::take(tx)?.into();
        if redo.is_empty() {
            return Ok(());
        }
        match replica.stream.land(replica.volume, redo.clone()) {
            Landing::Known(Ok(position)) => record_position(tx, &position),
            Landing::Known(Err(reason)) => Err(self.fence(reason)),
            Landing::Pending(outcome) => {
                *lock(&self.pending) = Some(PendingLanding { outcome, redo });
                Err(unavailable(
                    "the replica's stream did not answer in time (replication.put_retry_ms); \
                     the write may still land, and writes wait until that is known",
                ))
            }
        }
    }

    /// Refuses writes for good: the stream answered `reason` (fenced by another owner).
    fn fence(&self, reason: String) -> StoreError {
        let reason = self.fenced.get_or_init(|| {
            log::error!("{}: refusing writes: {reason}", self.path.display());
            reason
        });
        unavailable(reason.clone())
    }

    /// Settles a landing whose outcome was not known in time, before any other write of the
    /// volume: once it landed, applies its changes and reloads what memory holds of the volume
    /// (a recovery: stores opened before refuse writes and reopen, seeing the landed changes);
    /// until its outcome is known, refuses writes. Called by every write door under the writer
    /// lock, and by the committer when idle.
    pub(super) fn settle_landing(&self, writer: &mut Writer) -> Result<(), StoreError> {
        if let Some(reason) = self.fenced.get() {
            return Err(unavailable(reason.clone()));
        }
        // Taken out of its lock: the recovery below runs the write doors again.
        let Some(landing) = lock(&self.pending).take() else {
            return Ok(());
        };
        match landing.outcome.try_recv() {
            Ok(Ok(position)) => {
                let applied = (|| {
                    let tx = writer
                        .conn
                        .transaction_with_behavior(TransactionBehavior::Immediate)?;
                    redo::apply(&tx, &landing.redo)?;
                    // The replay was captured like any write; it is in the stream already.
                    redo::take(&tx)?;
                    record_position(&tx, &position)?;
                    tx.commit()?;
                    Ok(())
                })();
                if let Err(err) = applied {
                    return Err(self.write_failed(err));
                }
                self.recover(writer)
            }
            Ok(Err(reason)) => Err(self.fence(reason)),
            Err(TryRecvError::Empty) => {
                *lock(&self.pending) = Some(landing);
                Err(unavailable(
                    "a write's landing in the replica's stream is not known yet",
                ))
            }
            Err(TryRecvError::Disconnected) => {
                Err(self.fence("the replica's stream stopped".into()))
            }
        }
    }
}

/// A volume's file as the replica's taker sees it before the volume opens: where it stands on
/// the stream, and what replaying windows onto it takes.
pub struct LocalCopy {
    conn: Connection,
}

impl LocalCopy {
    /// Opens (creating if needed) the volume file at `path` and brings its schema up to date.
    ///
    /// # Errors
    /// A storage failure, or a file of a newer version.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
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
    /// holds.
    ///
    /// # Errors
    /// A storage failure.
    pub fn snapshot(path: &Path, target: &Path) -> Result<Option<Position>, StoreError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute("VACUUM INTO ?1", [target.to_string_lossy()])?;
        let copy = Connection::open_with_flags(target, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        read_position(&copy)
    }

    /// Closes the file, moving every change into the database file proper.
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
