//! `Volumes`: the volumes of a data folder, and which one holds a partition.
//!
//! Which volume holds a partition is asked of the volumes themselves (their `partitions`
//! tables), so nothing here grows with the partition count. A new partition goes to the volume
//! its name is spread to. A volume that cannot be opened is left out so the others serve on,
//! but a partition it may hold is answered `corrupted` rather than created again elsewhere
//! (which would hand out its offsets anew).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    DuePartition, DuePosition, LogStore, StoreError, StoreOptions, Stream, SyncMode, Volume,
    VolumeReplica,
};
use crate::error_code::with_causes;
use crate::names::{PartitionId, validate_topic};

/// The volumes of a data folder. See the module docs.
pub(crate) struct Volumes {
    /// The volumes that opened, by index; `None` for one that could not be opened.
    volumes: Vec<Option<Arc<Volume>>>,
    /// Why each volume that could not be opened could not: a partition found in no other
    /// volume may be stored there, so it is answered `corrupted` rather than created again
    /// (which would hand out its offsets anew).
    unopened: Vec<Unopened>,
    /// Volumes that new partitions are spread over (`storage.volumes`).
    spread: usize,
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
        let mut volumes = Vec::with_capacity(count);
        let mut unopened = Vec::new();
        for index in 0..count {
            let path = dir.join(Volume::file_name(index));
            let replica = stream.clone().map(|stream| VolumeReplica {
                stream,
                volume: index,
            });
            match Volume::open_replicated(&path, sync, replica) {
                Ok(volume) => volumes.push(Some(volume)),
                Err(error @ StoreError::SchemaTooNew { .. }) => {
                    return Err(VolumesError::TooNew { path, error });
                }
                Err(err) => {
                    let unopenable = Unopened {
                        path,
                        cause: with_causes(&err),
                    };
                    log::error!(
                        "{unopenable}; its partitions answer `corrupted`, the other volumes \
                         serve on"
                    );
                    volumes.push(None);
                    unopened.push(unopenable);
                }
            }
        }
        Ok(Self {
            volumes,
            unopened,
            spread,
        })
    }

    /// How many volumes the data folder has, opened or not.
    pub(crate) fn count(&self) -> usize {
        self.volumes.len()
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
        let home = crate::routing::fnv1a_utf16(&id.to_string()) as usize % self.spread;
        let others = self
            .volumes
            .iter()
            .enumerate()
            .filter_map(|(index, volume)| volume.as_ref().filter(|_| index != home));
        for volume in others {
            let found = LogStore::open_in(volume, id.topic(), id.index(), options.clone(), false)?;
            if let Some(store) = found {
                return Ok(Some((volume.clone(), store)));
            }
        }
        // Created only when no volume that could not be opened, or that lost commits, may hold
        // it already.
        let create = create && self.unopened.is_empty() && self.lost().next().is_none();
        let found = match &self.volumes[home] {
            Some(volume) => {
                LogStore::open_in(volume, id.topic(), id.index(), options.clone(), create)?
                    .map(|store| (volume.clone(), store))
            }
            None => None,
        };
        if found.is_some() {
            return Ok(found);
        }
        if let Some(unopened) = self.unopened.first() {
            return Err(StoreError::Corrupted {
                reason: format!("{id} may be stored in {unopened}"),
            });
        }
        // It may be in a volume that lost commits: its home volume if that one did.
        let mut lost = self.volumes[home].iter().chain(self.lost());
        Ok(lost.find_map(|volume| {
            LogStore::open_unlisted(volume, options.clone()).map(|store| (volume.clone(), store))
        }))
    }

    /// Each damaged volume's index and what is wrong with it: `malformed`, `lost` (see
    /// [`DamageKind`](super::DamageKind)), or `unopenable`.
    pub(crate) fn damaged(&self) -> Vec<(usize, &'static str)> {
        let kind = |volume: &Option<Arc<Volume>>| match volume {
            None => Some("unopenable"),
            Some(volume) => volume.damage().map(|kind| kind.as_str()),
        };
        let volumes = self.volumes.iter().enumerate();
        volumes
            .filter_map(|(index, volume)| Some((index, kind(volume)?)))
            .collect()
    }

    /// The volumes that hold fewer commits than they acknowledged.
    fn lost(&self) -> impl Iterator<Item = &Arc<Volume>> {
        self.volumes
            .iter()
            .flatten()
            .filter(|volume| volume.known_loss().is_some())
    }

    /// Reviews every volume's due times under the retention limits `limits` (see
    /// [`Volume::review_due_times`]). Blocks on SQLite.
    ///
    /// # Errors
    /// A storage failure.
    pub(crate) fn review_due_times(&self, limits: &str) -> Result<(), StoreError> {
        for volume in self.volumes.iter().flatten() {
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
    /// `after` (see [`Volume::due`]); none from a volume that is damaged (never written) or
    /// could not be opened. Blocks on SQLite.
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
        match self.volumes.get(volume) {
            Some(Some(volume)) if volume.damage().is_none() => volume.due(now, after, limit),
            _ => Ok(Vec::new()),
        }
    }

    /// Closes every volume (see [`Volume::close`]), logging failures. Blocks until each
    /// volume's committer stopped.
    pub(crate) fn close(&self) {
        for volume in self.volumes.iter().flatten() {
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
        if let Some(unopened) = self.unopened.first() {
            return Err(unvouched(unopened.to_string()));
        }
        if let Some(loss) = self.lost().find_map(|volume| volume.known_loss()) {
            return Err(unvouched(loss.to_owned()));
        }
        let mut topics = Vec::new();
        for volume in self.volumes.iter().flatten() {
            topics.extend(volume.topics_after(after, limit.saturating_add(1))?);
        }
        topics.sort();
        topics.dedup();
        let more = topics.len() > limit;
        topics.truncate(limit);
        Ok((topics, more))
    }
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

        let err = Volumes::open(dir.path(), 1, SyncMode::Normal, None)
            .err()
            .expect("refused");
        assert!(matches!(&err, VolumesError::EarlierLayout { file, .. } if *file == earlier));
        assert!(err.to_string().contains("does not migrate them"), "{err}");
        assert!(!dir.path().join(Volume::file_name(0)).exists());
    }
}
