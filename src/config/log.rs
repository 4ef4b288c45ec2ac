//! `[log]` (also per topic): partitions of a topic and the limits of a batch.

use serde::Deserialize;

use super::{ConfigError, positive};

/// Largest `log.max_batch_size`.
pub const MAX_BATCH_SIZE: usize = 10_000;
/// Largest `log.partitions_per_topic`.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 4096;

/// `[log]` (also per topic).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// Partitions of a topic. Default: 8.
    pub partitions_per_topic: u32,
    /// Most records per append to one partition, and the largest page. Default: 100.
    pub max_batch_size: usize,
    /// Largest payload (stored JSON text) of one record. Default: 1 MiB.
    pub max_record_bytes: usize,
}

impl LogSettings {
    /// Checks the section, naming each key after `prefix` (`""`, or `topics.<name>.`).
    pub(super) fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{prefix}{name}");
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&self.partitions_per_topic) {
            return Err(ConfigError::invalid(
                key("log.partitions_per_topic"),
                format!("must be 1 to {MAX_PARTITIONS_PER_TOPIC}"),
            ));
        }
        if !(1..=MAX_BATCH_SIZE).contains(&self.max_batch_size) {
            return Err(ConfigError::invalid(
                key("log.max_batch_size"),
                format!("must be 1 to {MAX_BATCH_SIZE}"),
            ));
        }
        // Over HTTP a record is also limited by `server.max_body_bytes`, whichever is smaller.
        positive(&key("log.max_record_bytes"), self.max_record_bytes as u64)
    }
}
