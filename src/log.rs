//! `Log`: the cloneable handle applications (and the HTTP server) use.
//!
//! It validates names and partition indexes, routes each operation to its partition's actor
//! through the `PartitionRegistry` actor, and answers reads of partitions that
//! were never written without creating them. Every method is `async` and needs a running
//! actix `System` (`#[actix::main]` / `#[actix_web::main]`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, AsyncContext, MailboxError, Message};

use crate::clock::{Clock, SystemClock};
use crate::cold::ColdStore;
use crate::config::Config;
use crate::error::Error;
use crate::load::{LoadObserver, LoadSnapshot};
use crate::names::{PartitionId, validate_group};
use crate::partition::{self, Appended, DeadLetter, PartitionActor, PartitionStats};
use crate::registry::{
    Addresses, DeadLetterFor, Locate, OpenStores, PartitionCounters, PartitionRegistry,
    RegistryParts, RunningPartitions, Shutdown, Signals, Volumes,
};
use crate::routing::partition_for;
use crate::store::{
    AppendOutcome, AppendRejection, Bounds, ColdFlushCounters, Lease, LeaseRow, NewRecord, Page,
    Record, StoreError, check_batch,
};

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

/// A topic that has at least one written partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: u32,
}

/// Opens a [`Log`] with parts other than the configured ones.
#[must_use]
pub struct LogBuilder {
    config: Config,
    cold: Option<Option<Arc<dyn ColdStore>>>,
    clock: Arc<dyn Clock>,
    dead_letter: Option<Arc<dyn DeadLetter>>,
}

impl LogBuilder {
    /// Uses `cold` as every partition's cold tier (`None`: no cold tier) instead of `[cold]`.
    pub fn cold_store(mut self, cold: Option<Arc<dyn ColdStore>>) -> Self {
        self.cold = Some(cold);
        self
    }

    /// Uses `clock` for every timestamp. Default: the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sends every topic's exhausted lease ranges to `dead_letter` instead of the configured
    /// `leases.dead_letter_topic`.
    pub fn dead_letter(mut self, dead_letter: Arc<dyn DeadLetter>) -> Self {
        self.dead_letter = Some(dead_letter);
        self
    }

    /// Starts the registry. Must run inside an actix `System`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the data folder cannot be created or the cold store cannot
    /// be configured.
    pub fn open(self) -> Result<Log, Error> {
        let config = Arc::new(self.config);
        std::fs::create_dir_all(&config.storage.data_dir).map_err(|err| Error::Unavailable {
            partition: "*".into(),
            reason: format!(
                "cannot create storage.data_dir {}: {err}",
                config.storage.data_dir.display()
            ),
        })?;
        let cold = match self.cold {
            Some(cold) => cold,
            None => config.cold.open().map_err(|err| Error::Unavailable {
                partition: "*".into(),
                reason: err.to_string(),
            })?,
        };
        let volumes = Arc::new(Volumes::open(&config)?);
        let clock = self.clock;
        let custom = self.dead_letter;
        let signals = Arc::new(Signals::default());
        let flush_counters = Arc::new(ColdFlushCounters::default());
        let counters = Arc::new(PartitionCounters::default());
        let addresses = Arc::new(Addresses::default());
        let waits_released = Arc::new(WaitsReleased::default());
        // The registry's dead-letter sinks append through a `Log` on the registry's own address.
        let registry = PartitionRegistry::create(|ctx| {
            let log = Log {
                inner: Arc::new(Inner {
                    config: config.clone(),
                    registry: ctx.address(),
                    clock: clock.clone(),
                    signals: signals.clone(),
                    flush_counters: flush_counters.clone(),
                    counters: counters.clone(),
                    volumes: volumes.clone(),
                    waits_released: waits_released.clone(),
                    addresses: addresses.clone(),
                }),
            };
            let dead_letter_for: DeadLetterFor = Arc::new(move |topic| match &custom {
                Some(custom) => Some(custom.clone()),
                None => {
                    let target = &log.inner.config.topic_leases(topic).dead_letter_topic;
                    (!target.is_empty()).then(|| {
                        Arc::new(DeadLetterTopic {
                            log: log.clone(),
                            topic: target.clone(),
                        }) as Arc<dyn DeadLetter>
                    })
                }
            });
            PartitionRegistry::new(RegistryParts {
                config: config.clone(),
                volumes: volumes.clone(),
                cold,
                clock: clock.clone(),
                dead_letter_for,
                signals: signals.clone(),
                flush_counters: flush_counters.clone(),
                counters: counters.clone(),
                addresses: addresses.clone(),
            })
        });
        Ok(Log {
            inner: Arc::new(Inner {
                config,
                registry,
                clock,
                signals,
                flush_counters,
                counters,
                volumes,
                waits_released,
                addresses,
            }),
        })
    }
}

