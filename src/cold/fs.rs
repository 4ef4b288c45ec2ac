//! A cold store in a local folder: one file per segment, written create-only and durably.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};

use super::{ColdFuture, ColdStore, ColdStoreError, PutOutcome, SegmentKey};

/// Segments as files under one folder, the key's `/` separating sub-folders.
///
/// A `put` writes a temporary file, fsyncs it, links it into place only if nothing is there
/// (a hard link never replaces), removes the temporary name and fsyncs the folder, so a crash
/// leaves either no segment or a complete one. File work runs on tokio's blocking pool.
///
/// # Temporary files left by killed processes
///
/// A process killed during a `put` leaves its temporary file (`.tmp-{name}-{tag}-{n}`, next to
/// where the segment goes; listing skips it). The `tag` names the writing process: its pid and
/// a random number drawn at start, because a restarted process often gets the same pid (always
/// so in a container), and a pid alone would keep an earlier run's files for ever. One process
/// writes a cold folder, so a temporary file with another tag than its own belongs to no put in
/// flight, and removing it is safe at any time, even while this process writes; one with this
/// process's tag is never removed (its put removes it). Two removals use that rule:
///
/// - `delete(key)` also removes the key's temporary files left by earlier processes. The
///   cleanup of unindexed uploads deletes every key a killed flush may have been writing, so
///   this removes those files without listing anything.
/// - The first `put` of a store sweeps the whole folder once, in the blocking pool, before
///   writing: it removes what earlier processes left that no upload record names (files from
///   before upload records existed, or from puts made outside a trim). At creation the store
///   has no runtime to run it on and `new` stays free of I/O; the first put is the first time
///   the folder is written, on the trim path, never on the path of appends or reads. That put
///   waits for one walk of the folder, once per process. A failed sweep is logged and not
///   retried before the next start.
#[derive(Debug, Clone)]
pub struct FsColdStore {
    root: PathBuf,
    /// Run once, by the first put: the sweep of temporary files of earlier processes.
    swept: Arc<Once>,
}

/// Distinguishes temporary files of concurrent puts within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Temporary files start with this, and listing skips them.
const TEMP_MARK: &str = ".tmp-";

/// This process's tag in the names of its temporary files: `{pid}.{random}` (no `-`).
fn process_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let random = uuid::Uuid::new_v4().as_u128() as u32;
        format!("{}.{random:08x}", std::process::id())
    })
}

/// The segment name and the writer's tag in a temporary file's name
/// (`.tmp-{name}-{tag}-{n}`; earlier versions wrote the bare pid as the tag), or `None` for a
/// name of another shape.
fn parse_temporary(file_name: &str) -> Option<(&str, &str)> {
    let mut parts = file_name.strip_prefix(TEMP_MARK)?.rsplitn(3, '-');
    let (counter, tag, name) = (parts.next()?, parts.next()?, parts.next()?);
    let numeric = !counter.is_empty() && counter.bytes().all(|byte| byte.is_ascii_digit());
    numeric.then_some((name, tag))
}

/// Whether `file_name` is a temporary file that no put of this process is writing: one with
/// another process's tag, or a `.tmp-` name of another shape.
fn is_leftover(file_name: &str) -> bool {
    file_name.starts_with(TEMP_MARK)
        && parse_temporary(file_name).is_none_or(|(_, tag)| tag != process_tag())
}

/// Removes a file; one already gone is fine.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Removes the leftover temporary files under `folder`, recursively; returns how many.
fn remove_leftovers(folder: &Path) -> std::io::Result<u64> {
    let Some(entries) = entries_of(folder)? else {
        return Ok(0);
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            removed += remove_leftovers(&entry.path())?;
        } else if is_leftover(&entry.file_name().to_string_lossy()) {
            remove_if_present(&entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes `path`'s segment file and the temporary files earlier processes left for it.
fn delete_file(path: &Path) -> std::io::Result<()> {
    remove_if_present(path)?;
    let folder = path.parent().expect("a segment path has a folder");
    let name = path
        .file_name()
        .expect("a segment path has a name")
        .to_string_lossy();
    let Some(entries) = entries_of(folder)? else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        let of_this_key = parse_temporary(&file_name).is_some_and(|(of, _)| of == name);
        if of_this_key && is_leftover(&file_name) {
            remove_if_present(&entry.path())?;
        }
    }
    Ok(())
}

impl FsColdStore {
    /// A store rooted at `root` (created on first write). Does no I/O.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            swept: Arc::new(Once::new()),
        }
    }

    /// The folder holding the segments.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, key: &SegmentKey) -> PathBuf {
        self.root.join(key.as_str())
    }
}

