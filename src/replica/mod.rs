//! Replication: every write of a node's volumes lands in object storage before its answer, so
//! the bucket holds everything acknowledged and a node's disk is a cache of it.
//!
//! The volume is the unit: each has a manifest in the bucket (its owner, a snapshot and the
//! chain of stream segments since it, see [`format`]). A node writes one stream per
//! incarnation; each object of it is a window of what the node's volumes committed together,
//! created only where nothing is (`If-None-Match: *`), so a seq holds one window for ever. A
//! volume's write is answered, and seen by readers, only once its window landed (see
//! `store/replication.rs`); a few windows are stored at once and answered in seq order, and
//! a window's seq is known when a write joins it, so the next writes commit locally while it
//! is stored.
//! At start the node claims a new incarnation and takes each volume ([`take`]): its local copy
//! is brought up to its history, the previous owner's stream is sealed with a fence (whose
//! writer then lands nothing more: it answers `503 unavailable` from then on), and the manifest
//! names the new owner (`If-Match`).

mod format;
#[cfg(test)]
mod history_tests;
mod maintenance;
pub(crate) mod probe;
mod take;
#[cfg(test)]
mod take_tests;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cold::S3Settings;
use crate::cold::s3::{ObjectError, Objects, Put};
use crate::config::{MAX_PUTS_IN_FLIGHT, ReplicationSettings};
use crate::error::ErrorCode;
use crate::store::{
    Landed, LocalCopy, OnLanded, Position, ReplicaCounters, StoreError, Stream, StreamError,
    Volume, lock,
};
use format::{Batch, Keys, Manifest, Window, is_fence};

