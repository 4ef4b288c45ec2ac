//! A cluster: several nodes over one bucket share the volumes, with etcd deciding who owns
//! which (`README.md`, "Running a cluster").
//!
//! Keys, all under `/durability/{cluster.name}/`, and all but `config` under the writing node's
//! etcd lease, so they vanish when it stops renewing it:
//! - `members/{node}`: `{url, inc}`, how other nodes reach this incarnation;
//! - `owners/{volume}`: `{node, inc}`, created only where absent;
//! - `config`: `{volumes}`, the volume count, written once by the first node.
//!
//! Nothing is written per partition or per write: etcd sees writes only when nodes join, leave
//! or fail. Each node watches the keys (and reads them again now and then), claims the unowned
//! volumes that rendezvous hashing gives it ([`placement`]), then takes them through the
//! replica (sealing the previous owner's stream: a node that lost its lease can land nothing
//! more, whatever it believes), and hands the volumes that fall to another node over to it, a
//! few at a time. Safety comes from the bucket's fences, not from etcd: a node that cannot
//! renew its lease keeps serving what it holds, takes nothing new, and joins again when etcd
//! answers; a node whose stream another node sealed, or whose windows cannot land for its TTL,
//! stops serving: its stream lands nothing more, its volumes close, its lease is revoked, and
//! [`Cluster::stopped`] tells the application ([`StopReason`]), which decides what follows (the
//! server exits with [`EXIT_LEASE_LOST`] and starts again as a new incarnation). The library
//! never ends its host. The lease is renewed on a thread of its own, so that taking and opening
//! volumes never delays it.

pub(crate) mod etcd;
pub(crate) mod keys;
pub mod peer;
pub mod placement;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::ClusterSettings;
use crate::error::ErrorCode;
use crate::replica::Replicator;
use crate::store::{ReplicaCounters, Volumes};
use crate::sync::{lock, read_lock, write_lock};
pub use etcd::EtcdError;
use etcd::{Etcd, EtcdAccess, KeyValue, LeaseId};
use keys::KeyStore;

/// The exit status the server uses when its node stopped serving ([`Cluster::stopped`]): it may
/// own nothing any more.
pub const EXIT_LEASE_LOST: i32 = 3;

/// Why a node stopped serving for good: another node may be taking its volumes, so it owns
/// nothing any more. Its stream lands nothing more and its volumes are closed; a new
/// incarnation (a new [`Log`](crate::Log) over the same data folder, or a restarted process)
/// can join again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StopReason {
    /// The node could not join the cluster at start.
    #[error("cannot join the cluster: {0}")]
    CannotJoin(Arc<ClusterError>),
    /// Its lease's thread could not start.
    #[error("cannot start the lease's thread: {0}")]
    LeaseThread(Arc<std::io::Error>),
    /// Another node took a volume of this node and sealed its stream.
    #[error("another node sealed this node's stream")]
    Sealed,
    /// Its writes could not land in the bucket for its lease's TTL: its lease is revoked so
    /// that nodes that reach the bucket take its volumes at once.
    #[error("this node's writes could not land in the bucket for its lease's TTL")]
    NotLanding,
    /// Another node claimed a volume this node held while it could not renew its lease.
    #[error("volume {volume} was claimed by another node while this node was detached")]
    ClaimedWhileDetached {
        /// The volume.
        volume: usize,
    },
    /// Handing a volume over failed after it was closed here: this node cannot serve it again
    /// as it is.
    #[error("releasing volume {volume} failed: {reason}")]
    ReleaseFailed {
        /// The volume.
        volume: usize,
        /// What failed.
        reason: String,
    },
}

/// Volumes a node hands over at once: a node joining gets its share in a few rounds rather
/// than one volume at a time, while each round leaves few partitions unavailable at once.
const MOVES_AT_ONCE: usize = 32;

/// Longest wait for one answer of etcd.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// How a node reaches another, as it registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its `cluster.advertise_url`.
    pub url: String,
    /// Its incarnation (its replica stream).
    pub inc: u64,
    /// Where Kafka clients reach it (`host:port`), when it runs a Kafka listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<String>,
}

/// Who owns a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The node.
    pub node: String,
    /// Its incarnation.
    pub inc: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct ClusterConfig {
    volumes: usize,
}

/// Where a volume is served from, as this node last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Here: the volume is open on this node.
    Local,
    /// At this node's URL.
    Remote(String),
    /// Nowhere yet: its owner failed and no node has taken it, or its new owner is taking it.
    Unowned,
}

/// What this node last read of etcd.
#[derive(Debug, Default)]
struct View {
    members: BTreeMap<String, Member>,
    owners: Vec<Option<Owner>>,
}

/// What the cluster did since this node started, for `GET /metrics`.
#[derive(Debug, Default)]
pub struct ClusterCounters {
    /// Volumes this node took.
    pub takeovers: AtomicU64,
    /// Milliseconds those takes lasted, from finding the volume unowned to serving it.
    pub takeover_ms: AtomicU64,
    /// Requests forwarded to another node.
    pub forwards: AtomicU64,
    /// Forwarded requests that reached no owner (answered `503`).
    pub forward_failures: AtomicU64,
    /// Changes of a volume's owner seen in etcd.
    pub ownership_changes: AtomicU64,
    /// Volumes this node handed to another node.
    pub releases: AtomicU64,
}

