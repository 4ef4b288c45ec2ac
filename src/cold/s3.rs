//! S3-compatible object storage (AWS S3, R2, MinIO, Garage, ...) over rust-s3: the bucket
//! client that the cold tier and the replica share, and the cold store in a bucket.
//!
//! rust-s3 answers a failed status as an error (`fail-on-err`), including 404 and 412; the
//! client's calls turn the ones that are answers into values, and the others into an
//! [`ObjectError`], a sentence naming the operation, its key and the bucket, with S3's own
//! code and message (never its XML). Nothing here retries: the caller knows whether a retry is
//! safe.

use std::time::Duration;

use s3::creds::Credentials;
use s3::error::S3Error;
use s3::request::ResponseData;
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
/// a 5xx, a bucket that does not exist), or a client that could not be made: said as a
/// sentence naming the operation, its key and the bucket (never the XML body S3 answers a
/// failure with).
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A request failed; its outcome is unknown.
    #[error("S3 {op} of {key} in bucket {bucket} failed: {reason}")]
    Request {
        /// `PUT`, `GET`, `LIST` or `DELETE`.
        op: &'static str,
        /// The bucket.
        bucket: String,
        /// The object, or the prefix of a listing.
        key: String,
        /// Why, in words (never the XML body of a failure).
        reason: String,
    },
    /// The settings make no client (a region, credentials or bucket name it refuses).
    #[error("no S3 client for bucket {bucket}: {reason}")]
    Client {
        /// The bucket.
        bucket: String,
        /// Why, in words.
        reason: String,
    },
}

/// The operations, as [`ObjectError`] names them.
pub(crate) const PUT: &str = "PUT";
pub(crate) const GET: &str = "GET";
pub(crate) const LIST: &str = "LIST";
pub(crate) const DELETE: &str = "DELETE";

/// Request `op` of `key` in `bucket` failed for `reason`.
pub(crate) fn request_failed(
    op: &'static str,
    bucket: &str,
    key: &str,
    reason: impl Into<String>,
) -> ObjectError {
    ObjectError::Request {
        op,
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Why a request failed, in words: the one rule for every S3 error of this crate. A failure
/// status is said with S3's own `Code` and `Message` when the body is S3's XML error document
/// (the XML itself is never repeated); any other error with its causes.
fn reason(err: &S3Error) -> String {
    match err {
        S3Error::HttpFailWithBody(status, body) => answered(*status, body),
        // rust-s3 says its source in its own message (`reqwest: {0}`): said once.
        other => crate::error_code::with_causes(other),
    }
}

/// A failure status and its body, in words (see [`reason`]).
fn answered(status: u16, body: &str) -> String {
    match (element(body, "Code"), element(body, "Message")) {
        (Some(code), Some(message)) => format!("status {status}, {code}: {message}"),
        (Some(code), None) => format!("status {status}, {code}"),
        (None, Some(message)) => format!("status {status}: {message}"),
        // Plain text (a proxy's answer) is said as is, markup never.
        (None, None) if !body.trim().is_empty() && !body.contains('<') => {
            let text: String = body.trim().chars().take(200).collect();
            format!("status {status}: {text}")
        }
        (None, None) => format!("status {status}"),
    }
}

/// The text of the first `<{name}>` element of an XML document, its entities decoded.
fn element(xml: &str, name: &str) -> Option<String> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let len = xml[start..].find(&format!("</{name}>"))?;
    let text = xml[start..start + len]
        .trim()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    (!text.is_empty()).then_some(text)
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
    /// The bucket's name, for errors.
    name: String,
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
        let config = |err: &dyn std::fmt::Display| ObjectError::Client {
            bucket: settings.bucket.clone(),
            reason: err.to_string(),
        };
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
            name: settings.bucket.clone(),
            backend: Backend::S3(bucket),
        })
    }

    /// A client of `bucket`, in memory (named `memory`).
    #[cfg(test)]
    pub(crate) fn memory(bucket: std::sync::Arc<memory::MemoryBucket>) -> Self {
        Self {
            name: memory::NAME.to_owned(),
            backend: Backend::Memory(bucket),
        }
    }

    /// The bucket's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Request `op` of `key` failed with `err` (see [`reason`]).
    fn failed(&self, op: &'static str, key: &str, err: &S3Error) -> ObjectError {
        request_failed(op, &self.name, key, reason(err))
    }

    /// Request `op` of `key` was answered `response`, which is no answer it expects.
    fn refused(&self, op: &'static str, key: &str, response: &ResponseData) -> ObjectError {
        let body = String::from_utf8_lossy(response.as_slice());
        request_failed(op, &self.name, key, answered(response.status_code(), &body))
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
            .map_err(|err| self.failed(PUT, key, &err))?;
        match request.execute().await {
            Ok(response) if response.status_code() / 100 == 2 => {
                // rust-s3 answers a PUT's ETag header as its body.
                let etag = response.headers().get("etag").cloned();
                let etag = etag
                    .unwrap_or_else(|| String::from_utf8_lossy(response.as_slice()).into_owned());
                Ok(Put::Stored(etag))
            }
            Ok(response) if response.status_code() == 412 => Ok(Put::ConditionFailed),
            Ok(response) => Err(self.refused(PUT, key, &response)),
            Err(S3Error::HttpFailWithBody(412, _)) => Ok(Put::ConditionFailed),
            Err(err) => Err(self.failed(PUT, key, &err)),
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
            Ok(response) => Err(self.refused(GET, key, &response)),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(None),
            Err(err) => Err(self.failed(GET, key, &err)),
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
            Ok(response) => Err(self.refused(GET, key, &response)),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(None),
            Err(err) => Err(self.failed(GET, key, &err)),
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
            .map_err(|err| self.failed(LIST, prefix, &err))?;
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
            Ok(response) => Err(self.refused(DELETE, key, &response)),
            Err(S3Error::HttpFailWithBody(404, _)) => Ok(()),
            Err(err) => Err(self.failed(DELETE, key, &err)),
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
            .map_err(|err| self.failed(LIST, prefix, &err))?;
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
        let objects = Objects::new(settings, None)?;
        Ok(Self { objects })
    }
}

