//! A bucket in memory behind [`Objects`](super::Objects), for unit tests of the replica: the
//! conditional writes, reads, listings and deletes of S3 as the replica uses them, answered at
//! once, with failures, lost answers, hangs and interleavings of concurrent callers injected
//! by a [`Faults`] hook; or a bucket that ignores the conditions of its writes, as one behind a
//! proxy that strips `If-None-Match` and `If-Match` does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};

use super::{DELETE, GET, LIST, ObjectError, PUT, Put, request_failed};
use crate::sync::lock;

/// A bucket in memory's name, in errors.
pub(crate) const NAME: &str = "memory";

/// What a call asks of the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Create,
    Replace,
    Get,
    HeadBytes,
    Keys,
    Delete,
    Folders,
}

impl Op {
    /// The S3 request it stands for.
    fn request(self) -> &'static str {
        match self {
            Op::Create | Op::Replace => PUT,
            Op::Get | Op::HeadBytes => GET,
            Op::Keys | Op::Folders => LIST,
            Op::Delete => DELETE,
        }
    }
}

/// One call, as the hook sees it: `key` is the prefix of a listing.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub op: Op,
    pub key: &'a str,
}

/// How the bucket answers one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Times the call yields to other tasks before it is carried out: concurrent callers
    /// joined on one task interleave their calls.
    pub yields: u32,
    pub fault: Option<Fault>,
}

/// A failure of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Not carried out, answered as a failure (a refused request, a timeout before it reached
    /// the bucket).
    Fail,
    /// Carried out, then answered as a failure (the answer lost on its way back).
    LoseAnswer,
    /// Never answered nor carried out: the caller stopped before sending it.
    Hang,
    /// Carried out and never answered: the caller stopped while it was in flight.
    HangAfter,
}

/// Decides how each call is answered.
pub(crate) trait Faults: Send + Sync {
    fn answer(&self, call: &Call<'_>) -> Answer;

    /// Told when a call hangs for good (see [`Fault::Hang`]), just before it does.
    fn hangs(&self, _call: &Call<'_>) {}
}

/// Answers every call at once and correctly.
struct NoFaults;

impl Faults for NoFaults {
    fn answer(&self, _call: &Call<'_>) -> Answer {
        Answer::default()
    }
}

/// An object: its bytes and its ETag.
type Stored = (Arc<[u8]>, String);

/// Objects in a sorted map. An ETag is the SHA-256 of the bytes, so identical bytes have one
/// ETag, as S3's MD5 ETags do.
pub(crate) struct MemoryBucket {
    objects: Mutex<BTreeMap<String, Stored>>,
    faults: Box<dyn Faults>,
    /// Which write conditions it ignores, storing the object whatever is there.
    ignores: Ignores,
}

/// The write conditions a [`MemoryBucket`] ignores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ignores {
    /// A create-only write replaces an existing object.
    pub if_none_match: bool,
    /// A write naming an ETag replaces the object whatever its ETag (or creates it).
    pub if_match: bool,
}

impl std::fmt::Debug for MemoryBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBucket")
            .field("objects", &self.objects().len())
            .finish_non_exhaustive()
    }
}

impl MemoryBucket {
    /// An empty bucket that answers every call correctly.
    pub(crate) fn new() -> Arc<Self> {
        Self::with_faults(NoFaults)
    }

    /// An empty bucket whose answers `faults` decides.
    pub(crate) fn with_faults(faults: impl Faults + 'static) -> Arc<Self> {
        Arc::new(Self {
            objects: Mutex::default(),
            faults: Box::new(faults),
            ignores: Ignores::default(),
        })
    }

