//! `Volumes`: the volumes of a data folder, and which one holds a partition.
//!
//! Which volume holds a partition is asked of the volumes themselves (their `partitions`
//! tables), so nothing here grows with the partition count. A new partition goes to the volume
//! its name is spread to. A volume that cannot be opened is left out so the others serve on,
//! but a partition it may hold is answered `corrupted` rather than created again elsewhere
//! (which would hand out its offsets anew).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::scrub::Scrubber;
use super::{
    CommitterPool, DuePartition, DuePosition, LogStore, StoreError, StoreOptions, Stream, SyncMode,
    Volume, VolumeReplica,
};
use super::{read_lock, write_lock};
use crate::error_code::with_causes;
use crate::names::{PartitionId, validate_topic};

/// The volumes of a data folder. See the module docs.
pub(crate) struct Volumes {
    /// Each volume, by index.
    slots: RwLock<Vec<Slot>>,
    /// Volumes that new partitions are spread over (`storage.volumes`).
    spread: usize,
    /// What opening a volume later needs (see [`Volumes::attach`]).
    dir: PathBuf,
    sync: SyncMode,
    stream: Option<Arc<dyn Stream>>,
    /// Runs the committers of every volume opened here.
    committers: CommitterPool,
    /// Checks every volume open here in the background, once started (see `scrub.rs`).
    scrub: Scrubber,
}

/// One volume of the folder, as this node has it.
enum Slot {
    Open(Arc<Volume>),
    /// It could not be opened: a partition found in no other volume may be stored there, so
    /// it is answered `corrupted` rather than created again (which would hand out its offsets
    /// anew).
    Unopened(Unopened),
    /// Another node holds it (a cluster's volumes are spread over its nodes).
    Elsewhere,
    /// It was found damaged and is being rebuilt from the replica's bucket: its partitions
    /// answer `unavailable` until it is attached again.
    Healing,
}

impl Slot {
    fn open(&self) -> Option<&Arc<Volume>> {
        match self {
            Self::Open(volume) => Some(volume),
            Self::Unopened(_) | Self::Elsewhere | Self::Healing => None,
        }
    }
}

/// Why the volumes of a data folder cannot serve at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumesError {
    /// The folder holds a partition database of the earlier one-database-per-partition layout,
    /// which this version does not migrate.
    #[error(
        "{} holds a partition database of the earlier one-file-per-partition layout ({}); this \
         version keeps partitions in shared volumes and does not migrate them: move that folder \
         away or set storage.data_dir to another folder",
        dir.display(),
        file.display()
    )]
    EarlierLayout {
        /// The data folder.
        dir: PathBuf,
        /// A partition database of the earlier layout in it.
        file: PathBuf,
    },
    /// A volume was written by a newer version of this program.
    #[error("cannot open {}: {error}", path.display())]
    TooNew {
        /// The volume's database file.
        path: PathBuf,
        /// What opening it answered ([`StoreError::SchemaTooNew`]), shown in the message.
        error: StoreError,
    },
}

impl Volumes {
    /// Opens every volume of the data folder `dir` (at least `spread`, the volumes new
    /// partitions are spread over), committing with `sync`, and landing every write in
    /// `stream` first when one is given (see `replication.rs`). A volume that cannot be opened
    /// (damaged) is logged and left out, so the others serve on. Blocks on SQLite.
    ///
    /// # Errors
    /// [`VolumesError`] when a volume was written by a newer version, or `dir` is a folder of
    /// the earlier one-database-per-partition layout.
    pub(crate) fn open(
        dir: &Path,
        spread: usize,
        sync: SyncMode,
        stream: Option<Arc<dyn Stream>>,
        committers: CommitterPool,
    ) -> Result<Self, VolumesError> {
        if let Some(file) = earlier_layout_file(dir) {
            return Err(VolumesError::EarlierLayout {
                dir: dir.to_owned(),
                file,
            });
        }
        let mut count = spread;
        while dir.join(Volume::file_name(count)).exists() {
            count += 1;
        }
        let volumes = Self::held_elsewhere(dir, spread, sync, stream, committers);
        for index in 0..count {
            volumes.attach(index)?;
        }
        Ok(volumes)
    }