/// Why the volumes cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The bucket did not answer, or answered a failure.
    #[error("the replica's bucket: {0}")]
    Bucket(#[from] ObjectError),
    /// A local copy could not be read or written.
    #[error("a volume's local copy: {0}")]
    Store(#[from] StoreError),
    /// A file of the data folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system answered.
        source: std::io::Error,
    },
    /// This node's stream lands nothing more.
    #[error("the replica's stream: {0}")]
    Stream(#[from] StreamError),
    /// The bucket or the data folder does not suit this node's settings (the volume count,
    /// the cluster's name, conditional writes): the node refuses to start rather than lose
    /// writes.
    #[error("{0}")]
    Unsuited(String),
    /// An object that a volume's history names is missing, or cannot be read: the bucket is
    /// damaged, and the volume is not taken from it.
    #[error("{key}: {reason}")]
    Damaged {
        /// The object's key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Another node replaced volume `volume`'s manifest: the volume is no longer this node's.
    #[error("volume {volume}'s manifest was replaced by another node")]
    Replaced {
        /// The volume.
        volume: usize,
    },
    /// Volume `volume`'s history changed while it was read (its owner snapshotted and
    /// collected what it named, or another node took it): read it again.
    #[error("volume {volume}'s history changed while it was read")]
    HistoryMoved {
        /// The volume.
        volume: usize,
    },
    /// A copy of a volume holds window `seq` of this node's stream, which did not land in
    /// time: the copy is not stored, as the bucket may never hold that window.
    #[error("the copy holds window {seq} of this node's stream, which did not land")]
    NotLanded {
        /// The window's seq.
        seq: u64,
    },
    /// Volume `volume`'s copy stands at a window its history does not hold.
    #[error("volume {volume}'s copy stands at {position:?}, which its history does not hold")]
    OffHistory {
        /// The volume.
        volume: usize,
        /// Where its copy stands.
        position: Position,
    },
    /// Volume `volume` was to be rebuilt from the bucket, and it bears no damage mark.
    #[error("volume {volume} has no damage mark: it is not rebuilt")]
    NotDamaged {
        /// The volume.
        volume: usize,
    },
    /// The replica's thread, or one of its tasks, ended before it answered.
    #[error("the replica's {0} stopped before it answered")]
    Stopped(&'static str),
}

impl ReplicaError {
    /// The stable code of this error (the REST API's `error.code`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Store(err) => err.code(),
            Self::Unsuited(_) => ErrorCode::InvalidConfig,
            Self::Damaged { .. } | Self::OffHistory { .. } => ErrorCode::Corrupted,
            Self::Replaced { .. } => ErrorCode::NotOwner,
            Self::NotDamaged { .. } => ErrorCode::InvalidRequest,
            Self::Bucket(_)
            | Self::Io { .. }
            | Self::Stream(_)
            | Self::HistoryMoved { .. }
            | Self::NotLanded { .. }
            | Self::Stopped(_) => ErrorCode::Unavailable,
        }
    }

    /// An object at `key` that cannot be decoded, for `reason`.
    fn undecodable(key: &str, reason: impl std::fmt::Display) -> Self {
        Self::Damaged {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// A consistent copy of the volume file at `path` (which may be open and writing), and the
/// last window it holds. Blocks on SQLite and the disk.
fn copy_of(path: &Path) -> Result<(Option<Position>, Vec<u8>), ReplicaError> {
    let copy = take::sibling(path, "snapshot");
    let _ = std::fs::remove_file(&copy);
    let position = LocalCopy::snapshot(path, &copy)?;
    let bytes = std::fs::read(&copy).map_err(|err| ReplicaError::io(&copy, err));
    let _ = std::fs::remove_file(&copy);
    Ok((position, bytes?))
}

/// A volume's changes waiting for their window, and where the window's outcome goes.
struct Submission {
    volume: usize,
    redo: Arc<[u8]>,
    on_landed: OnLanded,
}

/// A window of the stream not stored yet: its seq is fixed when it opens, so a submission
/// learns its position at once.
struct OpenWindow {
    seq: u64,
    opened: Instant,
    bytes: usize,
    /// Which volumes submitted to it, and how many.
    volumes: Vec<bool>,
    submitters: usize,
    submissions: Vec<Submission>,
    /// Being stored: it takes nothing more.
    storing: bool,
}

/// The windows waiting to be stored, oldest first, shared by the volumes (which submit) and
/// the stream's writer (which stores a few at once and answers them in seq order).
#[derive(Default)]
struct Outbox {
    windows: std::sync::Mutex<Windows>,
    /// Told of every submission, and when the stream closes.
    submitted: tokio::sync::Notify,
    /// Told when the node asks the stream to stop ([`Replicator::stop`]).
    halted: tokio::sync::Notify,
}

#[derive(Default)]
struct Windows {
    queue: VecDeque<OpenWindow>,
    /// The seq of the next window to open.
    next_seq: u64,
    /// Why the stream lands nothing more: another node sealed it, or it closed.
    stopped: Option<StreamError>,
    /// No more submissions come: store what is queued, then stop.
    closed: bool,
    /// The node asked the stream to stop storing at once, for this reason: taken by the
    /// writer, which answers every window queued or being stored.
    halt: Option<StreamError>,
}

/// A node incarnation's stream, after its volumes were taken: stores windows in seq order, on
/// its own thread.
pub(crate) struct Replicator {
    outbox: Arc<Outbox>,
    node: Arc<Node>,
    /// The replica thread's runtime, which takes the volumes at start.
    runtime: tokio::runtime::Handle,
    name: String,
    inc: u64,
    volumes: usize,
    max_window_bytes: usize,
    put_retry: Duration,
}

impl Drop for Replicator {
    fn drop(&mut self) {
        lock(&self.outbox.windows).closed = true;
        self.outbox.submitted.notify_one();
    }
}

impl std::fmt::Debug for Replicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicator").finish_non_exhaustive()
    }
}

/// A volume this incarnation owns: its manifest as last written, and what it landed since its
/// last snapshot.
struct Held {
    manifest: Manifest,
    etag: String,
    since_snapshot: u64,
    snapshot_at: Instant,
    snapshotting: bool,
}

/// What the node's stream and its maintenance share.
struct Node {
    objects: Objects,
    keys: Keys,
    node: String,
    inc: u64,
    data_dir: PathBuf,
    /// The volumes this incarnation took (`None`: another node's, or not taken yet).
    volumes: Vec<tokio::sync::Mutex<Option<Held>>>,
    /// Each volume's epoch as this incarnation took it, written in its sections.
    epochs: Vec<AtomicU64>,
    /// How many volumes this incarnation took.
    held: AtomicUsize,
    /// One snapshot or collection at a time.
    maintenance: tokio::sync::Mutex<maintenance::Unneeded>,
    snapshot_bytes: u64,
    snapshot_interval: Duration,
    gc_grace: Duration,
    counters: Arc<ReplicaCounters>,
    /// The newest window stored: a snapshot of a copy holding windows beyond it waits.
    landed: AtomicU64,
    /// Each volume's newest window of this incarnation's stream holding its changes (0: none):
    /// the windows after it hold none, so a history may skip them.
    submitted: Vec<AtomicU64>,
    /// Each volume's window of this stream from which its history was last shortened (taken,
    /// snapshotted or advanced): once the stream is `snapshot_windows` past it, the volume is
    /// snapshotted, so that a taker never replays much more than that.
    replay_from: Vec<AtomicU64>,
    /// `replication.snapshot_windows`: windows of the stream past which a volume's history is
    /// shortened (snapshotted, or, when the volume changed nothing meanwhile, started later).
    snapshot_windows: u64,
    /// Where a volume found damaged is sent to be rebuilt ([`Replicator::heal_requests`]);
    /// without a receiver it stays refused, as an unreplicated one.
    heal: Mutex<Option<tokio::sync::mpsc::UnboundedSender<usize>>>,
}

impl Replicator {
    /// Claims a new incarnation of this node in the bucket (whose data must be spread over
    /// `volumes` volumes, and whose prefix must belong to `cluster`, or to no cluster when
    /// `None`) and starts its stream, holding no volume yet: [`Replicator::take`]
    /// takes them. Blocks until the incarnation is claimed.
    ///
    /// # Errors
    /// [`ReplicaError`] when the bucket cannot be reached or refuses.
    pub(crate) fn start(
        settings: &ReplicationSettings,
        s3: &S3Settings,
        data_dir: &Path,
        volumes: usize,
        cluster: Option<&str>,
        counters: Arc<ReplicaCounters>,
    ) -> Result<Arc<Self>, ReplicaError> {
        let extra = data_dir.join(Volume::file_name(volumes));
        if extra.exists() {
            return Err(ReplicaError::Unsuited(format!(
                "{} is beyond storage.volumes ({volumes}), which a replicated node keeps fixed",
                extra.display()
            )));
        }
        let objects = Objects::new(s3, Some(REQUEST_TIMEOUT))?;
        let (max_window_bytes, put_retry) = (
            settings.max_window_bytes,
            Duration::from_millis(settings.put_retry_ms),
        );
        let settings = settings.clone();
        let cluster = cluster.map(str::to_owned);
        let data_dir = data_dir.to_owned();
        let outbox = Arc::new(Outbox::default());
        lock(&outbox.windows).next_seq = 1;
        let (started, claimed) = std::sync::mpsc::channel();
        let writer_outbox = outbox.clone();
        let runtime = crate::background::spawn("durability-replica", move || async move {
            let claimed = Node::claim(
                objects,
                &settings,
                data_dir,
                volumes,
                cluster.as_deref(),
                counters,
            );
            match claimed.await {
                Ok(node) => {
                    let _ = started.send(Ok(node.clone()));
                    tokio::spawn(node.clone().collect_garbage());
                    StreamWriter::new(node, &settings, writer_outbox)
                        .run()
                        .await;
                }
                Err(err) => {
                    let _ = started.send(Err(err));
                }
            }
        })
        .map_err(|err| ReplicaError::io(Path::new("durability-replica"), err))?;
        let node = claimed
            .recv()
            .map_err(|_| ReplicaError::Stopped("thread"))??;
        Ok(Arc::new(Self {
            outbox,
            name: node.node.clone(),
            inc: node.inc,
            node,
            runtime,
            volumes,
            max_window_bytes,
            put_retry,
        }))
    }

    /// Whether the stream lands nothing more (another node sealed it, or it stopped).
    pub(crate) fn stopped(&self) -> bool {
        lock(&self.outbox.windows).stopped.is_some()
    }

    /// Lands nothing more (the node stops serving): every later submission is refused, and
    /// the stream's writer stops storing and answers `reason` to every window queued or being
    /// stored (one being stored may still land: its writes were answered unavailable, not
    /// refused).
    pub(crate) fn stop(&self, reason: &str) {
        let reason = StreamError::Stopped {
            reason: reason.to_owned(),
        };
        {
            let mut windows = lock(&self.outbox.windows);
            windows.stopped.get_or_insert_with(|| reason.clone());
            windows.halt = Some(reason);
        }
        self.outbox.halted.notify_one();
        self.outbox.submitted.notify_one();
    }

    /// The volumes found damaged from now on, each sent once as it is found, for their
    /// rebuild ([`Replicator::rebuild`]).
    pub(crate) fn heal_requests(&self) -> tokio::sync::mpsc::UnboundedReceiver<usize> {
        let (requests, received) = tokio::sync::mpsc::unbounded_channel();
        *lock(&self.node.heal) = Some(requests);
        received
    }

    /// Rebuilds volume `volume`, which this incarnation holds and has closed (found damaged),
    /// from the bucket: once every window submitted so far landed, its copy is set aside and
    /// made anew from its snapshot and history, this incarnation's own segment replayed up to
    /// there, as a take would. Runs on the replica's thread; the volume may be opened again
    /// once this answers.
    ///
    /// # Errors
    /// [`ReplicaError`] when the windows do not land, or the bucket cannot be reached or
    /// refuses: the volume stays closed, and the rebuild may be tried again.
    pub(crate) async fn rebuild(self: &Arc<Self>, volume: usize) -> Result<(), ReplicaError> {
        let (rebuilt, outcome) = tokio::sync::oneshot::channel();
        let replicator = self.clone();
        self.runtime.spawn(async move {
            let last = lock(&replicator.outbox.windows).next_seq - 1;
            let at = Position {
                node: replicator.name.clone(),
                inc: replicator.inc,
                seq: last,
            };
            let done = match replicator.node.wait_for_landing(&at).await {
                Ok(()) => replicator.node.rebuild(volume, last + 1).await,
                Err(err) => Err(err),
            };
            let _ = rebuilt.send(done);
        });
        outcome.await.map_err(|_| ReplicaError::Stopped("thread"))?
    }

    /// How long the oldest window not landed yet has waited (none waits: `None`): a node whose
    /// windows cannot land for long cannot keep its volumes.
    pub(crate) fn stalled_for(&self) -> Option<Duration> {
        let windows = lock(&self.outbox.windows);
        windows.queue.front().map(|window| window.opened.elapsed())
    }

    /// This node's incarnation: the number of its stream.
    pub(crate) fn inc(&self) -> u64 {
        self.inc
    }

    /// Takes `volumes` for this incarnation (see [`take`]): each local copy is brought up to
    /// its history, the previous owner's stream sealed, and the manifest names this
    /// incarnation. The volume's file may be opened once this answers, not before.
    ///
    /// # Errors
    /// [`ReplicaError`] when the bucket cannot be reached or refuses, or a local copy fails.
    pub(crate) async fn take(&self, volumes: &[usize]) -> Result<(), ReplicaError> {
        // Windows from the oldest not landed on: a write of a volume taken now can join none
        // older.
        let first = {
            let windows = lock(&self.outbox.windows);
            // A sealed stream lands nothing more: a volume taken on it could take no write,
            // and its history would name a segment past the seal.
            if let Some(reason) = &windows.stopped {
                return Err(ReplicaError::Stream(reason.clone()));
            }
            windows
                .queue
                .front()
                .map_or(windows.next_seq, |window| window.seq)
        };
        for volume in self.node.take(volumes, first).await? {
            tokio::spawn(self.node.clone().snapshot_and_collect(volume));
        }
        Ok(())
    }

    /// Hands volume `volume`, closed here, to whichever node takes it next: once every window
    /// submitted so far landed (the volume's last changes among them), its manifest ends this
    /// incarnation's segment there, so the next owner replays up to that end and needs no
    /// seal. This incarnation holds the volume no more.
    ///
    /// # Errors
    /// [`ReplicaError`] when the windows do not land (the stream was sealed, or the bucket
    /// does not answer), or the manifest changed meanwhile.
    pub(crate) async fn release(&self, volume: usize) -> Result<(), ReplicaError> {
        let last = lock(&self.outbox.windows).next_seq - 1;
        let at = Position {
            node: self.name.clone(),
            inc: self.inc,
            seq: last,
        };
        self.node.wait_for_landing(&at).await?;
        self.node.release(volume, last + 1).await
    }

    /// [`Replicator::take`] on the replica's own thread, blocking until it is done.
    ///
    /// # Errors
    /// As [`Replicator::take`].
    pub(crate) fn take_blocking(self: &Arc<Self>, volumes: Vec<usize>) -> Result<(), ReplicaError> {
        let (taken, outcome) = std::sync::mpsc::channel();
        let replicator = self.clone();
        self.runtime.spawn(async move {
            let _ = taken.send(replicator.take(&volumes).await);
        });
        outcome
            .recv()
            .map_err(|_| ReplicaError::Stopped("thread"))?
    }
}

impl Node {
    /// Claims an incarnation (see [`take::claim`]), holding no volume yet.
    async fn claim(
        objects: Objects,
        settings: &ReplicationSettings,
        data_dir: PathBuf,
        volumes: usize,
        cluster: Option<&str>,
        counters: Arc<ReplicaCounters>,
    ) -> Result<Arc<Self>, ReplicaError> {
        let keys = Keys::new(&settings.prefix);
        let node = settings.node();
        probe::conditional_writes(&objects, &keys, &node).await?;
        take::fix_volume_count(&objects, &keys, volumes).await?;
        take::fix_cluster(&objects, &keys, cluster).await?;
        let inc = take::claim(&objects, &keys, &node).await?;
        log::info!("replica: claimed incarnation {inc} of {node}");
        Ok(Arc::new(Self {
            objects,
            keys,
            node,
            inc,
            data_dir,
            volumes: (0..volumes)
                .map(|_| tokio::sync::Mutex::default())
                .collect(),
            epochs: (0..volumes).map(|_| AtomicU64::new(0)).collect(),
            held: AtomicUsize::new(0),
            maintenance: tokio::sync::Mutex::default(),
            snapshot_bytes: settings.snapshot_bytes,
            snapshot_interval: Duration::from_millis(settings.snapshot_interval_ms),
            gc_grace: Duration::from_millis(settings.gc_grace_ms),
            counters,
            landed: AtomicU64::new(0),
            submitted: (0..volumes).map(|_| AtomicU64::new(0)).collect(),
            replay_from: (0..volumes).map(|_| AtomicU64::new(0)).collect(),
            snapshot_windows: settings.snapshot_windows,
            heal: Mutex::default(),
        }))
    }

    /// Asks for volume `volume`, found damaged, to be rebuilt: answers whether it will be.
    fn heal(&self, volume: usize) -> bool {
        lock(&self.heal)
            .as_ref()
            .is_some_and(|heal| heal.send(volume).is_ok())
    }

    /// Makes volume `volume`'s copy anew from the bucket (see [`Replicator::rebuild`]), this
    /// incarnation's own segment replayed up to window `end`, which landed. No snapshot runs
    /// meanwhile: it would copy a copy being made.
    async fn rebuild(&self, volume: usize, end: u64) -> Result<(), ReplicaError> {
        let _maintenance = self.maintenance.lock().await;
        let first = self.replay_from[volume].load(Ordering::SeqCst);
        let mut taker = take::Taker::new(&self.objects, &self.keys, &self.node, self.inc, first);
        taker.own_end = Some(end);
        let path = self.data_dir.join(Volume::file_name(volume));
        if !crate::store::damage_mark_path(&path).exists() {
            return Err(ReplicaError::NotDamaged { volume });
        }
        let (manifest, etag) = taker.take(&self.data_dir, volume).await?;
        self.epochs[volume].store(manifest.epoch, Ordering::SeqCst);
        if let Some(held) = self.volumes[volume].lock().await.as_mut() {
            held.manifest = manifest;
            held.etag = etag;
        }
        log::info!(
            "replica: volume {volume} rebuilt from the bucket ({} windows replayed)",
            taker.replayed
        );
        Ok(())
    }

    /// Takes `volumes` (see [`take`]), this incarnation's segment of each starting at window
    /// `first`.
    /// Answers the volumes whose take replayed a long history: they are snapshotted at once,
    /// so that whoever takes them next starts from here.
    async fn take(&self, volumes: &[usize], first: u64) -> Result<Vec<usize>, ReplicaError> {
        let mut taker = take::Taker::new(&self.objects, &self.keys, &self.node, self.inc, first);
        let mut long = Vec::new();
        for taken in taker.take_all(&self.data_dir, volumes).await? {
            let take::Taken {
                volume,
                manifest,
                etag,
                replayed,
            } = taken;
            let snapshotting = replayed >= LONG_REPLAY;
            if snapshotting {
                long.push(volume);
            }
            self.epochs[volume].store(manifest.epoch, Ordering::SeqCst);
            self.replay_from[volume].store(first, Ordering::SeqCst);
            let mut held = self.volumes[volume].lock().await;
            if held.is_none() {
                self.held.fetch_add(1, Ordering::SeqCst);
            }
            *held = Some(Held {
                manifest,
                etag,
                since_snapshot: 0,
                snapshot_at: Instant::now(),
                snapshotting,
            });
        }
        log::info!(
            "replica: took {} volumes as {} incarnation {}",
            volumes.len(),
            self.node,
            self.inc
        );
        Ok(long)
    }

    /// Ends this incarnation's segment of volume `volume` at window `end` (see
    /// [`Replicator::release`]), and holds it no more.
    async fn release(&self, volume: usize, end: u64) -> Result<(), ReplicaError> {
        let mut held = self.volumes[volume].lock().await;
        let Some(current) = held.as_ref() else {
            return Ok(());
        };
        let mut next = current.manifest.clone();
        next.version += 1;
        if let Some(own) = next.chain.last_mut()
            && own.node == self.node
            && own.inc == self.inc
        {
            own.end = Some(end.max(own.first));
        }
        next.chain
            .retain(|segment| segment.end != Some(segment.first));
        let key = self.keys.manifest(volume);
        match self
            .objects
            .replace(&key, &next.encode(), &current.etag)
            .await?
        {
            Put::Stored(_) => {
                *held = None;
                self.epochs[volume].store(0, Ordering::SeqCst);
                self.held.fetch_sub(1, Ordering::SeqCst);
                log::info!("replica: released volume {volume} (its history ends at window {end})");
                Ok(())
            }
            Put::ConditionFailed => Err(ReplicaError::Replaced { volume }),
        }
    }

    /// Starts the snapshot of every volume held whose history reaches more than
    /// `snapshot_windows` before window `seq`, which just landed.
    async fn bound_replays(self: &Arc<Self>, seq: u64) {
        for volume in 0..self.volumes.len() {
            let from = self.replay_from[volume].load(Ordering::SeqCst);
            if seq.saturating_sub(from) < self.snapshot_windows {
                continue;
            }
            let mut held = self.volumes[volume].lock().await;
            let Some(held) = held.as_mut() else { continue };
            if !held.snapshotting {
                held.snapshotting = true;
                // Not again before the stream moved on as far, whatever the snapshot does.
                self.replay_from[volume].store(seq, Ordering::SeqCst);
                tokio::spawn(self.clone().snapshot_and_collect(volume));
            }
        }
    }

    /// Counts `bytes` landed for volume `volume`, and starts its snapshot when one is due.
    async fn landed(self: &Arc<Self>, volume: usize, bytes: usize) {
        let mut held = self.volumes[volume].lock().await;
        let Some(held) = held.as_mut() else { return };
        held.since_snapshot += bytes as u64;
        let due = held.since_snapshot >= self.snapshot_bytes
            || held.snapshot_at.elapsed() >= self.snapshot_interval;
        if due && !held.snapshotting {
            held.snapshotting = true;
            tokio::spawn(self.clone().snapshot_and_collect(volume));
        }
    }
}

impl Stream for Replicator {
    fn submit(
        &self,
        volume: usize,
        redo: Arc<[u8]>,
        on_landed: OnLanded,
    ) -> Result<Position, StreamError> {
        let mut windows = lock(&self.outbox.windows);
        if let Some(reason) = &windows.stopped {
            return Err(reason.clone());
        }
        let joins = windows
            .queue
            .back()
            .is_some_and(|back| !back.storing && back.bytes < self.max_window_bytes);
        if !joins {
            let seq = windows.next_seq;
            windows.next_seq += 1;
            windows.queue.push_back(OpenWindow {
                seq,
                opened: Instant::now(),
                bytes: 0,
                volumes: vec![false; self.volumes],
                submitters: 0,
                submissions: Vec::new(),
                storing: false,
            });
        }
        let window = windows.queue.back_mut().expect("a window is open");
        window.bytes += redo.len();
        if !std::mem::replace(&mut window.volumes[volume], true) {
            window.submitters += 1;
        }
        window.submissions.push(Submission {
            volume,
            redo,
            on_landed,
        });
        let seq = window.seq;
        self.node.submitted[volume].store(seq, Ordering::SeqCst);
        drop(windows);
        self.outbox.submitted.notify_one();
        Ok(Position {
            node: self.name.clone(),
            inc: self.inc,
            seq,
        })
    }

    fn put_retry(&self) -> Duration {
        self.put_retry
    }

    fn heals(&self) -> bool {
        lock(&self.node.heal)
            .as_ref()
            .is_some_and(|heal| !heal.is_closed())
    }

    fn damaged(&self, volume: usize) -> bool {
        self.node.heal(volume)
    }
}

/// Windows a take replays beyond which the volume is snapshotted at once: a failover's time
/// follows the history its taker replays. A long history is read a batch at a time (16 GETs
/// for this many windows), so a shorter one is not worth the snapshots' PUTs, which compete
/// with the other takers of the same failover.
const LONG_REPLAY: u64 = 1024;

/// Longest wait for one answer of the bucket: a window's PUT is retried after it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// First and longest pause between attempts to store a window.
const RETRY_PAUSES: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The writing end of an incarnation's stream.
struct StreamWriter {
    node: Arc<Node>,
    outbox: Arc<Outbox>,
    linger: Duration,
    max_window_bytes: usize,
    max_puts_in_flight: usize,
    /// Landed windows not in a batch yet, consecutive, oldest first.
    batch: std::sync::Mutex<Vec<(u64, Arc<[u8]>)>>,
}

/// What the writer does next.
enum Step {
    /// Store this window (its seq, and what was submitted to it).
    Store(u64, Vec<Submission>),
    /// Nothing to start before a submission, or until this time (a window's linger ends).
    Wait(Option<Instant>),
    /// The stream closed and everything queued is stored.
    Stop,
}

/// A window being stored, on a task of its own.
struct Storing {
    seq: u64,
    /// The window as stored, kept for its batch.
    bytes: Arc<[u8]>,
    submissions: Vec<Submission>,
    landed: tokio::task::JoinHandle<Landed>,
}

/// Windows in one batch at most (see `format.rs`): a long replay reads one object per this
/// many windows.
const BATCH_WINDOWS: usize = 64;
/// Bytes of windows in one batch at most: a batch closes at the window that passes it.
const BATCH_BYTES: usize = 16 << 20;

impl StreamWriter {
    fn new(node: Arc<Node>, settings: &ReplicationSettings, outbox: Arc<Outbox>) -> Self {
        Self {
            node,
            outbox,
            linger: Duration::from_millis(settings.commit_linger_ms),
            max_window_bytes: settings.max_window_bytes,
            max_puts_in_flight: settings.max_puts_in_flight,
            batch: std::sync::Mutex::default(),
        }
    }

    /// Stores the submitted windows, up to `max_puts_in_flight` at once, and answers each
    /// window's submitters once it and every window before it are stored: a window is
    /// answered only after those before it, whatever order the bucket stores them in.
    async fn run(self) {
        let mut storing: VecDeque<Storing> = VecDeque::new();
        loop {
            let halt = lock(&self.outbox.windows).halt.take();
            if let Some(reason) = halt {
                self.stop(&reason, storing.drain(..));
            }
            let mut wait = Some(None);
            while storing.len() < self.max_puts_in_flight {
                match self.next_step() {
                    Step::Store(seq, submissions) => {
                        storing.push_back(self.start(seq, submissions))
                    }
                    Step::Wait(until) => {
                        wait = Some(until);
                        break;
                    }
                    Step::Stop => {
                        wait = None;
                        break;
                    }
                }
            }
            let more = storing.len() < self.max_puts_in_flight && wait.is_some();
            let Some(front) = storing.front_mut() else {
                match wait {
                    None => return,
                    Some(until) => {
                        self.wait_for_submissions(until).await;
                        continue;
                    }
                }
            };
            let until = wait.flatten();
            let landed = tokio::select! {
                landed = &mut front.landed => landed
                    .unwrap_or_else(|err| Err(StreamError::Stopped {
                        reason: format!("storing a window failed: {err}"),
                    })),
                () = self.wait_for_submissions(until), if more => continue,
                () = self.outbox.halted.notified() => continue,
            };
            let stored = storing.pop_front().expect("a window is being stored");
            if let Err(reason) = &landed {
                self.stop(reason, storing.drain(..));
            }
            self.answer(stored, landed).await;
        }
    }

    /// Waits for a submission, or until `until`.
    async fn wait_for_submissions(&self, until: Option<Instant>) {
        let submitted = self.outbox.submitted.notified();
        match until {
            Some(until) => {
                let _ = tokio::time::timeout_at(until.into(), submitted).await;
            }
            None => submitted.await,
        }
    }

    /// Encodes window `seq` and starts storing it.
    fn start(&self, seq: u64, submissions: Vec<Submission>) -> Storing {
        let node = &self.node;
        let at = Position {
            node: node.node.clone(),
            inc: node.inc,
            seq,
        };
        let changes: Vec<(usize, u64, &[u8])> = submissions
            .iter()
            .map(|s| {
                let epoch = node.epochs[s.volume].load(Ordering::Relaxed);
                (s.volume, epoch, &s.redo[..])
            })
            .collect();
        let bytes: Arc<[u8]> = Window::encode(&at, &changes).into();
        Storing {
            seq,
            bytes: bytes.clone(),
            submissions,
            landed: tokio::spawn(store(node.clone(), at, bytes)),
        }
    }

    /// Adds landed window `seq` to the next batch, and stores the batch once it is full.
    fn batch(&self, seq: u64, bytes: Arc<[u8]>) {
        let full = {
            let mut batch = lock(&self.batch);
            if batch.last().is_some_and(|(last, _)| last + 1 != seq) {
                batch.clear();
            }
            batch.push((seq, bytes));
            let size: usize = batch.iter().map(|(_, window)| window.len()).sum();
            (batch.len() >= BATCH_WINDOWS || size >= BATCH_BYTES)
                .then(|| std::mem::take(&mut *batch))
        };
        if let Some(windows) = full {
            tokio::spawn(store_batch(self.node.clone(), windows));
        }
    }

    /// Answers the submitters of a window whose outcome is known (and every window's before
    /// it), and counts what landed towards each volume's next snapshot.
    async fn answer(&self, stored: Storing, landed: Landed) {
        if landed.is_ok() {
            lock(&self.outbox.windows).queue.pop_front();
            self.node.landed.store(stored.seq, Ordering::SeqCst);
            self.batch(stored.seq, stored.bytes);
        }
        let mut counted = vec![0; self.node.volumes.len()];
        for submission in stored.submissions {
            counted[submission.volume] += submission.redo.len();
            (submission.on_landed)(landed.clone());
        }
        if landed.is_ok() {
            for (volume, bytes) in counted.into_iter().enumerate() {
                if bytes > 0 {
                    self.node.landed(volume, bytes).await;
                }
            }
            if stored.seq.is_multiple_of(BATCH_WINDOWS as u64) {
                self.node.bound_replays(stored.seq).await;
            }
        }
    }

    /// Takes the oldest window not being stored when it is closed: another window waits
    /// behind it, it is full, every volume this node holds submitted to it (none can add more
    /// before its answer), its linger is over, or the stream is closing.
    fn next_step(&self) -> Step {
        let mut windows = lock(&self.outbox.windows);
        let (closed, count) = (windows.closed, windows.queue.len());
        let Some(at) = windows.queue.iter().position(|window| !window.storing) else {
            return if closed && count == 0 {
                Step::Stop
            } else {
                Step::Wait(None)
            };
        };
        let window = &mut windows.queue[at];
        let until = window.opened + self.linger;
        let ready = at + 1 < count
            || closed
            || window.bytes >= self.max_window_bytes
            || window.submitters >= self.node.held.load(Ordering::Relaxed)
            || Instant::now() >= until;
        if !ready {
            return Step::Wait(Some(until));
        }
        window.storing = true;
        Step::Store(window.seq, std::mem::take(&mut window.submissions))
    }

    /// Stops the stream for good: every window queued or being stored (`storing`) is
    /// answered `reason`, and so is every later submission.
    fn stop(&self, reason: &StreamError, storing: impl Iterator<Item = Storing>) {
        let queued: Vec<OpenWindow> = {
            let mut windows = lock(&self.outbox.windows);
            windows.stopped.get_or_insert_with(|| reason.clone());
            windows.queue.drain(..).collect()
        };
        let storing = storing.flat_map(|window| {
            window.landed.abort();
            window.submissions
        });
        for submission in queued
            .into_iter()
            .flat_map(|window| window.submissions)
            .chain(storing)
        {
            (submission.on_landed)(Err(reason.clone()));
        }
    }
}

/// Stores `windows`, landed and consecutive, as one batch; a failure is logged and left (the
/// windows are read one by one instead).
async fn store_batch(node: Arc<Node>, windows: Vec<(u64, Arc<[u8]>)>) {
    let (Some((first, _)), Some((last, _))) = (windows.first(), windows.last()) else {
        return;
    };
    let key = node.keys.batch(&node.node, node.inc, *first, *last);
    match node.objects.create(&key, &Batch::encode(&windows)).await {
        Ok(_) => {
            node.counters.batches.fetch_add(1, Ordering::Relaxed);
        }
        Err(err) => log::warn!("replica: storing the batch {key} failed: {err}"),
    }
}

/// Stores the window `bytes` at `at`, retrying the same bytes until the bucket answers.
async fn store(node: Arc<Node>, at: Position, bytes: Arc<[u8]>) -> Landed {
    let key = node.keys.window(&at.node, at.inc, at.seq);
    let mut pause = RETRY_PAUSES.0;
    let mut failures = 0u32;
    loop {
        let failure = match node.objects.create(&key, &bytes).await {
            Ok(Put::Stored(_)) => break,
            // Stored already (an earlier attempt whose answer was lost), a fence, or nothing
            // readable yet.
            Ok(Put::ConditionFailed) => match node.objects.get(&key).await {
                Ok(Some((found, _))) if found[..] == bytes[..] => break,
                Ok(Some((found, _))) => {
                    let reason = if is_fence(&found) {
                        StreamError::Sealed { key }
                    } else {
                        StreamError::Usurped { key }
                    };
                    log::error!("replica: {reason}");
                    node.counters.fenced.store(true, Ordering::Relaxed);
                    return Err(reason);
                }
                Ok(None) => "a window's key answered 412, then 404".to_owned(),
                Err(err) => err.to_string(),
            },
            Err(err) => err.to_string(),
        };
        failures += 1;
        node.counters.put_failures.fetch_add(1, Ordering::Relaxed);
        if failures == 1 || failures.is_power_of_two() {
            log::warn!("replica: storing {key} failed ({failures} times): {failure}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_PAUSES.1);
    }
    if failures > 0 {
        log::info!("replica: stored {key} after {failures} failures");
    }
    node.counters.windows.fetch_add(1, Ordering::Relaxed);
    node.counters
        .window_bytes
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(at)
}
