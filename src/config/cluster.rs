//! `[cluster]`: the nodes that share the volumes through etcd.

use serde::Deserialize;

use super::{ConfigError, ReplicationKind, is_key_component};

/// Longest `cluster.volumes`.
const MAX_CLUSTER_VOLUMES: usize = 4096;

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
        Ok(())
    }
}
