//! `[cluster]`: the nodes that share the volumes through etcd.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, ReplicationKind, is_key_component, redacted};

/// Longest `cluster.volumes`.
const MAX_CLUSTER_VOLUMES: usize = 4096;

/// `[cluster]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// etcd endpoints, comma-separated; empty: a single node. Default: empty.
    pub etcd_endpoints: String,
    /// How other nodes reach this one. Default: empty (required in a cluster).
    pub advertise_url: String,
    /// The node's etcd lease: its volumes go to the others once it stopped renewing it for
    /// this long. Default: 5,000.
    pub lease_ttl_ms: u64,
    /// The cluster's name, under which its etcd keys are. Default: `default`.
    pub name: String,
    /// Volumes the cluster's data is spread over, fixed by the first node. Default: 256.
    pub volumes: usize,
    /// What the nodes prove themselves to one another with; empty: `server.auth_token`.
    /// Default: empty.
    pub secret: String,
    /// A file holding `secret` instead. Default: empty.
    pub secret_file: PathBuf,
    /// The CA that signed etcd's certificate, PEM; empty: the public roots. Default: empty.
    pub etcd_ca_file: PathBuf,
    /// This node's client certificate for etcd, PEM. Default: empty.
    pub etcd_cert_file: PathBuf,
    /// Its private key, PEM. Default: empty.
    pub etcd_key_file: PathBuf,
    /// etcd's user, when etcd has authentication on. Default: empty.
    pub etcd_user: String,
    /// Its password. Default: empty.
    pub etcd_password: String,
    /// A file holding `etcd_password` instead. Default: empty.
    pub etcd_password_file: PathBuf,
    /// `[cluster.tls]`: TLS between the nodes.
    pub tls: NodeTlsSettings,
}

/// `[cluster.tls]`: TLS between the nodes; off while `ca_file` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTlsSettings {
    /// The CA that signed every node's server certificate, PEM: the only one a node trusts
    /// when it calls another. Default: empty (plain HTTP between nodes).
    pub ca_file: PathBuf,
    /// This node's client certificate, PEM, for nodes whose listener asks for one. Default:
    /// empty.
    pub cert_file: PathBuf,
    /// Its private key, PEM. Default: empty.
    pub key_file: PathBuf,
}

impl NodeTlsSettings {
    /// Whether the nodes speak TLS to one another.
    pub fn enabled(&self) -> bool {
        !self.ca_file.as_os_str().is_empty()
    }

    /// This node's client certificate and key, if it has them.
    pub fn identity(&self) -> Option<(&Path, &Path)> {
        (!self.cert_file.as_os_str().is_empty())
            .then_some((self.cert_file.as_path(), self.key_file.as_path()))
    }
}

impl std::fmt::Debug for ClusterSettings {
    /// Like a derived `Debug`, with the secrets redacted so configs can be logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("etcd_endpoints", &self.etcd_endpoints)
            .field("advertise_url", &self.advertise_url)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("name", &self.name)
            .field("volumes", &self.volumes)
            .field("secret", &redacted(&self.secret))
            .field("secret_file", &self.secret_file)
            .field("etcd_ca_file", &self.etcd_ca_file)
            .field("etcd_cert_file", &self.etcd_cert_file)
            .field("etcd_key_file", &self.etcd_key_file)
            .field("etcd_user", &self.etcd_user)
            .field("etcd_password", &redacted(&self.etcd_password))
            .field("etcd_password_file", &self.etcd_password_file)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ClusterSettings {
    /// Whether this node is part of a cluster.
    pub fn enabled(&self) -> bool {
        !self.etcd_endpoints.trim().is_empty()
    }

    /// The etcd endpoints, each a base URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.etcd_endpoints
            .split(',')
            .map(|endpoint| endpoint.trim().trim_end_matches('/').to_owned())
            .filter(|endpoint| !endpoint.is_empty())
            .collect()
    }

