//! The requests that span partitions and are not [`Log`](crate::Log) operations yet, in a
//! cluster: a topic's description and a topic-wide lease claim. Each node serves the
//! partitions whose volumes it holds, and the node a request reached asks the others for the
//! rest and merges. Group polls and commits, keyed events and the topic list fan out in `Log`
//! itself (`log/spread.rs`), through the typed calls of [`cluster::peer`](crate::cluster::peer).
//!
//! A request that another node forwarded (it carries
//! [`FORWARDED`](super::forward::FORWARDED)) is served for the partitions held here only; the
//! node that asked checks that every partition was answered, and answers `503 unavailable` with
//! `Retry-After` when one was not (its volume is moving).

use std::collections::BTreeMap;

use actix_web::HttpRequest;
use serde_json::Value;

use super::HttpState;
use super::error::ApiError;
use super::forward::{Answer, FORWARDED, Forwarder, Outgoing, forward, send};
use crate::cluster::placement::volume_of;
use crate::cluster::{Cluster, Route};
use crate::names::PartitionId;
use futures_util::future::join_all;

/// Where a set of partitions is served from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Here,
    At(String),
}

/// A node of a cluster serving a request that spans partitions.
pub(crate) struct Spread<'a> {
    pub state: &'a HttpState,
    pub cluster: &'a Cluster,
    pub forwarder: &'a Forwarder,
    pub request: &'a HttpRequest,
}

/// What a spread request answers: its merged body, or an answer to pass back as it is (an
/// owner's error, or `503` when a partition has no owner now).
pub(crate) type Spreading<T> = Result<Result<T, Answer>, ApiError>;

impl<'a> Spread<'a> {
    /// The cluster's way for `request`, when this node is in a cluster.
    pub(crate) fn of(state: &'a HttpState, request: &'a HttpRequest) -> Option<Self> {
        Some(Self {
            state,
            cluster: state.log.cluster()?,
            forwarder: state.forwarder.as_ref()?,
            request,
        })
    }

    /// Whether another node forwarded the request: it is served for this node's partitions.
    pub(crate) fn forwarded(&self) -> bool {
        self.request.headers().contains_key(FORWARDED)
    }

    /// The partitions of `partitions` whose volumes this node holds.
    pub(crate) fn held(&self, topic: &str, partitions: impl Iterator<Item = u32>) -> Vec<u32> {
        partitions
            .filter(|&partition| self.place(topic, partition) == Some(Place::Here))
            .collect()
    }

    fn place(&self, topic: &str, partition: u32) -> Option<Place> {
        let id = PartitionId::new(topic, partition).ok()?;
        match self
            .cluster
            .route(volume_of(&id, self.cluster.volume_count()))
        {
            Route::Local => Some(Place::Here),
            Route::Remote(url) => Some(Place::At(url)),
            Route::Unowned => None,
        }
    }

    /// `partitions` grouped by where they are served; `Err` with the `503` to answer when one
    /// has no owner now.
    fn places(
        &self,
        topic: &str,
        partitions: impl Iterator<Item = u32>,
    ) -> Result<BTreeMap<Place, Vec<u32>>, Answer> {
        let mut places: BTreeMap<Place, Vec<u32>> = BTreeMap::new();
        for partition in partitions {
            let Some(place) = self.place(topic, partition) else {
                let volume = PartitionId::new(topic, partition)
                    .map_or(0, |id| volume_of(&id, self.cluster.volume_count()));
                return Err(Answer::no_owner(volume));
            };
            places.entry(place).or_default().push(partition);
        }
        Ok(places)
    }