    /// The `spread` volumes of the data folder `dir`, every one held by another node until
    /// [`Volumes::attach`] opens it here.
    pub(crate) fn held_elsewhere(
        dir: &Path,
        spread: usize,
        sync: SyncMode,
        stream: Option<Arc<dyn Stream>>,
        committers: CommitterPool,
    ) -> Self {
        Self {
            slots: RwLock::new((0..spread).map(|_| Slot::Elsewhere).collect()),
            spread,
            dir: dir.to_owned(),
            sync,
            stream,
            committers,
            scrub: Scrubber::new(),
        }
    }

    /// What the scrub of these volumes did so far (all zero before it started).
    pub(crate) fn scrub_counters(&self) -> Arc<super::ScrubCounters> {
        self.scrub.counters()
    }

    /// The threads that run the committers of these volumes.
    pub(crate) fn committers(&self) -> CommitterPool {
        self.committers.clone()
    }

    /// Starts the scrub of every volume open here (see `scrub.rs`): one pass every `interval`,
    /// none when it is `None`. Stopped by [`Volumes::close`].
    pub(crate) fn start_scrub(self: &Arc<Self>, interval: Option<Duration>) {
        let Some(interval) = interval else { return };
        if let Err(err) = self.scrub.start(Arc::downgrade(self), interval) {
            log::error!("cannot start the scrub, volumes are not scrubbed: {err}");
        }
    }

    /// Opens volume `index` of the data folder, which this node now holds. A volume that
    /// cannot be opened (damaged) is logged and left out, so the others serve on. Blocks on
    /// SQLite.
    ///
    /// # Errors
    /// [`VolumesError::TooNew`] when the volume was written by a newer version.
    pub(crate) fn attach(&self, index: usize) -> Result<(), VolumesError> {
        let path = self.dir.join(Volume::file_name(index));
        let replica = self.stream.clone().map(|stream| VolumeReplica {
            stream,
            volume: index,
        });
        let slot = match Volume::open_in(&path, self.sync, replica, &self.committers) {
            Ok(volume) => Slot::Open(volume),
            Err(error @ StoreError::SchemaTooNew { .. }) => {
                return Err(VolumesError::TooNew { path, error });
            }
            Err(err) => {
                let unopened = Unopened {
                    path,
                    cause: with_causes(&err),
                };
                log::error!(
                    "{unopened}; its partitions answer `corrupted`, the other volumes serve on"
                );
                Slot::Unopened(unopened)
            }
        };
        let mut slots = write_lock(&self.slots);
        if slots.len() <= index {
            slots.resize_with(index + 1, || Slot::Elsewhere);
        }
        slots[index] = slot;
        Ok(())
    }

    /// Volume `index` is held by another node from now on, or, when `healing`, rebuilt from
    /// the replica's bucket until [`Volumes::attach`] opens it again: no partition of it opens
    /// here meanwhile. Answers the volume, for the caller to close once its open partitions
    /// drained.
    pub(crate) fn detach(&self, index: usize, healing: bool) -> Option<Arc<Volume>> {
        let left = if healing {
            Slot::Healing
        } else {
            Slot::Elsewhere
        };
        let mut slots = write_lock(&self.slots);
        match std::mem::replace(slots.get_mut(index)?, left) {
            Slot::Open(volume) => Some(volume),
            Slot::Unopened(_) | Slot::Elsewhere | Slot::Healing => None,
        }
    }

    /// How many volumes the data folder has, opened or not.
    pub(crate) fn count(&self) -> usize {
        self.slots().len()
    }

    /// What tells when every connection of volume `index`, open here, has closed.
    pub(crate) fn gone(&self, index: usize) -> Option<super::Gone> {
        self.slots().get(index)?.open().map(|volume| volume.gone())
    }

    /// Whether volume `index` carries a damage mark (see `damage.rs`).
    pub(crate) fn marked_damaged(&self, index: usize) -> bool {
        super::damage::mark_path(&self.dir.join(Volume::file_name(index))).exists()
    }

    /// Whether volume `index` is open on this node.
    pub(crate) fn holds(&self, index: usize) -> bool {
        self.slots()
            .get(index)
            .is_some_and(|slot| slot.open().is_some())
    }