/// The embeddable log. Cheap to clone; every clone talks to the same partitions.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    registry: Addr<PartitionRegistry>,
    clock: Arc<dyn Clock>,
    signals: Arc<Signals>,
    flush_counters: Arc<ColdFlushCounters>,
    counters: Arc<PartitionCounters>,
    /// The log's volumes, for what asks all of them (the topic list).
    volumes: Arc<Volumes>,
    /// Set when long-polls must answer at once (shutdown), shared by every handle.
    waits_released: Arc<WaitsReleased>,
    /// Partitions' actors as last located, so a call goes straight to the partition instead
    /// of asking the registry first (a round trip to its thread).
    addresses: Arc<Addresses>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("data_dir", &self.inner.config.storage.data_dir)
            .finish_non_exhaustive()
    }
}

/// How many times an operation is retried when it met a partition that was stopping.
const STOPPED_RETRIES: usize = 3;

impl Log {
    /// Opens the log with `config`'s settings. Must run inside an actix `System`.
    ///
    /// # Errors
    /// As [`LogBuilder::open`].
    pub fn open(config: Config) -> Result<Self, Error> {
        Self::builder(config).open()
    }

    /// A builder to open the log with another cold store, clock or dead-letter destination.
    pub fn builder(config: Config) -> LogBuilder {
        LogBuilder {
            config,
            cold: None,
            clock: Arc::new(SystemClock),
            dead_letter: None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// `topic`'s partition count.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn partitions(&self, topic: &str) -> Result<u32, Error> {
        PartitionId::new(topic, 0)?;
        Ok(self.inner.config.topic_log(topic).partitions_per_topic)
    }

    /// The partition `index` of `topic`, checked against the topic's partition count.
    fn partition(&self, topic: &str, index: u32) -> Result<PartitionId, Error> {
        let partitions = self.partitions(topic)?;
        if index >= partitions {
            return Err(Error::UnknownPartition {
                topic: topic.to_owned(),
                partition: index,
                partitions,
            });
        }
        Ok(PartitionId::new(topic, index)?)
    }

    /// The partition's actor: the address last located, else the registry's answer (starting
    /// the partition when it has a database, or when `create`). `None`: never written and not
    /// `create`.
    async fn locate(
        &self,
        id: &PartitionId,
        create: bool,
    ) -> Result<Option<Addr<PartitionActor>>, Error> {
        if let Some(partition) = self.inner.addresses.get(id) {
            return Ok(Some(partition));
        }
        let located = self
            .inner
            .registry
            .send(Locate {
                id: id.clone(),
                create,
            })
            .await??;
        if let Some(partition) = &located {
            self.inner.addresses.insert(id.clone(), partition);
        }
        Ok(located)
    }

    /// Drops the address of a partition that answered it has stopped (unless another caller
    /// already replaced it).
    fn forget(&self, id: &PartitionId, stopped: &Addr<PartitionActor>) {
        self.inner.addresses.forget(id, stopped);
    }

    /// Sends `message` to the partition's actor (starting it when it has a database, or when
    /// `create`), retrying when the partition was stopping. `None`: the partition was never
    /// written and `create` is false.
    async fn call<M, T>(
        &self,
        id: &PartitionId,
        create: bool,
        message: M,
    ) -> Result<Option<T>, Error>
    where
        M: Message<Result = Result<T, Error>> + Clone + Send + 'static,
        T: Send + 'static,
        PartitionActor: actix::Handler<M>,
    {
        for _ in 0..STOPPED_RETRIES {
            let Some(partition) = self.locate(id, create).await? else {
                return Ok(None);
            };
            match partition.send(message.clone()).await {
                Ok(Err(Error::PartitionStopped)) | Err(MailboxError::Closed) => {
                    self.forget(id, &partition);
                    continue;
                }
                Ok(result) => return result.map(Some),
                Err(err) => return Err(err.into()),
            }
        }
        Err(Error::Unavailable {
            partition: id.to_string(),
            reason: "the partition kept stopping".into(),
        })
    }

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
        // Refused before the partition is touched, so a refusal creates no database.
        let settings = self.inner.config.topic_log(topic);
        if let Some(rejection) =
            check_batch(&records, settings.max_batch_size, settings.max_record_bytes)
        {
            let load = self.load(topic, partition).await?;
            return Ok(Appended {
                outcome: AppendOutcome::Rejected(rejection),
                load,
            });
        }
        let appended = self.call(&id, true, partition::Append { records }).await?;
        Ok(appended.expect("a write always finds its partition"))
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
        let settings = self.inner.config.topic_log(topic);
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
            if let Some(rejection) =
                check_batch(records, settings.max_batch_size, settings.max_record_bytes)
            {
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
                let appended = self.append(topic, partition, records).await?;
                Ok::<_, Error>((partition, positions, appended.outcome))
            });
        let mut placed = vec![(0, 0); total];
        for result in futures_join_all(appends).await {
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

    /// Reads up to `limit` records of a partition from `from` (default: its oldest readable
    /// offset), from the hot window or read back from cold segments.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::UnknownPartition`], and the store's read errors
    /// (`invalid_offset`, `log_truncated`, `invalid_request` for a zero limit, `unavailable`).
    pub async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Page, Error> {
        let id = self.partition(topic, partition)?;
        if limit == Some(0) {
            return Err(StoreError::InvalidLimit.into());
        }
        match self
            .call(&id, false, partition::Read { from, limit })
            .await?
        {
            Some(page) => Ok(page),
            None => match from {
                Some(offset) if offset > 0 => Err(StoreError::InvalidOffset {
                    offset,
                    next_offset: 0,
                }
                .into()),
                _ => Ok(Page::default()),
            },
        }
    }

    /// Like [`read`](Self::read), but when no record is available at `from` it waits up to
    /// `wait` for the first one to be committed (no polling: commits wake the waiters), then
    /// answers (an empty page if none came). Dropping the future releases the wait.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn read_wait(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Page, Error> {
        let id = self.partition(topic, partition)?;
        let signal = self.inner.signals.partition(&id);
        until_records(
            &signal,
            &self.inner.waits_released,
            wait,
            async || self.read(topic, partition, from, limit).await,
            |page| !page.records.is_empty(),
        )
        .await
    }

