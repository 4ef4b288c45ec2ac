//! `[replication]`: where an acknowledged write is kept besides this machine's disk, and
//! [`MAX_PUTS_IN_FLIGHT`], the bound the replica's streams are built around.

use serde::Deserialize;

use super::{ColdKind, ConfigError, is_key_component, positive};

/// The most windows a stream may store at once (`replication.max_puts_in_flight`): a copy
/// taken after a stop checks as many windows before its own (see `replica::take`).
pub const MAX_PUTS_IN_FLIGHT: usize = 16;

/// `[replication]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationSettings {
    /// Where writes land before their answer. Default: `none`.
    pub kind: ReplicationKind,
    /// Prefix of every replica object. Default: `replica`.
    pub prefix: String,
    /// This node's name in the bucket; empty: the host name. Default: empty.
    pub node_id: String,
    /// How long a window waits for more writes. Default: 2 ms.
    pub commit_linger_ms: u64,
    /// Largest window in bytes. Default: 8 MiB.
    pub max_window_bytes: usize,
    /// Most windows being stored at once, 1 to 16. Default: 2.
    pub max_puts_in_flight: usize,
    /// How long a write waits for its window before it is answered `unavailable`. Default: 10 s.
    pub put_retry_ms: u64,
    /// A volume is snapshotted once it landed this many bytes since its last snapshot.
    /// Default: 64 MiB.
    pub snapshot_bytes: u64,
    /// ... or once this long passed since its last snapshot with something landed. Default:
    /// 10 min.
    pub snapshot_interval_ms: u64,
    /// ... or once its history reaches this many windows of the node's stream back (what a
    /// node taking it over replays at most). Default: 4096.
    pub snapshot_windows: u64,
    /// How long an object no volume's history needs is kept before it is deleted. Default: 1 h.
    pub gc_grace_ms: u64,
}

/// `replication.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationKind {
    /// Writes are on this machine's disk only.
    None,
    /// Every write is in the `[cold]` S3 bucket before its answer.
    S3,
}

impl ReplicationSettings {
    /// `node_id`, or the host name when it is empty.
    pub fn node(&self) -> String {
        if !self.node_id.is_empty() {
            return self.node_id.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| is_key_component(name))
            .unwrap_or_else(|| "node".to_owned())
    }

    /// Checks the section; replication to S3 uses the `[cold]` connection, so it needs
    /// `cold.kind` `s3`.
    pub(super) fn validate(&self, cold: ColdKind) -> Result<(), ConfigError> {
        if self.kind == ReplicationKind::None {
            return Ok(());
        }
        if cold != ColdKind::S3 {
            return Err(ConfigError::invalid(
                "replication.kind",
                "\"s3\" uses the [cold] S3 connection: cold.kind must be \"s3\" too",
            ));
        }
        if !self.node_id.is_empty() && !is_key_component(&self.node_id) {
            return Err(ConfigError::invalid(
                "replication.node_id",
                "must be letters, digits, '.', '_' or '-'",
            ));
        }
        if self.prefix.is_empty() || self.prefix.split('/').any(|part| !is_key_component(part)) {
            return Err(ConfigError::invalid(
                "replication.prefix",
                "must be '/'-separated parts of letters, digits, '.', '_' or '-'",
            ));
        }
        positive("replication.max_window_bytes", self.max_window_bytes as u64)?;
        if !(1..=MAX_PUTS_IN_FLIGHT).contains(&self.max_puts_in_flight) {
            return Err(ConfigError::invalid(
                "replication.max_puts_in_flight",
                format!("must be 1 to {MAX_PUTS_IN_FLIGHT}"),
            ));
        }
        positive("replication.snapshot_bytes", self.snapshot_bytes)?;
        positive(
            "replication.snapshot_interval_ms",
            self.snapshot_interval_ms,
        )?;
        positive("replication.snapshot_windows", self.snapshot_windows)?;
        positive("replication.put_retry_ms", self.put_retry_ms)
    }
}
