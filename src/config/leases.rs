//! `[leases]` (also per topic): parallel consumers sharing a group.

use serde::Deserialize;

use super::{ConfigError, positive};
use crate::names::validate_topic;
use crate::store::LeaseOptions;

/// `[leases]` (also per topic).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    /// Whether groups may lease ranges. Default: true.
    pub enabled: bool,
    /// How long a lease holds. Default: 30 s.
    pub lease_ms: u64,
    /// Most ranges a group holds per partition. Default: 1.
    pub max_parallelism: u32,
    /// Deliveries before a range is dead-lettered; 0: unbounded. Default: 0.
    pub max_attempts: u32,
    /// Topic receiving exhausted ranges; empty: none. Default: empty.
    pub dead_letter_topic: String,
}

impl LeaseSettings {
    /// The options as the store takes them (`max_attempts` 0 means unbounded; a dead-letter
    /// topic is a destination for exhausted ranges).
    pub fn options(&self) -> LeaseOptions {
        LeaseOptions {
            enabled: self.enabled,
            lease_ms: self.lease_ms,
            max_parallelism: self.max_parallelism,
            max_attempts: (self.max_attempts > 0).then_some(self.max_attempts),
            dead_letter: !self.dead_letter_topic.is_empty(),
        }
    }

    /// Checks the section, naming each key after `prefix` (`""`, or `topics.<name>.`).
    pub(super) fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{prefix}{name}");
        positive(&key("leases.lease_ms"), self.lease_ms)?;
        positive(
            &key("leases.max_parallelism"),
            u64::from(self.max_parallelism),
        )?;
        if !self.dead_letter_topic.is_empty() {
            validate_topic(&self.dead_letter_topic).map_err(|err| {
                ConfigError::invalid(key("leases.dead_letter_topic"), err.to_string())
            })?;
        }
        Ok(())
    }
}