    /// Reads every partition of `topic` from `group`'s cursor (or the oldest readable offset
    /// when it has none), up to `limit` records each, without committing. With a `wait`, it
    /// answers as soon as any partition has records, or when the wait ends.
    ///
    /// # Errors
    /// Name errors, a zero limit, `log_truncated` when a partition lost records below the
    /// group's cursor, `unavailable`.
    pub async fn poll(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Vec<Page>, Error> {
        let partitions = self.partitions(topic)?;
        validate_group(group)?;
        if limit == Some(0) {
            return Err(StoreError::InvalidLimit.into());
        }
        let signal = self.inner.signals.topic(topic);
        let read_all = async || {
            let mut pages = Vec::with_capacity(partitions as usize);
            for partition in 0..partitions {
                let cursor = self.cursor(topic, partition, group).await?;
                pages.push(self.read(topic, partition, cursor, limit).await?);
            }
            Ok(pages)
        };
        until_records(
            &signal,
            &self.inner.waits_released,
            wait,
            read_all,
            |pages: &Vec<Page>| pages.iter().any(|page| !page.records.is_empty()),
        )
        .await
    }

    /// Commits `group`'s position in a partition (forward only); answers the cursor in effect.
    ///
    /// # Errors
    /// Name, partition and offset errors; `unavailable`.
    pub async fn commit(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        offset: u64,
    ) -> Result<u64, Error> {
        let id = self.partition(topic, partition)?;
        validate_group(group)?;
        let commit = partition::Commit {
            group: group.to_owned(),
            offset,
        };
        // A partition never written can only take a commit of 0 (its next offset); only that
        // commit creates it.
        match self.call(&id, false, commit.clone()).await? {
            Some(cursor) => Ok(cursor),
            None if offset > 0 => Err(StoreError::InvalidOffset {
                offset,
                next_offset: 0,
            }
            .into()),
            None => Ok(self
                .call(&id, true, commit)
                .await?
                .expect("a write always finds its partition")),
        }
    }

    /// `group`'s committed position in a partition, if any.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<Option<u64>, Error> {
        let id = self.partition(topic, partition)?;
        validate_group(group)?;
        Ok(self
            .call(
                &id,
                false,
                partition::GetCursor {
                    group: group.to_owned(),
                },
            )
            .await?
            .flatten())
    }

