//! The bucket as the replica uses it: conditional writes, reads with their ETag, listings.
//!
//! rust-s3 answers a failed status as an error (`fail-on-err`), including 404 and 412; these
//! calls turn the ones that are answers into values. Nothing here retries: the caller knows
//! whether a retry is safe.

use std::time::Duration;

use s3::Bucket;
use s3::error::S3Error;

use crate::cold::S3Settings;

/// Longest wait for one request's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
pub(crate) struct Objects {
    bucket: Box<Bucket>,
}

impl Objects {
    /// A client of `settings`' bucket. Nothing is sent yet.
    pub(crate) fn new(settings: &S3Settings) -> Result<Self, ObjectError> {
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
        let bucket = bucket
            .with_request_timeout(REQUEST_TIMEOUT)
            .map_err(|err| config(&err))?;
        Ok(Self { bucket })
    }

    async fn put_with(
        &self,
        key: &str,
        bytes: &[u8],
        header: (&str, &str),
    ) -> Result<Put, ObjectError> {
        let request = self
            .bucket
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
        self.put_with(key, bytes, ("If-None-Match", "*")).await
    }

    /// Replaces the object at `key` if it is still the one with ETag `etag` (`If-Match`).
    pub(crate) async fn replace(
        &self,
        key: &str,
        bytes: &[u8],
        etag: &str,
    ) -> Result<Put, ObjectError> {
        self.put_with(key, bytes, ("If-Match", etag)).await
    }

    /// The object at `key` and its ETag; `None` when there is none.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>, ObjectError> {
        match self.bucket.get_object(key).await {
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
        match self
            .bucket
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
        let pages = self
            .bucket
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
        match self.bucket.delete_object(key).await {
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
        let pages = self
            .bucket
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
