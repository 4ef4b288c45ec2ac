//! `[cold]`: where expired records go (a local folder, an S3-compatible bucket, or nowhere).

use std::fmt;
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;

use super::{ConfigError, redacted};
use crate::cold::S3Settings;

/// Where expired records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColdKind {
    /// A local folder.
    Fs,
    /// S3-compatible object storage.
    S3,
    /// Nowhere: expired records are deleted.
    None,
}

/// `[cold]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdSettings {
    /// Backend. Default: `fs`.
    pub kind: ColdKind,
    /// Folder for `fs`. Default: empty, which is the folder `cold` under `storage.data_dir`
    /// wherever that is (see [`Config::cold_dir`](super::Config::cold_dir)).
    pub dir: PathBuf,
    /// Prefix of every segment's key. Default: `segments`.
    pub prefix: String,
    /// Endpoint with scheme for `s3`; empty means AWS S3. Default: empty.
    pub s3_endpoint: String,
    /// Bucket for `s3`. Default: empty.
    pub s3_bucket: String,
    /// Region for `s3`. Default: `us-east-1`.
    pub s3_region: String,
    /// Access key for `s3`. Default: empty.
    pub s3_access_key: String,
    /// Secret key for `s3`. Default: empty.
    pub s3_secret_key: String,
    /// Path-style requests. Default: true.
    pub s3_path_style: bool,
    /// A file holding `s3_access_key` instead. Default: empty.
    pub s3_access_key_file: PathBuf,
    /// A file holding `s3_secret_key` instead. Default: empty.
    pub s3_secret_key_file: PathBuf,
    /// PEM file of the CA that an `https://` `s3_endpoint`'s certificate chains to, trusted
    /// besides the public roots. Default: empty (the public roots only).
    ///
    /// rust-s3 builds its own HTTP client and takes no root certificate, so the CA reaches it
    /// as `SSL_CERT_FILE`, which every HTTP client of the process reads at its creation: the
    /// `durability` binary sets it from this key before it starts a thread. A library's
    /// process is left alone: an embedder sets `SSL_CERT_FILE` to this file itself, before
    /// its first thread starts.
    pub s3_ca_file: PathBuf,
}

impl fmt::Debug for ColdSettings {
    /// Like a derived `Debug`, with the secret key redacted so configs can be logged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColdSettings")
            .field("kind", &self.kind)
            .field("dir", &self.dir)
            .field("prefix", &self.prefix)
            .field("s3_endpoint", &self.s3_endpoint)
            .field("s3_bucket", &self.s3_bucket)
            .field("s3_region", &self.s3_region)
            .field("s3_access_key", &redacted(&self.s3_access_key))
            .field("s3_secret_key", &redacted(&self.s3_secret_key))
            .field("s3_path_style", &self.s3_path_style)
            .field("s3_access_key_file", &self.s3_access_key_file)
            .field("s3_secret_key_file", &self.s3_secret_key_file)
            .field("s3_ca_file", &self.s3_ca_file)
            .finish()
    }
}

impl ColdSettings {
    /// The `s3_*` keys as S3 client settings.
    pub fn s3(&self) -> S3Settings {
        S3Settings {
            endpoint: self.s3_endpoint.clone(),
            bucket: self.s3_bucket.clone(),
            region: self.s3_region.clone(),
            access_key: self.s3_access_key.clone(),
            secret_key: self.s3_secret_key.clone(),
            path_style: self.s3_path_style,
        }
    }

    /// `s3_ca_file`, unless empty.
    pub fn s3_ca(&self) -> Option<&Path> {
        (!self.s3_ca_file.as_os_str().is_empty()).then_some(self.s3_ca_file.as_path())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match self.kind {
            ColdKind::S3 if self.s3_bucket.is_empty() => Err(ConfigError::invalid(
                "cold.s3_bucket",
                "must not be empty when cold.kind is \"s3\"",
            )),
            ColdKind::S3
                if !self.s3_endpoint.is_empty()
                    && !self.s3_endpoint.starts_with("http://")
                    && !self.s3_endpoint.starts_with("https://") =>
            {
                Err(ConfigError::invalid(
                    "cold.s3_endpoint",
                    "must start with http:// or https://",
                ))
            }
            _ => Ok(()),
        }?;
        let Some(ca_file) = self.s3_ca() else {
            return Ok(());
        };
        if !self.s3_endpoint.starts_with("https://") {
            return Err(ConfigError::invalid(
                "cold.s3_ca_file",
                "the S3 endpoint's CA is for an https:// cold.s3_endpoint only",
            ));
        }
        check_ca_file(ca_file).map_err(|why| ConfigError::invalid("cold.s3_ca_file", why))
    }
}

/// Whether the PEM file at `path` holds at least one certificate, each one that rustls takes
/// as a root: the S3 client reads it as `SSL_CERT_FILE`, and skips one it cannot take
/// without a word.
fn check_ca_file(path: &Path) -> Result<(), String> {
    let unfit = |err: &dyn fmt::Display| format!("{}: {err}", path.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|err| unfit(&err))? {
        let cert = cert.map_err(|err| unfit(&err))?;
        roots.add(cert).map_err(|err| unfit(&err))?;
    }
    if roots.is_empty() {
        return Err(unfit(&"no certificate in it"));
    }
    Ok(())
}
