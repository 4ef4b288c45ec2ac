//! The typed seam between nodes: one call per operation a node asks of another, with typed
//! answers and a typed [`PeerError`]. [`Log`](crate::Log) fans its cluster-wide operations out
//! through [`Peers`] (see `log/spread.rs`), so an embedded `Log` and the REST server behave
//! alike; [`HttpPeers`] speaks the other nodes' REST API, with the JSON shapes of
//! [`crate::wire`].
//!
//! A call carries [`FORWARDED`]: the node it reaches serves it from the partitions it holds and
//! never asks a third node, or answers `421 not_owner` ([`PeerError::NotOwner`]) for a
//! partition it does not hold (any more).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::config::ClusterSettings;
use crate::error::ErrorCode;
use crate::load::LoadSnapshot;
use crate::log::{
    Bounds, Committed, GroupOnPartition, Lease, NewRecord, Page, PartitionDetail, TopicInfo,
    TopicsPage,
};
use crate::wire;

/// Marks a request one node sends another: it is served here, never passed on. Taken only
/// with the cluster's secret ([`NODE_SECRET`]) when the cluster has one.
pub const FORWARDED: &str = "x-durability-forwarded";

/// The header a node proves itself to another with: the cluster's secret
/// (`cluster.secret`, else `server.auth_token`). A request carrying it is a node's, on its own
/// behalf (the typed calls of [`Peers`]) or passing on a client's request with the client's
/// own token, which the receiving node checks again.
pub const NODE_SECRET: &str = "x-durability-node";

/// The header of a cursor's deletion answered to another node (`1` or `0`): whether there was
/// a cursor, which the `204` a client gets does not say.
pub(crate) const CURSOR_DELETED: &str = "x-durability-cursor-deleted";

/// Longest wait for a peer's answer beyond its own long-poll wait.
const ANSWER_MARGIN: Duration = Duration::from_secs(10);

/// Longest wait for a connection to another node: on one network, a node that does not answer
/// by then is away.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a call to another node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The node does not hold what it was asked for (its volume moved): read the owners again.
    #[error("{node} does not hold what it was asked for now")]
    NotOwner {
        /// The node's URL.
        node: String,
    },
    /// The node did not answer, or its answer could not be read: the call may have been
    /// applied.
    #[error("{node} did not answer: {reason}")]
    Unreachable {
        /// The node's URL.
        node: String,
        /// What failed.
        reason: String,
    },
    /// No node holds the partition's volume now (its owner failed and another is taking it):
    /// retry shortly.
    #[error("volume {volume}, which holds this partition, has no reachable owner now")]
    NoOwner {
        /// The volume.
        volume: usize,
    },
    /// The node refused, with its REST API's error (its code, message and details: the
    /// offsets of a `log_truncated`, say), which is the caller's answer too.
    #[error("{}", .0.message)]
    Refused(wire::ErrorDetail),
}

impl PeerError {
    /// The code a caller is answered: the peer's own, or `unavailable` when it did not answer
    /// or no longer holds the partitions (a volume is moving: retry shortly).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Refused(error) => error.code,
            Self::NotOwner { .. } | Self::Unreachable { .. } | Self::NoOwner { .. } => {
                ErrorCode::Unavailable
            }
        }
    }
}

/// What a call to another node answers, once it does.
pub type PeerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, PeerError>> + Send + 'a>>;