    /// Sends the client's request, with `body` and `query` in place of its own, to the node at
    /// `url`: its answer, or the `503` to pass back when it did not answer or no longer holds
    /// what it was asked for.
    async fn ask(&self, url: &str, query: Option<String>, body: Vec<u8>) -> Result<Answer, Answer> {
        let path = self.request.path();
        let outgoing = Outgoing {
            method: self.request.method().clone(),
            path_and_query: match query {
                Some(query) => format!("{path}?{query}"),
                None => path.to_owned(),
            },
            headers: self.request.headers().clone(),
            body: body.into(),
        };
        self.cluster
            .counters()
            .forwards
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match send(self.forwarder, url, &outgoing).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) | Err(_) => {
                self.cluster
                    .counters()
                    .forward_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(Answer::unavailable(
                    "a node holding some of these partitions did not answer",
                ))
            }
        }
    }

    /// Sends `method path_and_query` with `body` and the client's headers (its token) to the
    /// node holding partition `id`'s volume (see [`forward`]).
    async fn to_owner_of(
        &self,
        id: &PartitionId,
        method: actix_web::http::Method,
        path_and_query: String,
        body: Vec<u8>,
    ) -> Answer {
        let outgoing = Outgoing {
            method,
            path_and_query,
            headers: self.request.headers().clone(),
            body: body.into(),
        };
        let volume = volume_of(id, self.cluster.volume_count());
        forward(self.cluster, self.forwarder, &outgoing, volume).await
    }

    /// Each partition's entry of a topic-wide request (`GET /topics/{topic}`): each node
    /// answers for the partitions it holds (this one through `here`), in partition order.
    pub(crate) async fn gather<F, Fut>(
        &self,
        topic: &str,
        partitions: u32,
        here: F,
    ) -> Spreading<Vec<Value>>
    where
        F: FnOnce(Vec<u32>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Value>, ApiError>>,
    {
        let mut places = match self.places(topic, 0..partitions) {
            Ok(places) => places,
            Err(unowned) => return Ok(Err(unowned)),
        };
        let mut entries = here(places.remove(&Place::Here).unwrap_or_default()).await?;
        let query = Some(self.request.query_string().to_owned());
        let asked = places.keys().filter_map(|place| match place {
            Place::At(url) => Some(self.ask(url, query.clone(), Vec::new())),
            Place::Here => None,
        });
        for answer in join_all(asked).await {
            let answer = match answer {
                Ok(answer) => answer,
                Err(failed) => return Ok(Err(failed)),
            };
            match entries_of(&answer) {
                Some(theirs) => entries.extend(theirs),
                None => return Ok(Err(answer)),
            }
        }
        Ok(complete(entries, partitions))
    }

    /// A topic-wide lease claim: the partitions are tried in turn, each where its volume is
    /// held, until one grants a range. Answers the lease with its `partition`, or `None`.
    pub(crate) async fn lease_any<F, Fut>(
        &self,
        topic: &str,
        group: &str,
        partitions: u32,
        here: F,
    ) -> Spreading<Option<Value>>
    where
        F: Fn(u32) -> Fut,
        Fut: std::future::Future<Output = Result<Option<Value>, ApiError>>,
    {
        for partition in 0..partitions {
            let id = self.state.log.partition(topic, partition)?;
            let volume = volume_of(&id, self.cluster.volume_count());
            if self.cluster.route(volume) == Route::Local {
                if let Some(lease) = here(partition).await? {
                    return Ok(Ok(Some(lease)));
                }
                continue;
            }
            let query = self.request.query_string();
            let path = format!("/topics/{topic}/partitions/{partition}/groups/{group}/leases");
            let path = if query.is_empty() {
                path
            } else {
                format!("{path}?{query}")
            };
            let answer = self
                .to_owner_of(&id, actix_web::http::Method::POST, path, Vec::new())
                .await;
            match answer.status {
                200 => {
                    let mut lease: Value = match serde_json::from_slice(&answer.body) {
                        Ok(lease) => lease,
                        Err(_) => return Ok(Err(answer)),
                    };
                    lease["partition"] = partition.into();
                    return Ok(Ok(Some(lease)));
                }
                204 => {}
                _ => return Ok(Err(answer)),
            }
        }
        Ok(Ok(None))
    }
}

/// The entries of every partition `0..partitions`, in order; `Err` with `503` when one is
/// missing (a node answered for other partitions than it was asked: a volume is moving).
fn complete(mut entries: Vec<Value>, partitions: u32) -> Result<Vec<Value>, Answer> {
    entries.sort_by_key(|entry| entry["partition"].as_u64());
    let complete = entries.len() == partitions as usize
        && entries
            .iter()
            .zip(0..)
            .all(|(entry, partition)| entry["partition"].as_u64() == Some(partition));
    if complete {
        Ok(entries)
    } else {
        Err(Answer::unavailable(
            "a partition's volume is moving between nodes",
        ))
    }
}

/// The entries of a node's `200` topic description, if it is one.
fn entries_of(answer: &Answer) -> Option<Vec<Value>> {
    if answer.status != 200 {
        return None;
    }
    let mut body: Value = serde_json::from_slice(&answer.body).ok()?;
    match body["partitions"].take() {
        Value::Array(entries) => Some(entries),
        _ => None,
    }
}
