//! Leases: the workers of a group claiming, settling and listing ranges of a partition.

use actix::Message;

use super::Log;
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::{self, PartitionActor};
use crate::store::{Lease, LeaseRow, StoreError, page_limit};

impl Log {
    /// Leases the next range of a partition for `group`; `None` when nothing is available now.
    ///
    /// # Errors
    /// `leases_disabled`, name and partition errors, `invalid_request` for a zero limit,
    /// `log_truncated` once when unsettled records were lost, `unavailable`.
    pub async fn lease(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        limit: Option<usize>,
    ) -> Result<Option<Lease>, Error> {
        let id = self.leasing_partition(topic, partition, group)?;
        let here = || {
            let lease = partition::ClaimLease {
                group: group.to_owned(),
                limit,
            };
            let id = &id;
            Box::pin(async move {
                match self.call_existing(id, lease).await? {
                    Some(lease) => Ok(lease),
                    // Never written: nothing to lease, once the limit passes the store's rule.
                    None => {
                        page_limit(limit, self.inner.config.topic_log(topic).max_batch_size)?;
                        Ok(None)
                    }
                }
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        match self.spread() {
            Some(spread) => spread.lease(&id, group, limit, here).await,
            None => here().await,
        }
    }

    /// Settles a leased range; answers the group's cursor afterwards.
    ///
    /// # Errors
    /// `lease_not_held`, `leases_disabled`, name and partition errors, `unavailable`.
    pub async fn ack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<Option<u64>, Error> {
        let ack = partition::Ack {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
        };
        self.settle(topic, partition, group, batch_id, ack).await
    }

    /// Hands a leased range back for redelivery after `delay_ms`.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub async fn nack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
        delay_ms: u64,
    ) -> Result<(), Error> {
        let nack = partition::Nack {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
            delay_ms,
        };
        self.settle(topic, partition, group, batch_id, nack).await
    }

    /// Renews a lease's hold; answers the new expiry.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub async fn extend(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<i64, Error> {
        let extend = partition::Extend {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
        };
        self.settle(topic, partition, group, batch_id, extend).await
    }

    /// Sends a settlement of `batch_id` (ack, nack, extend) to the partition. A partition that
    /// was never written holds no lease, so it is not started to say so.
    async fn settle<M, T>(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
        settlement: M,
    ) -> Result<T, Error>
    where
        M: Message<Result = Result<T, Error>> + Clone + Send + 'static,
        T: Send + 'static,
        PartitionActor: actix::Handler<M>,
    {
        let id = self.leasing_partition(topic, partition, group)?;
        self.call_existing(&id, settlement)
            .await?
            .ok_or_else(|| not_held(batch_id))
    }

    /// `group`'s lease rows in a partition.
    ///
    /// # Errors
    /// `leases_disabled`, name and partition errors, `unavailable`.
    pub async fn leases(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<Vec<LeaseRow>, Error> {
        let id = self.leasing_partition(topic, partition, group)?;
        Ok(self
            .call_existing(
                &id,
                partition::ListLeases {
                    group: group.to_owned(),
                },
            )
            .await?
            .unwrap_or_default())
    }

    fn leasing_partition(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<PartitionId, Error> {
        self.inner
            .config
            .topic_leases(topic)
            .options()
            .check_enabled()?;
        self.group_partition(topic, partition, group)
    }

    /// Leases `group`'s next range on whichever partition of `topic` has one, trying them in
    /// order; answers the partition with its lease, or `None` when none has a range now.
    ///
    /// # Errors
    /// As [`lease`](Self::lease).
    pub async fn lease_any(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
    ) -> Result<Option<(u32, Lease)>, Error> {
        for partition in 0..self.partitions(topic)? {
            if let Some(lease) = self.lease(topic, partition, group, limit).await? {
                return Ok(Some((partition, lease)));
            }
        }
        Ok(None)
    }
}

fn not_held(batch_id: &str) -> Error {
    StoreError::LeaseNotHeld {
        batch_id: batch_id.to_owned(),
    }
    .into()
}