/// Runs blocking file work off the async executor.
async fn blocking<T: Send + 'static>(
    key: &SegmentKey,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ColdStoreError> {
    let io_error = |source| ColdStoreError::Io {
        key: key.to_string(),
        source,
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(io_error),
        Err(join) => Err(io_error(std::io::Error::other(join.to_string()))),
    }
}

fn put_file(path: &Path, bytes: &[u8]) -> std::io::Result<PutOutcome> {
    let folder = path.parent().expect("a segment path has a folder");
    fs::create_dir_all(folder)?;
    let name = path
        .file_name()
        .expect("a segment path has a name")
        .to_string_lossy();
    let temp = folder.join(format!(
        "{TEMP_MARK}{name}-{}-{}",
        process_tag(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = File::create_new(&temp)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    let linked = written.and_then(|()| fs::hard_link(&temp, path));
    let _ = fs::remove_file(&temp);
    let outcome = match linked {
        Ok(()) => PutOutcome::Created,
        Err(err) if err.kind() == ErrorKind::AlreadyExists => PutOutcome::AlreadyExists,
        Err(err) => return Err(err),
    };
    File::open(folder)?.sync_all()?;
    Ok(outcome)
}

/// The entries of `folder`, or `None` when it does not exist (nothing was ever stored there).
fn entries_of(folder: &Path) -> std::io::Result<Option<fs::ReadDir>> {
    match fs::read_dir(folder) {
        Ok(entries) => Ok(Some(entries)),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

fn list_files(
    root: &Path,
    folder: &Path,
    prefix: &str,
    keys: &mut Vec<SegmentKey>,
) -> std::io::Result<()> {
    let Some(entries) = entries_of(folder)? else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            list_files(root, &path, prefix, keys)?;
        } else if !entry.file_name().to_string_lossy().starts_with(TEMP_MARK) {
            let key = path
                .strip_prefix(root)
                .expect("listed under root")
                .to_string_lossy()
                .replace('\\', "/");
            if key.starts_with(prefix) {
                keys.push(SegmentKey::from_stored(key));
            }
        }
    }
    Ok(())
}

impl ColdStore for FsColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        let path = self.path_of(key);
        let bytes = bytes.to_vec();
        let (root, swept) = (self.root.clone(), self.swept.clone());
        Box::pin(blocking(key, move || {
            swept.call_once(|| match remove_leftovers(&root) {
                Ok(0) => {}
                Ok(removed) => log::info!(
                    "cold folder {}: removed {removed} temporary files of earlier processes",
                    root.display()
                ),
                Err(err) => log::warn!(
                    "cold folder {}: cannot remove temporary files of earlier processes: {err}",
                    root.display()
                ),
            });
            put_file(&path, &bytes)
        }))
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        let path = self.path_of(key);
        let shown = key.clone();
        Box::pin(blocking(key, move || match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            // Something else stands where the segment was: the segment is lost, as if deleted
            // (not a failure of the store, which a retry could cure).
            Err(err) if path.is_dir() => {
                log::error!(
                    "cold segment {shown}: {} is a folder, not a segment: {err}",
                    path.display()
                );
                Ok(None)
            }
            Err(err) => Err(err),
        }))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        let root = self.root.clone();
        let prefix = prefix.to_owned();
        let key = SegmentKey::from_stored(prefix.clone());
        Box::pin(async move {
            blocking(&key, move || {
                let mut keys = Vec::new();
                list_files(&root, &root, &prefix, &mut keys)?;
                keys.sort();
                Ok(keys)
            })
            .await
        })
    }

    /// Also removes the key's temporary files that earlier processes left.
    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        let path = self.path_of(key);
        Box::pin(blocking(key, move || delete_file(&path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "00000000000000000000-00000000000000000001";

    /// A temporary file's name yields its segment and its writer's tag, in this version's
    /// shape and in the earlier one's (a bare pid); other names yield nothing.
    #[test]
    fn temporary_names_parse() {
        assert_eq!(
            parse_temporary(&format!(".tmp-{NAME}-812.0badcafe-17")),
            Some((NAME, "812.0badcafe"))
        );
        assert_eq!(
            parse_temporary(&format!(".tmp-{NAME}-812-0")),
            Some((NAME, "812"))
        );
        assert_eq!(parse_temporary(NAME), None);
        assert_eq!(parse_temporary(&format!(".tmp-{NAME}-812-x")), None);
        assert!(!process_tag().contains('-'), "the tag is one `-` field");
        assert!(!is_leftover(&format!(".tmp-{NAME}-{}-3", process_tag())));
        assert!(is_leftover(&format!(
            ".tmp-{NAME}-{}-3",
            std::process::id()
        )));
    }

    /// `delete` removes the key's temporary files left by earlier processes, and neither the
    /// one of a put of this process nor those of other keys.
    #[tokio::test]
    async fn delete_removes_the_keys_leftover_temporaries() {
        let root = tempfile::tempdir().expect("temp dir");
        let store = FsColdStore::new(root.path());
        let key = SegmentKey::new("segments", "events", 0, 0, 1);
        store.put(&key, b"segment").await.expect("put");
        let folder = root.path().join("segments/events/0");
        let leftover = folder.join(format!(".tmp-{NAME}-4242-0"));
        let in_flight = folder.join(format!(".tmp-{NAME}-{}-9", process_tag()));
        let other_key = folder.join(".tmp-00000000000000000002-00000000000000000003-4242-1");
        for path in [&leftover, &in_flight, &other_key] {
            fs::write(path, b"partial").expect("write a temporary file");
        }

        store.delete(&key).await.expect("delete");
        assert_eq!(store.get(&key).await.expect("get"), None);
        assert!(!leftover.exists(), "the key's leftover is removed");
        assert!(in_flight.exists(), "a put in flight keeps its file");
        assert!(
            other_key.exists(),
            "another key's file is not this delete's"
        );
    }

    /// A folder where a segment was is a lost segment (`None`), not a failing store.
    #[tokio::test]
    async fn a_folder_in_place_of_a_segment_is_no_segment() {
        let root = tempfile::tempdir().expect("temp dir");
        let store = FsColdStore::new(root.path());
        let key = SegmentKey::new("segments", "events", 0, 0, 1);
        store.put(&key, b"segment").await.expect("put");
        let path = root.path().join(key.as_str());
        fs::remove_file(&path).expect("remove the segment");
        fs::create_dir(&path).expect("a folder in its place");
        assert_eq!(store.get(&key).await.expect("get"), None);
    }

    /// The first put sweeps the whole folder for temporary files of earlier processes, and
    /// leaves those of this process.
    #[tokio::test]
    async fn first_put_removes_temporaries_of_earlier_processes() {
        let root = tempfile::tempdir().expect("temp dir");
        let deep = root.path().join("segments/events/7");
        fs::create_dir_all(&deep).expect("create folders");
        let earlier = deep.join(format!(".tmp-{NAME}-4242-0"));
        let odd = root.path().join(".tmp-something");
        let own = deep.join(format!(".tmp-{NAME}-{}-5", process_tag()));
        for path in [&earlier, &odd, &own] {
            fs::write(path, b"partial").expect("write a temporary file");
        }

        let store = FsColdStore::new(root.path());
        let key = SegmentKey::new("segments", "events", 0, 0, 1);
        assert_eq!(
            store.put(&key, b"segment").await.expect("put"),
            PutOutcome::Created
        );
        assert!(
            !earlier.exists() && !odd.exists(),
            "earlier files are removed"
        );
        assert!(own.exists(), "this process's file is kept");
    }
}