    /// Every group's committed position in a partition.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn cursors(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<BTreeMap<String, u64>, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self
            .call(&id, false, partition::ListCursors)
            .await?
            .unwrap_or_default())
    }

    /// Deletes `group`'s cursor and leases in a partition; answers whether there was a cursor.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn delete_cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<bool, Error> {
        let id = self.partition(topic, partition)?;
        validate_group(group)?;
        Ok(self
            .call(
                &id,
                false,
                partition::DeleteCursor {
                    group: group.to_owned(),
                },
            )
            .await?
            .unwrap_or(false))
    }

    /// A partition's bounds (all zero for a partition never written).
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn bounds(&self, topic: &str, partition: u32) -> Result<Bounds, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self
            .call(&id, false, partition::GetBounds)
            .await?
            .unwrap_or_default())
    }

    /// A partition's load snapshot.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn load(&self, topic: &str, partition: u32) -> Result<LoadSnapshot, Error> {
        let id = self.partition(topic, partition)?;
        match self.call(&id, false, partition::GetLoad).await? {
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
        Ok(self.call(&id, false, partition::Trim).await?.unwrap_or(0))
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
            .call(&id, false, partition::ForgetColdBefore { before })
            .await?
            .unwrap_or(0))
    }

    /// Leases the next range of a partition for `group`; `None` when nothing is available now.
    ///
    /// # Errors
    /// `leases_disabled`, name and partition errors, `invalid_request` for a zero limit,
    /// `log_truncated` once when unsettled records were lost, `unavailable`.
    pub async fn lease(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        limit: Option<usize>,
    ) -> Result<Option<Lease>, Error> {
        let id = self.leasing_partition(topic, partition, group)?;
        if limit == Some(0) {
            return Err(StoreError::InvalidLimit.into());
        }
        let lease = partition::ClaimLease {
            group: group.to_owned(),
            limit,
        };
        Ok(self.call(&id, false, lease).await?.flatten())
    }

    /// Settles a leased range; answers the group's cursor afterwards.
    ///
    /// # Errors
    /// `lease_not_held`, `leases_disabled`, name and partition errors, `unavailable`.
    pub async fn ack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<Option<u64>, Error> {
        let ack = partition::Ack {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
        };
        self.settle(topic, partition, group, batch_id, ack).await
    }

    /// Hands a leased range back for redelivery after `delay_ms`.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub async fn nack(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
        delay_ms: u64,
    ) -> Result<(), Error> {
        let nack = partition::Nack {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
            delay_ms,
        };
        self.settle(topic, partition, group, batch_id, nack).await
    }

    /// Renews a lease's hold; answers the new expiry.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub async fn extend(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
    ) -> Result<i64, Error> {
        let extend = partition::Extend {
            group: group.to_owned(),
            batch_id: batch_id.to_owned(),
        };
        self.settle(topic, partition, group, batch_id, extend).await
    }

    /// Sends a settlement of `batch_id` (ack, nack, extend) to the partition. A partition that
    /// was never written holds no lease, so it is not started to say so.
    async fn settle<M, T>(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        batch_id: &str,
        settlement: M,
    ) -> Result<T, Error>
    where
        M: Message<Result = Result<T, Error>> + Clone + Send + 'static,
        T: Send + 'static,
        PartitionActor: actix::Handler<M>,
    {
        let id = self.leasing_partition(topic, partition, group)?;
        self.call(&id, false, settlement)
            .await?
            .ok_or_else(|| not_held(batch_id))
    }

    /// `group`'s lease rows in a partition.
    ///
    /// # Errors
    /// `leases_disabled`, name and partition errors, `unavailable`.
    pub async fn leases(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<Vec<LeaseRow>, Error> {
        let id = self.leasing_partition(topic, partition, group)?;
        Ok(self
            .call(
                &id,
                false,
                partition::ListLeases {
                    group: group.to_owned(),
                },
            )
            .await?
            .unwrap_or_default())
    }

    /// The actor of a partition, started if needed, for applications that send it typed
    /// messages ([`partition::Append`], [`partition::Read`], ...) themselves. The address
    /// stops working when the partition stops for idleness; ask again then.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn partition_actor(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Addr<PartitionActor>, Error> {
        let id = self.partition(topic, partition)?;
        let located = self.locate(&id, true).await?;
        Ok(located.expect("a write-capable lookup always finds its partition"))
    }

    /// Counters of a partition's actor since it started (zero when it is not running).
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn stats(&self, topic: &str, partition: u32) -> Result<PartitionStats, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self
            .call(&id, false, partition::GetStats)
            .await?
            .unwrap_or_default())
    }

    /// Makes a partition's next commit fail, as a failing disk would (tests of recovery).
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    #[cfg(any(test, feature = "test-util"))]
    pub async fn fail_next_commit(&self, topic: &str, partition: u32) -> Result<(), Error> {
        let id = self.partition(topic, partition)?;
        self.call(&id, true, partition::FailNextCommit)
            .await
            .map(drop)
    }

    /// The topics with at least one written partition, by name.
    ///
    /// # Errors
    /// `unavailable`.
    pub async fn topics(&self) -> Result<Vec<TopicInfo>, Error> {
        let volumes = self.inner.volumes.clone();
        let names = actix_web::rt::task::spawn_blocking(move || volumes.topics())
            .await
            .map_err(|err| Error::Unavailable {
                partition: "*".into(),
                reason: format!("listing the topics failed: {err}"),
            })??;
        Ok(names
            .into_iter()
            .map(|name| TopicInfo {
                partitions: self.inner.config.topic(&name).log.partitions_per_topic,
                name,
            })
            .collect())
    }

    /// The counts of cold flushes (succeeded and failed) that every partition of this log made
    /// since it opened. Does not block.
    pub fn cold_flushes(&self) -> Arc<ColdFlushCounters> {
        self.inner.flush_counters.clone()
    }

    /// The counts of partitions opened and closed since the log opened, and of requests
    /// refused because every open partition was busy. Does not block.
    pub fn partition_counters(&self) -> Arc<PartitionCounters> {
        self.inner.counters.clone()
    }

    /// The stores of the open partitions, read without counting as their activity.
    pub(crate) async fn open_stores(
        &self,
    ) -> Result<Vec<(PartitionId, Arc<crate::store::LogStore>)>, Error> {
        Ok(self.inner.registry.send(OpenStores).await?)
    }

    /// The partitions whose actors are running now.
    ///
    /// # Errors
    /// `unavailable`.
    pub async fn running_partitions(&self) -> Result<Vec<PartitionId>, Error> {
        Ok(self.inner.registry.send(RunningPartitions).await?)
    }

    /// Answers waiting long-polls ([`release_waits`](Self::release_waits)), then stops every
    /// partition after the commits already queued finish, and closes the volumes.
    ///
    /// # Errors
    /// `unavailable` when the registry is gone.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.release_waits();
        Ok(self.inner.registry.send(Shutdown).await?)
    }

    /// Answers every waiting long-poll now, with what it has (an empty page when nothing came),
    /// and every later one without waiting: the first step of a shutdown, so that requests in
    /// flight finish at once.
    pub fn release_waits(&self) {
        self.inner.waits_released.release();
    }

    fn leasing_partition(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<PartitionId, Error> {
        let id = self.partition(topic, partition)?;
        if !self.inner.config.topic_leases(topic).enabled {
            return Err(StoreError::LeasesDisabled.into());
        }
        validate_group(group)?;
        Ok(id)
    }
}

