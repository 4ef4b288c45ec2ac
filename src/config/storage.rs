//! `[storage]`: where and how partitions are stored on this machine.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, positive};
use crate::store::SyncMode;

/// Longest `storage.scrub_interval_ms`: a year (a longer one is taken for a mistaken unit).
pub const MAX_SCRUB_INTERVAL_MS: u64 = 365 * 24 * 3_600_000;

/// `[storage]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSettings {
    /// Folder holding the volumes (SQLite databases shared by many partitions). Default:
    /// `./data`.
    pub data_dir: PathBuf,
    /// Commit durability. Default: `full`.
    pub sync: SyncMode,
    /// Volumes new partitions are spread over, each with one committer. Default: 1.
    pub volumes: usize,
    /// Most threads running the committers of the volumes this node holds (one runs a volume
    /// at a time). Default: 4.
    pub committers: usize,
    /// Threads running partitions' blocking work other than appends (cursor commits, leases,
    /// retention). Default: 2.
    pub workers: usize,
    /// How often the scrub checks every volume in the background (one pass per volume per
    /// interval, at most a fifth of one core); 0 turns it off. At most [`MAX_SCRUB_INTERVAL_MS`].
    /// Also read as `scrub_interval`. Default: one day.
    #[serde(alias = "scrub_interval")]
    pub scrub_interval_ms: u64,
}

impl StorageSettings {
    /// Checks `data_dir`. [`Config::validate`](super::Config::validate) checks it before the
    /// other sections and the rest of this one after them (see [`Self::validate`]).
    pub(super) fn validate_data_dir(&self) -> Result<(), ConfigError> {
        if self.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "storage.data_dir",
                "must not be empty",
            ));
        }
        Ok(())
    }

    /// Checks every key but `data_dir` (see [`Self::validate_data_dir`]).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("storage.volumes", self.volumes as u64)?;
        positive("storage.workers", self.workers as u64)?;
        positive("storage.committers", self.committers as u64)?;
        if self.scrub_interval_ms > MAX_SCRUB_INTERVAL_MS {
            return Err(ConfigError::invalid(
                "storage.scrub_interval_ms",
                format!("must be at most {MAX_SCRUB_INTERVAL_MS} (a year); 0 turns the scrub off"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// An interval beyond a year is refused, naming the key.
    #[test]
    fn a_scrub_interval_beyond_a_year_is_refused() {
        let text = format!(
            "[storage]\nscrub_interval_ms = {}",
            MAX_SCRUB_INTERVAL_MS + 1
        );
        let err = Config::from_sources(Some(("my.toml", &text)), std::iter::empty()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidValue { key, .. } if key == "storage.scrub_interval_ms"),
            "{err}"
        );
    }
}
