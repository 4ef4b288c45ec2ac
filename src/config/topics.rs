//! `[topics.<name>]`: one topic's `[log]`, `[retention]` and `[leases]`, the global sections
//! with that topic's overrides applied (the loader merges them, see `resolve_topics`).

use serde::Deserialize;

use super::{ConfigError, LeaseSettings, LogSettings, RetentionSettings};

/// The settings of one topic: the global `[log]`, `[retention]` and `[leases]` with that
/// topic's overrides applied.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// `[topics.<name>.log]` over `[log]`.
    pub log: LogSettings,
    /// `[topics.<name>.retention]` over `[retention]`.
    pub retention: RetentionSettings,
    /// `[topics.<name>.leases]` over `[leases]`.
    pub leases: LeaseSettings,
}

impl TopicSettings {
    /// Checks the three sections, naming each key after `prefix` (`""` for the global
    /// sections, `topics.<name>.` for a topic's).
    pub(super) fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        self.log.validate(prefix)?;
        self.retention.validate(prefix)?;
        self.leases.validate(prefix)
    }
}
