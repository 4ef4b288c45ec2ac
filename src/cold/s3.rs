//! A cold store in S3-compatible object storage (AWS S3, R2, MinIO, Garage, ...), over rust-s3.

use s3::creds::Credentials;
use s3::error::S3Error;
use s3::{Bucket, Region};

use super::{ColdFuture, ColdStore, ColdStoreError, PutOutcome, SegmentKey};

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

/// Segments as objects in one bucket. Puts are conditional (`If-None-Match: *`), so an
/// existing object is never replaced; the store answers 412 for it.
#[derive(Debug)]
pub struct S3ColdStore {
    bucket: Box<Bucket>,
}

impl S3ColdStore {
    /// A store for `settings`' bucket. Nothing is sent until the first request.
    ///
    /// # Errors
    /// [`ColdStoreError::Config`] for an unusable region, credentials or bucket name.
    pub fn new(settings: &S3Settings) -> Result<Self, ColdStoreError> {
        let bucket = Bucket::new(
            &settings.bucket,
            settings.region()?,
            settings.credentials()?,
        )
        .map_err(|err| ColdStoreError::Config(format!("bucket {:?}: {err}", settings.bucket)))?;
        let bucket = if settings.path_style {
            bucket.with_path_style()
        } else {
            bucket
        };
        Ok(Self { bucket })
    }
}

fn remote(key: &str, err: S3Error) -> ColdStoreError {
    ColdStoreError::Remote {
        key: key.to_owned(),
        message: err.to_string(),
    }
}

impl ColdStore for S3ColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        Box::pin(async move {
            let request = self
                .bucket
                .put_object_builder(key.as_str(), bytes)
                .with_header("If-None-Match", "*")
                .map_err(|err| remote(key.as_str(), err))?;
            match request.execute().await {
                Ok(_) => Ok(PutOutcome::Created),
                Err(S3Error::HttpFailWithBody(412, _)) => Ok(PutOutcome::AlreadyExists),
                Err(err) => Err(remote(key.as_str(), err)),
            }
        })
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            match self.bucket.get_object(key.as_str()).await {
                Ok(response) => Ok(Some(response.to_vec())),
                Err(S3Error::HttpFailWithBody(404, _)) => Ok(None),
                Err(err) => Err(remote(key.as_str(), err)),
            }
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        Box::pin(async move {
            let pages = self
                .bucket
                .list(prefix.to_owned(), None)
                .await
                .map_err(|err| remote(prefix, err))?;
            let mut keys: Vec<SegmentKey> = pages
                .into_iter()
                .flat_map(|page| page.contents)
                .map(|object| SegmentKey::from_stored(object.key))
                .collect();
            keys.sort();
            Ok(keys)
        })
    }

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        Box::pin(async move {
            match self.bucket.delete_object(key.as_str()).await {
                Ok(_) | Err(S3Error::HttpFailWithBody(404, _)) => Ok(()),
                Err(err) => Err(remote(key.as_str(), err)),
            }
        })
    }
}
