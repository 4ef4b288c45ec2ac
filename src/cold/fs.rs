//! A cold store in a local folder: one file per segment, written create-only and durably.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ColdFuture, ColdStore, ColdStoreError, PutOutcome, SegmentKey};

/// Segments as files under one folder, the key's `/` separating sub-folders.
///
/// A `put` writes a temporary file, fsyncs it, links it into place only if nothing is there
/// (a hard link never replaces), removes the temporary name and fsyncs the folder, so a crash
/// leaves either no segment or a complete one. File work runs on tokio's blocking pool.
#[derive(Debug, Clone)]
pub struct FsColdStore {
    root: PathBuf,
}

/// Distinguishes temporary files of concurrent puts within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Temporary files start with this, and listing skips them.
const TEMP_MARK: &str = ".tmp-";

impl FsColdStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
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
        std::process::id(),
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

fn list_files(
    root: &Path,
    folder: &Path,
    prefix: &str,
    keys: &mut Vec<SegmentKey>,
) -> std::io::Result<()> {
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
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
        Box::pin(blocking(key, move || put_file(&path, &bytes)))
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        let path = self.path_of(key);
        Box::pin(blocking(key, move || match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
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

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        let path = self.path_of(key);
        Box::pin(blocking(key, move || match fs::remove_file(&path) {
            Err(err) if err.kind() != ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }))
    }
}
