//! Keeping the bucket small: snapshots shorten a volume's history, and garbage collection
//! deletes what no history needs any more (windows, their batches, snapshots).
//!
//! A volume is snapshotted when the changes it landed since its last snapshot pass
//! `replication.snapshot_bytes`, or `replication.snapshot_interval_ms` passed since with some
//! landed: a consistent copy of its file is stored create-only, and its manifest then starts
//! from that copy with the chain after the copy's position. Each new manifest is followed by a
//! collection: windows that no manifest's chain names, and snapshots that no manifest names,
//! are deleted once they have been unneeded for `replication.gc_grace_ms` (a taker may still
//! be reading what an older manifest named). Fences and the claims of incarnations (seq 0)
//! are never deleted: a deleted fence would let a stale writer land a window at its seq that
//! no history will ever replay, and answer it as acknowledged.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::format::{Manifest, Snapshot, is_fence};
use super::{Node, ReplicaError};
use crate::cold::s3::Put;
use crate::store::{Position, StoreError};

/// Longest wait of a snapshot for the landing of the newest window its copy holds.
const LANDING_WAIT: Duration = Duration::from_secs(30);
/// How often that wait looks again.
const LANDING_POLL: Duration = Duration::from_millis(5);

/// What a collection found unneeded, and since when: deleted once unneeded for the grace time.
#[derive(Default)]
pub(super) struct Unneeded {
    since: HashMap<String, Instant>,
    /// When the last collection ran.
    collected_at: Option<Instant>,
    /// Window keys found to hold fences: kept for ever, and not read again.
    fences: HashSet<String>,
}

impl Node {
    /// Snapshots volume `volume`, then collects garbage unless a collection ran within half
    /// the grace time (what a collection finds is deleted only a grace time later anyway, and
    /// one reads every volume's manifest); logs what fails (the next one retries).
    pub(super) async fn snapshot_and_collect(self: Arc<Self>, volume: usize) {
        let mut unneeded = self.maintenance.lock().await;
        if let Err(err) = self.snapshot(volume).await {
            log::warn!("replica: snapshotting volume {volume} failed: {err}");
        }
        if let Some(held) = self.volumes[volume].lock().await.as_mut() {
            held.snapshotting = false;
        }
        if unneeded
            .collected_at
            .is_none_or(|at| at.elapsed() >= self.gc_grace / 2)
        {
            self.collect_logged(&mut unneeded).await;
        }
    }

    /// Collects garbage (see the module docs); logs what fails (the next one retries).
    pub(super) async fn collect_garbage(self: Arc<Self>) {
        let mut unneeded = self.maintenance.lock().await;
        self.collect_logged(&mut unneeded).await;
    }

    async fn collect_logged(&self, unneeded: &mut Unneeded) {
        unneeded.collected_at = Some(Instant::now());
        if let Err(err) = self.collect(unneeded).await {
            log::warn!("replica: garbage collection failed: {err}");
        }
    }

    /// Waits until this incarnation's window `position` landed: a copy commits its groups
    /// before their window lands, and a snapshot must hold landed writes only.
    pub(super) async fn wait_for_landing(&self, position: &Position) -> Result<(), ReplicaError> {
        if position.node != self.node || position.inc != self.inc {
            return Ok(());
        }
        let waited = tokio::time::Instant::now();
        while self.landed.load(Ordering::SeqCst) < position.seq {
            if self.counters.fenced() || waited.elapsed() >= LANDING_WAIT {
                return Err(ReplicaError::NotLanded { seq: position.seq });
            }
            tokio::time::sleep(LANDING_POLL).await;
        }
        Ok(())
    }

    /// Shortens volume `volume`'s history: where it changed nothing since its snapshot, its
    /// chain starts after the newest window landed, with no new snapshot; else a copy of it is
    /// stored and the manifest starts from that (its chain starting after the newest window
    /// landed too when the volume changed nothing since the copy).
    async fn snapshot(&self, volume: usize) -> Result<(), ReplicaError> {
        if self.advance(volume, None).await? {
            return Ok(());
        }
        let path = self.data_dir.join(crate::store::Volume::file_name(volume));
        let copied = tokio::task::spawn_blocking({
            let path = path.clone();
            move || super::copy_of(&path)
        })
        .await
        .map_err(|_| ReplicaError::Stopped("snapshot task"))?;
        if let Err(ReplicaError::Store(StoreError::Corrupted { reason })) = &copied {
            // Its damage must not reach the bucket; the bucket holds its whole history.
            crate::store::mark_damaged_file(&path, reason);
            self.heal(volume);
        }
        let (position, bytes) = copied?;
        let Some(position) = position else {
            // A copy that never held a window: no window of its history holds a change of the
            // volume, whatever segments its chain names (an empty volume taken over).
            self.advance_empty(volume).await?;
            return Ok(());
        };
        self.wait_for_landing(&position).await?;
        let key = self.keys.snapshot(volume, &position);
        self.objects.create(&key, &bytes).await?;
        let snapshot = Snapshot { key, position };
        if !self.advance(volume, Some(&snapshot)).await? {
            self.start_at(volume, snapshot).await?;
        }
        log::info!(
            "replica: volume {volume} snapshotted ({} bytes)",
            bytes.len()
        );
        Ok(())
    }

