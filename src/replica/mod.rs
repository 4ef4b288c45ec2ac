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
mod objects;
mod take;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::cold::S3Settings;
use crate::config::ReplicationSettings;
use crate::store::{Landed, Landing, Position, StoreError, Stream, Volume};
use format::{Keys, Window, is_fence};
use objects::{ObjectError, Objects, Put};

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
}

impl ReplicaError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }
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
    ) -> Result<Arc<Self>, ReplicaError> {
        let extra = data_dir.join(Volume::file_name(volumes));
        if extra.exists() {
            return Err(ReplicaError::Refused(format!(
                "{} is beyond storage.volumes ({volumes}), which a replicated node keeps fixed",
                extra.display()
            )));
        }
        let objects = Objects::new(s3)?;
        let keys = Keys::new(&settings.prefix);
        let node = settings.node();
        let data_dir = data_dir.to_owned();
        let linger = Duration::from_millis(settings.commit_linger_ms);
        let max_window_bytes = settings.max_window_bytes;
        let (submissions, queued) = mpsc::unbounded_channel();
        let (started, taken) = std::sync::mpsc::channel();
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
                    let taken = async {
                        take::fix_volume_count(&objects, &keys, volumes).await?;
                        let inc = take::claim(&objects, &keys, &node).await?;
                        let mut taker = take::Taker::new(&objects, &keys, &node, inc);
                        let mut epochs = Vec::with_capacity(volumes);
                        for volume in 0..volumes {
                            epochs.push(taker.take(&data_dir, volume).await?);
                        }
                        log::info!("replica: took {volumes} volumes as {node} incarnation {inc}");
                        Ok::<_, ReplicaError>((inc, epochs))
                    };
                    match taken.await {
                        Ok((inc, epochs)) => {
                            let _ = started.send(Ok(()));
                            let writer = StreamWriter {
                                objects,
                                keys,
                                node,
                                inc,
                                next_seq: 1,
                                epochs,
                                linger,
                                max_window_bytes,
                                fenced: None,
                            };
                            writer.run(queued).await;
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
            put_retry: Duration::from_millis(settings.put_retry_ms),
        }))
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

/// First and longest pause between attempts to store a window.
const RETRY_PAUSES: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The writing end of an incarnation's stream.
struct StreamWriter {
    objects: Objects,
    keys: Keys,
    node: String,
    inc: u64,
    next_seq: u64,
    /// Each volume's epoch, written in its sections.
    epochs: Vec<u64>,
    linger: Duration,
    max_window_bytes: usize,
    /// Why the stream stopped for good: another node sealed it.
    fenced: Option<String>,
}

impl StreamWriter {
    /// Stores what the volumes submit, a window at a time, and answers each submitter once its
    /// window's outcome is known.
    async fn run(mut self, mut queued: mpsc::UnboundedReceiver<Submission>) {
        while let Some(first) = queued.recv().await {
            let mut bytes = first.redo.len();
            let mut window = vec![first];
            let deadline = tokio::time::Instant::now() + self.linger;
            while bytes < self.max_window_bytes {
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
            for submission in window {
                let _ = submission.reply.send(landed.clone());
            }
        }
    }

    /// Stores one window at the next seq, retrying the same bytes until the bucket answers.
    async fn store(&mut self, window: &[Submission]) -> Landed {
        if let Some(reason) = &self.fenced {
            return Err(reason.clone());
        }
        let at = Position {
            node: self.node.clone(),
            inc: self.inc,
            seq: self.next_seq,
        };
        let changes: Vec<(usize, u64, &[u8])> = window
            .iter()
            .map(|s| (s.volume, self.epochs[s.volume], &s.redo[..]))
            .collect();
        let bytes = Window::encode(&at, &changes);
        let key = self.keys.window(&at.node, at.inc, at.seq);
        let mut pause = RETRY_PAUSES.0;
        let mut failures = 0u32;
        loop {
            let failure = match self.objects.create(&key, &bytes).await {
                Ok(Put::Stored) => break,
                // Stored already (an earlier attempt whose answer was lost), a fence, or
                // nothing readable yet.
                Ok(Put::ConditionFailed) => match self.objects.get(&key).await {
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
                        self.fenced = Some(reason.clone());
                        return Err(reason);
                    }
                    Ok(None) => "a window's key answered 412, then 404".to_owned(),
                    Err(err) => err.to_string(),
                },
                Err(err) => err.to_string(),
            };
            failures += 1;
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
        Ok(at)
    }
}
