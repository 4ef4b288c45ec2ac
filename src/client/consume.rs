//! Read and consume: pages of records, group polls and commits, cursors.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;

use super::call::Call;
use super::retry::Operation;
use super::{Client, ClientError, integer};
use crate::wire;

impl Client {
    /// Up to `limit` records (default and cap: the server's `maxBatchSize`) of partition
    /// `partition` of `topic` from offset `from` (default: the oldest readable):
    /// `GET /topics/{topic}/partitions/{partition}/records`.
    ///
    /// # Errors
    /// `400` (`invalid_name`, `invalid_offset`: beyond the log's end), `404
    /// unknown_partition`, `410 log_truncated` (its `oldest_offset` says where to continue).
    pub async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
    ) -> Result<wire::Page, ClientError> {
        self.read_waiting(topic, partition, from, limit, Duration::ZERO)
            .await
    }

    /// [`Client::read`], waiting up to `wait` (the server cuts it to `server.max_wait_ms`) for
    /// a record at `from` when there is none yet: a long-poll that answers as soon as one
    /// comes, or an empty page.
    ///
    /// # Errors
    /// As [`Client::read`].
    pub async fn read_waiting(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<wire::Page, ClientError> {
        let path = [
            "topics",
            topic,
            "partitions",
            &partition.to_string(),
            "records",
        ];
        let call = Call::new(Operation::Read, Method::GET, path)
            .query("from", from)
            .query("limit", limit)
            .wait(wait);
        self.json(call).await
    }

    /// Every partition of `topic` read from `group`'s cursors, up to `limit` records each,
    /// waiting up to `wait` (the server cuts it to `server.max_wait_ms`) for any record to come:
    /// `GET /topics/{topic}/groups/{group}/poll`. Commits nothing.
    ///
    /// # Errors
    /// `400 invalid_name`, `410 log_truncated`.
    pub async fn poll(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<wire::GroupPoll, ClientError> {
        let path = ["topics", topic, "groups", group, "poll"];
        let call = Call::new(Operation::Poll, Method::GET, path)
            .query("limit", limit)
            .wait(wait);
        self.json(call).await
    }

    /// Moves `group`'s cursors of `topic` forward to `offsets` (partition → next offset to
    /// read); a lower or equal offset changes nothing:
    /// `POST /topics/{topic}/groups/{group}/commit`.
    ///
    /// # Errors
    /// `400` (`invalid_name`, `invalid_offset`), `404 unknown_partition`.
    pub async fn commit(
        &self,
        topic: &str,
        group: &str,
        offsets: BTreeMap<u32, u64>,
    ) -> Result<wire::CommittedCursors, ClientError> {
        let path = ["topics", topic, "groups", group, "commit"];
        let body = wire::CommitOffsets { offsets };
        self.json(Call::new(Operation::Commit, Method::POST, path).json(&body))
            .await
    }

    /// Every consumer group's cursor on partition `partition` of `topic`:
    /// `GET /topics/{topic}/partitions/{partition}/cursors`.
    ///
    /// # Errors
    /// `400 invalid_name`, `404 unknown_partition`.
    pub async fn cursors(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<wire::GroupCursors, ClientError> {
        let path = [
            "topics",
            topic,
            "partitions",
            &partition.to_string(),
            "cursors",
        ];
        self.json(Call::new(Operation::Cursors, Method::GET, path))
            .await
    }

    /// Moves `group`'s cursor on one partition forward to `offset`:
    /// `PUT /topics/{topic}/partitions/{partition}/cursors/{group}`.
    ///
    /// # Errors
    /// `400` (`invalid_name`, `invalid_offset`), `404 unknown_partition`.
    pub async fn put_cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        offset: u64,
    ) -> Result<wire::Cursor, ClientError> {
        let partition = partition.to_string();
        let path = ["topics", topic, "partitions", &partition, "cursors", group];
        let body = wire::CursorBody {
            offset: integer(offset),
            seek: false,
            metadata: None,
        };
        self.json(Call::new(Operation::PutCursor, Method::PUT, path).json(&body))
            .await
    }

    /// Removes `group`'s cursor (and its leases) on one partition, also when it has none:
    /// `DELETE /topics/{topic}/partitions/{partition}/cursors/{group}`.
    ///
    /// # Errors
    /// `400 invalid_name`, `404 unknown_partition`.
    pub async fn delete_cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<(), ClientError> {
        let partition = partition.to_string();
        let path = ["topics", topic, "partitions", &partition, "cursors", group];
        self.no_content(Call::new(Operation::DeleteCursor, Method::DELETE, path))
            .await
    }
}
