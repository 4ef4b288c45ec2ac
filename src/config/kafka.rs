//! `[kafka]`: the listener that speaks Kafka's wire protocol (see `kafka/`).

use std::net::ToSocketAddrs;

use serde::Deserialize;

use super::{ConfigError, positive};

/// `[kafka]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    /// Listen address; port 0 picks a free one. Default: empty (no Kafka listener).
    pub bind: String,
    /// `host:port` that clients are told to connect to. Default: empty (the bound address).
    pub advertised: String,
    /// Largest request frame; a larger one is refused before it is read. Default: 16 MiB.
    pub max_request_bytes: usize,
    /// Most connections open at once; more are closed as they arrive. Default: 10,000.
    pub max_connections: usize,
}

impl KafkaSettings {
    /// Whether the listener runs.
    pub fn enabled(&self) -> bool {
        !self.bind.is_empty()
    }

    /// Where Kafka clients reach this node in `cluster`: `advertised`, else the host of its
    /// `advertise_url` with the port of `bind` (unless that port is 0, picked at start).
    pub fn advertised_in(&self, cluster: &super::ClusterSettings) -> Option<String> {
        if !self.enabled() {
            return None;
        }
        if !self.advertised.is_empty() {
            return Some(self.advertised.clone());
        }
        let port = self.bind.rsplit_once(':')?.1.parse::<u16>().ok()?;
        let url = cluster.advertise_url.trim_end_matches('/');
        let host = url.split_once("://").map_or(url, |(_, rest)| rest);
        let host = host.rsplit_once(':').map_or(host, |(host, _)| host);
        (port != 0 && !host.is_empty()).then(|| format!("{host}:{port}"))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if !is_address(&self.bind) {
            return Err(ConfigError::invalid(
                "kafka.bind",
                format!("{:?} is not a host:port address", self.bind),
            ));
        }
        let port = self.advertised.rsplit_once(':').map(|(_, port)| port);
        if !self.advertised.is_empty() && port.and_then(|port| port.parse::<u16>().ok()).is_none() {
            return Err(ConfigError::invalid(
                "kafka.advertised",
                format!("{:?} is not a host:port address", self.advertised),
            ));
        }
        positive("kafka.max_request_bytes", self.max_request_bytes as u64)?;
        positive("kafka.max_connections", self.max_connections as u64)
    }
}

fn is_address(address: &str) -> bool {
    address
        .to_socket_addrs()
        .is_ok_and(|mut addrs| addrs.next().is_some())
}
