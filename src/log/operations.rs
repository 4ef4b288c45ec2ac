//! Operations: topics, bounds, load, and retention run on demand.

use std::collections::BTreeMap;

use super::lag_history::LagSamples;
use super::{Log, Way};
use crate::error::Error;
use crate::load::{LoadObserver, LoadSnapshot};
use crate::names::PartitionId;
use crate::partition;
use crate::store::{Bounds, GroupPosition, StoreError};

/// One partition of a topic, as [`Log::describe_topic`] answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDetail {
    /// Its index.
    pub partition: u32,
    /// Which offsets it can serve.
    pub bounds: Bounds,
    /// Every group's committed position.
    pub cursors: BTreeMap<String, u64>,
    /// Records not yet processed by its slowest group.
    pub pending_deliveries: u64,
}

/// A group's position on one partition, as [`Log::group_summary`] answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOnPartition {
    /// The partition.
    pub partition: u32,
    /// The partition's next offset when it was read.
    pub next_offset: u64,
    /// The group, its cursor, lag and lease counts.
    pub position: GroupPosition,
    /// Its lag over time, when its topic is among those with a history (see
    /// [`LAG_SAMPLES`](super::LAG_SAMPLES)).
    pub history: Option<LagSamples>,
}

/// A topic that has at least one written partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: u32,
}

/// The page size of a topic listing when none is given.
pub const DEFAULT_TOPICS_PAGE: usize = 1_000;
/// The largest page of a topic listing.
pub const MAX_TOPICS_PAGE: usize = 10_000;

/// A page of topics, and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicsPage {
    /// Topics with at least one written partition, by name.
    pub topics: Vec<TopicInfo>,
    /// The last name of the page when more topics may follow (pass it as `after`); `None` at
    /// the end.
    pub next: Option<String>,
}

impl Log {
    /// Up to `limit` (default [`DEFAULT_TOPICS_PAGE`], at most [`MAX_TOPICS_PAGE`]) topics with
    /// at least one written partition whose names sort after `after` (default: from the
    /// first), by name. Paging with `next` lists every topic that exists throughout exactly
    /// once; the cost of a page follows its size, not the topics stored.
    ///
    /// # Errors
    /// `invalid_request` for a `limit` of 0 or over the maximum, or an `after` that is not a
    /// topic name; `corrupted` when a volume's topics cannot be vouched for; `unavailable`.
    pub async fn topics_page(
        &self,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<TopicsPage, Error> {
        let held = self.topics_page_held(after, limit);
        match self.spread() {
            Some(spread) => {
                let limit = limit.unwrap_or(DEFAULT_TOPICS_PAGE);
                spread.topics(after, limit, Box::pin(held)).await
            }
            None => held.await,
        }
    }

    /// [`Log::topics_page`] of the volumes this node holds only: what a cluster's node answers
    /// another.
    pub(crate) async fn topics_page_held(
        &self,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<TopicsPage, Error> {
        let limit = limit.unwrap_or(DEFAULT_TOPICS_PAGE);
        if !(1..=MAX_TOPICS_PAGE).contains(&limit) {
            return Err(Error::InvalidRequest(format!(
                "limit must be 1 to {MAX_TOPICS_PAGE}, not {limit}"
            )));
        }
        if let Some(after) = after {
            crate::names::validate_topic(after)
                .map_err(|err| Error::InvalidRequest(format!("after: {err}")))?;
        }
        let (volumes, after) = (self.inner.volumes.clone(), after.unwrap_or("").to_owned());
        let (names, more) =
            actix_web::rt::task::spawn_blocking(move || volumes.topics(&after, limit))
                .await
                .map_err(|err| {
                    Error::unavailable(None, "listing the topics failed", Some(err.into()))
                })??;
        let next = more.then(|| names.last().cloned()).flatten();
        let topics = names
            .into_iter()
            .map(|name| TopicInfo {
                partitions: self.inner.config.topic(&name).log.partitions_per_topic,
                name,
            })
            .collect();
        Ok(TopicsPage { topics, next })
    }

    /// Every topic with at least one written partition, by name: [`Log::topics_page`] page
    /// after page. Its cost follows the topics stored; prefer pages where there are many.
    ///
    /// # Errors
    /// As [`Log::topics_page`].
    pub async fn topics(&self) -> Result<Vec<TopicInfo>, Error> {
        let mut topics = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .topics_page(after.as_deref(), Some(MAX_TOPICS_PAGE))
                .await?;
            topics.extend(page.topics);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(topics),
            }
        }
    }