/// The operations one node asks of another, each served by the other node from the partitions
/// it holds. `node` is the other node's URL, as it registered.
pub trait Peers: Send + Sync {
    /// Appends `records`, one atomic batch, to partition `partition` of `topic`: their offsets,
    /// and the partition's load after the append.
    fn append<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        records: &'a [NewRecord],
    ) -> PeerFuture<'a, (Vec<u64>, LoadSnapshot)>;

    /// Polls `group` on the partitions of `topic` the node holds, up to `limit` records each,
    /// waiting up to `wait` for records: each partition's page.
    fn poll<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        group: &'a str,
        limit: Option<usize>,
        wait: Duration,
    ) -> PeerFuture<'a, Vec<(u32, Page)>>;

    /// Commits `group`'s `offsets` (partition → offset) of `topic`, all held by the node: each
    /// partition's cursor in effect.
    fn commit<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        group: &'a str,
        offsets: &'a BTreeMap<u32, u64>,
    ) -> PeerFuture<'a, BTreeMap<u32, u64>>;

    /// Sets `group`'s cursor on partition `partition` of `topic` to `offset`, forward or back,
    /// keeping `metadata` with it: the cursor.
    fn seek<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
        offset: u64,
        metadata: Option<&'a str>,
    ) -> PeerFuture<'a, u64>;

    /// `group`'s committed position on partition `partition` of `topic`, with its metadata.
    fn committed<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> PeerFuture<'a, Option<Committed>>;

    /// Deletes `group`'s cursor and leases on partition `partition` of `topic`: whether there
    /// was a cursor.
    fn delete_cursor<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> PeerFuture<'a, bool>;

    /// Partition `partition` of `topic`'s bounds.
    fn bounds<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
    ) -> PeerFuture<'a, Bounds>;

    /// Leases `group`'s next range of partition `partition` of `topic`, up to `limit` records;
    /// `None` when nothing is available now.
    fn lease<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
        limit: Option<usize>,
    ) -> PeerFuture<'a, Option<Lease>>;

    /// The bounds, cursors and backlog of the partitions of `topic` the node holds.
    fn describe<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
    ) -> PeerFuture<'a, Vec<PartitionDetail>>;

    /// Every group's position on the partitions of `topic` the node holds, with their lag
    /// history (see [`Log::group_summary`](crate::Log::group_summary)).
    fn groups<'a>(&'a self, node: &'a str, topic: &'a str)
    -> PeerFuture<'a, Vec<GroupOnPartition>>;

    /// A page of the topics of the volumes the node holds (see
    /// [`Log::topics_page`](crate::Log::topics_page)).
    fn topics<'a>(
        &'a self,
        node: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> PeerFuture<'a, TopicsPage>;
}

/// How one node calls the others: over TLS when `[cluster.tls]` says so, trusting only the
/// cluster's CA, and proving itself with the cluster's secret ([`NODE_SECRET`]); connections
/// are reused across calls, and clones share them.
#[derive(Clone)]
pub struct NodeClient {
    client: reqwest::Client,
    /// The cluster's secret (see [`ClusterSettings::node_secret`]), if it has one.
    secret: Option<String>,
}

impl std::fmt::Debug for NodeClient {
    /// Never shows the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient").finish_non_exhaustive()
    }
}

impl NodeClient {
    /// A client for the cluster `settings` describe, proving itself with `secret` (empty:
    /// none), whose calls wait at most `max_wait` (the longest long-poll) plus a margin.
    ///
    /// # Errors
    /// Why `[cluster.tls]`'s files do not make a client (see `tls::trusting`).
    pub fn new(
        settings: &ClusterSettings,
        secret: &str,
        max_wait: Duration,
    ) -> Result<Self, String> {
        let tls = &settings.tls;
        let builder = reqwest::Client::builder()
            .timeout(max_wait + ANSWER_MARGIN)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(64);
        let client = if tls.enabled() {
            crate::tls::trusting(builder, Some(&tls.ca_file), tls.identity())?
        } else {
            builder
        }
        .build()
        .map_err(|err| crate::error::with_causes(&err))?;
        Ok(Self {
            client,
            secret: (!secret.is_empty()).then(|| secret.to_owned()),
        })
    }

    /// A `method` request to `url`, marked as one node's to another ([`FORWARDED`], and the
    /// cluster's secret).
    pub(crate) fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, url).header(FORWARDED, "1");
        match &self.secret {
            Some(secret) => request.header(NODE_SECRET, secret),
            None => request,
        }
    }
}

/// [`Peers`] over the other nodes' REST API.
#[derive(Debug, Clone)]
pub struct HttpPeers {
    client: NodeClient,
}

impl HttpPeers {
    /// Peers called through `client`.
    pub fn new(client: NodeClient) -> Self {
        Self { client }
    }

    fn get(&self, node: &str, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(reqwest::Method::GET, &Self::url(node, path))
    }

    fn post(&self, node: &str, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(reqwest::Method::POST, &Self::url(node, path))
    }

    fn put(&self, node: &str, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(reqwest::Method::PUT, &Self::url(node, path))
    }

