//! Operations: topics, bounds, load, and retention run on demand.

use std::collections::BTreeMap;

use super::Log;
use crate::error::Error;
use crate::load::{LoadObserver, LoadSnapshot};
use crate::names::PartitionId;
use crate::partition;
use crate::store::{Bounds, GroupPosition};

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

/// A topic that has at least one written partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: u32,
}

impl Log {
    /// The topics with at least one written partition, by name.
    ///
    /// # Errors
    /// `unavailable`.
    pub async fn topics(&self) -> Result<Vec<TopicInfo>, Error> {
        let volumes = self.inner.volumes.clone();
        let names = actix_web::rt::task::spawn_blocking(move || volumes.topics())
            .await
            .map_err(|err| {
                Error::unavailable(None, "listing the topics failed", Some(err.into()))
            })??;
        Ok(names
            .into_iter()
            .map(|name| TopicInfo {
                partitions: self.inner.config.topic(&name).log.partitions_per_topic,
                name,
            })
            .collect())
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
        Ok(self
            .call_existing(&id, partition::GetBounds)
            .await?
            .unwrap_or_default())
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

    /// The groups of every open partition, read from their stores directly, not through their
    /// actors: asking never opens a partition nor keeps one from stopping (a closed one has
    /// been idle, so its groups did not move). A partition that cannot be read is left out
    /// (and logged).
    ///
    /// # Errors
    /// `unavailable` when the registry or the blocking pool is gone.
    pub async fn open_group_positions(
        &self,
    ) -> Result<Vec<(PartitionId, Vec<GroupPosition>)>, Error> {
        let stores = self.open_stores().await?;
        let read = move || {
            stores
                .into_iter()
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
        let partitions = self.partitions(topic)?;
        let mut details = Vec::with_capacity(partitions as usize);
        for partition in 0..partitions {
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
