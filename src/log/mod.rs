//! `Log`: the cloneable handle applications (and the HTTP server) use.
//!
//! It validates names and partition indexes, routes each operation to its partition's actor
//! through the `PartitionRegistry` actor, and answers reads of partitions that
//! were never written without creating them. Every method is `async` and needs a running
//! actix `System` (`#[actix::main]` / `#[actix_web::main]`).
//!
//! The operations are grouped as the REST server groups them, one file each: `produce.rs`,
//! `consume.rs`, `leases.rs` and `operations.rs`. `builder.rs` opens a log, `long_poll.rs`
//! holds the one waiting rule, and `dead_letter.rs` the server's dead-letter topic.

mod builder;
mod consume;
mod dead_letter;
mod heal;
mod lag_history;
mod leases;
mod long_poll;
mod operations;
mod produce;
mod spread;

/// The counts of partitions opened and closed that [`Log::partition_counters`] answers, so
/// that its callers need not reach into the registry.
pub use crate::registry::PartitionCounters;
/// The store's types that callers of `Log` see (its answers and errors), so they need not
/// reach into [`store`](crate::store).
pub use crate::store::{
    AppendOutcome, AppendRejection, Bounds, ColdFlushCounters, Committed, GroupPosition, Header,
    Lease, LeaseRow, LeaseState, MAX_CURSOR_METADATA_BYTES, MAX_KEY_BYTES, NewRecord, Page,
    Payload, Record, ReplicaCounters, ScrubCounters, StoreError, unsigned_offset,
};
pub use builder::LogBuilder;
pub use dead_letter::{Letter, MAX_REDRIVE, Redriven};
pub use lag_history::{LAG_SAMPLES, LagHistoryUsage, LagSamples};
pub use operations::{
    DEFAULT_TOPICS_PAGE, GroupOnPartition, MAX_TOPICS_PAGE, PartitionDetail, TopicInfo, TopicsPage,
};
pub use produce::{Event, EventBatch, EventBatches, EventsOutcome, Submitted};

use std::sync::Arc;

use actix::{Addr, MailboxError, Message};

use crate::clock::{Clock, SystemClock};
use crate::cluster::Cluster;
use crate::cluster::peer::{NodeClient, Peers};
use crate::config::Config;
use crate::error::Error;
use crate::names::{PartitionId, validate_group};
use crate::partition::{self, PartitionActor, PartitionStats};
use crate::registry::{
    Addresses, Locate, OpenStores, PartitionRegistry, RunningPartitions, Shutdown, Signals,
};
use crate::store::Volumes;
use long_poll::WaitsReleased;

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
    /// What replication did, for the metrics (zero without replication).
    replica_counters: Arc<ReplicaCounters>,
    /// This node's part in a cluster, if it is in one.
    cluster: Option<Cluster>,
    /// How this node reaches the others of its cluster, if it is in one.
    peers: Option<Arc<dyn Peers>>,
    /// In a cluster: how this node calls the others (its REST front end forwards with it too).
    node_client: Option<NodeClient>,
    /// Who may call the front ends, and what (`[auth]`, `server.auth_token`).
    credentials: Arc<crate::auth::Live>,
    /// The groups' recent lag, sampled every `metrics.lag_sample_ms`.
    lag_history: Arc<lag_history::LagHistory>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("data_dir", &self.inner.config.storage.data_dir)
            .finish_non_exhaustive()
    }
}

/// What [`Log::way`] found.
enum Way {
    Shortcut(Arc<partition::Shortcut>),
    /// The partition is stopping: its actor's way retries.
    Actor,
    /// Never written, and not to be created.
    Unwritten,
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

    /// The credentials in force, which every front end checks its callers against (see
    /// [`crate::auth`]).
    pub fn credentials(&self) -> Arc<crate::auth::Credentials> {
        self.inner.credentials.current()
    }

