//! A cluster node's [`Log`](crate::Log) over partitions that several nodes hold: each
//! operation that names partitions held elsewhere asks their nodes through
//! [`Peers`](crate::cluster::peer::Peers) and merges, so an embedded `Log` answers as the REST
//! server does.
//!
//! The rules, once for every front end:
//! - a partition with no owner now (its node failed, another is taking it) answers
//!   `unavailable` (retry shortly), and so does a node that no longer holds what it was asked
//!   for, after the owners were read again and it was asked once more;
//! - a group poll asks every node with the caller's wait; once one answers records, the others
//!   are asked again without waiting; every partition must be answered, in order;
//! - a group commit checks every offset against its partition's next offset first (asked of
//!   its owner; next offsets only grow), so a bad offset commits nothing anywhere; then each
//!   node commits its own;
//! - a topic list merges each node's page of the topics it holds.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::cluster::peer::{PeerError, Peers};
use crate::cluster::{Cluster, Route};
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::Appended;
use crate::store::{AppendOutcome, Bounds, Committed, Lease, NewRecord, Page, check_offset};

use super::{GroupOnPartition, PartitionDetail, TopicsPage};

/// Where a partition is served from, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Place {
    /// This node holds its volume.
    Here,
    /// The node at this URL does.
    At(String),
}

/// What the fan-out needs to know of the cluster: where each partition is, the other nodes,
/// and a fresh read of the owners. [`Cluster`] is one; the tests have a double.
pub(crate) trait Placement: Send + Sync {
    /// Where partition `id` is served from; `Err` when no node holds it now.
    fn place(&self, id: &PartitionId) -> Result<Place, PeerError>;
    /// The URLs of the other live nodes.
    fn others(&self) -> Vec<String>;
    /// Reads the owners again (a node answered that it no longer holds a partition).
    fn refresh(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

impl Placement for Cluster {
    fn place(&self, id: &PartitionId) -> Result<Place, PeerError> {
        let volume = crate::routing::volume_of(id, self.volume_count());
        match self.route(volume) {
            Route::Local => Ok(Place::Here),
            Route::Remote(url) => Ok(Place::At(url)),
            Route::Unowned => Err(PeerError::NoOwner { volume }),
        }
    }

    fn others(&self) -> Vec<String> {
        self.other_members()
    }

    fn refresh(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if let Err(err) = Cluster::refresh(self).await {
                log::warn!("cluster: reading the owners again failed: {err}");
            }
        })
    }
}

/// A node's way to the partitions of the others.
pub(crate) struct Spread<'a> {
    pub placement: &'a dyn Placement,
    pub peers: &'a dyn Peers,
}

/// What a node answers for the partitions it holds, in [`Spread::gather`].
#[derive(Debug, Clone, Copy)]
enum Answers {
    /// One item for each, in order.
    Each,
    /// Items for some of them, in order.
    Some,
}

/// What an operation on the partitions held here answers.
pub(super) type Here<'f, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'f>>;

/// What a poll of the partitions held here answers: not `Send`, as a long-poll's wait is not.
type PolledHere<'f> = Pin<Box<dyn Future<Output = Result<Vec<Page>, Error>> + 'f>>;