/// This node's part in a cluster: its view of who owns what (read by the router) and the task
/// that keeps its lease and claims its volumes. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

struct Shared {
    node: String,
    url: String,
    /// Where Kafka clients reach this node, registered with it.
    kafka: OnceLock<String>,
    prefix: String,
    /// etcd (an in-memory double in unit tests); the lease keeper asks it for a client of its
    /// own.
    etcd: Arc<dyn KeyStore>,
    ttl: Duration,
    volume_count: usize,
    view: RwLock<View>,
    /// Set once the node serves: the volumes it opens as it takes them.
    volumes: OnceLock<Arc<Volumes>>,
    /// Volumes this node is taking now.
    taking: RwLock<Vec<usize>>,
    /// The volume this node is handing to another now, if any.
    releasing: RwLock<Vec<usize>>,
    /// This incarnation's lease while it is joined; 0 before it joins and while it is detached
    /// (its lease could not be renewed): it then serves what it holds but claims and hands
    /// over nothing until it has a lease again.
    lease: AtomicI64,
    /// Since when etcd has renewed this node's lease without a failure (none: it is failing
    /// now). After an outage a node claims nothing for a TTL, so that the nodes whose leases
    /// expired meanwhile have joined again and claimed back what they hold, rather than being
    /// taken over (and stopped by the seal) for an outage that was etcd's.
    renewing_since: std::sync::Mutex<Option<Instant>>,
    /// Set when the node leaves: its lease ends on purpose.
    leaving: AtomicBool,
    /// Set as soon as the node must stop serving: it claims, renews and serves nothing more.
    stopping: AtomicBool,
    /// Why the node stopped serving, sent once it has (its volumes closed).
    stopped: tokio::sync::watch::Sender<Option<StopReason>>,
    /// What claiming, releasing and stopping work with, set when the node starts serving.
    parts: OnceLock<Parts>,
    /// Told of every change under the cluster's keys (a watch).
    changed: tokio::sync::Notify,
    /// Bumped whenever the view is read again: forwarded requests waiting on an owner look
    /// whether it still is one.
    view_read: tokio::sync::watch::Sender<u64>,
    runtime: tokio::runtime::Handle,
    counters: ClusterCounters,
}

/// Why a node cannot join its cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd did not answer, or refused.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// A live node registered this node's name (`replication.node_id`) under another URL:
    /// two processes with one name would evict each other.
    #[error(
        "a live node registered this node's name at {url} ({key}), and this one advertises \
         {advertised}: give each node its own replication.node_id, or stop that one first"
    )]
    NameTaken {
        /// The member's key in etcd.
        key: String,
        /// Where that node is reached.
        url: String,
        /// Where this node is reached (`cluster.advertise_url`).
        advertised: String,
    },
    /// A key of the cluster in etcd is missing or cannot be read.
    #[error("{key}: {reason}")]
    Damaged {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The cluster's thread could not start, or ended before it answered.
    #[error("the cluster's thread: {0}")]
    Thread(std::io::Error),
}

impl ClusterError {
    /// The stable code of this error (the REST API's `error.code`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Etcd(EtcdError::Tls(_)) | Self::NameTaken { .. } => ErrorCode::InvalidConfig,
            Self::Etcd(_) | Self::Thread(_) => ErrorCode::Unavailable,
            Self::Damaged { .. } => ErrorCode::Corrupted,
        }
    }
}

impl Cluster {
    /// Connects to the cluster's etcd and reads the volume count (recording `settings.volumes`
    /// when this node is the first). Starts the cluster's thread; blocks until etcd answered.
    ///
    /// # Errors
    /// [`ClusterError`] when etcd cannot be reached or refuses the node's user, its TLS files
    /// cannot be used, or the cluster's thread cannot start.
    pub fn connect(settings: &ClusterSettings, node: &str) -> Result<Self, ClusterError> {
        let access = EtcdAccess::of(settings);
        let etcd: Arc<dyn KeyStore> =
            Arc::new(Etcd::new(settings.endpoints(), ETCD_TIMEOUT, access)?);
        let prefix = format!("/durability/{}/", settings.name);
        let ttl = Duration::from_millis(settings.lease_ttl_ms);
        let (ready, connected) = std::sync::mpsc::channel();
        let config_key = format!("{prefix}config");
        let wanted = settings.volumes;
        let config_etcd = etcd.clone();
        let member_key = format!("{prefix}members/{node}");
        let url = settings.advertise_url.trim_end_matches('/').to_owned();
        let runtime = crate::background::spawn("durability-cluster", move || async move {
            let connected = async {
                node_is_free(&*config_etcd, &member_key, &url).await?;
                volume_count(&*config_etcd, &config_key, wanted).await
            };
            let _ = ready.send(connected.await);
            // The runtime serves the tasks spawned on it for the process's life.
            std::future::pending::<()>().await;
        })
        .map_err(ClusterError::Thread)?;
        let volume_count = connected.recv().map_err(|_| {
            ClusterError::Thread(std::io::Error::other("it stopped before it answered"))
        })??;
        log::info!(
            "cluster {}: {volume_count} volumes, this node is {node} at {}",
            settings.name,
            settings.advertise_url
        );
        Ok(Self {
            shared: Arc::new(Shared::new(
                node,
                &settings.advertise_url,
                prefix,
                etcd,
                ttl,
                volume_count,
                runtime,
            )),
        })
    }

