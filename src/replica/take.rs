//! Taking a node's volumes at start: claim a new incarnation, bring each volume's local copy
//! up to its history in the bucket, seal the previous owner's stream, and record the new owner.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{
    Batch, Keys, Manifest, Owner, Resume, Segment, Snapshot, StreamObject, Window, decode, fence,
};
use super::{MAX_PUTS_IN_FLIGHT, ReplicaError};
use crate::cold::s3::{Objects, Put};
use crate::store::{LocalCopy, Position, Volume};

/// Attempts at taking a volume whose history its owner keeps changing meanwhile.
pub(super) const MAX_TAKE_ATTEMPTS: u32 = 5;

/// Most bytes of windows kept in memory while the volumes are taken, so the volumes that share
/// a stream read each window once.
const CACHE_BYTES: usize = 256 << 20;

/// Windows read at once ahead of the one replayed: a replay waits for the bucket's latency
/// once per read-ahead, not once per window.
const READ_AHEAD: u64 = 16;

/// Batches of windows (see `format.rs`) read at once, where the stream has them.
const BATCHES_AHEAD: usize = 4;

/// Windows fenced at once after a fence lost a race to a landing window: more than a live
/// writer can land in the time the fences take, so the take does not chase its stream.
const FENCE_AHEAD: u64 = 2 * MAX_PUTS_IN_FLIGHT as u64;

/// A volume whose copy holds its whole history, and what its manifest is to say.
pub(super) enum Prepared {
    /// This manifest, written over the one with ETag `over`.
    Write { manifest: Manifest, over: String },
    /// Written already (the volume's first use), with its ETag.
    Written(Manifest, String),
}

/// A volume taken: its manifest as written, with its ETag, and the windows replayed.
pub(super) struct Taken {
    pub volume: usize,
    pub manifest: Manifest,
    pub etag: String,
    pub replayed: u64,
}

/// A batch of windows found in the bucket.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Listed {
    first: u64,
    last: u64,
    key: String,
}

/// A node incarnation taking its volumes.
pub(super) struct Taker<'a> {
    pub objects: &'a Objects,
    pub keys: &'a Keys,
    pub node: &'a str,
    pub inc: u64,
    /// The first window of this incarnation's stream that may hold the volumes taken.
    first: u64,
    /// Where each stream taken from another incarnation was sealed (by a fence: never where a
    /// segment of it was released).
    seals: HashMap<(String, u64), u64>,
    /// Streams whose writer landed a window where this take tried to fence it: they are live.
    raced: HashSet<(String, u64)>,
    /// Streams the volume being prepared fenced, whose seals hold only if its history did not
    /// move meanwhile (see [`Taker::moved`]).
    fenced: Vec<(String, u64)>,
    cache: HashMap<String, Arc<StreamObject>>,
    cached_bytes: usize,
    /// Windows read ahead of the replay, with their size.
    ahead: HashMap<String, (Arc<StreamObject>, usize)>,
    /// Windows the last reads ahead found absent, until the replay reaches them.
    absent: HashSet<String>,
    /// Manifests read at once for the volumes to take, each used by its first attempt.
    manifests: HashMap<usize, Option<(Vec<u8>, String)>>,
    /// Each stream's batches as listed once, by first seq.
    batches: HashMap<(String, u64), Vec<Listed>>,
    /// Windows the last [`Taker::take`] replayed.
    pub replayed: u64,
    /// Where this incarnation's own stream landed up to, when it rebuilds a volume it holds:
    /// its open segment is replayed up to there (see [`Taker::prepare`]).
    pub own_end: Option<u64>,
}

/// Checks that the bucket's data is spread over `volumes` volumes, recording it at first use.
pub(super) async fn fix_volume_count(
    objects: &Objects,
    keys: &Keys,
    volumes: usize,
) -> Result<(), ReplicaError> {
    let count = volumes.to_string();
    let found = match objects.get(&keys.volumes()).await? {
        Some((bytes, _)) => bytes,
        None => match objects.create(&keys.volumes(), count.as_bytes()).await? {
            Put::Stored(_) => return Ok(()),
            Put::ConditionFailed => objects
                .get(&keys.volumes())
                .await?
                .map(|(bytes, _)| bytes)
                .unwrap_or_default(),
        },
    };
    if found == count.as_bytes() {
        return Ok(());
    }
    Err(ReplicaError::Unsuited(format!(
        "the bucket's data is spread over {} volumes ({}), and storage.volumes is {volumes}: \
         the count is fixed when a bucket is first used",
        String::from_utf8_lossy(&found),
        keys.volumes()
    )))
}

