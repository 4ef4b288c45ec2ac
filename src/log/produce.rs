//! Producing: appends to one partition, and keyed events spread over a topic's partitions.

use std::collections::BTreeMap;

use futures_util::future::join_all;

use super::{Log, Way};
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::{self, Appended};
use crate::routing::partition_for;
use crate::store::{AppendOutcome, AppendRejection, NewRecord, check_batch};

/// A keyed event for [`Log::append_events`]: its partition is chosen from `partition_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Picks the partition (FNV-1a, see [`partition_for`]).
    pub partition_key: String,
    /// Optional deduplication key.
    pub key: Option<String>,
    /// The body, as JSON text.
    pub payload: String,
}

/// What [`Log::append_events`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum EventsOutcome {
    /// Every event is durable: `(partition, offset)` per input event, in input order.
    Appended(Vec<(u32, u64)>),
    /// A definite rejection: nothing was written to any partition.
    Rejected {
        /// The partition whose batch was refused.
        partition: u32,
        /// Why (positions are within that partition's batch).
        rejection: AppendRejection,
    },
}

impl Log {
    /// Appends `records` to one partition as one atomic batch (starting the partition).
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::UnknownPartition`], or [`Error::Unavailable`] (storage
    /// failed: the outcome is unknown; retry with the same deduplication keys). A refused batch
    /// is not an error but [`AppendOutcome::Rejected`].
    pub async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> Result<Appended, Error> {
        let id = self.partition(topic, partition)?;
        if let Some(rejection) = self.refusal(topic, &records) {
            let load = self.load(topic, partition).await?;
            return Ok(Appended {
                outcome: AppendOutcome::Rejected(rejection),
                load,
            });
        }
        self.append_checked(&id, records).await
    }

    /// Why the store would refuse `records` for `topic`, asked before a partition is touched so
    /// that a refusal creates no partition.
    fn refusal(&self, topic: &str, records: &[NewRecord]) -> Option<AppendRejection> {
        let settings = self.inner.config.topic_log(topic);
        check_batch(records, settings.max_batch_size, settings.max_record_bytes)
    }

    /// Appends a batch that [`refusal`](Self::refusal) accepted (the store still enforces
    /// every rule).
    ///
    /// The batch goes through the partition's [`Shortcut`](partition::Shortcut), straight to
    /// its volume's committer; through the actor when the shortcut cannot take it (the
    /// partition is closing, or its store must be reopened), as it retries and reopens.
    async fn append_checked(
        &self,
        id: &PartitionId,
        records: Vec<NewRecord>,
    ) -> Result<Appended, Error> {
        let records = match self.way(id, true).await? {
            Way::Shortcut(shortcut) => match shortcut.append(records) {
                Ok(appended) => return appended.await,
                Err(records) => {
                    self.inner.addresses.forget_shortcut(id, &shortcut);
                    records
                }
            },
            Way::Actor | Way::Unwritten => records,
        };
        self.call_creating(id, partition::Append { records }).await
    }

    /// Appends keyed events, each to the partition its `partition_key` picks, one atomic batch
    /// per partition. The whole request is checked before anything is written: either every
    /// batch is accepted or nothing is written.
    ///
    /// # Errors
    /// As [`append`](Self::append); after a storage failure some partitions may hold their
    /// batch (retry with the same deduplication keys).
    pub async fn append_events(
        &self,
        topic: &str,
        events: Vec<Event>,
    ) -> Result<EventsOutcome, Error> {
        let partitions = self.partitions(topic)?;
        let mut batches: BTreeMap<u32, (Vec<usize>, Vec<NewRecord>)> = BTreeMap::new();
        for (position, event) in events.into_iter().enumerate() {
            let batch = batches
                .entry(partition_for(&event.partition_key, partitions))
                .or_default();
            batch.0.push(position);
            batch.1.push(NewRecord {
                key: event.key,
                payload: event.payload,
            });
        }
        if batches.is_empty() {
            return Ok(EventsOutcome::Rejected {
                partition: 0,
                rejection: AppendRejection::EmptyBatch,
            });
        }
        for (&partition, (_, records)) in &batches {
            if let Some(rejection) = self.refusal(topic, records) {
                return Ok(EventsOutcome::Rejected {
                    partition,
                    rejection,
                });
            }
        }
        let total: usize = batches.values().map(|(positions, _)| positions.len()).sum();
        let appends = batches
            .into_iter()
            .map(|(partition, (positions, records))| async move {
                let id = PartitionId::new(topic, partition)?;
                let appended = self.append_checked(&id, records).await?;
                Ok::<_, Error>((partition, positions, appended.outcome))
            });
        let mut placed = vec![(0, 0); total];
        for result in join_all(appends).await {
            let (partition, positions, outcome) = result?;
            match outcome {
                AppendOutcome::Appended { offsets } => {
                    for (position, offset) in positions.into_iter().zip(offsets) {
                        placed[position] = (partition, offset);
                    }
                }
                // Checked above with the same rule, so only a changed configuration lands here.
                AppendOutcome::Rejected(rejection) => {
                    return Ok(EventsOutcome::Rejected {
                        partition,
                        rejection,
                    });
                }
            }
        }
        Ok(EventsOutcome::Appended(placed))
    }
}