    /// Sends `request` to `node` and reads its answer as `T` when it has status `expected`.
    async fn call<T: DeserializeOwned>(
        &self,
        node: &str,
        request: reqwest::RequestBuilder,
        expected: u16,
    ) -> Result<T, PeerError> {
        self.call_or_none(node, request, expected)
            .await?
            .ok_or_else(|| PeerError::Unreachable {
                node: node.to_owned(),
                reason: "answered 204, no content".into(),
            })
    }

    /// [`HttpPeers::call`], answering `None` for a `204 No Content`.
    async fn call_or_none<T: DeserializeOwned>(
        &self,
        node: &str,
        request: reqwest::RequestBuilder,
        expected: u16,
    ) -> Result<Option<T>, PeerError> {
        let unreachable = |reason: String| PeerError::Unreachable {
            node: node.to_owned(),
            reason,
        };
        let answer = request
            .send()
            .await
            .map_err(|err| unreachable(crate::error::with_causes(&err)))?;
        let status = answer.status().as_u16();
        let body = answer
            .bytes()
            .await
            .map_err(|err| unreachable(crate::error::with_causes(&err)))?;
        if status == 204 {
            return Ok(None);
        }
        if status == expected {
            return serde_json::from_slice(&body)
                .map(Some)
                .map_err(|err| unreachable(format!("an unreadable answer: {err}")));
        }
        Err(refusal(node, status, &body))
    }

    fn url(node: &str, path: &str) -> String {
        format!("{}{path}", node.trim_end_matches('/'))
    }
}

/// `request` with `body` as JSON.
fn json_post(
    request: reqwest::RequestBuilder,
    body: &impl serde::Serialize,
) -> reqwest::RequestBuilder {
    request
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).expect("a request body serializes"))
}

/// The error of a peer's answer with `status` and `body`.
fn refusal(node: &str, status: u16, body: &[u8]) -> PeerError {
    let error: Option<wire::ErrorBody> = serde_json::from_slice(body).ok();
    match error.map(|answer| answer.error) {
        Some(error) if error.code == ErrorCode::NotOwner => PeerError::NotOwner {
            node: node.to_owned(),
        },
        Some(error) => PeerError::Refused(error),
        None => PeerError::Unreachable {
            node: node.to_owned(),
            reason: format!("answered {status}: {}", String::from_utf8_lossy(body)),
        },
    }
}

/// An answer of `node` that could not be read back.
fn unreadable(node: &str) -> impl Fn(String) -> PeerError + '_ {
    move |reason| PeerError::Unreachable {
        node: node.to_owned(),
        reason: format!("an answer that does not read back: {reason}"),
    }
}