    fn slots(&self) -> std::sync::RwLockReadGuard<'_, Vec<Slot>> {
        read_lock(&self.slots)
    }

    /// Opens `id`'s store in the volume that holds it or, if `create` and none does, adds it
    /// to the volume its name is spread to. `None` when no volume holds it and it is not
    /// added. Blocks on SQLite.
    ///
    /// # Errors
    /// [`StoreError::Corrupted`] when a volume that could not be opened may hold it; a storage
    /// failure.
    pub(crate) fn open_store(
        &self,
        id: &PartitionId,
        options: &StoreOptions,
        create: bool,
    ) -> Result<Option<(Arc<Volume>, LogStore)>, StoreError> {
        let home = crate::routing::volume_of(id, self.spread);
        let slots = self.slots();
        match slots.get(home) {
            Some(Slot::Elsewhere) => return Err(StoreError::Elsewhere { volume: home }),
            Some(Slot::Healing) => return Err(StoreError::Healing { volume: home }),
            _ => {}
        }
        let others = slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| slot.open().filter(|_| index != home));
        for volume in others {
            let found = LogStore::open_in(volume, id.topic(), id.index(), options.clone(), false)?;
            if let Some(store) = found {
                return Ok(Some((volume.clone(), store)));
            }
        }
        let unopened = slots.iter().find_map(|slot| match slot {
            Slot::Unopened(unopened) => Some(unopened),
            Slot::Open(_) | Slot::Elsewhere | Slot::Healing => None,
        });
        let healing = slots.iter().position(|slot| matches!(slot, Slot::Healing));
        // Created only when no volume that could not be opened, is being rebuilt, or lost
        // commits may hold it already.
        let create =
            create && unopened.is_none() && healing.is_none() && lost(&slots).next().is_none();
        let found = match slots[home].open() {
            Some(volume) => {
                LogStore::open_in(volume, id.topic(), id.index(), options.clone(), create)?
                    .map(|store| (volume.clone(), store))
            }
            None => None,
        };
        if found.is_some() {
            return Ok(found);
        }
        if let Some(unopened) = unopened {
            return Err(StoreError::Corrupted {
                reason: format!("{id} may be stored in {unopened}"),
            });
        }
        if let Some(volume) = healing {
            return Err(StoreError::Healing { volume });
        }
        // It may be in a volume that lost commits: its home volume if that one did.
        let mut lost = slots[home].open().into_iter().chain(lost(&slots));
        Ok(lost.find_map(|volume| {
            LogStore::open_unlisted(volume, options.clone()).map(|store| (volume.clone(), store))
        }))
    }

    /// Each damaged volume's index and what is wrong with it: `malformed`, `lost` (see
    /// [`DamageKind`](super::DamageKind)), `unopenable`, or `healing` (being rebuilt from the
    /// replica's bucket).
    pub(crate) fn damaged(&self) -> Vec<(usize, &'static str)> {
        let kind = |slot: &Slot| match slot {
            Slot::Unopened(_) => Some("unopenable"),
            Slot::Open(volume) => volume.damage().map(|kind| kind.as_str()),
            Slot::Healing => Some("healing"),
            Slot::Elsewhere => None,
        };
        let slots = self.slots();
        let damaged = slots.iter().enumerate();
        damaged
            .filter_map(|(index, slot)| Some((index, kind(slot)?)))
            .collect()
    }

    /// The volumes open here.
    pub(super) fn open_volumes(&self) -> Vec<Arc<Volume>> {
        self.slots()
            .iter()
            .filter_map(Slot::open)
            .cloned()
            .collect()
    }

    /// Reviews every volume's due times under the retention limits `limits` (see
    /// [`Volume::review_due_times`]). Blocks on SQLite.
    ///
    /// # Errors
    /// A storage failure.
    pub(crate) fn review_due_times(&self, limits: &str) -> Result<(), StoreError> {
        for volume in self.open_volumes() {
            if volume.review_due_times(limits)? {
                log::info!(
                    "{}: the retention limits changed: every partition with hot records runs \
                     its retention once",
                    volume.path().display()
                );
            }
        }
        Ok(())
    }

    /// Up to `limit` partitions of volume `volume` whose retention is due at `now`, after
    /// `after` (see [`Volume::due`]); none from a volume that is damaged (never written), could
    /// not be opened or is held elsewhere. Blocks on SQLite.
    ///
    /// # Errors
    /// A storage failure.
    pub(crate) fn due(
        &self,
        volume: usize,
        now: i64,
        after: DuePosition,
        limit: usize,
    ) -> Result<Vec<DuePartition>, StoreError> {
        let volume = self.slots().get(volume).and_then(Slot::open).cloned();
        match volume {
            Some(volume) if volume.damage().is_none() => volume.due(now, after, limit),
            _ => Ok(Vec::new()),
        }
    }

    /// Stops the scrub, and closes every volume (see [`Volume::close`]), logging failures.
    /// Blocks until the scrub's step and each volume's committer stopped.
    pub(crate) fn close(&self) {
        self.scrub.stop();
        for volume in self.open_volumes() {
            if let Err(err) = volume.close() {
                log::error!("{}: cannot close: {err}", volume.path().display());
            }
        }
    }

    /// Up to `limit` topics with at least one stored partition whose names sort after `after`,
    /// by name, and whether more may follow. Each volume answers its first `limit + 1`; the
    /// first `limit` of their merge are the page. Blocks on SQLite.
    ///
    /// # Errors
    /// `corrupted` when a volume cannot be opened or lost commits: the list cannot be vouched
    /// for. A storage failure.
    pub(crate) fn topics(
        &self,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let unvouched = |reason: String| StoreError::Corrupted {
            reason: format!("the topics cannot be listed: {reason}"),
        };
        let volumes = {
            let slots = self.slots();
            for slot in slots.iter() {
                if let Slot::Unopened(unopened) = slot {
                    return Err(unvouched(unopened.to_string()));
                }
            }
            if let Some(loss) = lost(&slots).find_map(|volume| volume.known_loss()) {
                return Err(unvouched(loss.to_owned()));
            }
            slots
                .iter()
                .filter_map(Slot::open)
                .cloned()
                .collect::<Vec<_>>()
        };
        let mut topics = Vec::new();
        for volume in volumes {
            topics.extend(volume.topics_after(after, limit.saturating_add(1))?);
        }
        topics.sort();
        topics.dedup();
        let more = topics.len() > limit;
        topics.truncate(limit);
        Ok((topics, more))
    }
}