    /// Reads the credentials anew (`auth.tokens_file` above all; it is also reloaded whenever
    /// it changes): answers how many there are now.
    ///
    /// # Errors
    /// Why they could not be read; the credentials in force stay then.
    pub fn reload_credentials(&self) -> Result<usize, String> {
        self.inner.credentials.reload()
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
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::UnknownPartition`].
    pub fn partition(&self, topic: &str, index: u32) -> Result<PartitionId, Error> {
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

    /// The partition `index` of `topic` and a valid `group`: the checks of a group's request
    /// that a partition never written must answer without a store.
    fn group_partition(&self, topic: &str, index: u32, group: &str) -> Result<PartitionId, Error> {
        let id = self.partition(topic, index)?;
        validate_group(group)?;
        Ok(id)
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

    /// How an append or a read reaches a partition: by the [`Shortcut`](partition::Shortcut)
    /// of its actor, remembered or asked for (starting the actor when the partition is stored,
    /// or if `create`), else by the actor's way, which retries.
    async fn way(&self, id: &PartitionId, create: bool) -> Result<Way, Error> {
        let addresses = &self.inner.addresses;
        if let Some(shortcut) = addresses.shortcut(id) {
            return Ok(Way::Shortcut(shortcut));
        }
        let partition = match self.locate(id, create).await {
            Ok(Some(partition)) => partition,
            Ok(None) => return Ok(Way::Unwritten),
            Err(Error::PartitionStopped) => return Ok(Way::Actor),
            Err(err) => return Err(err),
        };
        match partition.send(partition::GetShortcut).await {
            Ok(shortcut) => {
                addresses.insert_shortcut(id.clone(), &shortcut);
                Ok(Way::Shortcut(shortcut))
            }
            Err(_) => Ok(Way::Actor),
        }
    }

    /// Drops the address of a partition that answered it has stopped (unless another caller
    /// already replaced it).
    fn forget(&self, id: &PartitionId, stopped: &Addr<PartitionActor>) {
        self.inner.addresses.forget(id, stopped);
    }

    /// Sends `message` (a read, or a write that a partition never written answers without
    /// being created) to the partition's actor, starting it when the partition is stored,
    /// retrying when the partition was stopping. `None`: the partition was never written, and
    /// nothing was created.
    async fn call_existing<M, T>(&self, id: &PartitionId, message: M) -> Result<Option<T>, Error>
    where
        M: Message<Result = Result<T, Error>> + Clone + Send + 'static,
        T: Send + 'static,
        PartitionActor: actix::Handler<M>,
    {
        self.deliver(id, false, message).await
    }

    /// Sends `message` (a write) to the partition's actor, starting it and creating the
    /// partition when it was never written, retrying when the partition was stopping.
    async fn call_creating<M, T>(&self, id: &PartitionId, message: M) -> Result<T, Error>
    where
        M: Message<Result = Result<T, Error>> + Clone + Send + 'static,
        T: Send + 'static,
        PartitionActor: actix::Handler<M>,
    {
        let answer = self.deliver(id, true, message).await?;
        Ok(answer.expect("a write always finds its partition"))
    }

    /// What [`call_existing`](Self::call_existing) and [`call_creating`](Self::call_creating)
    /// share: locates the partition (creating it if `create`) and sends `message`, retrying
    /// when the partition was stopping.
    async fn deliver<M, T>(
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
            let partition = match self.locate(id, create).await {
                Ok(Some(partition)) => partition,
                Ok(None) => return Ok(None),
                // It closed again while the registry waited for its previous close.
                Err(Error::PartitionStopped) => continue,
                Err(err) => return Err(err),
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
        Err(Error::unavailable(
            Some(id),
            "the partition kept stopping",
            None,
        ))
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
            .call_existing(&id, partition::GetStats)
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
        self.call_creating(&id, partition::FailNextCommit).await
    }

    /// The counts of cold flushes (succeeded and failed) that every partition of this log made
    /// since it opened. Does not block.
    pub fn cold_flushes(&self) -> Arc<ColdFlushCounters> {
        self.inner.flush_counters.clone()
    }

    /// What replication to object storage did since the log opened (all zero without it).
    pub fn replica_counters(&self) -> Arc<ReplicaCounters> {
        self.inner.replica_counters.clone()
    }

    /// The threads that run the volumes' committers, shared by every volume: how many run, and
    /// how many run a commit now.
    pub fn committers(&self) -> crate::store::CommitterPool {
        self.inner.volumes.committers()
    }

    /// What the background scrub of the volumes did since the log opened.
    pub fn scrub_counters(&self) -> Arc<ScrubCounters> {
        self.inner.volumes.scrub_counters()
    }

    /// What the groups' lag history holds now (see [`LAG_SAMPLES`]).
    pub fn lag_history_usage(&self) -> LagHistoryUsage {
        self.inner.lag_history.usage()
    }

    /// The log's clock (append times are read from it), in ms since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// This node's part in a cluster (`[cluster]`), if it is in one.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.cluster.as_ref()
    }

    /// How this node calls the others, when it is in a cluster.
    pub(crate) fn node_client(&self) -> Option<&NodeClient> {
        self.inner.node_client.as_ref()
    }

    /// The way to the partitions other nodes hold, when this node is in a cluster.
    fn spread(&self) -> Option<spread::Spread<'_>> {
        Some(spread::Spread {
            placement: self.inner.cluster.as_ref()?,
            peers: self.inner.peers.as_deref()?,
        })
    }

    /// Whether this node holds partition `index` of `topic` (always, outside a cluster): a
    /// front end that serves only what its node holds, as Kafka brokers do, asks it.
    ///
    /// # Errors
    /// Name and partition errors.
    pub fn holds(&self, topic: &str, index: u32) -> Result<bool, Error> {
        let id = self.partition(topic, index)?;
        Ok(self.spread().is_none_or(|spread| spread.is_here(&id)))
    }

    /// The partitions of `topic` this node holds (all of them, outside a cluster): what it
    /// answers for when another node asks.
    ///
    /// # Errors
    /// Name errors.
    pub(crate) fn held_partitions(&self, topic: &str) -> Result<Vec<u32>, Error> {
        use spread::Placement;
        let partitions = 0..self.partitions(topic)?;
        let Some(cluster) = &self.inner.cluster else {
            return Ok(partitions.collect());
        };
        Ok(partitions
            .filter(|&partition| {
                PartitionId::new(topic, partition)
                    .is_ok_and(|id| cluster.place(&id) == Ok(spread::Place::Here))
            })
            .collect())
    }

    /// Resolves once this node has stopped serving for good (see
    /// [`StopReason`](crate::cluster::StopReason)): it may own nothing any more, so its
    /// partitions are closed here and requests go to their new owners. Never resolves for a
    /// node outside a cluster. The library never ends its host: the application decides what
    /// follows (the server exits with
    /// [`EXIT_LEASE_LOST`](crate::cluster::EXIT_LEASE_LOST)).
    pub async fn stopped(&self) -> crate::cluster::StopReason {
        match &self.inner.cluster {
            Some(cluster) => cluster.stopped().await,
            None => std::future::pending().await,
        }
    }

    /// The counts of partitions opened and closed since the log opened, and of requests
    /// refused because every open partition was busy. Does not block.
    pub fn partition_counters(&self) -> Arc<PartitionCounters> {
        self.inner.counters.clone()
    }

    /// The stores of the open partitions, read without counting as their activity.
    async fn open_stores(&self) -> Result<Vec<(PartitionId, Arc<crate::store::LogStore>)>, Error> {
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
        self.inner.registry.send(Shutdown).await?;
        // Every volume is closed and what it wrote landed: the other nodes may take them now.
        if let Some(cluster) = &self.inner.cluster {
            cluster.leave().await;
        }
        Ok(())
    }

    /// Answers every waiting long-poll now, with what it has (an empty page when nothing came),
    /// and every later one without waiting: the first step of a shutdown, so that requests in
    /// flight finish at once.
    pub fn release_waits(&self) {
        self.inner.waits_released.release();
    }
}
