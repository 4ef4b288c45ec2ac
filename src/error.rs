//! The crate's umbrella error, with stable codes.

use crate::config::ConfigError;
use crate::names::NameError;
use crate::store::StoreError;

/// Any error of the `durability` crate.
///
/// [`Error::code`] is a stable, snake_case string equal to the REST API's `error.code`, for
/// programs that branch on errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage layer failed or refused the request.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A topic or group name breaks the naming rules.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// A partition index at or beyond the topic's partition count.
    #[error("topic {topic:?} has {partitions} partitions; there is no partition {partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The requested index.
        partition: u32,
        /// The topic's partition count.
        partitions: u32,
    },
}

impl Error {
    /// The stable error code: one of `invalid_request`, `invalid_name`, `batch_too_large`,
    /// `record_too_large`, `invalid_offset`, `unknown_partition`, `log_truncated`,
    /// `lease_not_held`, `leases_disabled`, `unauthorized`, `payload_too_large`, `unavailable`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Store(err) => err.code(),
            Self::Config(_) => "invalid_config",
            Self::InvalidName(_) => "invalid_name",
            Self::UnknownPartition { .. } => "unknown_partition",
        }
    }
}