impl Spread<'_> {
    /// Whether this node holds partition `id` now.
    pub fn is_here(&self, id: &PartitionId) -> bool {
        matches!(self.placement.place(id), Ok(Place::Here))
    }

    /// `partitions` of `topic` grouped by where they are served.
    fn places(
        &self,
        topic: &str,
        partitions: impl Iterator<Item = u32>,
    ) -> Result<BTreeMap<Place, Vec<u32>>, Error> {
        let mut places: BTreeMap<Place, Vec<u32>> = BTreeMap::new();
        for partition in partitions {
            let id = PartitionId::new(topic, partition)?;
            places
                .entry(self.placement.place(&id)?)
                .or_default()
                .push(partition);
        }
        Ok(places)
    }

    /// Runs `attempt`; when a node answered that it no longer holds what it was asked for,
    /// reads the owners again and runs it once more (`again` set): the one retry of every
    /// operation across nodes.
    async fn once_more_if_moved<T, F>(&self, attempt: impl Fn(bool) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        match attempt(false).await {
            Err(Error::Peer(PeerError::NotOwner { .. })) => {
                self.placement.refresh().await;
                attempt(true).await
            }
            answered => answered,
        }
    }

    /// Runs `remote` at the node that serves partition `id`, reading the owners again and
    /// running it once more when that node no longer holds it; `None` when this node holds the
    /// partition (at once, or once the owners were read again), for the caller to run it here.
    async fn on_other_node<T, F>(
        &self,
        id: &PartitionId,
        remote: impl Fn(String) -> F,
    ) -> Result<Option<T>, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        if self.placement.place(id)? == Place::Here {
            return Ok(None);
        }
        self.once_more_if_moved(|_| async {
            match self.placement.place(id)? {
                Place::At(node) => remote(node).await.map(Some),
                // Moved here meanwhile.
                Place::Here => Ok(None),
            }
        })
        .await
    }

    /// Appends `records` to partition `id` where it is served (`here`: this node, which takes
    /// them as they are: an append held here is never copied).
    pub async fn append<'h>(
        &self,
        id: &PartitionId,
        records: Vec<NewRecord>,
        here: impl FnOnce(Vec<NewRecord>) -> Here<'h, Appended>,
    ) -> Result<Appended, Error> {
        let remote = {
            let records = &records;
            self.on_other_node(id, |node| async move {
                let (offsets, load) = self
                    .peers
                    .append(&node, id.topic(), id.index(), records)
                    .await?;
                Ok(Appended {
                    outcome: AppendOutcome::Appended { offsets },
                    load,
                })
            })
            .await?
        };
        match remote {
            Some(appended) => Ok(appended),
            None => here(records).await,
        }
    }

    /// Partition `id`'s bounds where it is served (`here`: this node).
    pub async fn bounds<'h>(
        &self,
        id: &PartitionId,
        here: impl FnOnce() -> Here<'h, Bounds>,
    ) -> Result<Bounds, Error> {
        let remote = self
            .on_other_node(id, |node| async move {
                Ok(self.peers.bounds(&node, id.topic(), id.index()).await?)
            })
            .await?;
        match remote {
            Some(bounds) => Ok(bounds),
            None => here().await,
        }
    }

    /// Leases `group`'s next range of partition `id` where it is served (`here`: this node).
    pub async fn lease<'h>(
        &self,
        id: &PartitionId,
        group: &str,
        limit: Option<usize>,
        here: impl FnOnce() -> Here<'h, Option<Lease>>,
    ) -> Result<Option<Lease>, Error> {
        let remote = self
            .on_other_node(id, |node| async move {
                Ok(self
                    .peers
                    .lease(&node, id.topic(), id.index(), group, limit)
                    .await?)
            })
            .await?;
        match remote {
            Some(lease) => Ok(lease),
            None => here().await,
        }
    }

    /// Sets `group`'s cursor on partition `id` to `offset` with `metadata` where it is served
    /// (`here`: this node).
    pub async fn seek<'h>(
        &self,
        id: &PartitionId,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
        here: impl FnOnce() -> Here<'h, u64>,
    ) -> Result<u64, Error> {
        let remote = self
            .on_other_node(id, |node| async move {
                Ok(self
                    .peers
                    .seek(&node, id.topic(), id.index(), group, offset, metadata)
                    .await?)
            })
            .await?;
        match remote {
            Some(cursor) => Ok(cursor),
            None => here().await,
        }
    }

    /// `group`'s committed position on partition `id` where it is served (`here`: this node).
    pub async fn committed<'h>(
        &self,
        id: &PartitionId,
        group: &str,
        here: impl FnOnce() -> Here<'h, Option<Committed>>,
    ) -> Result<Option<Committed>, Error> {
        let remote = self
            .on_other_node(id, |node| async move {
                Ok(self
                    .peers
                    .committed(&node, id.topic(), id.index(), group)
                    .await?)
            })
            .await?;
        match remote {
            Some(committed) => Ok(committed),
            None => here().await,
        }
    }

    /// Deletes `group`'s cursor on partition `id` where it is served (`here`: this node):
    /// whether there was one.
    pub async fn delete_cursor<'h>(
        &self,
        id: &PartitionId,
        group: &str,
        here: impl FnOnce() -> Here<'h, bool>,
    ) -> Result<bool, Error> {
        let remote = self
            .on_other_node(id, |node| async move {
                Ok(self
                    .peers
                    .delete_cursor(&node, id.topic(), id.index(), group)
                    .await?)
            })
            .await?;
        match remote {
            Some(deleted) => Ok(deleted),
            None => here().await,
        }
    }

    /// Every partition `0..partitions` of `topic` described where it is held (`here`: the
    /// partitions held here), in order; when a node answered for other partitions than this
    /// node believes it holds, the owners are read again and every node asked once more.
    pub async fn describe<'h>(
        &self,
        topic: &str,
        partitions: u32,
        here: impl Fn(Vec<u32>) -> Here<'h, Vec<PartitionDetail>>,
    ) -> Result<Vec<PartitionDetail>, Error> {
        self.once_more_if_moved(|_| self.describe_once(topic, partitions, &here))
            .await
    }

    async fn describe_once<'h>(
        &self,
        topic: &str,
        partitions: u32,
        here: &impl Fn(Vec<u32>) -> Here<'h, Vec<PartitionDetail>>,
    ) -> Result<Vec<PartitionDetail>, Error> {
        let remote = |node: String| async move { self.peers.describe(&node, topic).await };
        let answered = |detail: &PartitionDetail| detail.partition;
        self.gather(topic, partitions, here, remote, answered, Answers::Each)
            .await
    }

    /// Every group's position on every partition `0..partitions` of `topic`, read where each
    /// partition is held (`here`: the partitions held here), ordered by partition.
    pub async fn groups<'h>(
        &self,
        topic: &str,
        partitions: u32,
        here: impl Fn(Vec<u32>) -> Here<'h, Vec<GroupOnPartition>>,
    ) -> Result<Vec<GroupOnPartition>, Error> {
        let remote = |node: String| async move { self.peers.groups(&node, topic).await };
        let answered = |group: &GroupOnPartition| group.partition;
        self.once_more_if_moved(|_| {
            self.gather(topic, partitions, &here, remote, answered, Answers::Some)
        })
        .await
    }

    /// What partitions `0..partitions` of `topic` answer where they are held (`here`, or
    /// `remote` of the node holding them), ordered by partition; a node that answered for a
    /// partition it was not asked for (or, with [`Answers::Each`], did not answer one) no
    /// longer holds what this node believes.
    async fn gather<'h, T, F>(
        &self,
        topic: &str,
        partitions: u32,
        here: &impl Fn(Vec<u32>) -> Here<'h, Vec<T>>,
        remote: impl Fn(String) -> F,
        answered: impl Fn(&T) -> u32,
        answers: Answers,
    ) -> Result<Vec<T>, Error>
    where
        F: Future<Output = Result<Vec<T>, PeerError>>,
    {
        let places = self.places(topic, 0..partitions)?;
        let asked = places.iter().map(|(place, held)| {
            let remote = &remote;
            let answered = &answered;
            async move {
                let items = match place {
                    Place::Here => here(held.clone()).await?,
                    Place::At(node) => remote(node.clone()).await?,
                };
                let moved = match answers {
                    Answers::Each => items.iter().map(answered).collect::<Vec<u32>>() != *held,
                    Answers::Some => items
                        .iter()
                        .any(|item| held.binary_search(&answered(item)).is_err()),
                };
                match place {
                    Place::At(node) if moved => {
                        Err(Error::Peer(PeerError::NotOwner { node: node.clone() }))
                    }
                    _ => Ok(items),
                }
            }
        });
        let mut items: Vec<T> = futures_util::future::try_join_all(asked)
            .await?
            .into_iter()
            .flatten()
            .collect();
        items.sort_by_key(|item| answered(item));
        Ok(items)
    }

    /// A group poll of every partition `0..partitions` of `topic` (see the module docs): one
    /// page per partition, in order. `here` polls the partitions held here with a wait.
    pub async fn poll<'h>(
        &self,
        topic: &str,
        group: &str,
        partitions: u32,
        (limit, wait): (Option<usize>, Duration),
        here: impl Fn(Vec<u32>, Duration) -> PolledHere<'h>,
    ) -> Result<Vec<Page>, Error> {
        // Asked again, nobody waits: the first attempt waited already.
        self.once_more_if_moved(|again| {
            let wait = if again { Duration::ZERO } else { wait };
            self.poll_once(topic, group, partitions, (limit, wait), &here)
        })
        .await
    }

    async fn poll_once<'h>(
        &self,
        topic: &str,
        group: &str,
        partitions: u32,
        (limit, wait): (Option<usize>, Duration),
        here: &impl Fn(Vec<u32>, Duration) -> PolledHere<'h>,
    ) -> Result<Vec<Page>, Error> {
        let places = self.places(topic, 0..partitions)?;
        let ask = |place: &Place, held: &[u32], wait: Duration| {
            let (place, held) = (place.clone(), held.to_vec());
            async move {
                let pages = match &place {
                    Place::Here => held
                        .iter()
                        .copied()
                        .zip(here(held.clone(), wait).await?)
                        .collect(),
                    Place::At(node) => {
                        let pages = self.peers.poll(node, topic, group, limit, wait).await?;
                        // A node answering for other partitions than it was asked holds
                        // other volumes than this node believes.
                        let answered: Vec<u32> = pages.iter().map(|(p, _)| *p).collect();
                        if answered != held {
                            return Err(Error::Peer(PeerError::NotOwner { node: node.clone() }));
                        }
                        pages
                    }
                };
                Ok::<_, Error>((place, pages))
            }
        };
        let mut pending: FuturesUnordered<_> = places
            .iter()
            .map(|(place, held)| ask(place, held, wait))
            .collect();
        let mut answered: BTreeMap<Place, Vec<(u32, Page)>> = BTreeMap::new();
        while let Some(answer) = pending.next().await {
            let (place, pages) = answer?;
            let found = pages.iter().any(|(_, page)| !page.records.is_empty());
            answered.insert(place, pages);
            if found && !wait.is_zero() {
                // Records came: the others answer what they have now.
                drop(pending);
                let mut now: FuturesUnordered<_> = places
                    .iter()
                    .filter(|(place, _)| !answered.contains_key(*place))
                    .map(|(place, held)| ask(place, held, Duration::ZERO))
                    .collect();
                while let Some(answer) = now.next().await {
                    let (place, pages) = answer?;
                    answered.insert(place, pages);
                }
                break;
            }
        }
        let mut pages: Vec<(u32, Page)> = answered.into_values().flatten().collect();
        pages.sort_by_key(|(partition, _)| *partition);
        Ok(pages.into_iter().map(|(_, page)| page).collect())
    }

    /// A group commit of `offsets` (partition → offset) of `topic` (see the module docs): each
    /// partition's cursor in effect. `bounds` answers a partition's bounds wherever it is
    /// served; `here` commits the partitions held here (checking them all first), and is called
    /// even with none, so that it checks the names.
    pub async fn commit<'h>(
        &self,
        topic: &str,
        group: &str,
        offsets: &BTreeMap<u32, u64>,
        here: impl FnOnce(BTreeMap<u32, u64>) -> Here<'h, BTreeMap<u32, u64>>,
    ) -> Result<BTreeMap<u32, u64>, Error> {
        let mut places = self.places(topic, offsets.keys().copied())?;
        let subset = |held: &[u32]| -> BTreeMap<u32, u64> {
            held.iter().map(|p| (*p, offsets[p])).collect()
        };
        for (place, held) in &places {
            let Place::At(node) = place else { continue };
            for &partition in held {
                let id = PartitionId::new(topic, partition)?;
                let next_offset = self
                    .once_more_if_moved(|_| async {
                        match self.placement.place(&id)? {
                            Place::At(now) => Ok(self.peers.bounds(&now, topic, partition).await?),
                            // Moved here: not among the partitions `here` commits as planned.
                            Place::Here => {
                                Err(Error::Peer(PeerError::NotOwner { node: node.clone() }))
                            }
                        }
                    })
                    .await?
                    .next_offset;
                check_offset(offsets[&partition], next_offset)?;
            }
        }
        let held_here = places.remove(&Place::Here).unwrap_or_default();
        let mut cursors = here(subset(&held_here)).await?;
        for (place, held) in &places {
            let Place::At(node) = place else { continue };
            let theirs = self.peers.commit(node, topic, group, &subset(held)).await?;
            cursors.extend(theirs);
        }
        Ok(cursors)
    }

    /// A page of the topic list: this node's page (`here`) merged with each other node's,
    /// the first `limit` of their union, with `next` when more may follow.
    pub async fn topics(
        &self,
        after: Option<&str>,
        limit: usize,
        here: Here<'_, TopicsPage>,
    ) -> Result<TopicsPage, Error> {
        let mine = here.await?;
        let mut more = mine.next.is_some();
        let mut topics = mine.topics;
        let others = self.placement.others();
        let pages = futures_util::future::join_all(
            others
                .iter()
                .map(|node| self.peers.topics(node, after, limit)),
        )
        .await;
        for page in pages {
            let page = page?;
            more |= page.next.is_some();
            topics.extend(page.topics);
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics.dedup_by(|a, b| a.name == b.name);
        more |= topics.len() > limit;
        topics.truncate(limit);
        let next = more
            .then(|| topics.last().map(|topic| topic.name.clone()))
            .flatten();
        Ok(TopicsPage { topics, next })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::clock::SystemClock;
    use crate::error::ErrorCode;
    use crate::load::LoadSnapshot;
    use crate::log::TopicInfo;
    use crate::store::Record;
    use crate::sync::lock;

    const TOPIC: &str = "orders";

    /// The cluster as a test sets it: each partition's place (none: no owner), and the places
    /// after a refresh.
    struct Places {
        now: Mutex<BTreeMap<u32, Place>>,
        after_refresh: Option<BTreeMap<u32, Place>>,
        refreshes: Mutex<u32>,
    }

    impl Places {
        fn new(places: &[(u32, Place)]) -> Self {
            Self {
                now: Mutex::new(places.iter().cloned().collect()),
                after_refresh: None,
                refreshes: Mutex::new(0),
            }
        }
    }

    impl Placement for Places {
        fn place(&self, id: &PartitionId) -> Result<Place, PeerError> {
            lock(&self.now)
                .get(&id.index())
                .cloned()
                .ok_or(PeerError::NoOwner { volume: 0 })
        }

        fn others(&self) -> Vec<String> {
            let mut nodes: Vec<String> = lock(&self.now)
                .values()
                .filter_map(|place| match place {
                    Place::At(node) => Some(node.clone()),
                    Place::Here => None,
                })
                .collect();
            nodes.dedup();
            nodes
        }

        fn refresh(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            *lock(&self.refreshes) += 1;
            if let Some(after) = &self.after_refresh {
                *lock(&self.now) = after.clone();
            }
            Box::pin(async {})
        }
    }

    /// What a node in memory holds: partition → (next offset, committed cursor).
    type Held = BTreeMap<u32, (u64, u64)>;

    /// Nodes in memory: each holds some partitions, each a log of records and a cursor.
    #[derive(Default)]
    struct Nodes {
        /// What each node holds, by node.
        held: Mutex<BTreeMap<String, Held>>,
        /// Every call, as `node op detail`.
        calls: Mutex<Vec<String>>,
        /// The metadata kept with each cursor, by node and partition.
        metadata: Mutex<BTreeMap<(String, u32), String>>,
    }

    impl Nodes {
        fn with(held: &[(&str, u32, u64)]) -> Self {
            let nodes = Self::default();
            for &(node, partition, next_offset) in held {
                lock(&nodes.held)
                    .entry(node.to_owned())
                    .or_default()
                    .insert(partition, (next_offset, 0));
            }
            nodes
        }

        fn calls(&self) -> Vec<String> {
            lock(&self.calls).clone()
        }

        /// The node's partitions, or `NotOwner` when it holds none of `wanted`.
        fn holding(&self, node: &str, wanted: Option<u32>) -> Result<Held, PeerError> {
            let held = lock(&self.held).get(node).cloned().unwrap_or_default();
            match wanted {
                Some(partition) if !held.contains_key(&partition) => Err(PeerError::NotOwner {
                    node: node.to_owned(),
                }),
                _ => Ok(held),
            }
        }
    }

    /// A page of `count` records from `from`.
    fn page(from: u64, count: u64, next: u64) -> Page {
        let records = (from..from + count)
            .map(|offset| Record {
                offset,
                key: None,
                payload: format!("{{\"n\":{offset}}}").into(),
                message_key: None,
                headers: Vec::new(),
                appended_at: 0,
            })
            .collect();
        Page {
            records,
            next_offset: from + count,
            lag: next - from - count,
        }
    }

    impl Peers for Nodes {
        fn append<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
            records: &'a [NewRecord],
        ) -> crate::cluster::peer::PeerFuture<'a, (Vec<u64>, LoadSnapshot)> {
            lock(&self.calls).push(format!("{node} append {partition}"));
            Box::pin(async move {
                self.holding(node, Some(partition))?;
                let mut held = lock(&self.held);
                let entry = held.get_mut(node).unwrap().get_mut(&partition).unwrap();
                let offsets = (entry.0..entry.0 + records.len() as u64).collect();
                entry.0 += records.len() as u64;
                Ok((
                    offsets,
                    crate::load::LoadObserver::new(Arc::new(SystemClock)).snapshot(0),
                ))
            })
        }

        fn poll<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            _: &'a str,
            _: Option<usize>,
            wait: Duration,
        ) -> crate::cluster::peer::PeerFuture<'a, Vec<(u32, Page)>> {
            lock(&self.calls).push(format!("{node} poll wait={}", wait.as_millis()));
            Box::pin(async move {
                let held = self.holding(node, None)?;
                Ok(held
                    .into_iter()
                    .map(|(partition, (next, cursor))| {
                        (partition, page(cursor, next - cursor, next))
                    })
                    .collect())
            })
        }

        fn commit<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            _: &'a str,
            offsets: &'a BTreeMap<u32, u64>,
        ) -> crate::cluster::peer::PeerFuture<'a, BTreeMap<u32, u64>> {
            lock(&self.calls).push(format!("{node} commit {offsets:?}"));
            Box::pin(async move {
                let mut held = lock(&self.held);
                let mine = held.get_mut(node).unwrap();
                Ok(offsets
                    .iter()
                    .map(|(&partition, &offset)| {
                        let entry = mine.get_mut(&partition).unwrap();
                        entry.1 = entry.1.max(offset);
                        (partition, entry.1)
                    })
                    .collect())
            })
        }

        fn seek<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
            _: &'a str,
            offset: u64,
            metadata: Option<&'a str>,
        ) -> crate::cluster::peer::PeerFuture<'a, u64> {
            lock(&self.calls).push(format!("{node} seek {partition} to {offset}"));
            Box::pin(async move {
                self.holding(node, Some(partition))?;
                let mut held = lock(&self.held);
                let entry = held.get_mut(node).unwrap().get_mut(&partition).unwrap();
                check_offset(offset, entry.0).map_err(|err| {
                    PeerError::Refused(crate::wire::ErrorDetail::new(err.code(), err.to_string()))
                })?;
                entry.1 = offset;
                let key = (node.to_owned(), partition);
                match metadata {
                    Some(text) => lock(&self.metadata).insert(key, text.to_owned()),
                    None => lock(&self.metadata).remove(&key),
                };
                Ok(offset)
            })
        }

        fn committed<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
            _: &'a str,
        ) -> crate::cluster::peer::PeerFuture<'a, Option<Committed>> {
            lock(&self.calls).push(format!("{node} committed {partition}"));
            Box::pin(async move {
                let held = self.holding(node, Some(partition))?;
                let metadata = lock(&self.metadata)
                    .get(&(node.to_owned(), partition))
                    .cloned();
                Ok(Some(Committed {
                    offset: held[&partition].1,
                    metadata,
                }))
            })
        }

        fn delete_cursor<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
            _: &'a str,
        ) -> crate::cluster::peer::PeerFuture<'a, bool> {
            lock(&self.calls).push(format!("{node} delete_cursor {partition}"));
            Box::pin(async move {
                self.holding(node, Some(partition))?;
                Ok(lock(&self.metadata)
                    .remove(&(node.to_owned(), partition))
                    .is_some())
            })
        }

        fn bounds<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
        ) -> crate::cluster::peer::PeerFuture<'a, Bounds> {
            lock(&self.calls).push(format!("{node} bounds {partition}"));
            Box::pin(async move {
                let held = self.holding(node, Some(partition))?;
                Ok(Bounds {
                    oldest_offset: 0,
                    hot_offset: 0,
                    next_offset: held[&partition].0,
                })
            })
        }

        fn lease<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
            partition: u32,
            _: &'a str,
            _: Option<usize>,
        ) -> crate::cluster::peer::PeerFuture<'a, Option<Lease>> {
            lock(&self.calls).push(format!("{node} lease {partition}"));
            Box::pin(async move {
                self.holding(node, Some(partition))?;
                Ok(None)
            })
        }

        fn describe<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
        ) -> crate::cluster::peer::PeerFuture<'a, Vec<PartitionDetail>> {
            lock(&self.calls).push(format!("{node} describe"));
            Box::pin(async move {
                Ok(self
                    .holding(node, None)?
                    .into_iter()
                    .map(|(partition, (next_offset, cursor))| PartitionDetail {
                        partition,
                        bounds: Bounds {
                            oldest_offset: 0,
                            hot_offset: 0,
                            next_offset,
                        },
                        cursors: [("g".to_owned(), cursor)].into_iter().collect(),
                        pending_deliveries: next_offset - cursor,
                    })
                    .collect())
            })
        }

        fn groups<'a>(
            &'a self,
            node: &'a str,
            _: &'a str,
        ) -> crate::cluster::peer::PeerFuture<'a, Vec<GroupOnPartition>> {
            lock(&self.calls).push(format!("{node} groups"));
            Box::pin(async move {
                Ok(self
                    .holding(node, None)?
                    .into_iter()
                    .map(|(partition, (next_offset, cursor))| GroupOnPartition {
                        partition,
                        next_offset,
                        position: crate::store::GroupPosition {
                            group: "g".to_owned(),
                            cursor: Some(cursor),
                            lag: next_offset - cursor,
                            leases: None,
                        },
                        history: None,
                    })
                    .collect())
            })
        }

        fn topics<'a>(
            &'a self,
            node: &'a str,
            _: Option<&'a str>,
            _: usize,
        ) -> crate::cluster::peer::PeerFuture<'a, TopicsPage> {
            lock(&self.calls).push(format!("{node} topics"));
            let name = format!("{node}-topic");
            Box::pin(async move {
                Ok(TopicsPage {
                    topics: vec![TopicInfo {
                        name,
                        partitions: 4,
                    }],
                    next: None,
                })
            })
        }
    }

    fn at(node: &str) -> Place {
        Place::At(node.to_owned())
    }

    /// A poll spread over this node (partition 0) and two others: every partition's page, in
    /// partition order, each from where it is held; once one node answers records, the others
    /// still waiting are asked again without waiting (here: its wait is never sat out).
    #[actix::test]
    async fn a_poll_merges_every_nodes_pages_in_partition_order() {
        let places = Places::new(&[(0, Place::Here), (1, at("b")), (2, at("c")), (3, at("b"))]);
        let nodes = Nodes::with(&[("b", 1, 2), ("b", 3, 0), ("c", 2, 0)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let here_asked = Mutex::new(Vec::new());
        let here = |held: Vec<u32>, wait: Duration| {
            lock(&here_asked).push(wait);
            Box::pin(async move {
                // Nothing comes here: a poll with a wait sits it out.
                tokio::time::sleep(wait).await;
                Ok(held.iter().map(|_| page(0, 0, 0)).collect())
            }) as PolledHere<'_>
        };
        let started = std::time::Instant::now();
        let pages = spread
            .poll(TOPIC, "g", 4, (None, Duration::from_secs(30)), here)
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "b's records end the wait"
        );
        let next: Vec<u64> = pages.iter().map(|page| page.next_offset).collect();
        assert_eq!(next, [0, 2, 0, 0], "each partition's page, in order");
        assert_eq!(pages[1].records.len(), 2, "b's records of partition 1");
        assert_eq!(
            *lock(&here_asked),
            [Duration::from_secs(30), Duration::ZERO],
            "asked with the wait, then again without"
        );
    }

    /// A node answering for other partitions than this node believes it holds (its volumes
    /// moved) makes the poll read the owners again and ask once more, without waiting.
    #[actix::test]
    async fn a_poll_that_meets_a_moved_volume_reads_the_owners_again() {
        let mut places = Places::new(&[(0, at("b")), (1, at("b"))]);
        places.after_refresh = Some([(0, at("b")), (1, at("c"))].into_iter().collect());
        let nodes = Nodes::with(&[("b", 0, 1), ("c", 1, 1)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let here = |_: Vec<u32>, _: Duration| Box::pin(async { Ok(Vec::new()) }) as PolledHere<'_>;
        let pages = spread
            .poll(TOPIC, "g", 2, (None, Duration::from_millis(500)), here)
            .await
            .unwrap();
        assert_eq!(pages.len(), 2);
        assert_eq!(*lock(&places.refreshes), 1);
        assert!(nodes.calls().contains(&"c poll wait=0".to_owned()));
    }

    /// A group commit with one offset beyond its partition's next offset, on another node,
    /// commits nothing anywhere: neither here nor on any node.
    #[actix::test]
    async fn a_group_commit_with_a_bad_offset_commits_nothing_anywhere() {
        let places = Places::new(&[(0, Place::Here), (1, at("b")), (2, at("c"))]);
        let nodes = Nodes::with(&[("b", 1, 10), ("c", 2, 5)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let committed_here = Mutex::new(false);
        let offsets: BTreeMap<u32, u64> = [(0, 1), (1, 10), (2, 6)].into_iter().collect();
        let refused = spread
            .commit(TOPIC, "g", &offsets, |_| {
                *lock(&committed_here) = true;
                Box::pin(async { Ok(BTreeMap::new()) })
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidOffset, "{refused}");
        assert!(!*lock(&committed_here), "nothing committed here");
        assert!(
            !nodes.calls().iter().any(|call| call.contains("commit")),
            "nothing committed elsewhere: {:?}",
            nodes.calls()
        );

        let offsets: BTreeMap<u32, u64> = [(0, 1), (1, 10), (2, 5)].into_iter().collect();
        let cursors = spread
            .commit(TOPIC, "g", &offsets, |held| {
                Box::pin(async move { Ok(held) })
            })
            .await
            .unwrap();
        assert_eq!(
            cursors, offsets,
            "each partition's cursor, from where it is held"
        );
    }

    /// An append sent to a node that no longer holds the partition reads the owners again and
    /// goes to the new owner, once; a partition with no owner answers `unavailable`.
    #[actix::test]
    async fn an_append_follows_a_moved_partition_once_and_a_partition_without_owner_is_unavailable()
    {
        let mut places = Places::new(&[(0, at("b"))]);
        places.after_refresh = Some([(0, at("c"))].into_iter().collect());
        let nodes = Nodes::with(&[("c", 0, 7)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let id = PartitionId::new(TOPIC, 0).unwrap();
        let here = |_: Vec<NewRecord>| -> Here<'_, Appended> { panic!("not held here") };
        let appended = spread
            .append(&id, vec![NewRecord::new("{}")], here)
            .await
            .unwrap();
        assert_eq!(
            appended.outcome,
            AppendOutcome::Appended { offsets: vec![7] }
        );
        assert_eq!(nodes.calls(), ["b append 0", "c append 0"]);

        let nowhere = Places::new(&[]);
        let spread = Spread {
            placement: &nowhere,
            peers: &nodes,
        };
        let err = spread
            .append(&id, vec![NewRecord::new("{}")], here)
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    }

    /// A seek, a committed position and a cursor's deletion of a partition held elsewhere are
    /// served by its node (following it once when it moved), with the seek's metadata and its
    /// refusal as that node answers them; one held here is served here.
    #[actix::test]
    async fn a_seek_and_its_committed_position_are_served_where_the_partition_is_held() {
        let mut places = Places::new(&[(0, Place::Here), (1, at("b"))]);
        places.after_refresh = Some([(0, Place::Here), (1, at("c"))].into_iter().collect());
        let nodes = Nodes::with(&[("b", 1, 5), ("c", 1, 9)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let (here_id, there) = (
            PartitionId::new(TOPIC, 0).unwrap(),
            PartitionId::new(TOPIC, 1).unwrap(),
        );
        let not_here = || -> Here<'_, u64> { panic!("not held here") };
        assert_eq!(
            spread
                .seek(&there, "g", 4, Some("m"), not_here)
                .await
                .unwrap(),
            4
        );
        let committed = spread
            .committed(&there, "g", || panic!("not held here"))
            .await
            .unwrap();
        let expected = Committed {
            offset: 4,
            metadata: Some("m".into()),
        };
        assert_eq!(committed, Some(expected));
        let refused = spread
            .seek(&there, "g", 6, None, not_here)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidOffset, "{refused}");
        assert!(
            spread
                .delete_cursor(&there, "g", || panic!("not held here"))
                .await
                .unwrap()
        );
        assert_eq!(
            nodes.calls(),
            [
                "b seek 1 to 4",
                "b committed 1",
                "b seek 1 to 6",
                "b delete_cursor 1"
            ]
        );

        // b no longer holds it: the owners are read again, and c is asked.
        lock(&nodes.held).remove("b");
        let here = || Box::pin(async { Ok(7_u64) }) as Here<'_, u64>;
        assert_eq!(
            spread.seek(&there, "g", 8, None, not_here).await.unwrap(),
            8
        );
        assert_eq!(spread.seek(&here_id, "g", 7, None, here).await.unwrap(), 7);
        assert_eq!(*lock(&places.refreshes), 1);
        assert_eq!(nodes.calls()[4..], ["b seek 1 to 8", "c seek 1 to 8"]);
    }

    /// A topic's description gathers every partition from where it is held, in order; a node
    /// answering for partitions this node did not expect makes it read the owners again.
    #[actix::test]
    async fn a_description_gathers_every_partition_from_its_node() {
        let mut places = Places::new(&[(0, Place::Here), (1, at("b")), (2, at("b"))]);
        places.after_refresh = Some(
            [(0, Place::Here), (1, at("b")), (2, at("c"))]
                .into_iter()
                .collect(),
        );
        let nodes = Nodes::with(&[("b", 1, 4), ("c", 2, 9)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let here = |held: Vec<u32>| {
            Box::pin(async move {
                Ok(held
                    .into_iter()
                    .map(|partition| PartitionDetail {
                        partition,
                        bounds: Bounds::default(),
                        cursors: BTreeMap::new(),
                        pending_deliveries: 0,
                    })
                    .collect())
            }) as Here<'_, Vec<PartitionDetail>>
        };
        let details = spread.describe(TOPIC, 3, here).await.unwrap();
        let next: Vec<(u32, u64)> = details
            .iter()
            .map(|detail| (detail.partition, detail.bounds.next_offset))
            .collect();
        assert_eq!(next, [(0, 0), (1, 4), (2, 9)]);
        assert_eq!(
            *lock(&places.refreshes),
            1,
            "b answered for 1 only: read again"
        );
    }

    /// A topic's groups are read where each partition is held and ordered by partition; a
    /// node answering for a partition it was not asked for makes the owners be read again.
    #[actix::test]
    async fn the_groups_are_read_where_each_partition_is_held() {
        let mut places = Places::new(&[(0, Place::Here), (1, at("c")), (2, at("b"))]);
        places.after_refresh = Some(
            [(0, Place::Here), (1, at("b")), (2, at("c"))]
                .into_iter()
                .collect(),
        );
        let nodes = Nodes::with(&[("b", 1, 4), ("c", 2, 9)]);
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let here = |held: Vec<u32>| {
            Box::pin(async move {
                assert_eq!(held, [0]);
                Ok(Vec::new())
            }) as Here<'_, Vec<GroupOnPartition>>
        };
        let groups = spread.groups(TOPIC, 3, here).await.unwrap();
        let lags: Vec<(u32, u64)> = groups
            .iter()
            .map(|group| (group.partition, group.position.lag))
            .collect();
        assert_eq!(lags, [(1, 4), (2, 9)]);
        assert_eq!(*lock(&places.refreshes), 1, "c answered for 2: read again");
    }

    /// The topic list merges this node's page with every other node's, by name, once each.
    #[actix::test]
    async fn the_topic_list_merges_every_nodes_page() {
        let places = Places::new(&[(0, Place::Here), (1, at("b")), (2, at("c"))]);
        let nodes = Nodes::default();
        let spread = Spread {
            placement: &places,
            peers: &nodes,
        };
        let mine = TopicsPage {
            topics: vec![TopicInfo {
                name: "a-topic".into(),
                partitions: 4,
            }],
            next: None,
        };
        let page = spread
            .topics(None, 2, Box::pin(async { Ok(mine) }))
            .await
            .unwrap();
        let names: Vec<&str> = page
            .topics
            .iter()
            .map(|topic| topic.name.as_str())
            .collect();
        assert_eq!(names, ["a-topic", "b-topic"]);
        assert_eq!(page.next.as_deref(), Some("b-topic"), "c-topic follows");
    }
}
