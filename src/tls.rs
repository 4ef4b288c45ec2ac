//! TLS on the REST listener: rustls with the ring provider, TLS 1.3 and 1.2 only. The
//! certificate chain and key are read from PEM files, and read again on SIGHUP and whenever
//! either file changes, without a restart: open connections keep their session, new ones get
//! the new certificate, and a reload that fails keeps the one in force and says why. With a
//! client CA, every client must present a certificate it signed.
//!
//! The clients the node makes of other servers (the other nodes, etcd) trust only the CA they
//! are given, and show a client certificate when they have one: `trusting`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

/// How often the certificate's files are looked at for changes.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The certificate in force, which every new connection is given.
#[derive(Debug)]
pub struct Certificate {
    current: RwLock<Arc<CertifiedKey>>,
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(crate::sync::read_lock(&self.current).clone())
    }
}

impl Certificate {
    /// Reads the chain and key again; on failure the certificate in force stays.
    ///
    /// # Errors
    /// Why the files could not be read, or do not make a certificate with its key.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = certified(&self.cert_file, &self.key_file, &self.provider)?;
        *crate::sync::write_lock(&self.current) = Arc::new(fresh);
        Ok(())
    }
}

/// The server's TLS settings from PEM files: the chain at `cert_file`, its key at `key_file`,
/// and, if given, the CA whose client certificates alone are let in. Answers the certificate
/// in force too, to reload it; a thread of its own reloads it when the files change, until it
/// is dropped.
///
/// # Errors
/// Why a file could not be read or does not hold what it should.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    client_ca_file: Option<&Path>,
) -> Result<(ServerConfig, Arc<Certificate>), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|err| err.to_string())?;
    let builder = match client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for cert in chain(ca_file)? {
                roots
                    .add(cert)
                    .map_err(|err| format!("{}: {err}", ca_file.display()))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|err| format!("{}: {err}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let certificate = Arc::new(Certificate {
        current: RwLock::new(Arc::new(certified(cert_file, key_file, &provider)?)),
        cert_file: cert_file.to_owned(),
        key_file: key_file.to_owned(),
        provider,
    });
    let watched = Arc::downgrade(&certificate);
    std::thread::Builder::new()
        .name("durability-tls".into())
        .spawn(move || watch(&watched))
        .map_err(|err| format!("the certificate's watcher: {err}"))?;
    let mut config = builder.with_cert_resolver(certificate.clone());
    // HTTP/1.1 only: the server is built without an HTTP/2 stack.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, certificate))
}

/// Whether the files make a certificate with its key (and the client CA, if any, a CA):
/// for `--check-config`.
///
/// # Errors
/// What is wrong, naming the file.
pub fn check(
    cert_file: &Path,
    key_file: &Path,
    client_ca_file: Option<&Path>,
) -> Result<(), String> {
    server_config(cert_file, key_file, client_ca_file).map(drop)
}

/// `builder`, trusting only the CA at `ca_file` when one is given (otherwise the built-in
/// roots: the public ones, and the store `SSL_CERT_FILE` names), speaking TLS 1.2 or 1.3, and showing the client certificate `identity` (its
/// chain's file, its key's file) to servers that ask for one.
///
/// # Errors
/// Why a file could not be read or does not hold what it should.
pub(crate) fn trusting(
    builder: reqwest::ClientBuilder,
    ca_file: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<reqwest::ClientBuilder, String> {
    let mut builder = builder
        .min_tls_version(reqwest::tls::Version::TLS_1_2)
        .https_only(ca_file.is_some());
    if let Some(ca_file) = ca_file {
        builder = builder.tls_built_in_root_certs(false);
        for cert in chain(ca_file)? {
            let cert = reqwest::Certificate::from_der(&cert)
                .map_err(|err| format!("{}: {err}", ca_file.display()))?;
            builder = builder.add_root_certificate(cert);
        }
    }
    if let Some((cert_file, key_file)) = identity {
        let read =
            |path: &Path| std::fs::read(path).map_err(|err| format!("{}: {err}", path.display()));
        let mut pem = read(cert_file)?;
        pem.push(b'\n');
        pem.extend(read(key_file)?);
        let identity = reqwest::Identity::from_pem(&pem)
            .map_err(|err| format!("{} with {}: {err}", cert_file.display(), key_file.display()))?;
        builder = builder.identity(identity);
    }
    Ok(builder)
}

/// Whether a client can be made trusting `ca_file` and showing `identity` (see [`trusting`]):
/// for `--check-config`.
///
/// # Errors
/// What is wrong, naming the file.
pub(crate) fn check_client(
    ca_file: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<(), String> {
    trusting(reqwest::Client::builder(), ca_file, identity)?
        .build()
        .map(drop)
        .map_err(|err| err.to_string())
}

/// The certificates of the PEM file at `path`, at least one.
fn chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = |err: rustls::pki_types::pem::Error| format!("{}: {err}", path.display());
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(chain)
}

/// The chain at `cert_file` with the key at `key_file`, checked to match.
fn certified(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let chain = chain(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|err| format!("{}: {err}", key_file.display()))?;
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|err| format!("{} with {}: {err}", cert_file.display(), key_file.display()))?;
    Ok(certified)
}

/// Reloads the certificate whenever its files' modification times change, until it is gone.
fn watch(certificate: &Weak<Certificate>) {
    let stamps = |certificate: &Certificate| -> [Option<SystemTime>; 2] {
        [&certificate.cert_file, &certificate.key_file].map(|file| {
            std::fs::metadata(file)
                .and_then(|meta| meta.modified())
                .ok()
        })
    };
    let Some(mut seen) = certificate
        .upgrade()
        .map(|certificate| stamps(&certificate))
    else {
        return;
    };
    loop {
        std::thread::sleep(WATCH_EVERY);
        let Some(certificate) = certificate.upgrade() else {
            return;
        };
        let now = stamps(&certificate);
        if now == seen {
            continue;
        }
        seen = now;
        match certificate.reload() {
            Ok(()) => log::info!("{}: certificate reloaded", certificate.cert_file.display()),
            Err(why) => log::warn!("certificate not reloaded, the one in force stays: {why}"),
        }
    }
}
