//! The cold tier: write-once object storage for segments of records that left the hot window.
//!
//! [`ColdStore`] is a small object-safe async trait over opaque bytes keyed by [`SegmentKey`];
//! it knows nothing of SQLite, records or actors. Implementations: [`FsColdStore`] (a local
//! folder, the default), [`S3ColdStore`] (any S3-compatible object store), and, for tests,
//! `MemoryColdStore` and `FailingColdStore` (feature `test-util`).
//!
//! Every `put` is create-only: an existing object is never overwritten. That is what makes a
//! retried flush safe (the caller compares the existing object with its own).

mod fs;
#[cfg(any(test, feature = "test-util"))]
mod memory;
pub(crate) mod s3;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

pub use fs::FsColdStore;
#[cfg(any(test, feature = "test-util"))]
pub use memory::{ColdStep, FailingColdStore, MemoryColdStore};
pub use s3::{ObjectError, S3ColdStore, S3Settings};

/// A boxed future, which keeps [`ColdStore`] object-safe.
pub type ColdFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ColdStoreError>> + Send + 'a>>;

/// Where a segment lives: `{prefix}/{topic}/{partition}/{first}-{last}`, offsets zero-padded to
/// 20 digits so that listing sorts by offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentKey(String);

impl SegmentKey {
    /// The key of the segment holding offsets `first..=last` of `topic`'s `partition`.
    pub fn new(prefix: &str, topic: &str, partition: u32, first: u64, last: u64) -> Self {
        let prefix = prefix.trim_matches('/');
        let head = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Self(format!("{head}{topic}/{partition}/{first:020}-{last:020}"))
    }

    /// The prefix of every segment key of `topic`'s `partition` (ending in `/`, so that it
    /// names no other partition).
    pub fn partition_prefix(prefix: &str, topic: &str, partition: u32) -> String {
        let key = Self::new(prefix, topic, partition, 0, 0).0;
        let end = key.rfind('/').map_or(0, |slash| slash + 1);
        key[..end].to_owned()
    }

    /// The first and last offsets that the key names, if it is a segment key.
    pub fn offsets(&self) -> Option<(u64, u64)> {
        let name = self.0.rsplit('/').next()?;
        let (first, last) = name.split_once('-')?;
        let digits = |text: &str| {
            (text.len() == 20 && text.bytes().all(|b| b.is_ascii_digit()))
                .then(|| text.parse().ok())
                .flatten()
        };
        Some((digits(first)?, digits(last)?)).filter(|(first, last)| first <= last)
    }

    /// A key as stored in a segment index.
    pub fn from_stored(key: String) -> Self {
        Self(key)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SegmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a create-only `put` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object did not exist and now holds the bytes.
    Created,
    /// An object already existed under that key; it was left untouched.
    AlreadyExists,
}

/// A cold-store failure. The data it concerns is not lost: hot records are deleted only after
/// their segment is stored and indexed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColdStoreError {
    /// A local file operation failed.
    #[error("cold store I/O failed on {key}")]
    Io {
        /// The object concerned.
        key: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The object store answered with an error or could not be reached.
    #[error("{message}")]
    Remote {
        /// The object concerned.
        key: String,
        /// What failed, as a sentence naming the operation, the bucket and the object, with
        /// what the object store said (`S3 PUT of {key} in bucket {bucket} failed: status 404,
        /// NoSuchBucket: The specified bucket does not exist`).
        message: String,
    },
    /// The object store is misconfigured (bad endpoint, credentials or bucket name).
    #[error("cold store configuration: {0}")]
    Config(String),
    /// An object exists under a segment's key with other contents than the segment.
    #[error("segment {key} already exists with different contents")]
    Conflict {
        /// The object concerned.
        key: String,
    },
    /// A test double failing on purpose.
    #[cfg(any(test, feature = "test-util"))]
    #[error("injected cold store failure at {0}")]
    Injected(&'static str),
}

/// Write-once object storage for segments.
///
/// Implementations must never overwrite: `put` on an existing key returns
/// [`PutOutcome::AlreadyExists`] and leaves the object as it was.
pub trait ColdStore: fmt::Debug + Send + Sync {
    /// Stores `bytes` under `key` unless an object is already there.
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome>;

    /// The object under `key`, or `None` if there is none.
    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>>;

    /// Every key that starts with `prefix`, sorted.
    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>>;

    /// Removes the object under `key`; removing a missing object is not an error. Whatever an
    /// interrupted `put` of `key` in an earlier process left (the folder store's temporary
    /// files) goes with it: this is how leftovers of killed flushes are removed.
    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys sort by offset because offsets are zero-padded, and an empty prefix adds no slash.
    #[test]
    fn segment_keys_sort_by_offset() {
        let early = SegmentKey::new("segments", "events", 3, 9, 99);
        let late = SegmentKey::new("segments", "events", 3, 100, 100);
        assert_eq!(
            early.as_str(),
            "segments/events/3/00000000000000000009-00000000000000000099"
        );
        assert!(early < late);
        assert_eq!(
            SegmentKey::new("", "t", 0, 0, 0).as_str(),
            "t/0/00000000000000000000-00000000000000000000"
        );
        assert_eq!(
            SegmentKey::new("/p/", "t", 0, 0, 0).as_str(),
            "p/t/0/00000000000000000000-00000000000000000000"
        );
        assert_eq!(
            SegmentKey::partition_prefix("segments", "events", 3),
            "segments/events/3/"
        );
        assert_eq!(SegmentKey::partition_prefix("", "t", 1), "t/1/");
        assert_eq!(early.offsets(), Some((9, 99)));
        assert_eq!(SegmentKey::from_stored("t/1/x-y".into()).offsets(), None);
        assert_eq!(SegmentKey::from_stored("t/1/9-99".into()).offsets(), None);
    }
}
