//! S3-compatible object storage (AWS S3, R2, MinIO, Garage, ...) over rust-s3: the bucket
//! client that the cold tier and the replica share, and the cold store in a bucket.
//!
//! rust-s3 answers a failed status as an error (`fail-on-err`), including 404 and 412; the
//! client's calls turn the ones that are answers into values. Nothing here retries: the caller
//! knows whether a retry is safe.

use std::time::Duration;

use s3::creds::Credentials;
use s3::error::S3Error;
use s3::{Bucket, Region};

use super::{ColdFuture, ColdStore, ColdStoreError, PutOutcome, SegmentKey};

#[cfg(test)]
pub(crate) mod memory;

/// Where and how to reach the bucket: the `[cold]` section's `s3_*` keys.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// Endpoint with scheme (`http://127.0.0.1:9000`); empty means AWS S3 in `region`.
    pub endpoint: String,
    /// Bucket name.
    pub bucket: String,
    /// Region name.
    pub region: String,
    /// Access key; empty means the `AWS_*` environment variables, else anonymous.
    pub access_key: String,
    /// Secret key.
    pub secret_key: String,
    /// Path-style requests (`http://host/bucket/key`), as most S3-compatible servers expect.
    pub path_style: bool,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("path_style", &self.path_style)
            .finish_non_exhaustive()
    }
}

impl S3Settings {
    /// The region as rust-s3 wants it: a custom endpoint when one is given.
    pub fn region(&self) -> Result<Region, ColdStoreError> {
        if self.endpoint.is_empty() {
            self.region
                .parse()
                .map_err(|err| ColdStoreError::Config(format!("region {:?}: {err}", self.region)))
        } else {
            Ok(Region::Custom {
                region: self.region.clone(),
                endpoint: self.endpoint.clone(),
            })
        }
    }