impl Peers for HttpPeers {
    fn append<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        records: &'a [NewRecord],
    ) -> PeerFuture<'a, (Vec<u64>, LoadSnapshot)> {
        Box::pin(async move {
            let body = records
                .iter()
                .map(|record| {
                    wire::RecordOut::of(record).map_err(|err| {
                        PeerError::Refused(wire::ErrorDetail::new(ErrorCode::InvalidRequest, err))
                    })
                })
                .collect::<Result<Vec<_>, PeerError>>()?;
            let path = format!("/topics/{topic}/partitions/{partition}/records");
            let request = json_post(self.post(node, &path), &body);
            let appended: wire::AppendedOffsets = self.call(node, request, 202).await?;
            Ok((appended.offsets, appended.load))
        })
    }

    fn poll<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        group: &'a str,
        limit: Option<usize>,
        wait: Duration,
    ) -> PeerFuture<'a, Vec<(u32, Page)>> {
        Box::pin(async move {
            let mut query = vec![("waitMs", wait.as_millis().to_string())];
            if let Some(limit) = limit {
                query.push(("limit", limit.to_string()));
            }
            let path = format!("/topics/{topic}/groups/{group}/poll");
            let request = self.get(node, &path).query(&query);
            let polled: wire::GroupPoll = self.call(node, request, 200).await?;
            polled
                .partitions
                .into_iter()
                .map(|entry| {
                    Ok((
                        entry.partition,
                        entry.page.try_into().map_err(unreadable(node))?,
                    ))
                })
                .collect()
        })
    }

    fn commit<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        group: &'a str,
        offsets: &'a BTreeMap<u32, u64>,
    ) -> PeerFuture<'a, BTreeMap<u32, u64>> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/groups/{group}/commit");
            let body = wire::CommitOffsets {
                offsets: offsets.clone(),
            };
            let request = json_post(self.post(node, &path), &body);
            let committed: wire::CommittedCursors = self.call(node, request, 200).await?;
            Ok(committed.cursors)
        })
    }

    fn seek<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
        offset: u64,
        metadata: Option<&'a str>,
    ) -> PeerFuture<'a, u64> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/partitions/{partition}/cursors/{group}");
            let body = wire::CursorBody {
                offset: wire::Integer(i64::try_from(offset).unwrap_or(i64::MAX)),
                seek: true,
                metadata: metadata.map(str::to_owned),
            };
            let request = json_post(self.put(node, &path), &body);
            let cursor: wire::Cursor = self.call(node, request, 200).await?;
            Ok(cursor.cursor)
        })
    }

    fn committed<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> PeerFuture<'a, Option<Committed>> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/partitions/{partition}/cursors/{group}");
            let answer: wire::GroupCursor = self.call(node, self.get(node, &path), 200).await?;
            Ok(answer.cursor.map(|offset| Committed {
                offset,
                metadata: answer.metadata,
            }))
        })
    }

    fn delete_cursor<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
    ) -> PeerFuture<'a, bool> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/partitions/{partition}/cursors/{group}");
            let request = self
                .client
                .request(reqwest::Method::DELETE, &Self::url(node, &path));
            let unreachable = |err: reqwest::Error| PeerError::Unreachable {
                node: node.to_owned(),
                reason: crate::error::with_causes(&err),
            };
            let answer = request.send().await.map_err(unreachable)?;
            let status = answer.status().as_u16();
            // A node that does not say (an earlier version) deleted whatever there was.
            let deleted = answer
                .headers()
                .get(CURSOR_DELETED)
                .is_none_or(|value| value.as_bytes() != b"0");
            let body = answer.bytes().await.map_err(unreachable)?;
            match status {
                204 => Ok(deleted),
                _ => Err(refusal(node, status, &body)),
            }
        })
    }

    fn bounds<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
    ) -> PeerFuture<'a, Bounds> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/partitions/{partition}/bounds");
            let request = self.get(node, &path);
            let bounds: wire::Bounds = self.call(node, request, 200).await?;
            Ok(bounds.into())
        })
    }

    fn lease<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
        partition: u32,
        group: &'a str,
        limit: Option<usize>,
    ) -> PeerFuture<'a, Option<Lease>> {
        Box::pin(async move {
            let path = format!("/topics/{topic}/partitions/{partition}/groups/{group}/leases");
            let mut request = self.post(node, &path);
            if let Some(limit) = limit {
                request = request.query(&[("limit", limit)]);
            }
            let lease: Option<wire::Lease> = self.call_or_none(node, request, 200).await?;
            lease
                .map(Lease::try_from)
                .transpose()
                .map_err(unreadable(node))
        })
    }

    fn describe<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
    ) -> PeerFuture<'a, Vec<PartitionDetail>> {
        Box::pin(async move {
            let request = self.get(node, &format!("/topics/{topic}"));
            let described: wire::TopicDetail = self.call(node, request, 200).await?;
            Ok(described
                .partitions
                .into_iter()
                .map(PartitionDetail::from)
                .collect())
        })
    }

    fn groups<'a>(
        &'a self,
        node: &'a str,
        topic: &'a str,
    ) -> PeerFuture<'a, Vec<GroupOnPartition>> {
        Box::pin(async move {
            let request = self.get(node, &format!("/topics/{topic}/groups"));
            let groups: wire::TopicGroups = self.call(node, request, 200).await?;
            Ok(groups.positions())
        })
    }

    fn topics<'a>(
        &'a self,
        node: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> PeerFuture<'a, TopicsPage> {
        Box::pin(async move {
            let mut query = vec![("limit", limit.to_string())];
            if let Some(after) = after {
                query.push(("after", after.to_owned()));
            }
            let request = self.get(node, "/topics").query(&query);
            let page: wire::Topics = self.call(node, request, 200).await?;
            Ok(TopicsPage {
                topics: page
                    .topics
                    .into_iter()
                    .map(|topic| TopicInfo {
                        name: topic.name,
                        partitions: topic.partitions,
                    })
                    .collect(),
                next: page.next,
            })
        })
    }
}