/// Checks that the bucket's prefix belongs to cluster `cluster` (`None`: to no cluster, a single
/// node), recording the name at a cluster's first use: two clusters writing under one prefix
/// would seal each other's streams.
pub(super) async fn fix_cluster(
    objects: &Objects,
    keys: &Keys,
    cluster: Option<&str>,
) -> Result<(), ReplicaError> {
    let key = keys.cluster();
    let mut found = objects.get(&key).await?.map(|(bytes, _)| bytes);
    if found.is_none()
        && let Some(name) = cluster
    {
        found = match objects.create(&key, name.as_bytes()).await? {
            Put::Stored(_) => return Ok(()),
            Put::ConditionFailed => objects.get(&key).await?.map(|(bytes, _)| bytes),
        };
    }
    let found = found.map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    match (found.as_deref(), cluster) {
        (None, None) => Ok(()),
        (Some(found), Some(name)) if found == name => Ok(()),
        (Some(found), Some(name)) => Err(ReplicaError::Unsuited(format!(
            "the bucket's prefix belongs to cluster \"{found}\" ({key}), and this node's \
             cluster.name is \"{name}\": give each cluster a replication.prefix of its own"
        ))),
        (Some(found), None) => Err(ReplicaError::Unsuited(format!(
            "the bucket's prefix belongs to cluster \"{found}\" ({key}), and this node is in \
             no cluster: give it that cluster's settings, or a replication.prefix of its own"
        ))),
        (None, Some(_)) => Err(ReplicaError::Damaged {
            key,
            reason: "vanished after it was written".to_owned(),
        }),
    }
}