    /// The credentials as rust-s3 wants them: the configured keys, else the standard
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` variables, else anonymous. Never a
    /// network lookup (no instance-metadata probing).
    pub fn credentials(&self) -> Result<Credentials, ColdStoreError> {
        let credentials = if self.access_key.is_empty() {
            Credentials::from_env().or_else(|_| Credentials::anonymous())
        } else {
            Credentials::new(
                Some(&self.access_key),
                Some(&self.secret_key),
                None,
                None,
                None,
            )
        };
        credentials.map_err(|err| ColdStoreError::Config(format!("credentials: {err}")))
    }
}

/// A request that failed without an answer that means something (a network error, a timeout,
/// a 5xx): its outcome is unknown.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub(crate) struct ObjectError {
    key: String,
    message: String,
}

fn failed(key: &str, err: impl std::fmt::Display) -> ObjectError {
    ObjectError {
        key: key.to_owned(),
        message: err.to_string(),
    }
}

/// What a conditional write answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// The object is stored, with this ETag.
    Stored(String),
    /// The condition failed: the object exists (create-only) or changed (`If-Match`).
    ConditionFailed,
}

/// One bucket.
#[derive(Debug)]
pub(crate) struct Objects {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    S3(Box<Bucket>),
    /// Unit tests' bucket, in memory.
    #[cfg(test)]
    Memory(std::sync::Arc<memory::MemoryBucket>),
}

impl Objects {
    /// A client of `settings`' bucket waiting at most `timeout` for each answer (rust-s3's
    /// default when `None`). Nothing is sent yet.
    pub(crate) fn new(
        settings: &S3Settings,
        timeout: Option<Duration>,
    ) -> Result<Self, ObjectError> {
        let config = |err: &dyn std::fmt::Display| failed(&settings.bucket, err);
        let bucket = Bucket::new(
            &settings.bucket,
            settings.region().map_err(|err| config(&err))?,
            settings.credentials().map_err(|err| config(&err))?,
        )
        .map_err(|err| config(&err))?;
        let bucket = if settings.path_style {
            bucket.with_path_style()
        } else {
            bucket
        };
        let bucket = match timeout {
            Some(timeout) => bucket
                .with_request_timeout(timeout)
                .map_err(|err| config(&err))?,
            None => bucket,
        };
        Ok(Self {
            backend: Backend::S3(bucket),
        })
    }

    /// A client of `bucket`, in memory.
    #[cfg(test)]
    pub(crate) fn memory(bucket: std::sync::Arc<memory::MemoryBucket>) -> Self {
        Self {
            backend: Backend::Memory(bucket),
        }
    }

    /// The bucket in memory, when this is one.
    #[cfg(test)]
    fn in_memory(&self) -> Option<&memory::MemoryBucket> {
        match &self.backend {
            Backend::Memory(bucket) => Some(bucket),
            Backend::S3(_) => None,
        }
    }

    /// The S3 bucket (a bucket in memory answers each call before it would be needed).
    fn bucket(&self) -> &Bucket {
        match &self.backend {
            Backend::S3(bucket) => bucket,
            #[cfg(test)]
            Backend::Memory(_) => unreachable!("a bucket in memory answers every call itself"),
        }
    }

    async fn put_with(
        &self,
        key: &str,
        bytes: &[u8],
        header: (&str, &str),
    ) -> Result<Put, ObjectError> {
        let request = self
            .bucket()
            .put_object_builder(key, bytes)
            .with_header(header.0, header.1)
            .map_err(|err| failed(key, err))?;
        match request.execute().await {
            Ok(response) if response.status_code() / 100 == 2 => {
                // rust-s3 answers a PUT's ETag header as its body.
                let etag = response.headers().get("etag").cloned();
                let etag = etag
                    .unwrap_or_else(|| String::from_utf8_lossy(response.as_slice()).into_owned());
                Ok(Put::Stored(etag))
            }
            Ok(response) if response.status_code() == 412 => Ok(Put::ConditionFailed),
            Ok(response) => Err(failed(key, format!("status {}", response.status_code()))),
            Err(S3Error::HttpFailWithBody(412, _)) => Ok(Put::ConditionFailed),
            Err(err) => Err(failed(key, err)),
        }
    }

    /// Stores `bytes` at `key` unless an object is there (`If-None-Match: *`).
    pub(crate) async fn create(&self, key: &str, bytes: &[u8]) -> Result<Put, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.create(key, bytes).await;
        }
        self.put_with(key, bytes, ("If-None-Match", "*")).await
    }

    /// Replaces the object at `key` if it is still the one with ETag `etag` (`If-Match`).
    pub(crate) async fn replace(
        &self,
        key: &str,
        bytes: &[u8],
        etag: &str,
    ) -> Result<Put, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.replace(key, bytes, etag).await;
        }
        self.put_with(key, bytes, ("If-Match", etag)).await
    }

    /// The object at `key` and its ETag; `None` when there is none.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.get(key).await;
        }
        match self.bucket().get_object(key).await {
            Ok(response) if response.status_code() == 200 => {
                let etag = response.headers().get("etag").cloned().unwrap_or_default();
                Ok(Some((response.to_vec(), etag)))
            }
            Ok(response) if response.status_code() == 404 => Ok(None),
            Ok(response) => Err(failed(key, format!("status {}", response.status_code()))),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(None),
            Err(err) => Err(failed(key, err)),
        }
    }

    /// The first `len` bytes of the object at `key` (fewer when it is shorter); `None` when
    /// there is none.
    pub(crate) async fn head_bytes(
        &self,
        key: &str,
        len: u64,
    ) -> Result<Option<Vec<u8>>, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.head_bytes(key, len).await;
        }
        match self
            .bucket()
            .get_object_range(key, 0, Some(len.saturating_sub(1)))
            .await
        {
            Ok(response) if response.status_code() / 100 == 2 => Ok(Some(response.to_vec())),
            Ok(response) if response.status_code() == 404 => Ok(None),
            Ok(response) => Err(failed(key, format!("status {}", response.status_code()))),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(None),
            Err(err) => Err(failed(key, err)),
        }
    }

    /// The keys under `prefix`, sorted.
    pub(crate) async fn keys(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.keys(prefix).await;
        }
        let pages = self
            .bucket()
            .list(prefix.to_owned(), None)
            .await
            .map_err(|err| failed(prefix, err))?;
        let mut keys: Vec<String> = pages
            .into_iter()
            .flat_map(|page| page.contents)
            .map(|object| object.key)
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Deletes the object at `key` (nothing when there is none).
    pub(crate) async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.delete(key).await;
        }
        match self.bucket().delete_object(key).await {
            Ok(response) if response.status_code() / 100 == 2 || response.status_code() == 404 => {
                Ok(())
            }
            Ok(response) => Err(failed(key, format!("status {}", response.status_code()))),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(()),
            Err(err) => Err(failed(key, err)),
        }
    }

    /// The names one level below `prefix` (which ends with `/`): the parts up to the next `/`.
    pub(crate) async fn folders(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        #[cfg(test)]
        if let Some(memory) = self.in_memory() {
            return memory.folders(prefix).await;
        }
        let pages = self
            .bucket()
            .list(prefix.to_owned(), Some("/".to_owned()))
            .await
            .map_err(|err| failed(prefix, err))?;
        Ok(pages
            .into_iter()
            .flat_map(|page| page.common_prefixes.unwrap_or_default())
            .filter_map(|common| {
                common
                    .prefix
                    .strip_prefix(prefix)
                    .map(|rest| rest.trim_end_matches('/').to_owned())
            })
            .collect())
    }
}

/// Segments as objects in one bucket. Puts are conditional (`If-None-Match: *`), so an
/// existing object is never replaced; the store answers 412 for it.
#[derive(Debug)]
pub struct S3ColdStore {
    objects: Objects,
}

impl S3ColdStore {
    /// A store for `settings`' bucket. Nothing is sent until the first request.
    ///
    /// # Errors
    /// [`ColdStoreError::Config`] for an unusable region, credentials or bucket name.
    pub fn new(settings: &S3Settings) -> Result<Self, ColdStoreError> {
        let objects = Objects::new(settings, None).map_err(|err| {
            ColdStoreError::Config(format!("bucket {:?}: {err}", settings.bucket))
        })?;
        Ok(Self { objects })
    }
}

impl From<ObjectError> for ColdStoreError {
    fn from(err: ObjectError) -> Self {
        Self::Remote {
            key: err.key,
            message: err.message,
        }
    }
}

impl ColdStore for S3ColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        Box::pin(async move {
            Ok(match self.objects.create(key.as_str(), bytes).await? {
                Put::Stored(_) => PutOutcome::Created,
                Put::ConditionFailed => PutOutcome::AlreadyExists,
            })
        })
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            Ok(self
                .objects
                .get(key.as_str())
                .await?
                .map(|(bytes, _)| bytes))
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        Box::pin(async move {
            Ok(self
                .objects
                .keys(prefix)
                .await?
                .into_iter()
                .map(SegmentKey::from_stored)
                .collect())
        })
    }

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        Box::pin(async move { Ok(self.objects.delete(key.as_str()).await?) })
    }
}
