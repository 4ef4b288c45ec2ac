//! Replication: every write of a node's volumes lands in object storage before its answer, so
//! the bucket holds everything acknowledged and a node's disk is a cache of it.
//!
//! The volume is the unit: each has a manifest in the bucket (its owner, a snapshot and the
//! chain of stream segments since it, see [`format`]). A node writes one stream per
//! incarnation; each object of it is a window of what the node's volumes committed together,
//! created only where nothing is (`If-None-Match: *`), so a seq holds one window for ever. A
//! volume's write commits locally only once its window landed (see `store/replication.rs`).
//! At start the node claims a new incarnation and takes each volume ([`take`]): its local copy
//! is brought up to its history, the previous owner's stream is sealed with a fence (whose
//! writer then lands nothing more: it answers `503 unavailable` from then on), and the manifest
//! names the new owner (`If-Match`).

mod format;
mod maintenance;
mod take;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::cold::S3Settings;
use crate::cold::s3::{ObjectError, Objects, Put};
use crate::config::ReplicationSettings;
use crate::store::{
    Landed, Landing, LocalCopy, Position, ReplicaCounters, StoreError, Stream, Volume,
};
use format::{Keys, Manifest, Window, is_fence};

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
    /// What the bucket holds does not allow it.
    #[error("{0}")]
    Refused(String),
    /// The volume's history changed while it was read (its owner snapshotted and collected
    /// what it named): read it again.
    #[error("the volume's history changed while it was read: {0}")]
    HistoryMoved(String),
}

impl ReplicaError {
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

/// A volume's changes waiting for their window.
struct Submission {
    volume: usize,
    redo: Arc<[u8]>,
    reply: std::sync::mpsc::SyncSender<Landed>,
}

/// A node incarnation's stream, after its volumes were taken: stores windows in seq order, on
/// its own thread.
pub(crate) struct Replicator {
    submissions: mpsc::UnboundedSender<Submission>,
    put_retry: Duration,
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
    volumes: Vec<tokio::sync::Mutex<Held>>,
    /// Each volume's epoch as this incarnation took it, written in its sections.
    epochs: Vec<u64>,
    /// One snapshot or collection at a time.
    maintenance: tokio::sync::Mutex<maintenance::Unneeded>,
    snapshot_bytes: u64,
    snapshot_interval: Duration,
    gc_grace: Duration,
    counters: Arc<ReplicaCounters>,
}

impl Replicator {
    /// Takes the `volumes` volumes of `data_dir` for this node (see the module docs) and starts
    /// its stream. Blocks until the volumes are taken.
    ///
    /// # Errors
    /// [`ReplicaError`] when the bucket cannot be reached or refuses, or a local copy fails.
    pub(crate) fn start(
        settings: &ReplicationSettings,
        s3: &S3Settings,
        data_dir: &Path,
        volumes: usize,
        counters: Arc<ReplicaCounters>,
    ) -> Result<Arc<Self>, ReplicaError> {
        let extra = data_dir.join(Volume::file_name(volumes));
        if extra.exists() {
            return Err(ReplicaError::Refused(format!(
                "{} is beyond storage.volumes ({volumes}), which a replicated node keeps fixed",
                extra.display()
            )));
        }
        let objects = Objects::new(s3, Some(REQUEST_TIMEOUT))?;
        let settings = settings.clone();
        let data_dir = data_dir.to_owned();
        let (submissions, queued) = mpsc::unbounded_channel();
        let (started, taken) = std::sync::mpsc::channel();
        let put_retry = Duration::from_millis(settings.put_retry_ms);
        std::thread::Builder::new()
            .name("durability-replica".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = started.send(Err(ReplicaError::io(&data_dir, err)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match Node::take(objects, &settings, data_dir, volumes, counters).await {
                        Ok(node) => {
                            let _ = started.send(Ok(()));
                            tokio::spawn(node.clone().collect_garbage());
                            StreamWriter::new(node, &settings).run(queued).await;
                        }
                        Err(err) => {
                            let _ = started.send(Err(err));
                        }
                    }
                });
            })
            .map_err(|err| ReplicaError::io(Path::new("durability-replica"), err))?;
        taken
            .recv()
            .map_err(|_| ReplicaError::Refused("the replica's thread stopped".into()))??;
        Ok(Arc::new(Self {
            submissions,
            put_retry,
        }))
    }
}

impl Node {
    /// Claims an incarnation and takes every volume (see [`take`]).
    async fn take(
        objects: Objects,
        settings: &ReplicationSettings,
        data_dir: PathBuf,
        volumes: usize,
        counters: Arc<ReplicaCounters>,
    ) -> Result<Arc<Self>, ReplicaError> {
        let keys = Keys::new(&settings.prefix);
        let node = settings.node();
        take::fix_volume_count(&objects, &keys, volumes).await?;
        let inc = take::claim(&objects, &keys, &node).await?;
        let mut held = Vec::with_capacity(volumes);
        let mut epochs = Vec::with_capacity(volumes);
        {
            let mut taker = take::Taker::new(&objects, &keys, &node, inc);
            for volume in 0..volumes {
                let (manifest, etag) = taker.take(&data_dir, volume).await?;
                epochs.push(manifest.epoch);
                held.push(tokio::sync::Mutex::new(Held {
                    manifest,
                    etag,
                    since_snapshot: 0,
                    snapshot_at: Instant::now(),
                    snapshotting: false,
                }));
            }
        }
        log::info!("replica: took {volumes} volumes as {node} incarnation {inc}");
        Ok(Arc::new(Self {
            objects,
            keys,
            node,
            inc,
            data_dir,
            volumes: held,
            epochs,
            maintenance: tokio::sync::Mutex::default(),
            snapshot_bytes: settings.snapshot_bytes,
            snapshot_interval: Duration::from_millis(settings.snapshot_interval_ms),
            gc_grace: Duration::from_millis(settings.gc_grace_ms),
            counters,
        }))
    }