impl Drop for Volumes {
    /// Tells the scrub to stop, without waiting: the drop may run on its thread.
    fn drop(&mut self) {
        self.scrub.signal_stop();
    }
}

/// The volumes of `slots` that hold fewer commits than they acknowledged.
fn lost(slots: &[Slot]) -> impl Iterator<Item = &Arc<Volume>> {
    slots
        .iter()
        .filter_map(Slot::open)
        .filter(|volume| volume.known_loss().is_some())
}

/// A volume that could not be opened, and why.
#[derive(Debug)]
struct Unopened {
    path: PathBuf,
    cause: String,
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, which cannot be opened: {}",
            self.path.display(),
            self.cause
        )
    }
}

/// A `{topic}/{index}.sqlite` file of the earlier layout, if the folder has one.
fn earlier_layout_file(dir: &Path) -> Option<PathBuf> {
    let topics = std::fs::read_dir(dir).ok()?;
    topics.flatten().find_map(|topic| {
        let name = topic.file_name().to_string_lossy().into_owned();
        if validate_topic(&name).is_err() || !topic.path().is_dir() {
            return None;
        }
        std::fs::read_dir(topic.path())
            .ok()?
            .flatten()
            .find_map(|file| {
                let file_name = file.file_name().to_string_lossy().into_owned();
                let index = file_name.strip_suffix(".sqlite")?;
                index.parse::<u32>().is_ok().then(|| file.path())
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data folder of the earlier one-database-per-partition layout is refused, naming the
    /// partition database found, rather than opened as an empty log beside it.
    #[test]
    fn a_folder_of_the_earlier_layout_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let earlier = dir.path().join("orders").join("3.sqlite");
        std::fs::create_dir(earlier.parent().unwrap()).expect("topic folder");
        std::fs::write(&earlier, b"").expect("partition file");

        let err = Volumes::open(dir.path(), 1, SyncMode::Normal, None, CommitterPool::new(1))
            .err()
            .expect("refused");
        assert!(matches!(&err, VolumesError::EarlierLayout { file, .. } if *file == earlier));
        assert!(err.to_string().contains("does not migrate them"), "{err}");
        assert!(!dir.path().join(Volume::file_name(0)).exists());
    }
}