    /// How many volumes the cluster's data is spread over.
    pub fn volume_count(&self) -> usize {
        self.shared.volume_count
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// Joins the cluster as incarnation `inc` of this node and keeps claiming the volumes that
    /// fall to it: `replicator` takes each, and `volumes` opens it.
    pub(crate) fn serve(
        &self,
        replicator: Arc<Replicator>,
        volumes: Arc<Volumes>,
        replica_counters: Arc<ReplicaCounters>,
        close_volume: CloseVolume,
    ) {
        let _ = self.shared.volumes.set(volumes.clone());
        let shared = self.shared.clone();
        let inc = replicator.inc();
        let parts = Parts {
            inc,
            replicator: replicator.clone(),
            volumes,
            close_volume,
        };
        let _ = self.shared.parts.set(parts.clone());
        self.shared.runtime.spawn(async move {
            let lease = match shared.join(inc).await {
                Ok(lease) => lease,
                Err(err) => return shared.stop_serving(StopReason::CannotJoin(Arc::new(err))),
            };
            shared.lease.store(lease, Ordering::SeqCst);
            // The lease is renewed on a thread of its own, with a client of its own: taking and
            // opening volumes on this runtime must never delay a renewal.
            let keeper = shared.clone();
            let started = crate::background::spawn("durability-lease", move || {
                keeper.keep_lease(inc, replicator, replica_counters)
            });
            if let Err(err) = started {
                return shared.stop_serving(StopReason::LeaseThread(Arc::new(err)));
            }
            tokio::spawn(shared.clone().watch_changes());
            shared.claim_forever(&parts).await;
        });
    }

    /// Why this node stopped serving, once it has (see [`StopReason`]); `None` while it serves.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.shared.stopped.borrow().clone()
    }