    /// Starts volume `volume`'s history at `snapshot`, with the chain after its position.
    async fn start_at(&self, volume: usize, snapshot: Snapshot) -> Result<(), ReplicaError> {
        let mut held = self.volumes[volume].lock().await;
        let Some(held) = held.as_mut() else {
            return Ok(());
        };
        let Some(chain) = held.manifest.chain_after(&snapshot.position) else {
            return Err(ReplicaError::OffHistory {
                volume,
                position: snapshot.position,
            });
        };
        let next = Manifest {
            version: held.manifest.version + 1,
            snapshot: Some(snapshot),
            chain,
            ..held.manifest.clone()
        };
        self.replace_manifest(volume, held, next).await
    }

    /// Starts volume `volume`'s history at `snapshot` (none: the one its manifest names) with
    /// a chain of this incarnation's segment alone, from the window after the newest landed,
    /// when no window of the history after the snapshot holds a change of the volume. Answers
    /// whether it did (or the volume is not held here any more).
    async fn advance(
        &self,
        volume: usize,
        snapshot: Option<&Snapshot>,
    ) -> Result<bool, ReplicaError> {
        // Landed first: a change submitted after this read joins a window past it.
        let landed = self.landed.load(Ordering::SeqCst);
        let submitted = self.submitted[volume].load(Ordering::SeqCst);
        let mut held = self.volumes[volume].lock().await;
        let Some(held) = held.as_mut() else {
            return Ok(true);
        };
        let Some(own) = held
            .manifest
            .chain
            .last()
            .filter(|own| own.open_of(&self.node, self.inc))
        else {
            return Ok(false);
        };
        let from = match snapshot {
            // A copy holds every window through its position; those after it changed nothing
            // of the volume, but for this incarnation's own windows since.
            Some(snapshot) => &snapshot.position,
            None => {
                // Without a new copy, only a chain of this incarnation's segment alone may be
                // skipped: an earlier segment holds changes the snapshot lacks.
                if held.manifest.chain.len() > 1 {
                    return Ok(false);
                }
                match &held.manifest.snapshot {
                    Some(snapshot) => &snapshot.position,
                    None if submitted < own.first => {
                        return self.start_chain_at(volume, held, None, landed + 1).await;
                    }
                    None => return Ok(false),
                }
            }
        };
        let quiet = if from.node == self.node && from.inc == self.inc {
            submitted <= from.seq
        } else {
            submitted < own.first
        };
        if !quiet {
            return Ok(false);
        }
        let snapshot = snapshot.or(held.manifest.snapshot.as_ref()).cloned();
        self.start_chain_at(volume, held, snapshot, landed + 1)
            .await
    }

    /// Starts the history of volume `volume`, which holds no change at all (no snapshot, and a
    /// copy that never held a window), after the newest window landed.
    async fn advance_empty(&self, volume: usize) -> Result<(), ReplicaError> {
        // Landed first: a change submitted after this read joins a window past it.
        let landed = self.landed.load(Ordering::SeqCst);
        let submitted = self.submitted[volume].load(Ordering::SeqCst);
        let mut held = self.volumes[volume].lock().await;
        let Some(held) = held.as_mut() else {
            return Ok(());
        };
        let quiet = held.manifest.snapshot.is_none()
            && held
                .manifest
                .chain
                .last()
                .is_some_and(|own| own.open_of(&self.node, self.inc) && submitted < own.first);
        if quiet {
            self.start_chain_at(volume, held, None, landed + 1).await?;
        }
        Ok(())
    }

