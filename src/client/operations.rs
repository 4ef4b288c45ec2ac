//! Operations: bounds, load, trim, cold forget, topics, a topic's description, the cluster.

use reqwest::Method;

use super::call::Call;
use super::retry::Operation;
use super::{Client, ClientError, integer};
use crate::load::LoadSnapshot;
use crate::wire;

impl Client {
    /// The offsets of partition `partition` of `topic`:
    /// `GET /topics/{topic}/partitions/{partition}/bounds`.
    ///
    /// # Errors
    /// `400 invalid_name`, `404 unknown_partition`.
    pub async fn bounds(&self, topic: &str, partition: u32) -> Result<wire::Bounds, ClientError> {
        let path = [
            "topics",
            topic,
            "partitions",
            &partition.to_string(),
            "bounds",
        ];
        self.json(Call::new(Operation::Bounds, Method::GET, path))
            .await
    }

    /// The load of one partition: `GET /topics/{topic}/partitions/{partition}/load`.
    ///
    /// # Errors
    /// As [`Client::bounds`].
    pub async fn load(&self, topic: &str, partition: u32) -> Result<LoadSnapshot, ClientError> {
        let path = [
            "topics",
            topic,
            "partitions",
            &partition.to_string(),
            "load",
        ];
        self.json(Call::new(Operation::Load, Method::GET, path))
            .await
    }

    /// Runs retention on one partition now:
    /// `POST /topics/{topic}/partitions/{partition}/trim`.
    ///
    /// # Errors
    /// As [`Client::bounds`]; `503 unavailable` when the cold store failed (passes already
    /// completed stay done).
    pub async fn trim(&self, topic: &str, partition: u32) -> Result<wire::Trimmed, ClientError> {
        let path = [
            "topics",
            topic,
            "partitions",
            &partition.to_string(),
            "trim",
        ];
        self.json(Call::new(Operation::Trim, Method::POST, path))
            .await
    }

    /// Forgets the cold segments of one partition that end below `before`:
    /// `POST /topics/{topic}/partitions/{partition}/cold/forget`.
    ///
    /// # Errors
    /// As [`Client::bounds`]; `400 invalid_offset`.
    pub async fn forget_cold(
        &self,
        topic: &str,
        partition: u32,
        before: u64,
    ) -> Result<wire::Forgotten, ClientError> {
        let partition = partition.to_string();
        let path = ["topics", topic, "partitions", &partition, "cold", "forget"];
        let body = wire::ForgetBody {
            before: integer(before),
        };
        self.json(Call::new(Operation::ForgetCold, Method::POST, path).json(&body))
            .await
    }

    /// A page of the topics with data, by name: the first `limit` (default 1000, at most
    /// 10000) after `after` (the previous page's `next`): `GET /topics`.
    ///
    /// # Errors
    /// `400 invalid_request`: `limit` out of range, or `after` not a topic name.
    pub async fn topics(
        &self,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<wire::Topics, ClientError> {
        let call = Call::new(Operation::Topics, Method::GET, ["topics"])
            .query("after", after)
            .query("limit", limit);
        self.json(call).await
    }

    /// Every partition of `topic` with its offsets, cursors and backlog: `GET /topics/{topic}`.
    ///
    /// # Errors
    /// `400 invalid_name`.
    pub async fn describe(&self, topic: &str) -> Result<wire::TopicDetail, ClientError> {
        self.json(Call::new(
            Operation::Describe,
            Method::GET,
            ["topics", topic],
        ))
        .await
    }

    /// The cluster as the answering node sees it (members, who owns which volume, what is
    /// moving): `GET /cluster`.
    ///
    /// # Errors
    /// `404 not_found` when the server is not in a cluster.
    pub async fn cluster(&self) -> Result<serde_json::Value, ClientError> {
        self.json(Call::new(Operation::Cluster, Method::GET, ["cluster"]))
            .await
    }
}