    /// Checks the section when this node is part of a cluster, which shares its volumes
    /// through the bucket: `replication` must be `s3`.
    pub(super) fn validate(&self, replication: ReplicationKind) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if replication != ReplicationKind::S3 {
            return Err(ConfigError::invalid(
                "cluster.etcd_endpoints",
                "a cluster shares its volumes through the bucket: replication.kind must be \"s3\"",
            ));
        }
        let is_url = |url: &str| url.starts_with("http://") || url.starts_with("https://");
        if let Some(bad) = self
            .endpoints()
            .into_iter()
            .find(|endpoint| !is_url(endpoint))
        {
            return Err(ConfigError::invalid(
                "cluster.etcd_endpoints",
                format!("{bad} is not an http:// or https:// URL"),
            ));
        }
        if !is_url(&self.advertise_url) {
            return Err(ConfigError::invalid(
                "cluster.advertise_url",
                "must be the http:// or https:// URL other nodes reach this one at",
            ));
        }
        if self.lease_ttl_ms < 1000 {
            return Err(ConfigError::invalid(
                "cluster.lease_ttl_ms",
                "must be at least 1000 (etcd counts leases in seconds)",
            ));
        }
        if !is_key_component(&self.name) {
            return Err(ConfigError::invalid(
                "cluster.name",
                "must be letters, digits, '.', '_' or '-'",
            ));
        }
        if !(1..=MAX_CLUSTER_VOLUMES).contains(&self.volumes) {
            return Err(ConfigError::invalid(
                "cluster.volumes",
                format!("must be 1 to {MAX_CLUSTER_VOLUMES}"),
            ));
        }
        self.validate_etcd_access()?;
        self.validate_node_tls()
    }

    /// The secret the nodes prove themselves to one another with: `secret`, else
    /// `auth_token` (`server.auth_token`); empty when neither is set.
    pub fn node_secret<'a>(&'a self, auth_token: &'a str) -> &'a str {
        if self.secret.is_empty() {
            auth_token
        } else {
            &self.secret
        }
    }

    /// The CA that signed etcd's certificate, if given.
    pub fn etcd_ca(&self) -> Option<&Path> {
        (!self.etcd_ca_file.as_os_str().is_empty()).then_some(self.etcd_ca_file.as_path())
    }

    /// This node's client certificate and key for etcd, if given.
    pub fn etcd_identity(&self) -> Option<(&Path, &Path)> {
        (!self.etcd_cert_file.as_os_str().is_empty())
            .then_some((self.etcd_cert_file.as_path(), self.etcd_key_file.as_path()))
    }

    /// etcd's TLS files and its user come in pairs, and its CA only with https endpoints.
    fn validate_etcd_access(&self) -> Result<(), ConfigError> {
        let given = |path: &Path| !path.as_os_str().is_empty();
        if given(&self.etcd_cert_file) != given(&self.etcd_key_file) {
            return Err(ConfigError::invalid(
                "cluster.etcd_key_file",
                "cluster.etcd_cert_file and cluster.etcd_key_file are given together",
            ));
        }
        let https = self
            .endpoints()
            .iter()
            .all(|endpoint| endpoint.starts_with("https://"));
        if (given(&self.etcd_ca_file) || given(&self.etcd_cert_file)) && !https {
            return Err(ConfigError::invalid(
                "cluster.etcd_endpoints",
                "etcd's CA and client certificate are for https:// endpoints only",
            ));
        }
        if https {
            crate::tls::check_client(self.etcd_ca(), self.etcd_identity())
                .map_err(|why| ConfigError::invalid("cluster.etcd_ca_file", why))?;
        }
        if self.etcd_user.is_empty() != self.etcd_password.is_empty() {
            return Err(ConfigError::invalid(
                "cluster.etcd_password",
                "cluster.etcd_user and its password are given together",
            ));
        }
        Ok(())
    }

    /// `[cluster.tls]`: a CA that reads, https advertise URLs, and a client certificate with
    /// its key.
    fn validate_node_tls(&self) -> Result<(), ConfigError> {
        let tls = &self.tls;
        if !tls.enabled() {
            if tls.identity().is_some() || !tls.key_file.as_os_str().is_empty() {
                return Err(ConfigError::invalid(
                    "cluster.tls.ca_file",
                    "is needed with cluster.tls.cert_file and cluster.tls.key_file",
                ));
            }
            return Ok(());
        }
        if !self.advertise_url.starts_with("https://") {
            return Err(ConfigError::invalid(
                "cluster.advertise_url",
                "must be an https:// URL when the nodes speak TLS ([cluster.tls])",
            ));
        }
        if tls.identity().is_some() == tls.key_file.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "cluster.tls.key_file",
                "cluster.tls.cert_file and cluster.tls.key_file are given together",
            ));
        }
        crate::tls::check_client(Some(&tls.ca_file), tls.identity())
            .map_err(|why| ConfigError::invalid("cluster.tls", why))
    }
}
