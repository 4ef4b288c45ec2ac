//! `[retention]` (also per topic): how long records stay in the hot window.

use serde::Deserialize;

use super::{ConfigError, positive};
use crate::store::Retention;

/// Largest `retention.max_bytes`: 1 GiB.
pub const MAX_LOG_BYTES: u64 = 1 << 30;

/// `[retention]` (also per topic). 0 means "no limit" for each of the three limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Oldest age a hot record may reach. Default: 7 days.
    pub max_age_ms: u64,
    /// Most hot records. Default: 0 (no limit).
    pub max_records: u64,
    /// Most hot payload bytes, at most 1 GiB. Default: 256 MiB.
    pub max_bytes: u64,
    /// How often the partitions whose retention is due are looked for: a partition's
    /// retention runs within one interval of its oldest record breaking a limit (two at
    /// most). Default: 60 s.
    pub sweep_interval_ms: u64,
}

impl RetentionSettings {
    /// The limits as the store takes them (0 means no limit).
    pub fn limits(&self) -> Retention {
        let limit = |value: u64| (value > 0).then_some(value);
        Retention {
            max_age_ms: limit(self.max_age_ms),
            max_records: limit(self.max_records),
            max_bytes: limit(self.max_bytes),
        }
    }

    /// Checks the section, naming each key after `prefix` (`""`, or `topics.<name>.`).
    pub(super) fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{prefix}{name}");
        if self.max_bytes > MAX_LOG_BYTES {
            return Err(ConfigError::invalid(
                key("retention.max_bytes"),
                format!("must be at most {MAX_LOG_BYTES} (1 GiB)"),
            ));
        }
        positive(&key("retention.sweep_interval_ms"), self.sweep_interval_ms)
    }
}
