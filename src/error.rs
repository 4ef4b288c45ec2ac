//! The crate's umbrella error, with stable codes.

use crate::config::ConfigError;
pub use crate::error_code::ErrorCode;
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
    /// A partition is stopping (idle) or restarting; the operation was not applied. [`Log`]
    /// retries on a fresh start of the partition, so callers rarely see this.
    ///
    /// [`Log`]: crate::Log
    #[error("the partition is stopping; the operation was not applied")]
    PartitionStopped,
    /// The partition could not serve the request: its storage failed (the outcome of a write
    /// is unknown: retry with the same deduplication keys).
    #[error("partition {partition} is unavailable: {reason}")]
    Unavailable {
        /// The partition, `{topic}:{index}`.
        partition: String,
        /// What failed.
        reason: String,
    },
    /// Every open partition is busy and `partitions.max_open` are open, so the partition could
    /// not be opened now. Nothing changed; retry later.
    #[error(
        "{open} partitions are open and busy (partitions.max_open); partition {partition} cannot open now, retry later"
    )]
    Overloaded {
        /// The partition, `{topic}:{index}`.
        partition: String,
        /// Partitions open.
        open: usize,
    },
    /// An actor's mailbox is closed or full.
    #[error("actor mailbox failure")]
    Mailbox(#[from] actix::MailboxError),
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
    /// The stable error code (see [`ErrorCode`] for what each promises).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Store(err) => err.code(),
            Self::Config(_) => ErrorCode::InvalidConfig,
            Self::InvalidName(_) => ErrorCode::InvalidName,
            Self::UnknownPartition { .. } => ErrorCode::UnknownPartition,
            Self::Overloaded { .. } => ErrorCode::Overloaded,
            Self::PartitionStopped | Self::Unavailable { .. } | Self::Mailbox(_) => {
                ErrorCode::Unavailable
            }
        }
    }

    /// The same failure, for another caller that shared it (a group commit answers several
    /// callers from one failed transaction).
    pub(crate) fn for_another_caller(&self, partition: &crate::names::PartitionId) -> Self {
        if let Self::Store(StoreError::Corrupted { reason }) = self {
            return Self::Store(StoreError::Corrupted {
                reason: reason.clone(),
            });
        }
        Self::Unavailable {
            partition: partition.to_string(),
            reason: with_causes(self),
        }
    }
}

/// `err` followed by each of its causes: `storage failure: database disk image is malformed`.
pub(crate) fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