/// Claims a new incarnation of `node`: one past the largest listed, or the next free.
pub(super) async fn claim(objects: &Objects, keys: &Keys, node: &str) -> Result<u64, ReplicaError> {
    let listed = objects.folders(&keys.incarnations(node)).await?;
    let mut inc = listed
        .iter()
        .filter_map(|folder| folder.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    loop {
        let start = Position {
            node: node.to_owned(),
            inc,
            seq: 0,
        };
        match objects
            .create(&keys.window(node, inc, 0), &Window::encode(&start, &[]))
            .await?
        {
            Put::Stored(_) => return Ok(inc),
            Put::ConditionFailed => inc += 1,
        }
    }
}

impl<'a> Taker<'a> {
    pub(super) fn new(
        objects: &'a Objects,
        keys: &'a Keys,
        node: &'a str,
        inc: u64,
        first: u64,
    ) -> Self {
        Self {
            objects,
            keys,
            node,
            inc,
            first,
            seals: HashMap::new(),
            raced: HashSet::new(),
            fenced: Vec::new(),
            absent: HashSet::new(),
            cache: HashMap::new(),
            cached_bytes: 0,
            ahead: HashMap::new(),
            manifests: HashMap::new(),
            batches: HashMap::new(),
            replayed: 0,
            own_end: None,
        }
    }

    fn owner(&self) -> Owner {
        Owner {
            node: self.node.to_owned(),
            inc: self.inc,
        }
    }

    /// Reads the manifests of `volumes` at once, for their takes: a failover waits for the
    /// bucket's latency once instead of once per volume. A manifest replaced meanwhile makes
    /// its take read it again (its replacement is conditional).
    async fn read_manifests(&mut self, volumes: &[usize]) -> Result<(), ReplicaError> {
        let objects = self.objects;
        let keys: Vec<String> = volumes
            .iter()
            .map(|&volume| self.keys.manifest(volume))
            .collect();
        let read = futures_util::future::join_all(keys.iter().map(|key| objects.get(key))).await;
        for (&volume, found) in volumes.iter().zip(read) {
            self.manifests.insert(volume, found?);
        }
        Ok(())
    }

    /// Makes the copy of volume `volume` in `data_dir` hold its whole history and this
    /// incarnation its owner (see [`Taker::take_all`]). Answers the volume's manifest as
    /// written, and its ETag; [`Taker::replayed`] tells the windows replayed.
    pub(super) async fn take(
        &mut self,
        data_dir: &Path,
        volume: usize,
    ) -> Result<(Manifest, String), ReplicaError> {
        let [taken] = <[Taken; 1]>::try_from(self.take_all(data_dir, &[volume]).await?)
            .unwrap_or_else(|_| unreachable!("one volume taken"));
        self.replayed = taken.replayed;
        Ok((taken.manifest, taken.etag))
    }

    /// Makes the copies of `volumes` in `data_dir` hold their whole histories and this
    /// incarnation their owner. The manifests are written at once, so that a failover waits
    /// for the bucket's latency once instead of once per volume. A volume whose history moved
    /// while it was taken (its owner snapshotted and collected what it named, or replaced its
    /// manifest before this take wrote it) is taken again whole, up to `MAX_TAKE_ATTEMPTS`
    /// times: the one place a take is retried.
    pub(super) async fn take_all(
        &mut self,
        data_dir: &Path,
        volumes: &[usize],
    ) -> Result<Vec<Taken>, ReplicaError> {
        self.read_manifests(volumes).await?;
        let mut taken = Vec::with_capacity(volumes.len());
        let mut pending = volumes.to_vec();
        for attempt in 0.. {
            let retry = |err: &ReplicaError| {
                let moved = matches!(err, ReplicaError::HistoryMoved { .. });
                if moved && attempt < MAX_TAKE_ATTEMPTS {
                    log::info!("replica: {err}; reading its history again");
                }
                moved && attempt < MAX_TAKE_ATTEMPTS
            };
            let mut moved = Vec::new();
            let mut prepared = Vec::with_capacity(pending.len());
            for &volume in &pending {
                self.replayed = 0;
                match self.prepare(data_dir, volume).await {
                    Ok(ready) => prepared.push((volume, ready, self.replayed)),
                    Err(err) if retry(&err) => moved.push(volume),
                    Err(err) => return Err(err),
                }
            }
            let this = &*self;
            let written = futures_util::future::join_all(prepared.into_iter().map(
                |(volume, ready, replayed)| async move {
                    (volume, this.write(volume, ready).await, replayed)
                },
            ))
            .await;
            for (volume, written, replayed) in written {
                match written {
                    Ok((manifest, etag)) => taken.push(Taken {
                        volume,
                        manifest,
                        etag,
                        replayed,
                    }),
                    Err(err) if retry(&err) => moved.push(volume),
                    Err(err) => return Err(err),
                }
            }
            if moved.is_empty() {
                break;
            }
            pending = moved;
        }
        Ok(taken)
    }

    /// Writes the manifest of volume `volume` as [`Taker::prepare`] left it, answering it
    /// with its ETag.
    async fn write(
        &self,
        volume: usize,
        prepared: Prepared,
    ) -> Result<(Manifest, String), ReplicaError> {
        match prepared {
            Prepared::Write { manifest, over } => {
                self.write_manifest(volume, manifest, Some(&over)).await
            }
            Prepared::Written(manifest, etag) => Ok((manifest, etag)),
        }
    }

    /// Brings volume `volume`'s copy up to its history, up to writing its manifest, which
    /// [`Taker::write`] does: [`ReplicaError::HistoryMoved`] when the volume's
    /// history changed while it was read (its owner snapshotted, and its collection deleted a
    /// window the history named).
    async fn prepare(&mut self, data_dir: &Path, volume: usize) -> Result<Prepared, ReplicaError> {
        let path = data_dir.join(Volume::file_name(volume));
        // A copy found damaged (a malformed page, a hole, lost commits) is never resumed: its
        // whole history is in the bucket.
        if crate::store::damage_mark_path(&path).exists() {
            set_aside(&path, "found damaged")?;
        }
        let mut local = LocalCopy::open(&path)?;
        self.fenced.clear();
        let manifest_key = self.keys.manifest(volume);
        let found = match self.manifests.remove(&volume) {
            Some(found) => found,
            None => self.objects.get(&manifest_key).await?,
        };
        let Some((bytes, etag)) = found else {
            let (manifest, etag) = self.first_use(volume, &path, local).await?;
            return Ok(Prepared::Written(manifest, etag));
        };
        let manifest = Manifest::decode(&bytes)
            .map_err(|why| ReplicaError::undecodable(&manifest_key, why))?;
        let resume = match manifest.resume(local.position()?.as_ref()) {
            Some(resume) if self.holds_window(&manifest, &resume).await? => Some(resume),
            _ => None,
        };
        let resume = match resume {
            Some(resume) => resume,
            None => {
                let fresh = !local.holds_data()?;
                local.close()?;
                if fresh {
                    remove_copy(&path)?;
                } else {
                    set_aside(&path, "not on the volume's history in the bucket")?;
                }
                if let Some(snapshot) = &manifest.snapshot {
                    let (bytes, _) = self.objects.get(&snapshot.key).await?.ok_or_else(|| {
                        ReplicaError::Damaged {
                            key: snapshot.key.clone(),
                            reason: "the volume's snapshot is missing".to_owned(),
                        }
                    })?;
                    std::fs::write(&path, bytes).map_err(|err| ReplicaError::io(&path, err))?;
                }
                local = LocalCopy::open(&path)?;
                Resume::Start
            }
        };
        let mut chain = manifest.chain.clone();
        let (first, mut after) = match resume {
            Resume::Start => (0, None),
            Resume::After { segment, position } => (segment, Some(position.seq)),
        };
        // A take of this incarnation's that wrote the manifest but failed after (a lost
        // answer, a volume of the same take that failed) left this stream's open segment last:
        // it is kept as it is (the volume took no write since), never replayed, which would seal
        // this node's own stream. A rebuild replays it up to where the stream landed.
        let own_open = chain
            .last()
            .is_some_and(|segment| segment.open_of(self.node, self.inc));
        let replayed = chain.len() - usize::from(own_open && self.own_end.is_none());
        for segment in chain[..replayed].iter_mut().skip(first) {
            let start = after.take().map_or(segment.first, |seq| seq + 1);
            let own = segment.open_of(self.node, self.inc);
            if own {
                segment.end = self.own_end;
            }
            let replayed = self.replay(volume, &mut local, segment, start).await;
            if own {
                segment.end = None;
            }
            if let Err(err) = replayed {
                if self.moved(&manifest_key, &etag).await? {
                    log::debug!(
                        "replica: volume {volume}'s replay failed ({err}) as its history moved"
                    );
                    return Err(ReplicaError::HistoryMoved { volume });
                }
                return Err(err);
            }
        }
        if !self.fenced.is_empty() && self.moved(&manifest_key, &etag).await? {
            return Err(ReplicaError::HistoryMoved { volume });
        }
        chain.retain(|segment| segment.end != Some(segment.first));
        if !own_open {
            chain.push(self.own_segment());
        }
        let next = Manifest {
            version: manifest.version + 1,
            epoch: manifest.epoch + 1,
            owner: self.owner(),
            snapshot: manifest.snapshot.clone(),
            chain,
        };
        local.close()?;
        Ok(Prepared::Write {
            manifest: next,
            over: etag,
        })
    }

    /// Whether the manifest at `key` is no longer the one with ETag `etag` that the volume's
    /// history was read from. If so, the seals of the streams fenced while it was read are
    /// forgotten: a window found absent may have been collected by its owner after the history
    /// moved on, and a fence created over it seals nothing (its writer passed it long ago).
    /// The windows a history names are collected only once no manifest names them, so a seal
    /// found in a history that did not move holds.
    async fn moved(&mut self, key: &str, etag: &str) -> Result<bool, ReplicaError> {
        let now = self.objects.get(key).await?;
        let moved = now.is_some_and(|(_, now)| now != etag);
        if moved {
            for stream in self.fenced.drain(..) {
                self.seals.remove(&stream);
            }
        }
        Ok(moved)
    }

    /// Whether every window up to the one a copy resumes after is in the bucket. A copy commits
    /// a group before its window lands (it is answered only after): one whose node stopped
    /// first may hold a window that never landed, or one stored while a window before it was
    /// not (windows are stored several at a time), and the bucket's history then ends before
    /// it. Only an open segment can end so (a sealed one ends at its first absent window), and
    /// only the windows that may have been stored at once with it need a look.
    async fn holds_window(
        &mut self,
        manifest: &Manifest,
        resume: &Resume,
    ) -> Result<bool, ReplicaError> {
        let Resume::After { segment, position } = resume else {
            return Ok(true);
        };
        let segment = &manifest.chain[*segment];
        if segment.end.is_some() {
            return Ok(true);
        }
        // Windows before the segment's first are in the volume's snapshot (and may be deleted).
        let oldest = (position.seq + 1)
            .saturating_sub(MAX_PUTS_IN_FLIGHT as u64)
            .max(segment.first);
        for seq in oldest..=position.seq {
            let key = self.keys.window(&position.node, position.inc, seq);
            if !matches!(
                self.fetch(&key).await?.as_deref(),
                Some(StreamObject::Window(_))
            ) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// This incarnation's stream, open, as a segment of a volume's history.
    fn own_segment(&self) -> Segment {
        Segment {
            node: self.node.to_owned(),
            inc: self.inc,
            first: self.first,
            end: None,
        }
    }

    /// Writes volume `volume`'s `manifest` over the one with ETag `over` (none: where there is
    /// none), and answers it with its new ETag.
    async fn write_manifest(
        &self,
        volume: usize,
        manifest: Manifest,
        over: Option<&str>,
    ) -> Result<(Manifest, String), ReplicaError> {
        let key = self.keys.manifest(volume);
        let bytes = manifest.encode();
        let written = match over {
            Some(etag) => self.objects.replace(&key, &bytes, etag).await?,
            None => self.objects.create(&key, &bytes).await?,
        };
        match written {
            Put::Stored(etag) => Ok((manifest, etag)),
            Put::ConditionFailed => Err(ReplicaError::HistoryMoved { volume }),
        }
    }

    /// A volume the bucket has no history of: its history starts here, from a snapshot of the
    /// local copy when that holds data (a node moving to replication), else from empty.
    async fn first_use(
        &mut self,
        volume: usize,
        path: &Path,
        mut local: LocalCopy,
    ) -> Result<(Manifest, String), ReplicaError> {
        let snapshot = if local.holds_data()? {
            // The copy stands at this incarnation's claim, which holds no changes: a copy
            // that does not is not the snapshot.
            let position = Position {
                node: self.node.to_owned(),
                inc: self.inc,
                seq: 0,
            };
            local.set_position(&position)?;
            local.close()?;
            let (_, bytes) = super::copy_of(path)?;
            let key = self.keys.snapshot(volume, &position);
            self.objects.create(&key, &bytes).await?;
            Some(Snapshot { key, position })
        } else {
            // Whatever an empty copy holds besides partitions (from an earlier history) is not
            // in this one: it starts from a new file, as a copy restored from it will.
            local.close()?;
            remove_copy(path)?;
            None
        };
        let manifest = Manifest {
            version: 1,
            epoch: 1,
            owner: self.owner(),
            snapshot,
            chain: vec![self.own_segment()],
        };
        self.write_manifest(volume, manifest, None).await
    }

    /// Applies to `local` volume `volume`'s changes in `segment` from window `start` on. An
    /// open segment (another incarnation's stream) is sealed at its first absent window: a
    /// fence is created there, after which its writer can land nothing more.
    async fn replay(
        &mut self,
        volume: usize,
        local: &mut LocalCopy,
        segment: &mut Segment,
        start: u64,
    ) -> Result<(), ReplicaError> {
        let stream = (segment.node.clone(), segment.inc);
        // Only an open segment ends where its stream is sealed. A closed one ends where its
        // owner released the volume, and the same stream may hold a later segment of this
        // volume (taken back) or be open for other volumes: its end is no seal.
        let open = segment.end.is_none();
        if open {
            // A segment that starts past the seal (taken by a node whose stream was already
            // sealed) holds nothing acknowledged: it ends where it starts.
            segment.end = self.seals.get(&stream).map(|&end| end.max(segment.first));
        }
        let mut seq = start;
        while segment.end.is_none_or(|end| seq < end) {
            let key = self.keys.window(&segment.node, segment.inc, seq);
            if !self.cache.contains_key(&key)
                && !self.ahead.contains_key(&key)
                && !self.absent.contains(&key)
                && !self.read_batches(&segment.node, segment.inc, seq).await?
            {
                let until = segment
                    .end
                    .map_or(seq + READ_AHEAD, |end| end.min(seq + READ_AHEAD));
                self.read_ahead(&segment.node, segment.inc, seq..until)
                    .await?;
            }
            // The end of an open segment, found by reading ahead, is fenced at once: reading
            // it again first would give a live writer time to land it, round after round.
            let found = if self.absent.remove(&key) && segment.end.is_none() {
                None
            } else {
                self.fetch(&key).await?
            };
            match found.as_deref() {
                Some(StreamObject::Window(window)) => {
                    let at = Position {
                        node: segment.node.clone(),
                        inc: segment.inc,
                        seq,
                    };
                    for changes in window.changes_of(volume) {
                        local.apply(changes, &at)?;
                    }
                    seq += 1;
                    self.replayed += 1;
                }
                // A fence ends an open segment, even before where another volume's replay of
                // the same stream found one (a stopped stream may hold more than one).
                Some(StreamObject::Fence) if open => {
                    segment.end = Some(seq);
                }
                None if segment.end.is_none() => {
                    // Else windows or fences landed meanwhile from `seq` on: read them.
                    segment.end = self.fence(&segment.node, segment.inc, seq).await?;
                }
                Some(StreamObject::Fence) | None => {
                    return Err(ReplicaError::Damaged {
                        key,
                        reason: format!(
                            "volume {volume}'s history names this window, and it is not there"
                        ),
                    });
                }
            }
        }
        if open && let Some(end) = segment.end {
            let seal = self.seals.entry(stream).or_insert(end);
            *seal = (*seal).min(end);
        }
        Ok(())
    }

    /// Seals stream `node`/`inc` at window `seq`, found absent: a fence created there ends it.
    /// A live writer may land the window first; once it has, the fences of the next
    /// [`FENCE_AHEAD`] windows are created at once. The stream is sealed at the lowest one
    /// stored (its writer can land windows past it, never acknowledge them: a window is
    /// acknowledged only once every window before it landed). Answers that seal, or `None`
    /// when the writer landed every window first.
    async fn fence(&mut self, node: &str, inc: u64, seq: u64) -> Result<Option<u64>, ReplicaError> {
        let stream = (node.to_owned(), inc);
        let ahead = if self.raced.contains(&stream) {
            FENCE_AHEAD
        } else {
            1
        };
        let by = Position {
            node: self.node.to_owned(),
            inc: self.inc,
            seq: 0,
        };
        let (fence, objects) = (fence(&by), self.objects);
        let keys: Vec<String> = (seq..seq + ahead)
            .map(|seq| self.keys.window(node, inc, seq))
            .collect();
        let created =
            futures_util::future::join_all(keys.iter().map(|key| objects.create(key, &fence)))
                .await;
        let mut seal = None;
        for (at, created) in (seq..).zip(created) {
            if let Put::Stored(_) = created? {
                seal = seal.or(Some(at));
            }
        }
        if seal != Some(seq) {
            self.raced.insert(stream.clone());
        }
        if seal.is_some() {
            self.fenced.push(stream);
        }
        Ok(seal)
    }

    /// Reads the windows `seqs` of stream `node`/`inc` at once, for [`Taker::fetch`]; those
    /// not there yet are left to it.
    async fn read_ahead(
        &mut self,
        node: &str,
        inc: u64,
        seqs: std::ops::Range<u64>,
    ) -> Result<(), ReplicaError> {
        let keys: Vec<String> = seqs
            .map(|seq| self.keys.window(node, inc, seq))
            .filter(|key| !self.cache.contains_key(key))
            .collect();
        let objects = self.objects;
        let read = futures_util::future::join_all(keys.iter().map(|key| objects.get(key))).await;
        for (key, found) in keys.into_iter().zip(read) {
            if let Some((bytes, _)) = found? {
                let object = decode(&bytes).map_err(|why| ReplicaError::undecodable(&key, why))?;
                self.ahead.insert(key, (Arc::new(object), bytes.len()));
            } else {
                self.absent.insert(key);
            }
        }
        Ok(())
    }

    /// Reads the batch of stream `node`/`inc` holding window `seq`, and the batches after it,
    /// at once, for [`Taker::fetch`]. Answers whether window `seq` was found in one; where it
    /// was not (no batch holds it, or collection deleted it meanwhile), it is read alone.
    async fn read_batches(&mut self, node: &str, inc: u64, seq: u64) -> Result<bool, ReplicaError> {
        let stream = (node.to_owned(), inc);
        if !self.batches.contains_key(&stream) {
            let keys = self
                .objects
                .keys(&self.keys.stream_batches(node, inc))
                .await?;
            let mut listed: Vec<Listed> = keys
                .into_iter()
                .filter_map(|key| {
                    let (_, _, first, last) = self.keys.parse_batch(&key)?;
                    Some(Listed { first, last, key })
                })
                .collect();
            listed.sort();
            self.batches.insert(stream.clone(), listed);
        }
        let listed = &self.batches[&stream];
        let Some(at) = listed
            .iter()
            .position(|batch| (batch.first..=batch.last).contains(&seq))
        else {
            return Ok(false);
        };
        let wanted: Vec<String> = listed[at..]
            .iter()
            .take(BATCHES_AHEAD)
            .map(|batch| batch.key.clone())
            .collect();
        let objects = self.objects;
        let read = futures_util::future::join_all(wanted.iter().map(|key| objects.get(key))).await;
        for (key, found) in wanted.iter().zip(read) {
            let Some((bytes, _)) = found? else { continue };
            let windows =
                Batch::decode(&bytes).map_err(|why| ReplicaError::undecodable(key, why))?;
            for (window_seq, window) in windows {
                let window_key = self.keys.window(node, inc, window_seq);
                if self.cache.contains_key(&window_key) {
                    continue;
                }
                let object = decode(window).map_err(|why| ReplicaError::undecodable(key, why))?;
                self.ahead
                    .insert(window_key, (Arc::new(object), window.len()));
            }
        }
        Ok(self.ahead.contains_key(&self.keys.window(node, inc, seq)))
    }

    /// The stream object at `key`, read once while the volumes are taken.
    async fn fetch(&mut self, key: &str) -> Result<Option<Arc<StreamObject>>, ReplicaError> {
        if let Some(found) = self.cache.get(key) {
            return Ok(Some(found.clone()));
        }
        let (object, size) = match self.ahead.remove(key) {
            Some(read) => read,
            None => {
                let Some((bytes, _)) = self.objects.get(key).await? else {
                    return Ok(None);
                };
                let object = decode(&bytes).map_err(|why| ReplicaError::undecodable(key, why))?;
                (Arc::new(object), bytes.len())
            }
        };
        if self.cached_bytes + size <= CACHE_BYTES {
            self.cached_bytes += size;
            self.cache.insert(key.to_owned(), object.clone());
        }
        Ok(Some(object))
    }
}

/// `path` with `-{suffix}` added to its name.
pub(super) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!("-{suffix}"));
    name.into()
}

fn remove_if_present(path: &Path) -> Result<(), ReplicaError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(ReplicaError::io(path, err)),
    }
}

/// Moves a local copy that is not on its volume's history aside (renamed with the time, never
/// deleted), with the files that describe it.
fn set_aside(path: &Path, why: &str) -> Result<(), ReplicaError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let aside = sibling(path, &format!("set-aside-{stamp}"));
    log::warn!(
        "{}: {why}; moved to {} and rebuilt from the bucket",
        path.display(),
        aside.display()
    );
    // Its WAL and damage mark go with it: what it held stays readable, and why it was set
    // aside stays said.
    for suffix in ["wal", "damaged"] {
        let (from, to) = (sibling(path, suffix), sibling(&aside, suffix));
        if from.exists() {
            std::fs::rename(&from, &to).map_err(|err| ReplicaError::io(&from, err))?;
        }
    }
    std::fs::rename(path, &aside).map_err(|err| ReplicaError::io(path, err))?;
    remove_copy(path)
}

/// Removes a local copy with the files that describe it.
fn remove_copy(path: &Path) -> Result<(), ReplicaError> {
    remove_if_present(path)?;
    for suffix in ["wal", "shm", "hwm", "damaged"] {
        remove_if_present(&sibling(path, suffix))?;
    }
    Ok(())
}
