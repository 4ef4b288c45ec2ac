//! Errors of the storage layer.

use crate::cold::ColdStoreError;
use crate::error_code::ErrorCode;
use crate::names::NameError;

/// What can go wrong inside a [`LogStore`](super::LogStore).
///
/// Definite errors (bad input) change nothing; storage errors are uncertain and, on the write
/// path, leave the store refusing writes until it is reopened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite failed. On the write path the outcome is unknown, so the store is now poisoned.
    #[error("storage failure")]
    Sqlite(#[from] rusqlite::Error),
    /// No reader connection could be had.
    #[error("storage connection pool failure")]
    Pool(#[from] r2d2::Error),
    /// The operating system refused a thread (the volume's committer).
    #[error("cannot start a thread")]
    Thread(#[source] std::io::Error),
    /// An earlier write failed with an unknown outcome; the store must be reopened.
    #[error("the partition refuses writes after a failed commit; it must be reopened")]
    Poisoned,
    /// The database was written by a newer version of this program.
    #[error("database schema version {found} is newer than the {supported} this version knows")]
    SchemaTooNew {
        /// Version found in the file.
        found: i64,
        /// Newest version this program can open.
        supported: i64,
    },
    /// A read or commit named an offset the log cannot have.
    #[error("offset {offset} is beyond the log's next offset {next_offset}")]
    InvalidOffset {
        /// The offset asked for.
        offset: u64,
        /// The log's next offset.
        next_offset: u64,
    },
    /// An offset below 0 (offsets start at 0).
    #[error("offset {offset} is negative")]
    NegativeOffset {
        /// The offset given.
        offset: i64,
    },
    /// The records asked for left the log (retention), so they cannot be returned.
    #[error("offset {requested_offset} was trimmed: the oldest retained offset is {oldest_offset}")]
    Truncated {
        /// The offset asked for.
        requested_offset: u64,
        /// Where reading can continue.
        oldest_offset: u64,
    },
    /// A page limit outside `1..`.
    #[error("limit must be a positive integer")]
    InvalidLimit,
    /// A group name that breaks the naming rules.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// A cursor's metadata longer than a cursor keeps.
    #[error("metadata of {bytes} bytes is longer than the {max} bytes a cursor keeps")]
    MetadataTooLong {
        /// The metadata's length in bytes of UTF-8.
        bytes: usize,
        /// The most a cursor keeps.
        max: usize,
    },
    /// The batch is not held by this group: unknown, fenced by a redelivery, already settled,
    /// or another group's.
    #[error("batch {batch_id} is not held")]
    LeaseNotHeld {
        /// The batch id given.
        batch_id: String,
    },
    /// Lease operations are switched off (the leases option).
    #[error("leases are disabled for this topic (the leases option)")]
    LeasesDisabled,
    /// The cold tier failed; no data was lost (hot records stay until their segment is stored).
    #[error("cold storage failure")]
    Cold(#[from] ColdStoreError),
    /// The volume's files are damaged (SQLite found them malformed, or they hold fewer commits
    /// than were acknowledged). Its partitions refuse writes from then on, so no offset is
    /// handed out twice; retrying does not help until the files are repaired or restored.
    #[error("{reason}")]
    Corrupted {
        /// The file and what is wrong with it.
        reason: String,
    },
    /// The partition's volume is held by another node of the cluster.
    #[error("volume {volume}, which holds this partition, is held by another node")]
    Elsewhere {
        /// The volume.
        volume: usize,
    },
    /// The partition's volume was found damaged and is being rebuilt from the replica's bucket
    /// (see `replica/`): nothing changed; retry shortly.
    #[error(
        "volume {volume}, which holds this partition, was found damaged and is being rebuilt \
         from the bucket; retry shortly"
    )]
    Healing {
        /// The volume.
        volume: usize,
    },
    /// The write did not land in the replica's stream (see `replication.rs`): its answer did
    /// not come in time (it may still land; the volume refuses writes until that is known),
    /// or another owner fenced the stream (it never will, and the volume refuses writes).
    #[error(transparent)]
    Replica(#[from] super::StreamError),
}

impl StoreError {
    /// The stable code of this error (the REST API's `error.code`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Sqlite(_)
            | Self::Pool(_)
            | Self::Poisoned
            | Self::Thread(_)
            | Self::SchemaTooNew { .. }
            | Self::Cold(_)
            | Self::Replica(_)
            | Self::Healing { .. } => ErrorCode::Unavailable,
            Self::Elsewhere { .. } => ErrorCode::NotOwner,
            Self::InvalidOffset { .. } | Self::NegativeOffset { .. } => ErrorCode::InvalidOffset,
            Self::Truncated { .. } => ErrorCode::LogTruncated,
            Self::InvalidLimit | Self::MetadataTooLong { .. } => ErrorCode::InvalidRequest,
            Self::InvalidName(_) => ErrorCode::InvalidName,
            Self::LeaseNotHeld { .. } => ErrorCode::LeaseNotHeld,
            Self::LeasesDisabled => ErrorCode::LeasesDisabled,
            Self::Corrupted { .. } => ErrorCode::Corrupted,
        }
    }

    /// Whether the operation may have changed state (a storage failure) rather than being
    /// refused before it changed anything.
    pub fn is_uncertain(&self) -> bool {
        !self.code().changed_nothing()
    }

    /// Whether a write that failed this way leaves the writing connection in a state to
    /// reopen: every uncertain error but a replica's, whose transaction rolled back whole (the
    /// volume settles its landing itself, see `replication.rs`).
    pub(super) fn poisons(&self) -> bool {
        self.is_uncertain() && !matches!(self, Self::Replica(_))
    }
}
