//! Requests that span partitions, in a cluster: each node serves the partitions whose volumes
//! it holds, and the node a request reached asks the others for the rest and merges.
//!
//! A group poll that another node forwarded (it carries
//! [`FORWARDED`](super::forward::FORWARDED)) is served for the partitions held here only; the
//! node that asked checks that every partition was answered, and answers `503 unavailable` with
//! `Retry-After` when one was not (its volume is moving). A forwarded group commit names only
//! partitions held where it is sent.

use std::collections::BTreeMap;

use actix_web::HttpRequest;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::Value;

use super::HttpState;
use super::error::ApiError;
use super::forward::{Answer, FORWARDED, Forwarder, Outgoing, forward, send};
use crate::cluster::placement::volume_of;
use crate::cluster::{Cluster, Route};
use crate::error::Error;
use crate::log::{AppendOutcome, Event, EventsOutcome, NewRecord};
use crate::names::PartitionId;
use crate::store::check_offset;
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

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

    /// A group poll over every partition of `topic`: each node polls the partitions it holds
    /// (this one through `poll_here`) with the client's wait, and once one answers records the
    /// others are asked again without waiting. Answers each partition's entry (`partition`,
    /// records, `nextOffset`, `lag`), in partition order.
    pub(crate) async fn poll<F, Fut>(
        &self,
        topic: &str,
        partitions: u32,
        waited: bool,
        poll_here: F,
    ) -> Spreading<Vec<Value>>
    where
        F: Fn(Vec<u32>, bool) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Value>, ApiError>>,
    {
        let places = match self.places(topic, 0..partitions) {
            Ok(places) => places,
            Err(unowned) => return Ok(Err(unowned)),
        };
        let query = |wait: bool| {
            let query = self.request.query_string();
            if wait {
                return Some(query.to_owned());
            }
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| !pair.is_empty() && !pair.starts_with("waitMs="))
                .collect();
            Some(kept.join("&"))
        };
        let ask = |place: Place, partitions: Vec<u32>, wait: bool| {
            let query = query(wait);
            let poll_here = &poll_here;
            async move {
                let entries = match &place {
                    Place::Here => poll_here(partitions, wait).await?,
                    Place::At(url) => match self.ask(url, query, Vec::new()).await {
                        Ok(answer) => match entries_of(&answer) {
                            Some(entries) => entries,
                            None => return Ok(Err(answer)),
                        },
                        Err(failed) => return Ok(Err(failed)),
                    },
                };
                Ok::<_, ApiError>(Ok((place, entries)))
            }
        };
        let mut pending: FuturesUnordered<_> = places
            .iter()
            .map(|(place, partitions)| ask(place.clone(), partitions.clone(), waited))
            .collect();
        let mut answered: BTreeMap<Place, Vec<Value>> = BTreeMap::new();
        while let Some(answer) = pending.next().await {
            let (place, entries) = match answer? {
                Ok(answer) => answer,
                Err(failed) => return Ok(Err(failed)),
            };
            let found = entries
                .iter()
                .any(|entry| entry["records"].as_array().is_some_and(|r| !r.is_empty()));
            answered.insert(place, entries);
            if found && waited {
                // Records came: the others answer what they have now.
                drop(pending);
                let mut now: FuturesUnordered<_> = places
                    .iter()
                    .filter(|(place, _)| !answered.contains_key(*place))
                    .map(|(place, partitions)| ask(place.clone(), partitions.clone(), false))
                    .collect();
                while let Some(answer) = now.next().await {
                    match answer? {
                        Ok((place, entries)) => answered.insert(place, entries),
                        Err(failed) => return Ok(Err(failed)),
                    };
                }
                break;
            }
        }
        Ok(complete(
            answered.into_values().flatten().collect(),
            partitions,
        ))
    }

    /// A group commit of `offsets` (partition → offset), so that a bad offset changes nothing
    /// anywhere: each partition held elsewhere is checked against its next offset first (its
    /// owner's `GET .../bounds`; next offsets only grow), then this node commits the partitions
    /// it holds (`commit_here`, which checks them before committing any), then each owner
    /// commits its own. Answers each partition's cursor in effect.
    pub(crate) async fn commit<F, Fut>(
        &self,
        topic: &str,
        offsets: &BTreeMap<u32, u64>,
        commit_here: F,
    ) -> Spreading<BTreeMap<u32, u64>>
    where
        F: FnOnce(BTreeMap<u32, u64>) -> Fut,
        Fut: std::future::Future<Output = Result<BTreeMap<u32, u64>, Error>>,
    {
        let mut places = match self.places(topic, offsets.keys().copied()) {
            Ok(places) => places,
            Err(unowned) => return Ok(Err(unowned)),
        };
        let subset = |partitions: &[u32]| -> BTreeMap<u32, u64> {
            partitions.iter().map(|p| (*p, offsets[p])).collect()
        };
        for (place, partitions) in &places {
            if *place == Place::Here {
                continue;
            }
            for &partition in partitions {
                let id = self.state.log.partition(topic, partition)?;
                let next_offset = match self.next_offset(&id).await {
                    Ok(next_offset) => next_offset,
                    Err(answer) => return Ok(Err(answer)),
                };
                check_offset(offsets[&partition], next_offset).map_err(Error::from)?;
            }
        }
        // Called even with nothing held here: it checks the names.
        let here = places.remove(&Place::Here).unwrap_or_default();
        let mut cursors = commit_here(subset(&here)).await?;
        for (place, partitions) in &places {
            let Place::At(url) = place else { continue };
            let body = serde_json::json!({ "offsets": subset(partitions) });
            let answer = match self.ask(url, None, body.to_string().into_bytes()).await {
                Ok(answer) => answer,
                Err(failed) => return Ok(Err(failed)),
            };
            match cursors_of(&answer) {
                Some(theirs) => cursors.extend(theirs),
                None => return Ok(Err(answer)),
            }
        }
        Ok(Ok(cursors))
    }

    /// Partition `partition`'s next offset, asked of its owner.
    async fn next_offset(&self, id: &PartitionId) -> Result<u64, Answer> {
        let path = format!("/topics/{}/partitions/{}/bounds", id.topic(), id.index());
        let answer = self
            .to_owner_of(id, actix_web::http::Method::GET, path, Vec::new())
            .await;
        let next_offset = (answer.status == 200)
            .then(|| serde_json::from_slice::<Value>(&answer.body).ok())
            .flatten()
            .and_then(|bounds| bounds["nextOffset"].as_u64());
        next_offset.ok_or(answer)
    }

    /// Keyed events in a cluster: checked whole here, then each partition's batch appended
    /// here when this node holds its volume, else sent to its owner's
    /// `POST /topics/{topic}/partitions/{partition}/records`. An owner's error is answered as
    /// it is (`Err`); the batches already appended stay, as when a storage failure stops
    /// [`Log::append_events`](crate::Log::append_events).
    pub(crate) async fn append_events(
        &self,
        topic: &str,
        events: Vec<Event>,
    ) -> Result<Result<EventsOutcome, Answer>, ApiError> {
        let mut batches = match self.state.log.event_batches(topic, events)? {
            Ok(batches) => batches,
            Err(rejected) => return Ok(Ok(rejected)),
        };
        let appends = batches.groups.iter_mut().map(|group| {
            let (partition, records) = (group.partition, std::mem::take(&mut group.records));
            self.append(topic, partition, records)
        });
        let mut outcomes = Vec::new();
        for appended in join_all(appends).await {
            match appended? {
                Ok(outcome) => outcomes.push(outcome),
                Err(owners_answer) => return Ok(Err(owners_answer)),
            }
        }
        Ok(Ok(batches.place(outcomes)))
    }

    /// Appends one partition's batch where its volume is held.
    async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> Result<Result<AppendOutcome, Answer>, ApiError> {
        let id = PartitionId::new(topic, partition).map_err(crate::Error::from)?;
        let volume = volume_of(&id, self.cluster.volume_count());
        if self.cluster.route(volume) == Route::Local {
            let appended = self.state.log.append(topic, partition, records).await?;
            return Ok(Ok(appended.outcome));
        }
        let body: Vec<RecordOut<'_>> = records
            .iter()
            .map(|record| {
                let payload = serde_json::from_str(&record.payload)
                    .map_err(|err| ApiError::invalid_request(err.to_string()))?;
                Ok(RecordOut {
                    payload,
                    key: record.key.as_deref(),
                })
            })
            .collect::<Result<_, ApiError>>()?;
        let path = format!("/topics/{topic}/partitions/{partition}/records");
        let body = serde_json::to_vec(&body).expect("records serialize");
        let answer = self
            .to_owner_of(&id, actix_web::http::Method::POST, path, body)
            .await;
        if answer.status != 202 {
            return Ok(Err(answer));
        }
        let appended: OffsetsIn = serde_json::from_slice(&answer.body).map_err(|err| {
            ApiError::new(
                crate::error::ErrorCode::Unavailable,
                format!("the owner of {id} answered an unreadable body: {err}"),
            )
        })?;
        Ok(Ok(AppendOutcome::Appended {
            offsets: appended.offsets,
        }))
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

    /// A page of the topic list: every live node lists the topics of the volumes it holds
    /// (this one through `here`), and the first `limit` of their merge are the page, with
    /// `next` when more may follow.
    pub(crate) async fn topics<F, Fut>(
        &self,
        limit: usize,
        here: F,
    ) -> Spreading<(Vec<Value>, Option<String>)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Vec<Value>, Option<String>), ApiError>>,
    {
        let (mut topics, mut more) = {
            let (topics, next) = here().await?;
            (topics, next.is_some())
        };
        let query = Some(self.request.query_string().to_owned());
        let others = self.cluster.other_members();
        let asked = others
            .iter()
            .map(|url| self.ask(url, query.clone(), Vec::new()));
        for answer in join_all(asked).await {
            let answer = match answer {
                Ok(answer) => answer,
                Err(failed) => return Ok(Err(failed)),
            };
            let page: Option<Value> = (answer.status == 200)
                .then(|| serde_json::from_slice(&answer.body).ok())
                .flatten();
            let Some(Value::Array(theirs)) = page.as_ref().map(|page| page["topics"].clone())
            else {
                return Ok(Err(answer));
            };
            more |= page.is_some_and(|page| !page["next"].is_null());
            topics.extend(theirs);
        }
        topics.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        topics.dedup_by(|a, b| a["name"] == b["name"]);
        more |= topics.len() > limit;
        topics.truncate(limit);
        let next = more
            .then(|| {
                topics
                    .last()
                    .and_then(|topic| topic["name"].as_str())
                    .map(str::to_owned)
            })
            .flatten();
        Ok(Ok((topics, next)))
    }
}

/// A record as a forwarded batch carries it.
#[derive(Serialize)]
struct RecordOut<'a> {
    payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
}

/// The offsets of an owner's `202`.
#[derive(Deserialize)]
struct OffsetsIn {
    offsets: Vec<u64>,
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

/// The entries of a node's `200` group poll or topic description, if it is one.
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

/// The cursors of a node's `200` group commit, if it is one.
fn cursors_of(answer: &Answer) -> Option<BTreeMap<u32, u64>> {
    if answer.status != 200 {
        return None;
    }
    let body: Value = serde_json::from_slice(&answer.body).ok()?;
    body["cursors"]
        .as_object()?
        .iter()
        .map(|(partition, cursor)| Some((partition.parse().ok()?, cursor.as_u64()?)))
        .collect()
}
