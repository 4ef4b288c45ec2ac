//! `[server]` and `[metrics]`: the HTTP listener, and what its `GET /metrics` shows.

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, positive};

/// The longest `waitMs` the REST contract allows: `server.max_wait_ms` may only shorten it.
pub const MAX_WAIT_MS: u64 = 30_000;

/// `[server]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Listen address; port 0 picks a free one. Default: `127.0.0.1:8080`.
    pub bind: String,
    /// Bearer token for every endpoint but `/healthz`; empty: no auth. Default: empty.
    pub auth_token: String,
    /// A file holding `auth_token` instead. Default: empty.
    pub auth_token_file: PathBuf,
    /// Largest request body. Default: 16 MiB.
    pub max_body_bytes: usize,
    /// Longest wait for a request's body. Default: 5,000.
    pub request_timeout_ms: u64,
    /// Longest wait of a long-poll read (`waitMs`); a longer one is cut to it. At most
    /// [`MAX_WAIT_MS`]. Default: 30,000.
    pub max_wait_ms: u64,
    /// `[server.tls]`: TLS on the listener.
    pub tls: TlsSettings,
}

/// `[server.tls]`: TLS on the listener (see `tls.rs`); off while `cert_file` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// The certificate chain, PEM, the server's own first. Default: empty (no TLS).
    pub cert_file: PathBuf,
    /// Its private key, PEM. Default: empty.
    pub key_file: PathBuf,
    /// A CA, PEM: when given, only clients presenting a certificate it signed are let in.
    /// Default: empty.
    pub client_ca_file: PathBuf,
}

impl TlsSettings {
    /// Whether the listener speaks TLS.
    pub fn enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty()
    }

    /// The client CA, if one is set.
    pub fn client_ca(&self) -> Option<&Path> {
        (!self.client_ca_file.as_os_str().is_empty()).then_some(self.client_ca_file.as_path())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            if !self.key_file.as_os_str().is_empty() || self.client_ca().is_some() {
                return Err(ConfigError::invalid(
                    "server.tls.cert_file",
                    "is needed with server.tls.key_file or server.tls.client_ca_file",
                ));
            }
            return Ok(());
        }
        if self.key_file.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "server.tls.key_file",
                "is needed with server.tls.cert_file",
            ));
        }
        crate::tls::check(&self.cert_file, &self.key_file, self.client_ca())
            .map_err(|why| ConfigError::invalid("server.tls", why))
    }
}

impl std::fmt::Debug for ServerSettings {
    /// Like a derived `Debug`, with the token redacted so configs can be logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("bind", &self.bind)
            .field("auth_token", &super::redacted(&self.auth_token))
            .field("auth_token_file", &self.auth_token_file)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("max_wait_ms", &self.max_wait_ms)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ServerSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self
            .bind
            .to_socket_addrs()
            .map(|mut addrs| addrs.next().is_none())
            .unwrap_or(true)
        {
            return Err(ConfigError::invalid(
                "server.bind",
                format!("{:?} is not a host:port address", self.bind),
            ));
        }
        self.tls.validate()?;
        positive("server.max_body_bytes", self.max_body_bytes as u64)?;
        positive("server.request_timeout_ms", self.request_timeout_ms)?;
        if self.max_wait_ms > MAX_WAIT_MS {
            return Err(ConfigError::invalid(
                "server.max_wait_ms",
                format!("must be at most {MAX_WAIT_MS}"),
            ));
        }
        Ok(())
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Topics with series of their own, the first seen since the server started; the counts
    /// of later ones are summed under `topic="(other)"`. Default: 1,000.
    pub max_topics: usize,
    /// How often the groups of those topics have their lag sampled for the lag history
    /// ([`LAG_SAMPLES`](crate::log::LAG_SAMPLES) kept); 0: no history. Default: 20,000 (the
    /// last hour).
    pub lag_sample_ms: u64,
}
