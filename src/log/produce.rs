//! Producing: appends to one partition, and keyed events spread over a topic's partitions.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;

use super::{Log, Way};
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::{self, Appended};
use crate::routing::partition_for;
use crate::store::{AppendOutcome, AppendRejection, Header, NewRecord, Payload, check_batch};

/// A keyed event for [`Log::append_events`]: its partition is chosen from `partition_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Picks the partition (FNV-1a, see [`partition_for`]); stored as the record's message
    /// key.
    pub partition_key: String,
    /// Optional deduplication key.
    pub key: Option<String>,
    /// The body.
    pub payload: Payload,
    /// Headers, in order.
    pub headers: Vec<Header>,
}

/// What [`Log::submit_batches`] did.
#[must_use]
pub enum Submitted<F> {
    /// Handed to the committer, in order; the future answers them.
    Handed(F),
    /// Not handed over: the batches, back.
    NotNow(Vec<Vec<NewRecord>>),
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
        self.append_routed(&id, records).await
    }

    /// Appends a checked batch where partition `id` is served: here, or on the node of the
    /// cluster that holds it.
    async fn append_routed(
        &self,
        id: &PartitionId,
        records: Vec<NewRecord>,
    ) -> Result<Appended, Error> {
        match self.spread() {
            Some(spread) => {
                let here = |records| {
                    Box::pin(self.append_checked(id, records))
                        as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
                };
                spread.append(id, records, here).await
            }
            None => self.append_checked(id, records).await,
        }
    }

    /// Appends `batches` to one partition in order, each atomically (as [`append`](Self::append)
    /// does one): what a producer that batches by bytes needs, a batch of more records than
    /// `max_batch_size` going as several. The batches join the partition's next group commit
    /// together, so they cost one commit, not one each. Every batch is checked first: if one
    /// is refused, that refusal is the one answer and nothing is written.
    ///
    /// # Errors
    /// As [`append`](Self::append); after a storage failure some batches may be written.
    pub async fn append_batches(
        &self,
        topic: &str,
        partition: u32,
        batches: Vec<Vec<NewRecord>>,
    ) -> Result<Vec<Appended>, Error> {
        let id = self.partition(topic, partition)?;
        if let Some(rejection) = batches.iter().find_map(|batch| self.refusal(topic, batch)) {
            let load = self.load(topic, partition).await?;
            return Ok(vec![Appended {
                outcome: AppendOutcome::Rejected(rejection),
                load,
            }]);
        }
        let batches = match self.submit_batches(topic, partition, batches)? {
            Submitted::Handed(appended) => return appended.await,
            Submitted::NotNow(batches) => batches,
        };
        let here = self.spread().is_none_or(|spread| spread.is_here(&id));
        if let Way::Shortcut(shortcut) = self.way(&id, true).await?
            && here
        {
            match self.hand_over(&id, &shortcut, batches) {
                Submitted::Handed(appended) => return appended.await,
                Submitted::NotNow(batches) => return self.one_after_another(&id, batches).await,
            }
        }
        // Elsewhere, or only through the actor.
        self.one_after_another(&id, batches).await
    }

    /// Hands `batches` (checked as [`append_batches`](Self::append_batches) checks them) to
    /// the committer of partition `index` of `topic` at once, in order, when the partition is
    /// open here; the future answers them once committed. A caller that keeps a partition's
    /// batches in order while it awaits them (a Kafka connection answering produces in a
    /// pipeline) hands the next ones over only after this returned `Handed`. `NotNow` gives
    /// the batches back, nothing handed over: append them with `append_batches`, before any
    /// later batch of the partition.
    ///
    /// # Errors
    /// Name and partition errors.
    pub fn submit_batches(
        &self,
        topic: &str,
        index: u32,
        batches: Vec<Vec<NewRecord>>,
    ) -> Result<Submitted<impl Future<Output = Result<Vec<Appended>, Error>> + use<'_>>, Error>
    {
        let id = self.partition(topic, index)?;
        let refused = batches
            .iter()
            .any(|batch| self.refusal(topic, batch).is_some());
        let here = self.spread().is_none_or(|spread| spread.is_here(&id));
        match self.inner.addresses.shortcut(&id) {
            Some(shortcut) if here && !refused => Ok(self.hand_over(&id, &shortcut, batches)),
            _ => Ok(Submitted::NotNow(batches)),
        }
    }

    /// Hands `batches` to `shortcut`'s committer, in order, before any is awaited; those it
    /// no longer takes (its partition is closing) are appended after, through the actor.
    fn hand_over<'a>(
        &'a self,
        id: &PartitionId,
        shortcut: &Arc<partition::Shortcut>,
        batches: Vec<Vec<NewRecord>>,
    ) -> Submitted<impl Future<Output = Result<Vec<Appended>, Error>> + use<'a>> {
        let mut pending = Vec::with_capacity(batches.len());
        let mut rest = batches.into_iter();
        let mut later = Vec::new();
        while let Some(batch) = rest.next() {
            match shortcut.append(batch) {
                Ok(appended) => pending.push(appended),
                Err(batch) => {
                    self.inner.addresses.forget_shortcut(id, shortcut);
                    later.push(batch);
                    later.extend(rest);
                    break;
                }
            }
        }
        if pending.is_empty() {
            return Submitted::NotNow(later);
        }
        let id = id.clone();
        Submitted::Handed(async move {
            let mut answers = Vec::with_capacity(pending.len() + later.len());
            for appended in pending {
                answers.push(appended.await?);
            }
            answers.extend(self.one_after_another(&id, later).await?);
            Ok(answers)
        })
    }

    /// Appends `batches` one after the other, each where partition `id` is served.
    async fn one_after_another(
        &self,
        id: &PartitionId,
        batches: Vec<Vec<NewRecord>>,
    ) -> Result<Vec<Appended>, Error> {
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches {
            answers.push(self.append_routed(id, batch).await?);
        }
        Ok(answers)
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
        let mut batches = match self.event_batches(topic, events)? {
            Ok(batches) => batches,
            Err(rejected) => return Ok(rejected),
        };
        let appends = batches.groups.iter_mut().map(|group| {
            let (partition, records) = (group.partition, std::mem::take(&mut group.records));
            async move {
                let id = PartitionId::new(topic, partition)?;
                Ok::<_, Error>(self.append_routed(&id, records).await?.outcome)
            }
        });
        let outcomes = join_all(appends).await.into_iter();
        Ok(batches.place(outcomes.collect::<Result<_, _>>()?))
    }

    /// Keyed events grouped into one batch per partition, each checked as
    /// [`append_events`](Self::append_events) checks them before writing anything: the
    /// batches, or the outcome that refuses the whole request.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn event_batches(
        &self,
        topic: &str,
        events: Vec<Event>,
    ) -> Result<Result<EventBatches, EventsOutcome>, Error> {
        let partitions = self.partitions(topic)?;
        let mut groups: BTreeMap<u32, EventBatch> = BTreeMap::new();
        let total = events.len();
        for (position, event) in events.into_iter().enumerate() {
            let partition = partition_for(&event.partition_key, partitions);
            let group = groups.entry(partition).or_insert_with(|| EventBatch {
                partition,
                positions: Vec::new(),
                records: Vec::new(),
            });
            group.positions.push(position);
            group.records.push(NewRecord {
                key: event.key,
                payload: event.payload,
                message_key: Some(event.partition_key.into_bytes()),
                headers: event.headers,
            });
        }
        if groups.is_empty() {
            return Ok(Err(EventsOutcome::Rejected {
                partition: 0,
                rejection: AppendRejection::EmptyBatch,
            }));
        }
        for (&partition, group) in &groups {
            if let Some(rejection) = self.refusal(topic, &group.records) {
                return Ok(Err(EventsOutcome::Rejected {
                    partition,
                    rejection,
                }));
            }
        }
        Ok(Ok(EventBatches {
            groups: groups.into_values().collect(),
            total,
        }))
    }
}