fn not_held(batch_id: &str) -> Error {
    StoreError::LeaseNotHeld {
        batch_id: batch_id.to_owned(),
    }
    .into()
}

/// Calls `read` until its answer holds records (`found`) or `wait` has passed, sleeping on
/// `signal` in between: the one long-poll rule for reads and group polls. The wake-up is
/// registered before each read, so a commit between the read and the wait still wakes it.
async fn until_records<T>(
    signal: &tokio::sync::Notify,
    released: &WaitsReleased,
    wait: Duration,
    mut read: impl AsyncFnMut() -> Result<T, Error>,
    found: impl Fn(&T) -> bool,
) -> Result<T, Error> {
    let deadline = Instant::now() + wait;
    loop {
        let appended = signal.notified();
        let stopping = released.notify.notified();
        tokio::pin!(appended, stopping);
        appended.as_mut().enable();
        stopping.as_mut().enable();
        let answer = read().await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if found(&answer) || remaining.is_zero() || released.is_set() {
            return Ok(answer);
        }
        // Woken or timed out, read again: after the deadline that read is the answer.
        let _ = actix::clock::timeout(remaining, async {
            tokio::select! {
                () = appended => {}
                () = stopping => {}
            }
        })
        .await;
    }
}

/// Whether long-polls must answer at once, and their wake-up when that starts.
#[derive(Default)]
struct WaitsReleased {
    released: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl WaitsReleased {
    fn is_set(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn release(&self) {
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// Waits for every future; a small local stand-in for `futures::future::join_all`.
async fn futures_join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every future finished"))
        .collect()
}

/// The server's dead-letter destination: a topic, keyed by origin so a retry never duplicates.
#[derive(Debug)]
struct DeadLetterTopic {
    log: Log,
    topic: String,
}

impl DeadLetter for DeadLetterTopic {
    fn store_exhausted<'a>(
        &'a self,
        origin: &'a PartitionId,
        records: &'a [Record],
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        Box::pin(async move {
            let events = records
                .iter()
                .map(|record| {
                    let key = format!("{}:{}:{}", origin.topic(), origin.index(), record.offset);
                    Event {
                        partition_key: key.clone(),
                        key: Some(key),
                        payload: record.payload.clone(),
                    }
                })
                .collect();
            match self.log.append_events(&self.topic, events).await? {
                EventsOutcome::Appended(_) => Ok(()),
                EventsOutcome::Rejected {
                    partition,
                    rejection,
                } => Err(Error::Unavailable {
                    partition: format!("{}:{partition}", self.topic),
                    reason: format!("the dead-letter topic refused the records: {rejection}"),
                }),
            }
        })
    }
}