    /// Resolves once this node has stopped serving for good (see [`StopReason`]): its stream
    /// lands nothing more, its volumes are closed and its lease is revoked. The application
    /// decides what follows: the server exits with [`EXIT_LEASE_LOST`]; an embedding
    /// application may keep running, and open a new [`Log`](crate::Log) to join again.
    pub async fn stopped(&self) -> StopReason {
        let mut stopped = self.shared.stopped.subscribe();
        match stopped.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().expect("waited for a reason"),
            // The sender lives as long as this handle.
            Err(_) => std::future::pending().await,
        }
    }

    /// Where volume `volume` is served from, as this node last saw it.
    pub fn route(&self, volume: usize) -> Route {
        let shared = &self.shared;
        if read_lock(&shared.releasing).contains(&volume) {
            return Route::Unowned;
        }
        let view = read_lock(&shared.view);
        let owner = view.owners.get(volume).and_then(Option::as_ref);
        let live = |owner: &Owner| {
            view.members
                .get(&owner.node)
                .is_some_and(|member| member.inc == owner.inc)
        };
        // A volume held here that another live node claimed (this node was stopped, or cut
        // off, past its lease) is no longer the log here: its requests go to that node.
        let claimed_elsewhere = owner.is_some_and(|owner| owner.node != shared.node && live(owner));
        // A node that stopped serving holds nothing that is the log any more.
        if !claimed_elsewhere
            && !shared.stopping()
            && shared
                .volumes
                .get()
                .is_some_and(|volumes| volumes.holds(volume))
        {
            return Route::Local;
        }
        match owner {
            Some(owner) if owner.node != shared.node => view
                .members
                .get(&owner.node)
                .filter(|member| member.inc == owner.inc)
                .map_or(Route::Unowned, |member| Route::Remote(member.url.clone())),
            _ => Route::Unowned,
        }
    }

    /// Resolves once volume `volume` is no longer served from `url` as this node sees it (its
    /// owner's lease expired, say): a forwarded request need not wait for a node cut off.
    pub(crate) async fn until_moved_from(&self, volume: usize, url: &str) {
        let mut reads = self.shared.view_read.subscribe();
        while matches!(self.route(volume), Route::Remote(now) if now == url) {
            if reads.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Reads the members and owners from etcd again (a forwarded request met a node that does
    /// not own the volume any more).
    ///
    /// # Errors
    /// [`EtcdError`] when etcd does not answer.
    pub(crate) async fn refresh(&self) -> Result<(), EtcdError> {
        let shared = self.shared.clone();
        self.shared
            .runtime
            .spawn(async move { shared.read_view().await.map(|_| ()) })
            .await
            .unwrap_or_else(|err| Err(EtcdError::Failed(err.to_string())))
    }

    /// What `GET /cluster` shows.
    pub fn status(&self) -> ClusterStatus {
        let shared = &self.shared;
        let view = read_lock(&shared.view);
        let mut members: BTreeMap<String, MemberStatus> = view
            .members
            .iter()
            .map(|(node, member)| {
                let status = MemberStatus {
                    url: member.url.clone(),
                    kafka: member.kafka.clone(),
                    inc: member.inc,
                    volumes: Vec::new(),
                };
                (node.clone(), status)
            })
            .collect();
        let mut unowned = Vec::new();
        for (volume, owner) in view.owners.iter().enumerate() {
            match owner
                .as_ref()
                .and_then(|owner| members.get_mut(&owner.node))
            {
                Some(member) => member.volumes.push(volume),
                None => unowned.push(volume),
            }
        }
        ClusterStatus {
            node: shared.node.clone(),
            volumes: shared.volume_count,
            members,
            unowned,
            taking: read_lock(&shared.taking).clone(),
            releasing: read_lock(&shared.releasing).first().copied(),
        }
    }

    /// The URLs of the other live nodes, as this node last saw them.
    pub fn other_members(&self) -> Vec<String> {
        let view = read_lock(&self.shared.view);
        view.members
            .iter()
            .filter(|(node, _)| **node != self.shared.node)
            .map(|(_, member)| member.url.clone())
            .collect()
    }

    /// Registers, with this node, where Kafka clients reach it (before it serves).
    pub(crate) fn advertise_kafka(&self, address: String) {
        let _ = self.shared.kafka.set(address);
    }

    /// Every live node that runs a Kafka listener, by name, with its address.
    pub fn kafka_brokers(&self) -> Vec<(String, String)> {
        let view = read_lock(&self.shared.view);
        view.members
            .iter()
            .filter_map(|(node, member)| Some((node.clone(), member.kafka.clone()?)))
            .collect()
    }

    /// The node serving volume `volume` now, by name: this one, or the live owner this node
    /// last saw; `None` while no node does.
    pub fn server_of(&self, volume: usize) -> Option<String> {
        match self.route(volume) {
            Route::Local => Some(self.shared.node.clone()),
            Route::Unowned => None,
            Route::Remote(_) => {
                let view = read_lock(&self.shared.view);
                let owner = view.owners.get(volume)?.as_ref()?;
                Some(owner.node.clone())
            }
        }
    }

    /// How many volumes this node holds and serves.
    pub fn held_volumes(&self) -> usize {
        self.shared.held().len()
    }

    /// What the cluster did since this node started.
    pub fn counters(&self) -> &ClusterCounters {
        &self.shared.counters
    }

    /// Leaves the cluster once this node's volumes are closed: its lease is revoked, so its
    /// keys go at once and the other nodes take its volumes without waiting for the lease to
    /// expire (sealing its stream, after which it can land nothing more).
    pub async fn leave(&self) {
        let shared = self.shared.clone();
        shared.leaving.store(true, Ordering::SeqCst);
        let lease = shared.lease.load(Ordering::SeqCst);
        if lease == 0 {
            return;
        }
        let revoked = self
            .shared
            .runtime
            .spawn(async move { shared.etcd.revoke(lease).await })
            .await;
        match revoked {
            Ok(Ok(())) => log::info!("cluster: left (lease revoked)"),
            Ok(Err(err)) => log::warn!("cluster: revoking the lease failed: {err}"),
            Err(err) => log::warn!("cluster: revoking the lease failed: {err}"),
        }
    }
}

/// Stops every partition of a volume this node hands to another, and closes the volume.
pub(crate) type CloseVolume =
    Arc<dyn Fn(usize) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What the task claiming and releasing this node's volumes works with.
#[derive(Clone)]
struct Parts {
    inc: u64,
    replicator: Arc<Replicator>,
    volumes: Arc<Volumes>,
    close_volume: CloseVolume,
}

/// `GET /cluster`: the members, the volumes each owns, and what is moving.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node: String,
    /// How many volumes the data is spread over.
    pub volumes: usize,
    /// Each live node, by name.
    pub members: BTreeMap<String, MemberStatus>,
    /// Volumes no live node owns now (their owner failed, and they are being taken).
    pub unowned: Vec<usize>,
    /// Volumes the answering node is taking now.
    pub taking: Vec<usize>,
    /// A volume the answering node is handing to another now, if any (the lowest, when it
    /// hands over several at once).
    pub releasing: Option<usize>,
}

/// One live node of the cluster, as `GET /cluster` shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemberStatus {
    /// How other nodes reach it.
    pub url: String,
    /// Where Kafka clients reach it (`host:port`), when it runs a Kafka listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<String>,
    /// Its incarnation: its replica stream, sealed when another node takes its volumes.
    pub inc: u64,
    /// The volumes it owns.
    pub volumes: Vec<usize>,
}