/// Keyed events grouped by partition, checked (see [`Log::event_batches`]).
#[derive(Debug)]
pub struct EventBatches {
    /// One batch per partition, by partition.
    pub groups: Vec<EventBatch>,
    total: usize,
}

/// The events of one partition, in input order.
#[derive(Debug)]
pub struct EventBatch {
    /// The partition.
    pub partition: u32,
    /// Where each event was in the request.
    pub positions: Vec<usize>,
    /// The records to append.
    pub records: Vec<NewRecord>,
}

impl EventBatches {
    /// The request's outcome from each group's (in the order of [`EventBatches::groups`]):
    /// `(partition, offset)` per input event, in input order.
    pub fn place(self, outcomes: Vec<AppendOutcome>) -> EventsOutcome {
        let mut placed = vec![(0, 0); self.total];
        for (group, outcome) in self.groups.into_iter().zip(outcomes) {
            match outcome {
                AppendOutcome::Appended { offsets } => {
                    for (position, offset) in group.positions.into_iter().zip(offsets) {
                        placed[position] = (group.partition, offset);
                    }
                }
                // Checked when grouped with the same rule, so only a changed configuration
                // lands here.
                AppendOutcome::Rejected(rejection) => {
                    return EventsOutcome::Rejected {
                        partition: group.partition,
                        rejection,
                    };
                }
            }
        }
        EventsOutcome::Appended(placed)
    }
}