impl From<ObjectError> for ColdStoreError {
    fn from(err: ObjectError) -> Self {
        match &err {
            ObjectError::Request { key, .. } => Self::Remote {
                key: key.clone(),
                message: err.to_string(),
            },
            ObjectError::Client { .. } => Self::Config(err.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// S3's XML error document is said by its code and message, never repeated as XML; a body
    /// that is not S3's is said when it is plain text, and left out when it is markup.
    #[test]
    fn failures_are_sentences_without_xml() {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code>\
                    <Message>The specified bucket does not exist</Message>\
                    <BucketName>gone</BucketName></Error>";
        let err = request_failed(
            PUT,
            "gone",
            "replica/volumes",
            reason(&S3Error::HttpFailWithBody(404, body.into())),
        );
        assert_eq!(
            err.to_string(),
            "S3 PUT of replica/volumes in bucket gone failed: status 404, NoSuchBucket: The \
             specified bucket does not exist"
        );
        let cases = [
            (
                "<Error><Code>AccessDenied</Code></Error>",
                "status 403, AccessDenied",
            ),
            (
                "<Error><Message>Tom &amp; Jerry &quot;x&quot;</Message></Error>",
                "status 403: Tom & Jerry \"x\"",
            ),
            ("proxy says no\n", "status 403: proxy says no"),
            ("<html><body>Forbidden</body></html>", "status 403"),
            ("", "status 403"),
        ];
        for (body, said) in cases {
            assert_eq!(
                reason(&S3Error::HttpFailWithBody(403, body.into())),
                said,
                "{body}"
            );
        }
    }

    /// A cold-store error is the same sentence, and keeps its key.
    #[test]
    fn cold_store_errors_are_the_same_sentences() {
        let err = request_failed(LIST, "b", "cold/", "status 500");
        let sentence = err.to_string();
        let cold = ColdStoreError::from(err);
        assert!(
            matches!(&cold, ColdStoreError::Remote { key, .. } if key == "cold/"),
            "{cold:?}"
        );
        assert_eq!(cold.to_string(), sentence);
        assert_eq!(sentence, "S3 LIST of cold/ in bucket b failed: status 500");
    }
}
