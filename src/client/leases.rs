//! Leases: claim a range (of a partition, or of any partition of a topic), ack, nack, extend,
//! list.

use std::time::Duration;

use reqwest::Method;

use super::call::Call;
use super::retry::Operation;
use super::{Client, ClientError, integer};
use crate::wire;

impl Client {
    /// Claims `group`'s next range of partition `partition` of `topic`, up to `limit`
    /// records; `None` when nothing is available now:
    /// `POST /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
    ///
    /// # Errors
    /// `400 invalid_name`, `404 unknown_partition`, `409 leases_disabled`, `410
    /// log_truncated` (once: the group continues at its `oldest_offset`).
    pub async fn claim(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        limit: Option<usize>,
    ) -> Result<Option<wire::Lease>, ClientError> {
        let partition = partition.to_string();
        let path = [
            "topics",
            topic,
            "partitions",
            &partition,
            "groups",
            group,
            "leases",
        ];
        let call = Call::new(Operation::Claim, Method::POST, path).query("limit", limit);
        self.json_or_none(call).await
    }

    /// [`Client::claim`] on whichever partition of `topic` has a range available:
    /// `POST /topics/{topic}/groups/{group}/leases`.
    ///
    /// # Errors
    /// As [`Client::claim`], without `unknown_partition`.
    pub async fn claim_any(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
    ) -> Result<Option<wire::PartitionLease>, ClientError> {
        let path = ["topics", topic, "groups", group, "leases"];
        let call = Call::new(Operation::ClaimAny, Method::POST, path).query("limit", limit);
        self.json_or_none(call).await
    }

    /// `group`'s ranges on one partition that its cursor has not moved past:
    /// `GET /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
    ///
    /// # Errors
    /// `400 invalid_name`, `404 unknown_partition`, `409 leases_disabled`.
    pub async fn leases(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<wire::Leases, ClientError> {
        let partition = partition.to_string();
        let path = [
            "topics",
            topic,
            "partitions",
            &partition,
            "groups",
            group,
            "leases",
        ];
        self.json(Call::new(Operation::Leases, Method::GET, path))
            .await
    }

    /// Settles the range of `batch_id`; the answer holds the group's cursor after it:
    /// `POST .../leases/{batchId}/ack`.
    ///
    /// # Errors
    /// `409 lease_not_held` (unknown, reclaimed after expiring, or already settled).
    pub async fn ack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<wire::AckedCursor, ClientError> {
        let call = Call::new(
            Operation::Ack,
            Method::POST,
            batch_path(topic, partition, group, batch_id, "ack"),
        );
        self.json(call).await
    }

    /// Gives the range of `batch_id` back, to be delivered again (under a new batch id) no
    /// sooner than `delay` from now: `POST .../leases/{batchId}/nack`.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn nack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
        delay: Duration,
    ) -> Result<(), ClientError> {
        let body = wire::NackBody {
            delay_ms: Some(integer(delay.as_millis().try_into().unwrap_or(u64::MAX))),
        };
        let path = batch_path(topic, partition, group, batch_id, "nack");
        self.no_content(Call::new(Operation::Nack, Method::POST, path).json(&body))
            .await
    }

    /// Renews the hold on the range of `batch_id` for another `leases.lease_ms`:
    /// `POST .../leases/{batchId}/extend`.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn extend(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<wire::Extended, ClientError> {
        let call = Call::new(
            Operation::Extend,
            Method::POST,
            batch_path(topic, partition, group, batch_id, "extend"),
        );
        self.json(call).await
    }
}

/// The path of `action` on a leased range.
fn batch_path(
    topic: &str,
    partition: u32,
    group: &str,
    batch_id: &str,
    action: &str,
) -> [String; 9] {
    [
        "topics",
        topic,
        "partitions",
        &partition.to_string(),
        "groups",
        group,
        "leases",
        batch_id,
        action,
    ]
    .map(str::to_owned)
}