/// Refuses a node whose name (`member_key`) a live node registered under another URL than
/// `url`: two processes with one `replication.node_id` would evict each other. A restart under
/// the same URL replaces its earlier incarnation (see [`Shared::join`]).
async fn node_is_free(
    etcd: &dyn KeyStore,
    member_key: &str,
    url: &str,
) -> Result<(), ClusterError> {
    let (found, _) = etcd.prefix(member_key).await?;
    let live = found
        .iter()
        .filter(|kv| kv.key == member_key)
        .filter_map(|kv| serde_json::from_slice::<Member>(&kv.value).ok())
        .find(|member| member.url.trim_end_matches('/') != url);
    match live {
        Some(member) => Err(ClusterError::NameTaken {
            key: member_key.to_owned(),
            url: member.url,
            advertised: url.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The cluster's volume count: the one recorded in `key`, or `wanted` recorded there by this
/// first node.
async fn volume_count(
    etcd: &dyn KeyStore,
    key: &str,
    wanted: usize,
) -> Result<usize, ClusterError> {
    let record = serde_json::to_vec(&ClusterConfig { volumes: wanted }).expect("serializes");
    etcd.create(key, &record, 0).await?;
    let (found, _) = etcd.prefix(key).await?;
    let found =
        found
            .into_iter()
            .find(|kv| kv.key == key)
            .ok_or_else(|| ClusterError::Damaged {
                key: key.to_owned(),
                reason: "vanished after it was written".to_owned(),
            })?;
    let config: ClusterConfig =
        serde_json::from_slice(&found.value).map_err(|err| ClusterError::Damaged {
            key: key.to_owned(),
            reason: err.to_string(),
        })?;
    if config.volumes != wanted {
        log::warn!(
            "cluster.volumes is {wanted}, but the cluster was created with {} volumes: it \
             keeps them",
            config.volumes
        );
    }
    Ok(config.volumes)
}

/// What joining again after a detach found.
enum Rejoined {
    /// The node holds this lease again.
    Lease(LeaseId),
    /// Another node claimed this volume, which this node holds.
    Claimed(usize),
}

/// How often a node reads the members and owners when its watch tells it nothing (a watch
/// cut off silently): a fifth of the lease, between 100 ms and 1 s.
fn tick(ttl: Duration) -> Duration {
    (ttl / 5).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

impl Shared {
    /// A node's part in the cluster before it joins: `node` reached at `url`, its keys under
    /// `prefix` in `etcd`, its tasks spawned on `runtime`.
    fn new(
        node: &str,
        url: &str,
        prefix: String,
        etcd: Arc<dyn KeyStore>,
        ttl: Duration,
        volume_count: usize,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            node: node.to_owned(),
            url: url.trim_end_matches('/').to_owned(),
            kafka: OnceLock::new(),
            prefix,
            etcd,
            ttl,
            volume_count,
            view: RwLock::new(View {
                members: BTreeMap::new(),
                owners: vec![None; volume_count],
            }),
            volumes: OnceLock::new(),
            taking: RwLock::new(Vec::new()),
            releasing: RwLock::new(Vec::new()),
            lease: AtomicI64::new(0),
            renewing_since: std::sync::Mutex::new(Instant::now().checked_sub(ttl)),
            leaving: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stopped: tokio::sync::watch::Sender::new(None),
            parts: OnceLock::new(),
            changed: tokio::sync::Notify::new(),
            view_read: tokio::sync::watch::Sender::new(0),
            runtime,
            counters: ClusterCounters::default(),
        }
    }

    /// Stops serving for good (see [`StopReason`]): at once nothing is claimed, renewed or
    /// served here any more; then the stream is stopped (it lands nothing more), every volume
    /// held is closed, the lease is revoked (its keys go, so other nodes take the volumes at
    /// once), and [`Cluster::stopped`] resolves. Only the first reason counts.
    fn stop_serving(self: &Arc<Self>, reason: StopReason) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        log::error!(
            "cluster: {reason}; this node stops serving (a new incarnation can join again)"
        );
        self.changed.notify_one();
        let shared = self.clone();
        self.runtime.spawn(async move {
            if let Some(parts) = shared.parts.get() {
                parts.replicator.stop(&reason.to_string());
                let held = shared.held();
                futures_util::future::join_all(
                    held.iter().map(|&volume| (parts.close_volume)(volume)),
                )
                .await;
            }
            let lease = shared.lease.swap(0, Ordering::SeqCst);
            if lease != 0
                && let Err(err) = shared.etcd.revoke(lease).await
            {
                log::warn!("cluster: revoking the lease failed: {err}");
            }
            log::info!("cluster: stopped serving; the volumes held here are closed");
            shared.stopped.send_replace(Some(reason));
        });
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn member_key(&self, node: &str) -> String {
        format!("{}members/{node}", self.prefix)
    }

    fn owner_key(&self, volume: usize) -> String {
        format!("{}owners/{volume:05}", self.prefix)
    }

    /// What an owner key of incarnation `inc` of this node holds.
    fn owner_value(&self, inc: u64) -> Vec<u8> {
        serde_json::to_vec(&Owner {
            node: self.node.clone(),
            inc,
        })
        .expect("serializes")
    }

    /// The volumes this node holds and serves.
    fn held(&self) -> Vec<usize> {
        self.volumes.get().map_or_else(Vec::new, |volumes| {
            (0..self.volume_count)
                .filter(|&volume| volumes.holds(volume))
                .collect()
        })
    }

    /// Registers this incarnation under a new lease. A lease of an earlier incarnation of this
    /// node still registered is revoked: that process is gone (or must be), and its volumes
    /// are free at once instead of at its lease's end.
    async fn join(&self, inc: u64) -> Result<LeaseId, ClusterError> {
        let lease = self.etcd.grant(self.ttl).await?;
        let key = self.member_key(&self.node);
        let (found, _) = self.etcd.prefix(&key).await?;
        for earlier in found.iter().filter(|kv| kv.key == key && kv.lease != lease) {
            if earlier.lease != 0 {
                log::info!("cluster: revoking the lease of an earlier incarnation of this node");
                self.etcd.revoke(earlier.lease).await?;
            }
        }
        let member = Member {
            url: self.url.clone(),
            inc,
            kafka: self.kafka.get().cloned(),
        };
        let value = serde_json::to_vec(&member).expect("serializes");
        self.etcd.put(&key, &value, lease).await?;
        Ok(lease)
    }

    /// Renews the lease a third of its TTL apart, on its own thread with `etcd`'s client of its
    /// own. A node whose stream another node sealed, or whose windows cannot land for a whole
    /// TTL (cut off from the bucket), stops serving, the latter after revoking its lease so that
    /// nodes that reach the bucket take its volumes at once (see [`Shared::stop_serving`]). A node that cannot
    /// renew its lease (etcd is out of reach, or expired it) detaches instead: it keeps
    /// serving the volumes it holds, whose safety comes from the bucket's fences (a node that
    /// takes one seals this node's stream, which then lands nothing more and stops), takes and
    /// hands over nothing, and joins again under a new lease once etcd answers.
    async fn keep_lease(
        self: Arc<Self>,
        inc: u64,
        replicator: Arc<Replicator>,
        replica: Arc<ReplicaCounters>,
    ) {
        let etcd = self.etcd.client_of_its_own();
        let mut renewed = Instant::now();
        // The lease held before a detach: etcd may still know it.
        let mut previous = 0;
        loop {
            tokio::time::sleep(self.ttl / 3).await;
            if self.leaving.load(Ordering::SeqCst) || self.stopping() {
                return;
            }
            if replica.fenced() {
                return self.stop_serving(StopReason::Sealed);
            }
            let lease = self.lease.load(Ordering::SeqCst);
            if replicator
                .stalled_for()
                .is_some_and(|stalled| stalled >= self.ttl)
            {
                if lease != 0
                    && let Err(err) = etcd.revoke(lease).await
                {
                    log::warn!("cluster: revoking the lease failed: {err}");
                }
                return self.stop_serving(StopReason::NotLanding);
            }
            if lease == 0 {
                let rejoined = match self.rejoin(&*etcd, inc, previous).await {
                    Ok(Rejoined::Lease(lease)) => Ok(lease),
                    Ok(Rejoined::Claimed(volume)) => {
                        return self.stop_serving(StopReason::ClaimedWhileDetached { volume });
                    }
                    Err(err) => Err(err),
                };
                self.renewing(rejoined.is_ok());
                match rejoined {
                    Ok(lease) => {
                        renewed = Instant::now();
                        self.lease.store(lease, Ordering::SeqCst);
                        self.changed.notify_one();
                        log::info!("cluster: joined again under a new lease");
                    }
                    Err(err) => log::warn!("cluster: joining again failed: {err}"),
                }
                continue;
            }
            let kept = etcd.keep_alive(lease).await;
            self.renewing(matches!(kept, Ok(true)));
            match kept {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => self.detach("this node's etcd lease expired"),
                Err(err) => log::warn!("cluster: renewing the lease failed: {err}"),
            }
            if self.lease.load(Ordering::SeqCst) != 0 && renewed.elapsed() >= self.ttl {
                previous = lease;
                self.detach("this node could not renew its etcd lease for its whole TTL");
            }
        }
    }

    /// Records whether etcd just renewed the lease (or granted one).
    fn renewing(&self, renewed: bool) {
        let mut since = lock(&self.renewing_since);
        match (renewed, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, _) => *since = None,
            (true, Some(_)) => {}
        }
    }

    /// Whether etcd has renewed the lease without a failure for a whole TTL: only then does
    /// the node claim and hand over volumes (see `renewing_since`).
    fn steady(&self) -> bool {
        lock(&self.renewing_since).is_some_and(|since| since.elapsed() >= self.ttl)
    }

    /// Stops claiming and handing over volumes until the node joins again (see
    /// [`Shared::keep_lease`]); the volumes it holds are served meanwhile.
    fn detach(&self, why: &str) {
        self.lease.store(0, Ordering::SeqCst);
        log::warn!(
            "cluster: {why}; serving the volumes held here, taking none, until etcd answers \
             (a node that takes them seals this node's stream, and this node then stops)"
        );
    }

    /// Joins again after a detach: under lease `previous` when etcd still knows it (its keys
    /// are still there), else under a new lease, with this incarnation's member key and the
    /// owner keys of the volumes it holds. A volume another node claimed meanwhile is answered
    /// instead, and the new lease revoked: the node must stop (that node's take seals this
    /// node's stream).
    async fn rejoin(
        &self,
        etcd: &dyn KeyStore,
        inc: u64,
        previous: LeaseId,
    ) -> Result<Rejoined, EtcdError> {
        if previous != 0 && etcd.keep_alive(previous).await? {
            return Ok(Rejoined::Lease(previous));
        }
        let lease = etcd.grant(self.ttl).await?;
        let member = Member {
            url: self.url.clone(),
            inc,
            kafka: self.kafka.get().cloned(),
        };
        let value = serde_json::to_vec(&member).expect("serializes");
        etcd.put(&self.member_key(&self.node), &value, lease)
            .await?;
        let mine = self.owner_value(inc);
        for volume in self.held() {
            let key = self.owner_key(volume);
            if etcd.create(&key, &mine, lease).await? {
                continue;
            }
            let (found, _) = etcd.prefix(&key).await?;
            if found.iter().any(|kv| kv.key == key && kv.value != mine) {
                // Its take seals this node's stream, if it has not yet: what this node holds
                // of the volume is no longer the log.
                if let Err(err) = etcd.revoke(lease).await {
                    log::warn!("cluster: revoking the lease failed: {err}");
                }
                return Ok(Rejoined::Claimed(volume));
            }
        }
        Ok(Rejoined::Lease(lease))
    }

    /// Reads the members and owners, and stores them as this node's view. Answers when each
    /// unowned volume was first seen so.
    async fn read_view(&self) -> Result<(), EtcdError> {
        let (kvs, _) = self.etcd.prefix(&self.prefix).await?;
        let mut view = View {
            members: BTreeMap::new(),
            owners: vec![None; self.volume_count],
        };
        let members = format!("{}members/", self.prefix);
        let owners = format!("{}owners/", self.prefix);
        for KeyValue { key, value, .. } in kvs {
            if let Some(node) = key.strip_prefix(&members) {
                if let Ok(member) = serde_json::from_slice::<Member>(&value) {
                    view.members.insert(node.to_owned(), member);
                }
            } else if let Some(volume) = key.strip_prefix(&owners) {
                let volume = volume.parse::<usize>().ok();
                let owner = serde_json::from_slice::<Owner>(&value).ok();
                if let (Some(volume), Some(owner)) = (volume, owner)
                    && let Some(slot) = view.owners.get_mut(volume)
                {
                    *slot = Some(owner);
                }
            }
        }
        let mut current = write_lock(&self.view);
        let changes = current
            .owners
            .iter()
            .zip(&view.owners)
            .filter(|(before, after)| before != after)
            .count();
        self.counters
            .ownership_changes
            .fetch_add(changes as u64, Ordering::Relaxed);
        *current = view;
        drop(current);
        self.view_read.send_modify(|reads| *reads += 1);
        Ok(())
    }

    /// The volumes this node should take now: those no live incarnation owns that rendezvous
    /// hashing gives it, and those it claimed and has not taken yet.
    fn due_to_take(&self, inc: u64, volumes: &Volumes) -> Vec<usize> {
        let view = read_lock(&self.view);
        let live = |owner: &Owner| {
            view.members
                .get(&owner.node)
                .is_some_and(|member| member.inc == owner.inc)
        };
        let mine = Owner {
            node: self.node.clone(),
            inc,
        };
        (0..self.volume_count)
            .filter(|&volume| !volumes.holds(volume))
            .filter(|&volume| match &view.owners[volume] {
                Some(owner) if *owner == mine => true,
                Some(owner) if live(owner) => false,
                _ => {
                    placement::owner_of(volume, view.members.keys().map(String::as_str))
                        == Some(self.node.as_str())
                }
            })
            .collect()
    }

    /// Watches the cluster's keys, telling `changed` of each change: a member's lease expiring
    /// is seen at once instead of at the next [`tick`]. Watches again when the watch ends.
    async fn watch_changes(self: Arc<Self>) {
        use futures_util::StreamExt;
        while !self.leaving.load(Ordering::SeqCst) {
            if let Ok((_, revision)) = self.etcd.prefix(&self.prefix).await {
                let mut events = self.etcd.watch(&self.prefix, revision + 1);
                while let Some(Ok(_)) = events.next().await {
                    self.changed.notify_one();
                }
            }
            self.changed.notify_one();
            tokio::time::sleep(tick(self.ttl)).await;
        }
    }

    /// Reads the view whenever the keys change (and every [`tick`]), takes the volumes due to
    /// this node and, once every volume has an owner, hands the volumes it holds that fall to
    /// another node to that node, a few at a time, for ever.
    async fn claim_forever(self: &Arc<Self>, parts: &Parts) {
        let mine = self.owner_value(parts.inc);
        // When each volume due here was first seen due: a takeover lasts from then.
        let mut due_since: BTreeMap<usize, Instant> = BTreeMap::new();
        // Nodes started together see one another before the first claims.
        tokio::time::sleep(tick(self.ttl) * 2).await;
        while !self.leaving.load(Ordering::SeqCst) && !self.stopping() {
            if let Err(err) = self.read_view().await {
                log::warn!("cluster: reading the members and owners failed: {err}");
                let _ = tokio::time::timeout(tick(self.ttl), self.changed.notified()).await;
                continue;
            }
            let lease = self.lease.load(Ordering::SeqCst);
            if lease == 0 || !self.steady() {
                // Detached, or just back from an etcd outage: nothing is claimed or handed
                // over until the node has renewed its lease for a whole TTL.
                let _ = tokio::time::timeout(tick(self.ttl), self.changed.notified()).await;
                continue;
            }
            let due = self.due_to_take(parts.inc, &parts.volumes);
            due_since.retain(|volume, _| due.contains(volume));
            let mut claimed = Vec::new();
            for &volume in &due {
                due_since.entry(volume).or_insert_with(Instant::now);
                if self.claim(volume, &mine, lease).await {
                    claimed.push(volume);
                }
            }
            if !claimed.is_empty() {
                self.take(&claimed, parts, &due_since).await;
                for volume in &claimed {
                    due_since.remove(volume);
                }
                continue;
            }
            let due = self.due_to_release(&parts.volumes);
            if !due.is_empty() {
                if let Err(reason) = self.release(&due, &mine, parts).await {
                    return self.stop_serving(reason);
                }
                continue;
            }
            let _ = tokio::time::timeout(tick(self.ttl), self.changed.notified()).await;
        }
    }

    /// The volumes this node holds that rendezvous hashing gives another live node, up to
    /// [`MOVES_AT_ONCE`], once every volume has an owner (moves wait for failures to be taken
    /// care of).
    fn due_to_release(&self, volumes: &Volumes) -> Vec<usize> {
        let view = read_lock(&self.view);
        if view.owners.iter().any(Option::is_none) {
            return Vec::new();
        }
        let members = || view.members.keys().map(String::as_str);
        (0..self.volume_count)
            .filter(|&volume| {
                volumes.holds(volume)
                    && placement::owner_of(volume, members()).is_some_and(|pick| pick != self.node)
            })
            .take(MOVES_AT_ONCE)
            .collect()
    }

    /// Hands `volumes` to the nodes they fall to, all at once: their requests are answered
    /// `503` with `Retry-After` meanwhile; their partitions stop and the volumes close; the
    /// replica ends this node's segment of each history once everything landed; then the
    /// owner keys go, and the nodes they fall to claim them and take them without a seal. A
    /// volume that could not be handed over is answered: this node must stop serving.
    async fn release(
        &self,
        volumes: &[usize],
        mine: &[u8],
        parts: &Parts,
    ) -> Result<(), StopReason> {
        volumes.clone_into(&mut write_lock(&self.releasing));
        let started = Instant::now();
        futures_util::future::join_all(volumes.iter().map(|&volume| (parts.close_volume)(volume)))
            .await;
        let released = futures_util::future::join_all(volumes.iter().map(|&volume| async move {
            let outcome = match parts.replicator.release(volume).await {
                Ok(()) => self
                    .etcd
                    .delete_if(&self.owner_key(volume), mine)
                    .await
                    .map(|_| ())
                    .map_err(|err| err.to_string()),
                Err(err) => Err(err.to_string()),
            };
            (volume, outcome)
        }))
        .await;
        write_lock(&self.releasing).clear();
        for (volume, outcome) in released {
            match outcome {
                Ok(()) => {
                    self.counters.releases.fetch_add(1, Ordering::Relaxed);
                }
                // The volume is closed here and its history may be ended: this node cannot
                // serve it again as it is. A new incarnation takes it back, or another node
                // does.
                Err(reason) => return Err(StopReason::ReleaseFailed { volume, reason }),
            }
        }
        log::info!(
            "cluster: released volumes {volumes:?} in {:?}",
            started.elapsed()
        );
        Ok(())
    }

    /// Claims volume `volume` for `mine` under `lease`: creates its owner key where absent.
    /// True when the key holds `mine` now (this incarnation may have claimed it earlier).
    async fn claim(&self, volume: usize, mine: &[u8], lease: LeaseId) -> bool {
        let key = self.owner_key(volume);
        match self.etcd.create(&key, mine, lease).await {
            Ok(true) => true,
            // Claimed by this incarnation earlier, and not taken yet.
            Ok(false) => self.owned_by(&key, mine).await,
            Err(err) => {
                log::warn!("cluster: claiming volume {volume} failed: {err}");
                false
            }
        }
    }

    /// Whether `key` holds `mine`.
    async fn owned_by(&self, key: &str, mine: &[u8]) -> bool {
        match self.etcd.prefix(key).await {
            Ok((kvs, _)) => kvs.iter().any(|kv| kv.key == key && kv.value == mine),
            Err(_) => false,
        }
    }

    /// Takes the `claimed` volumes through the replica and opens them; what fails is retried
    /// on the next round (the claim stays).
    async fn take(&self, claimed: &[usize], parts: &Parts, due_since: &BTreeMap<usize, Instant>) {
        *write_lock(&self.taking) = claimed.to_vec();
        let started = Instant::now();
        let taken = parts.replicator.take(claimed).await;
        let replayed = started.elapsed();
        let opened = match taken {
            Err(err) => Err(err.to_string()),
            // Opening many volumes takes seconds: off this runtime, whose watch and view reads
            // must go on meanwhile.
            Ok(()) => {
                let (volumes, claimed) = (parts.volumes.clone(), claimed.to_vec());
                tokio::task::spawn_blocking(move || {
                    claimed.iter().try_for_each(|&volume| {
                        volumes.attach(volume).map_err(|err| err.to_string())
                    })
                })
                .await
                .unwrap_or_else(|err| Err(err.to_string()))
            }
        };
        write_lock(&self.taking).clear();
        match opened {
            Ok(()) => {
                let now = Instant::now();
                for volume in claimed {
                    let since = due_since.get(volume).copied().unwrap_or(now);
                    let took = now.duration_since(since);
                    self.counters.takeovers.fetch_add(1, Ordering::Relaxed);
                    self.counters.takeover_ms.fetch_add(
                        u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                        Ordering::Relaxed,
                    );
                }
                let found = claimed
                    .iter()
                    .filter_map(|volume| due_since.get(volume))
                    .min();
                log::info!(
                    "cluster: serving volumes {claimed:?}: taken in {:?} ({replayed:?} through \
                     the replica, the rest opening them), {:?} after they were found unowned",
                    started.elapsed(),
                    found.map(Instant::elapsed).unwrap_or_default()
                );
            }
            Err(err) => {
                log::warn!("cluster: taking volumes {claimed:?} failed: {err}; retrying");
                tokio::time::sleep(tick(self.ttl)).await;
            }
        }
    }
}