    /// Writes volume `volume`'s manifest with `snapshot` and this incarnation's segment alone
    /// from window `first` (where it starts later than now).
    async fn start_chain_at(
        &self,
        volume: usize,
        held: &mut super::Held,
        snapshot: Option<Snapshot>,
        first: u64,
    ) -> Result<bool, ReplicaError> {
        let Some(own) = held.manifest.chain.last() else {
            return Ok(false);
        };
        let own = super::format::Segment {
            first: first.max(own.first),
            ..own.clone()
        };
        if snapshot == held.manifest.snapshot && held.manifest.chain == [own.clone()] {
            return Ok(true);
        }
        let next = Manifest {
            version: held.manifest.version + 1,
            snapshot,
            chain: vec![own],
            ..held.manifest.clone()
        };
        self.replace_manifest(volume, held, next).await?;
        Ok(true)
    }

    /// Replaces volume `volume`'s manifest by `next` (`If-Match` the one `held` last wrote).
    async fn replace_manifest(
        &self,
        volume: usize,
        held: &mut super::Held,
        next: Manifest,
    ) -> Result<(), ReplicaError> {
        match self
            .objects
            .replace(&self.keys.manifest(volume), &next.encode(), &held.etag)
            .await?
        {
            Put::Stored(etag) => {
                if next.snapshot != held.manifest.snapshot {
                    self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
                }
                held.manifest = next;
                held.etag = etag;
                held.since_snapshot = 0;
                held.snapshot_at = Instant::now();
                Ok(())
            }
            Put::ConditionFailed => Err(ReplicaError::Replaced { volume }),
        }
    }

    /// Deletes the windows and snapshots no manifest needs, once unneeded for the grace time.
    /// Listings come before manifests: an object listed was stored before the manifests read
    /// after it, so a manifest that needs it is among them.
    async fn collect(&self, unneeded: &mut Unneeded) -> Result<(), ReplicaError> {
        let windows = self.objects.keys(&self.keys.streams()).await?;
        let batches = self.objects.keys(&self.keys.batches()).await?;
        let mut snapshots = Vec::new();
        for volume in 0..self.volumes.len() {
            snapshots.extend(self.objects.keys(&self.keys.snapshots(volume)).await?);
        }
        let mut needed_snapshots = HashSet::new();
        let mut needed_from: HashMap<(String, u64), u64> = HashMap::new();
        for volume in 0..self.volumes.len() {
            let key = self.keys.manifest(volume);
            let Some((bytes, _)) = self.objects.get(&key).await? else {
                continue;
            };
            let manifest =
                Manifest::decode(&bytes).map_err(|why| ReplicaError::undecodable(&key, why))?;
            if let Some(snapshot) = manifest.snapshot {
                needed_snapshots.insert(snapshot.key);
            }
            for segment in manifest.chain {
                let from = needed_from
                    .entry((segment.node, segment.inc))
                    .or_insert(segment.first);
                *from = (*from).min(segment.first);
            }
        }
        let mut candidates = Vec::new();
        for key in windows {
            let Some((node, inc, seq)) = self.keys.parse_window(&key) else {
                continue;
            };
            let needed = needed_from
                .get(&(node.to_owned(), inc))
                .is_some_and(|&from| seq >= from);
            if seq > 0 && !needed && !unneeded.fences.contains(&key) {
                candidates.push(key);
            }
        }
        // A batch goes once no history needs its last window.
        candidates.extend(batches.into_iter().filter(|key| {
            self.keys
                .parse_batch(key)
                .is_some_and(|(node, inc, _, last)| {
                    needed_from
                        .get(&(node.to_owned(), inc))
                        .is_none_or(|&from| last < from)
                })
        }));
        candidates.extend(
            snapshots
                .into_iter()
                .filter(|key| !needed_snapshots.contains(key)),
        );
        let now = Instant::now();
        let grace = self.gc_grace;
        let candidates: HashSet<String> = candidates.into_iter().collect();
        unneeded.since.retain(|key, _| candidates.contains(key));
        let mut deleted = 0;
        for key in candidates {
            let since = *unneeded.since.entry(key.clone()).or_insert(now);
            if now.duration_since(since) < grace {
                continue;
            }
            // Only a window's key can hold a fence; fences are never deleted.
            if self.keys.parse_window(&key).is_some() {
                let head = self.objects.head_bytes(&key, 64).await?;
                if head.as_deref().is_none_or(is_fence) {
                    unneeded.since.remove(&key);
                    unneeded.fences.insert(key);
                    continue;
                }
            }
            self.objects.delete(&key).await?;
            self.counters.deleted.fetch_add(1, Ordering::Relaxed);
            unneeded.since.remove(&key);
            deleted += 1;
        }
        if deleted > 0 {
            log::info!("replica: garbage collection deleted {deleted} objects");
        }
        Ok(())
    }
}
