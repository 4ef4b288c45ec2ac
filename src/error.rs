//! The crate's umbrella error, with stable codes.

use crate::cluster::ClusterError;
use crate::config::ConfigError;
pub use crate::error_code::{ErrorCode, with_causes};
use crate::names::{NameError, PartitionId};
pub use crate::replica::ReplicaError;
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
    /// A request's parameter is out of its range (a listing's page size or position).
    #[error("{0}")]
    InvalidRequest(String),
    /// A partition is stopping (idle) or restarting; the operation was not applied. [`Log`]
    /// retries on a fresh start of the partition, so callers rarely see this.
    ///
    /// [`Log`]: crate::Log
    #[error("the partition is stopping; the operation was not applied")]
    PartitionStopped,
    /// The partition, or the whole log, could not serve the request: its storage failed (the
    /// outcome of a write is unknown: retry with the same deduplication keys).
    #[error("{} is unavailable: {reason}", subject(.partition.as_ref()))]
    Unavailable {
        /// The partition, when the failure is one partition's.
        partition: Option<PartitionId>,
        /// What failed.
        reason: String,
        /// The failure underneath, if any.
        #[source]
        source: Option<BoxedCause>,
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
    /// The node could not take its volumes from the replica's bucket (see
    /// [`ReplicaError::code`] for the codes).
    #[error("cannot take the volumes")]
    Replica(#[from] ReplicaError),
    /// The node could not join its cluster.
    #[error("cannot join the cluster")]
    Cluster(#[from] ClusterError),
    /// Another node of the cluster, asked for partitions it holds, refused or did not answer.
    #[error(transparent)]
    Peer(#[from] crate::cluster::peer::PeerError),
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

/// A cause kept as the source of an [`Error::Unavailable`].
pub type BoxedCause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What an [`Error::Unavailable`] is about: `partition t:0`, or `the log`.
fn subject(partition: Option<&PartitionId>) -> String {
    partition.map_or_else(|| "the log".to_owned(), |id| format!("partition {id}"))
}

impl Error {
    /// `unavailable` for `partition` (or the whole log), because of `cause` if there is one.
    pub(crate) fn unavailable(
        partition: Option<&PartitionId>,
        reason: impl Into<String>,
        cause: Option<BoxedCause>,
    ) -> Self {
        Self::Unavailable {
            partition: partition.cloned(),
            reason: reason.into(),
            source: cause,
        }
    }

    /// The stable error code (see [`ErrorCode`] for what each promises).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Store(err) => err.code(),
            Self::Config(_) => ErrorCode::InvalidConfig,
            Self::InvalidName(_) => ErrorCode::InvalidName,
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::UnknownPartition { .. } => ErrorCode::UnknownPartition,
            Self::Overloaded { .. } => ErrorCode::Overloaded,
            Self::Peer(err) => err.code(),
            Self::Replica(err) => err.code(),
            Self::Cluster(err) => err.code(),
            Self::PartitionStopped | Self::Unavailable { .. } | Self::Mailbox(_) => {
                ErrorCode::Unavailable
            }
        }
    }

    /// The same failure, for another caller that shared it (a group commit answers several
    /// callers from one failed transaction).
    pub(crate) fn for_another_caller(&self, partition: &PartitionId) -> Self {
        if let Self::Store(StoreError::Corrupted { reason }) = self {
            return Self::Store(StoreError::Corrupted {
                reason: reason.clone(),
            });
        }
        // The cause is another caller's error, which cannot be shared: its text is.
        Self::unavailable(Some(partition), with_causes(self), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why a node cannot start is told by its code: a bucket that does not suit its settings
    /// is its configuration's fault, a fence is not this node's volume, an outage is
    /// unavailable.
    #[test]
    fn a_node_that_cannot_start_says_why_by_its_code() {
        let unsuited = Error::from(ReplicaError::Unsuited("another cluster's bucket".into()));
        assert_eq!(unsuited.code(), ErrorCode::InvalidConfig);
        let replaced = Error::from(ReplicaError::Replaced { volume: 3 });
        assert_eq!(replaced.code(), ErrorCode::NotOwner);
        let damaged = Error::from(ReplicaError::Damaged {
            key: "replica/manifests/3".into(),
            reason: "not a manifest".into(),
        });
        assert_eq!(damaged.code(), ErrorCode::Corrupted);
        let stopped = Error::from(ReplicaError::Stopped("thread"));
        assert_eq!(stopped.code(), ErrorCode::Unavailable);
        assert_eq!(
            with_causes(&replaced),
            "cannot take the volumes: volume 3's manifest was replaced by another node"
        );
    }

    /// An `unavailable` error keeps its cause as its source, which the HTTP message still
    /// shows, and names its partition only when it has one.
    #[test]
    fn unavailable_keeps_its_cause_and_optional_partition() {
        let cause = std::io::Error::other("disk on fire");
        let err = Error::unavailable(None, "listing the topics failed", Some(cause.into()));
        assert_eq!(
            err.to_string(),
            "the log is unavailable: listing the topics failed"
        );
        let source = std::error::Error::source(&err).expect("the cause is kept");
        assert_eq!(source.to_string(), "disk on fire");
        assert_eq!(
            with_causes(&err),
            "the log is unavailable: listing the topics failed: disk on fire"
        );
        let id = PartitionId::new("t", 3).unwrap();
        let err = Error::unavailable(Some(&id), "the partition kept stopping", None);
        assert_eq!(
            err.to_string(),
            "partition t:3 is unavailable: the partition kept stopping"
        );
        assert_eq!(err.code(), ErrorCode::Unavailable);
    }
}
