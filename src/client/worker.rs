//! [`LeaseWorker`]: one of a consumer group's parallel workers, which processes leased ranges
//! with a closure and settles each by the closure's result.

use std::future::Future;
use std::time::Duration;

use super::{Client, ClientError};
use crate::clock::{Clock, SystemClock};
use crate::error::ErrorCode;
use crate::wire;

/// The shortest wait between two extensions of a lease, whatever the clocks say.
const MIN_EXTEND_EVERY: Duration = Duration::from_millis(50);

/// How [`LeaseWorker::run_once`] settled a range.
#[derive(Debug)]
#[non_exhaustive]
pub enum Settled<E> {
    /// The work succeeded and the range was acked.
    Acked {
        /// The range's partition.
        partition: u32,
        /// The group's cursor after the ack, if it has one yet.
        cursor: Option<u64>,
    },
    /// The work failed with `error` and the range was nacked, to be delivered again.
    Nacked {
        /// The range's partition.
        partition: u32,
        /// What the work answered.
        error: E,
    },
}

/// A worker of `topic`'s leases in consumer group `group`: [`LeaseWorker::run_once`] claims a
/// range on any partition, hands it to a closure, and acks it when the closure succeeds or
/// nacks it when it fails. While the closure runs, the lease is extended each time half of
/// its remaining hold has passed, so slow work keeps its range.
///
/// The hold's end (`expiresAt`) is the server's time: the worker assumes its clock agrees
/// with the server's to well within a lease.
#[derive(Debug)]
pub struct LeaseWorker {
    client: Client,
    topic: String,
    group: String,
    limit: Option<usize>,
    nack_delay: Duration,
}

impl LeaseWorker {
    pub(super) fn new(client: Client, topic: String, group: String) -> Self {
        Self {
            client,
            topic,
            group,
            limit: None,
            nack_delay: Duration::ZERO,
        }
    }

    /// The most records in a fresh range.
    /// Default: the server's `maxBatchSize`.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// How long a failed range waits before it is delivered again.
    /// Default: 0 (at once).
    #[must_use]
    pub fn nack_delay(mut self, delay: Duration) -> Self {
        self.nack_delay = delay;
        self
    }

    /// Claims a range and runs `work` on it, extending the lease while it runs; acks the range
    /// when `work` succeeds, nacks it when it fails. `None` when no range is available now.
    ///
    /// # Errors
    /// A failed claim (as [`Client::claim_any`]), ack or nack: `409 lease_not_held` when the
    /// lease was lost (its hold ended and another worker took the range).
    pub async fn run_once<F, Fut, E>(&self, work: F) -> Result<Option<Settled<E>>, ClientError>
    where
        F: FnOnce(wire::PartitionLease) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let client = &self.client;
        let (topic, group) = (self.topic.as_str(), self.group.as_str());
        let Some(lease) = client.claim_any(topic, group, self.limit).await? else {
            return Ok(None);
        };
        let partition = lease.partition;
        let batch_id = lease.lease.batch_id.clone();
        let mut expires_at = Some(lease.lease.expires_at);
        let mut work = std::pin::pin!(work(lease));
        let outcome = loop {
            let Some(holds_until) = expires_at else {
                break work.await;
            };
            tokio::select! {
                outcome = &mut work => break outcome,
                () = tokio::time::sleep(half_of_what_remains(holds_until)) => {
                    match client.extend(topic, partition, group, &batch_id).await {
                        Ok(extended) => expires_at = Some(extended.expires_at),
                        // Lost: the ack or nack will say so.
                        Err(err) if err.code() == Some(ErrorCode::LeaseNotHeld) => {
                            expires_at = None;
                        }
                        // Tried again when half of what remains has passed.
                        Err(err) => log::warn!("cannot extend lease {batch_id}: {err}"),
                    }
                }
            }
        };
        Ok(Some(match outcome {
            Ok(()) => {
                let acked = client.ack(topic, partition, group, &batch_id).await?;
                Settled::Acked {
                    partition,
                    cursor: acked.cursor,
                }
            }
            Err(error) => {
                client
                    .nack(topic, partition, group, &batch_id, self.nack_delay)
                    .await?;
                Settled::Nacked { partition, error }
            }
        }))
    }
}

/// Half the time from now to `expires_at` (ms since the Unix epoch), at least
/// [`MIN_EXTEND_EVERY`].
fn half_of_what_remains(expires_at: i64) -> Duration {
    let now = SystemClock.now_ms();
    let remaining = u64::try_from(expires_at.saturating_sub(now)).unwrap_or(0);
    Duration::from_millis(remaining / 2).max(MIN_EXTEND_EVERY)
}