    /// An empty bucket that answers every call at once, ignoring the write conditions of
    /// `ignores`.
    pub(crate) fn ignoring(ignores: Ignores) -> Arc<Self> {
        Arc::new(Self {
            objects: Mutex::default(),
            faults: Box::new(NoFaults),
            ignores,
        })
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<String, Stored>> {
        lock(&self.objects)
    }

    /// Every object, bypassing the hook (what an audit reads).
    pub(crate) fn dump(&self) -> BTreeMap<String, Arc<[u8]>> {
        self.objects()
            .iter()
            .map(|(key, (bytes, _))| (key.clone(), bytes.clone()))
            .collect()
    }

    /// Carries out `apply` as the hook answers call `op` on `key`.
    async fn call<T>(
        &self,
        op: Op,
        key: &str,
        apply: impl FnOnce(&mut BTreeMap<String, Stored>) -> T,
    ) -> Result<T, ObjectError> {
        let call = Call { op, key };
        let answer = self.faults.answer(&call);
        for _ in 0..answer.yields {
            tokio::task::yield_now().await;
        }
        match answer.fault {
            Some(Fault::Fail) => {
                return Err(request_failed(
                    op.request(),
                    NAME,
                    key,
                    "injected: the request failed",
                ));
            }
            Some(Fault::Hang) => {
                self.faults.hangs(&call);
                return std::future::pending().await;
            }
            _ => {}
        }
        let outcome = apply(&mut self.objects());
        match answer.fault {
            Some(Fault::LoseAnswer) => Err(request_failed(
                op.request(),
                NAME,
                key,
                "injected: the answer was lost",
            )),
            Some(Fault::HangAfter) => {
                self.faults.hangs(&call);
                std::future::pending().await
            }
            _ => Ok(outcome),
        }
    }

    fn etag(bytes: &[u8]) -> String {
        format!("\"{}\"", hex::encode(Sha256::digest(bytes)))
    }

    /// `If-None-Match: *`.
    pub(crate) async fn create(&self, key: &str, bytes: &[u8]) -> Result<Put, ObjectError> {
        self.call(Op::Create, key, |objects| {
            if objects.contains_key(key) && !self.ignores.if_none_match {
                return Put::ConditionFailed;
            }
            let etag = Self::etag(bytes);
            objects.insert(key.to_owned(), (bytes.into(), etag.clone()));
            Put::Stored(etag)
        })
        .await
    }

    /// `If-Match: etag`; a missing object fails the condition too.
    pub(crate) async fn replace(
        &self,
        key: &str,
        bytes: &[u8],
        etag: &str,
    ) -> Result<Put, ObjectError> {
        self.call(Op::Replace, key, |objects| {
            let matches = objects.get(key).is_some_and(|stored| stored.1 == etag);
            if !matches && !self.ignores.if_match {
                return Put::ConditionFailed;
            }
            let etag = Self::etag(bytes);
            objects.insert(key.to_owned(), (bytes.into(), etag.clone()));
            Put::Stored(etag)
        })
        .await
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>, ObjectError> {
        self.call(Op::Get, key, |objects| {
            objects
                .get(key)
                .map(|(bytes, etag)| (bytes.to_vec(), etag.clone()))
        })
        .await
    }

    pub(crate) async fn head_bytes(
        &self,
        key: &str,
        len: u64,
    ) -> Result<Option<Vec<u8>>, ObjectError> {
        self.call(Op::HeadBytes, key, |objects| {
            objects.get(key).map(|(bytes, _)| {
                let len = usize::try_from(len).unwrap_or(usize::MAX).min(bytes.len());
                bytes[..len].to_vec()
            })
        })
        .await
    }

    /// The keys under `prefix`, sorted.
    pub(crate) async fn keys(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        self.call(Op::Keys, prefix, |objects| {
            objects
                .range(prefix.to_owned()..)
                .take_while(|(key, _)| key.starts_with(prefix))
                .map(|(key, _)| key.clone())
                .collect()
        })
        .await
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.call(Op::Delete, key, |objects| {
            objects.remove(key);
        })
        .await
    }

    /// The names one level below `prefix` that hold objects deeper down (S3's common
    /// prefixes with delimiter `/`), without the trailing `/`.
    pub(crate) async fn folders(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        self.call(Op::Folders, prefix, |objects| {
            let folders: BTreeSet<String> = objects
                .range(prefix.to_owned()..)
                .take_while(|(key, _)| key.starts_with(prefix))
                .filter_map(|(key, _)| {
                    let (folder, _) = key[prefix.len()..].split_once('/')?;
                    Some(folder.to_owned())
                })
                .collect();
            folders.into_iter().collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    /// Create-only and `If-Match` writes answer as S3 does; listings are sorted and folders
    /// are the common prefixes.
    #[test]
    fn conditional_writes_and_listings() {
        block_on(async {
            let bucket = MemoryBucket::new();
            let Put::Stored(etag) = bucket.create("p/a/1", b"one").await.unwrap() else {
                panic!("created")
            };
            assert_eq!(
                bucket.create("p/a/1", b"two").await.unwrap(),
                Put::ConditionFailed
            );
            assert_eq!(
                bucket.replace("p/a/1", b"two", "\"other\"").await.unwrap(),
                Put::ConditionFailed
            );
            assert_eq!(
                bucket.replace("p/none", b"two", &etag).await.unwrap(),
                Put::ConditionFailed
            );
            let Put::Stored(second) = bucket.replace("p/a/1", b"two", &etag).await.unwrap() else {
                panic!("replaced")
            };
            assert_ne!(second, etag);
            assert_eq!(
                bucket.get("p/a/1").await.unwrap(),
                Some((b"two".to_vec(), second))
            );
            assert_eq!(
                bucket.head_bytes("p/a/1", 1).await.unwrap(),
                Some(b"t".to_vec())
            );
            bucket.create("p/b/2/x", b"").await.unwrap();
            bucket.create("p/c", b"").await.unwrap();
            bucket.create("q/a/1", b"").await.unwrap();
            assert_eq!(
                bucket.keys("p/").await.unwrap(),
                ["p/a/1", "p/b/2/x", "p/c"]
            );
            assert_eq!(bucket.folders("p/").await.unwrap(), ["a", "b"]);
            bucket.delete("p/a/1").await.unwrap();
            bucket.delete("p/a/1").await.unwrap();
            assert_eq!(bucket.get("p/a/1").await.unwrap(), None);
            assert_eq!(bucket.folders("p/").await.unwrap(), ["b"]);
        });
    }

    struct LoseEveryAnswer;

    impl Faults for LoseEveryAnswer {
        fn answer(&self, _call: &Call<'_>) -> Answer {
            Answer {
                yields: 1,
                fault: Some(Fault::LoseAnswer),
            }
        }
    }

    /// A lost answer leaves the write done.
    #[test]
    fn a_lost_answer_leaves_the_write_done() {
        block_on(async {
            let bucket = MemoryBucket::with_faults(LoseEveryAnswer);
            assert!(bucket.create("k", b"v").await.is_err());
            assert_eq!(
                bucket.dump().get("k").map(|bytes| &bytes[..]),
                Some(&b"v"[..])
            );
        });
    }
}