    /// Counts `bytes` landed for volume `volume`, and starts its snapshot when one is due.
    async fn landed(self: &Arc<Self>, volume: usize, bytes: usize) {
        let mut held = self.volumes[volume].lock().await;
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
    fn land(&self, volume: usize, redo: Arc<[u8]>) -> Landing {
        let (reply, outcome) = std::sync::mpsc::sync_channel(1);
        let stopped = || Landing::Known(Err("the replica's stream stopped".into()));
        if self
            .submissions
            .send(Submission {
                volume,
                redo,
                reply,
            })
            .is_err()
        {
            return stopped();
        }
        match outcome.recv_timeout(self.put_retry) {
            Ok(landed) => Landing::Known(landed),
            Err(RecvTimeoutError::Timeout) => Landing::Pending(outcome),
            Err(RecvTimeoutError::Disconnected) => stopped(),
        }
    }
}

/// Longest wait for one answer of the bucket: a window's PUT is retried after it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// First and longest pause between attempts to store a window.
const RETRY_PAUSES: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The writing end of an incarnation's stream.
struct StreamWriter {
    node: Arc<Node>,
    next_seq: u64,
    linger: Duration,
    max_window_bytes: usize,
    /// Why the stream stopped for good: another node sealed it.
    fenced: Option<String>,
}

impl StreamWriter {
    fn new(node: Arc<Node>, settings: &ReplicationSettings) -> Self {
        Self {
            node,
            next_seq: 1,
            linger: Duration::from_millis(settings.commit_linger_ms),
            max_window_bytes: settings.max_window_bytes,
            fenced: None,
        }
    }

    /// Stores what the volumes submit, a window at a time, and answers each submitter once its
    /// window's outcome is known.
    async fn run(mut self, mut queued: mpsc::UnboundedReceiver<Submission>) {
        while let Some(first) = queued.recv().await {
            let mut bytes = first.redo.len();
            let mut window = vec![first];
            let deadline = tokio::time::Instant::now() + self.linger;
            // A volume has one write in flight at a time: once every volume submitted, no
            // more can come.
            while bytes < self.max_window_bytes && window.len() < self.node.epochs.len() {
                let next = match queued.try_recv() {
                    Ok(next) => Some(next),
                    Err(_) => tokio::time::timeout_at(deadline, queued.recv())
                        .await
                        .ok()
                        .flatten(),
                };
                let Some(next) = next else { break };
                bytes += next.redo.len();
                window.push(next);
            }
            let landed = self.store(&window).await;
            for submission in &window {
                let _ = submission.reply.send(landed.clone());
            }
            if landed.is_ok() {
                for submission in &window {
                    self.node
                        .landed(submission.volume, submission.redo.len())
                        .await;
                }
            }
        }
    }

    /// Stores one window at the next seq, retrying the same bytes until the bucket answers.
    async fn store(&mut self, window: &[Submission]) -> Landed {
        if let Some(reason) = &self.fenced {
            return Err(reason.clone());
        }
        let node = &self.node;
        let at = Position {
            node: node.node.clone(),
            inc: node.inc,
            seq: self.next_seq,
        };
        let changes: Vec<(usize, u64, &[u8])> = window
            .iter()
            .map(|s| (s.volume, node.epochs[s.volume], &s.redo[..]))
            .collect();
        let bytes = Window::encode(&at, &changes);
        let key = node.keys.window(&at.node, at.inc, at.seq);
        let mut pause = RETRY_PAUSES.0;
        let mut failures = 0u32;
        loop {
            let failure = match node.objects.create(&key, &bytes).await {
                Ok(Put::Stored(_)) => break,
                // Stored already (an earlier attempt whose answer was lost), a fence, or
                // nothing readable yet.
                Ok(Put::ConditionFailed) => match node.objects.get(&key).await {
                    Ok(Some((found, _))) if found == bytes => break,
                    Ok(Some((found, _))) => {
                        let reason = if is_fence(&found) {
                            format!(
                                "another node took this node's volumes (its stream is sealed at \
                                 {key}); this node accepts no more writes"
                            )
                        } else {
                            format!("{key} holds another writer's window")
                        };
                        log::error!("replica: {reason}");
                        node.counters.fenced.store(true, Ordering::Relaxed);
                        self.fenced = Some(reason.clone());
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
        self.next_seq += 1;
        node.counters.windows.fetch_add(1, Ordering::Relaxed);
        node.counters
            .window_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(at)
    }
}
