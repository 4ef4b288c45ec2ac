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
    /// The object is stored.
    Stored,
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
            Ok(response) if response.status_code() / 100 == 2 => Ok(Put::Stored),
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