    /// Each damaged volume's index (the N of `volume-N.sqlite`) and what is wrong with it:
    /// `malformed`, `lost` (see [`DamageKind`](crate::store::DamageKind)), or `unopenable`.
    pub fn damaged_volumes(&self) -> Vec<(usize, &'static str)> {
        self.inner.volumes.damaged()
    }

    /// A partition's bounds (all zero for a partition never written).
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn bounds(&self, topic: &str, partition: u32) -> Result<Bounds, Error> {
        let id = self.partition(topic, partition)?;
        let here = || {
            Box::pin(async {
                // Read here, on the caller's thread, as a read is, unless only the actor can.
                if let Way::Shortcut(shortcut) = self.way(&id, false).await?
                    && let Some(bounds) = shortcut.bounds()
                {
                    return bounds;
                }
                Ok(self
                    .call_existing(&id, partition::GetBounds)
                    .await?
                    .unwrap_or_default())
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        match self.spread() {
            Some(spread) => spread.bounds(&id, here).await,
            None => here().await,
        }
    }

    /// The first record of a partition appended at or after `at` (ms since the Unix epoch),
    /// as `(offset, appended_at)`; `None` when every readable record is older. Append times
    /// never decrease along a partition, so this is a binary search of single-record reads,
    /// cold segments included.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn offset_at_time(
        &self,
        topic: &str,
        partition: u32,
        at: i64,
    ) -> Result<Option<(u64, i64)>, Error> {
        let bounds = self.bounds(topic, partition).await?;
        let (mut low, mut high) = (bounds.oldest_offset, bounds.next_offset);
        let mut found = None;
        // Invariant: every record below `low` is older than `at`; the one at `high`, if read,
        // is `found`.
        while low < high {
            let middle = low + (high - low) / 2;
            let page = match self.read(topic, partition, Some(middle), Some(1)).await {
                Ok(page) => page,
                // Removed by retention meanwhile: what is left starts later.
                Err(Error::Store(StoreError::Truncated { .. })) => {
                    low = middle + 1;
                    continue;
                }
                Err(err) => return Err(err),
            };
            let Some(record) = page.records.first() else {
                break;
            };
            if record.appended_at >= at {
                found = Some((record.offset, record.appended_at));
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        Ok(found)
    }

    /// A partition's load snapshot.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn load(&self, topic: &str, partition: u32) -> Result<LoadSnapshot, Error> {
        let id = self.partition(topic, partition)?;
        match self.call_existing(&id, partition::GetLoad).await? {
            Some(load) => Ok(load),
            None => Ok(LoadObserver::new(self.inner.clock.clone()).snapshot(0)),
        }
    }

    /// Runs a partition's retention now; answers how many records left its hot window.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable` (a cold-store failure stops at that pass).
    pub async fn trim(&self, topic: &str, partition: u32) -> Result<u64, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self.call_existing(&id, partition::Trim).await?.unwrap_or(0))
    }

    /// Forgets a partition's cold segments that end below `before`; answers how many.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn forget_cold_before(
        &self,
        topic: &str,
        partition: u32,
        before: u64,
    ) -> Result<u64, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self
            .call_existing(&id, partition::ForgetColdBefore { before })
            .await?
            .unwrap_or(0))
    }

    /// The groups of every open partition of the topics `wanted` accepts, read from their
    /// stores directly, not through their actors: asking never opens a partition nor keeps one
    /// from stopping (a closed one has been idle, so its groups did not move). A partition that
    /// cannot be read is left out (and logged).
    ///
    /// # Errors
    /// `unavailable` when the registry or the blocking pool is gone.
    pub async fn open_group_positions(
        &self,
        wanted: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Vec<(PartitionId, Vec<GroupPosition>)>, Error> {
        let stores = self.open_stores().await?;
        let read = move || {
            stores
                .into_iter()
                .filter(|(id, _)| wanted(id.topic()))
                .filter_map(|(id, store)| match store.group_positions() {
                    Ok(groups) => Some((id, groups)),
                    Err(err) => {
                        log::warn!("reading the groups of {id}: {err}");
                        None
                    }
                })
                .collect()
        };
        tokio::task::spawn_blocking(read).await.map_err(|err| {
            Error::unavailable(
                None,
                "reading the groups of the open partitions failed",
                Some(err.into()),
            )
        })
    }

    /// Every partition of `topic` in order: its bounds, its groups' cursors and its backlog.
    ///
    /// # Errors
    /// Name errors; `unavailable`.
    pub async fn describe_topic(&self, topic: &str) -> Result<Vec<PartitionDetail>, Error> {
        let count = self.partitions(topic)?;
        let Some(spread) = self.spread() else {
            let partitions: Vec<u32> = (0..count).collect();
            return self.describe_partitions(topic, &partitions).await;
        };
        let here = |held: Vec<u32>| {
            Box::pin(async move { self.describe_partitions(topic, &held).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        spread.describe(topic, count, here).await
    }

    /// Every group of `topic` on every partition it has a cursor or a lease on: position, lag,
    /// lease counts and lag history, ordered by partition, then group. In a cluster, each
    /// partition is read on the node holding it, which keeps its history.
    ///
    /// # Errors
    /// Name errors; `unavailable`.
    pub async fn group_summary(&self, topic: &str) -> Result<Vec<GroupOnPartition>, Error> {
        let count = self.partitions(topic)?;
        let Some(spread) = self.spread() else {
            let partitions: Vec<u32> = (0..count).collect();
            return self.groups_of_partitions(topic, &partitions).await;
        };
        let here = |held: Vec<u32>| {
            Box::pin(async move { self.groups_of_partitions(topic, &held).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        spread.groups(topic, count, here).await
    }

    /// [`group_summary`](Self::group_summary) of the partitions this node holds only: what a
    /// cluster's node answers another.
    ///
    /// # Errors
    /// As [`group_summary`](Self::group_summary).
    pub(crate) async fn group_summary_held(
        &self,
        topic: &str,
    ) -> Result<Vec<GroupOnPartition>, Error> {
        let held = self.held_partitions(topic)?;
        self.groups_of_partitions(topic, &held).await
    }

    async fn groups_of_partitions(
        &self,
        topic: &str,
        partitions: &[u32],
    ) -> Result<Vec<GroupOnPartition>, Error> {
        let mut groups = Vec::new();
        for &partition in partitions {
            let id = self.partition(topic, partition)?;
            let Some(mut positions) = self.call_existing(&id, partition::ListGroups).await? else {
                continue;
            };
            if positions.is_empty() {
                continue;
            }
            positions.sort_by(|a, b| a.group.cmp(&b.group));
            let next_offset = self.bounds(topic, partition).await?.next_offset;
            groups.extend(positions.into_iter().map(|position| GroupOnPartition {
                partition,
                next_offset,
                history: self.inner.lag_history.of(&id, &position.group),
                position,
            }));
        }
        Ok(groups)
    }

    /// Takes one sample of the lag history (see [`lag_history`](super::lag_history)).
    pub(super) async fn sample_lag(&self) {
        let history = self.inner.lag_history.clone();
        match self
            .open_group_positions(move |topic| history.admit(topic))
            .await
        {
            Ok(sampled) => {
                let held = |id: &PartitionId| self.spread().is_none_or(|spread| spread.is_here(id));
                self.inner.lag_history.record(self.now_ms(), sampled, held);
            }
            Err(err) => log::warn!("sampling the groups' lag: {err}"),
        }
    }

    /// [`describe_topic`](Self::describe_topic) of the partitions this node holds only: what
    /// a cluster's node answers another.
    ///
    /// # Errors
    /// As [`describe_topic`](Self::describe_topic).
    pub(crate) async fn describe_held(&self, topic: &str) -> Result<Vec<PartitionDetail>, Error> {
        let held = self.held_partitions(topic)?;
        self.describe_partitions(topic, &held).await
    }

    /// [`describe_topic`](Self::describe_topic) of `partitions` only, in the order given (a
    /// cluster's node describes the partitions it holds).
    ///
    /// # Errors
    /// As [`describe_topic`](Self::describe_topic), and `unknown_partition`.
    pub async fn describe_partitions(
        &self,
        topic: &str,
        partitions: &[u32],
    ) -> Result<Vec<PartitionDetail>, Error> {
        let mut details = Vec::with_capacity(partitions.len());
        for &partition in partitions {
            details.push(PartitionDetail {
                partition,
                bounds: self.bounds(topic, partition).await?,
                cursors: self.cursors(topic, partition).await?,
                pending_deliveries: self
                    .load(topic, partition)
                    .await?
                    .outbound
                    .pending_deliveries,
            });
        }
        Ok(details)
    }
}
