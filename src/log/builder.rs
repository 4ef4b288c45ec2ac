//! [`LogBuilder`]: opening a [`Log`] with another cold store, clock or dead-letter
//! destination.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext};

use super::dead_letter::DeadLetterTopic;
use super::lag_history::LagHistory;
use super::long_poll::WaitsReleased;
use super::{Inner, Log};
use crate::clock::Clock;
use crate::cluster::peer::{HttpPeers, NodeClient, Peers};
use crate::cluster::{CloseVolume, Cluster};
use crate::cold::ColdStore;
use crate::config::Config;
use crate::config::ReplicationKind;
use crate::error::Error;
use crate::partition::DeadLetter;
use crate::registry::{
    Addresses, DeadLetterFor, PartitionCounters, PartitionRegistry, RegistryParts, ReleaseVolume,
    Signals,
};
use crate::replica::Replicator;
use crate::store::{ColdFlushCounters, CommitterPool, ReplicaCounters, Stream, Volumes};

/// Opens a [`Log`] with parts other than the configured ones.
#[must_use]
pub struct LogBuilder {
    pub(super) config: Config,
    pub(super) cold: Option<Option<Arc<dyn ColdStore>>>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) dead_letter: Option<Arc<dyn DeadLetter>>,
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
    /// [`Error::Unavailable`] when the data folder cannot be created or holds the earlier
    /// layout, a volume was written by a newer version, or the cold store cannot be configured.
    pub fn open(self) -> Result<Log, Error> {
        let config = Arc::new(self.config);
        std::fs::create_dir_all(&config.storage.data_dir).map_err(|err| {
            let reason = format!(
                "cannot create storage.data_dir {}",
                config.storage.data_dir.display()
            );
            Error::unavailable(None, reason, Some(err.into()))
        })?;
        let cold = match self.cold {
            Some(cold) => cold,
            None => config.cold_store().map_err(|err| {
                Error::unavailable(None, "cannot open the cold store", Some(err.into()))
            })?,
        };
        let storage = &config.storage;
        let replica_counters = Arc::new(ReplicaCounters::default());
        let cluster = if config.cluster.enabled() {
            let node = config.replication.node();
            let cluster = Cluster::connect(&config.cluster, &node)?;
            if let Some(kafka) = config.kafka.advertised_in(&config.cluster) {
                cluster.advertise_kafka(kafka);
            }
            Some(cluster)
        } else {
            None
        };
        // A cluster's node reaches the others through their REST API, proving itself with the
        // cluster's secret.
        let node_client = match &cluster {
            None => None,
            Some(_) => {
                let max_wait = std::time::Duration::from_millis(config.server.max_wait_ms);
                let secret = config.cluster.node_secret(&config.server.auth_token);
                let client = NodeClient::new(&config.cluster, secret, max_wait).map_err(|why| {
                    Error::unavailable(None, format!("cannot call the other nodes: {why}"), None)
                })?;
                Some(client)
            }
        };
        let peers = node_client
            .clone()
            .map(|client| Arc::new(HttpPeers::new(client)) as Arc<dyn Peers>);
        let volume_count = cluster
            .as_ref()
            .map_or(storage.volumes, Cluster::volume_count);
        let replicator = match config.replication.kind {
            ReplicationKind::None => None,
            ReplicationKind::S3 => Some(Replicator::start(
                &config.replication,
                &config.cold.s3(),
                &storage.data_dir,
                volume_count,
                cluster.as_ref().map(|_| config.cluster.name.as_str()),
                replica_counters.clone(),
            )?),
        };
        // A single node rebuilds the volumes it finds damaged from the bucket (see `heal.rs`).
        let heal_requests = match (&cluster, &replicator) {
            (None, Some(replicator)) => Some(replicator.heal_requests()),
            _ => None,
        };
        let stream = replicator
            .clone()
            .map(|replicator| replicator as Arc<dyn Stream>);
        let committers = CommitterPool::new(storage.committers);
        let volumes = match (&cluster, &replicator) {
            // A cluster's node opens the volumes it takes, as it takes them.
            (Some(_), _) => Volumes::held_elsewhere(
                &storage.data_dir,
                volume_count,
                storage.sync,
                stream,
                committers,
            ),
            (None, Some(replicator)) => {
                replicator.take_blocking((0..volume_count).collect())?;
                Volumes::open(
                    &storage.data_dir,
                    volume_count,
                    storage.sync,
                    stream,
                    committers,
                )
                .map_err(|err| Error::unavailable(None, err.to_string(), None))?
            }
            (None, None) => Volumes::open(
                &storage.data_dir,
                volume_count,
                storage.sync,
                stream,
                committers,
            )
            .map_err(|err| Error::unavailable(None, err.to_string(), None))?,
        };
        volumes
            .review_due_times(&config.retention_limits())
            .map_err(|err| {
                Error::unavailable(None, "cannot review the due times", Some(err.into()))
            })?;
        let volumes = Arc::new(volumes);
        volumes.start_scrub(config.scrub_interval());
        let clock = self.clock;
        let custom = self.dead_letter;
        let signals = Arc::new(Signals::default());
        let flush_counters = Arc::new(ColdFlushCounters::default());
        let counters = Arc::new(PartitionCounters::default());
        let addresses = Arc::new(Addresses::default());
        let waits_released = Arc::new(WaitsReleased::default());
        let lag_history = Arc::new(LagHistory::new(config.metrics.max_topics));
        let credentials = {
            let (auth, token) = (config.auth.clone(), config.server.auth_token.clone());
            let file = (!auth.tokens_file.as_os_str().is_empty()).then(|| auth.tokens_file.clone());
            let load = move || auth.credentials(&token).map_err(|err| err.to_string());
            crate::auth::Live::start(Box::new(load), file).map_err(|why| {
                Error::unavailable(None, format!("cannot read the credentials: {why}"), None)
            })?
        };
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
                    replica_counters: replica_counters.clone(),
                    cluster: cluster.clone(),
                    peers: peers.clone(),
                    node_client: node_client.clone(),
                    credentials: credentials.clone(),
                    lag_history: lag_history.clone(),
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
        if let (Some(requests), Some(replicator)) = (heal_requests, &replicator) {
            actix::spawn(super::heal::heal_volumes(
                requests,
                registry.clone(),
                volumes.clone(),
                replicator.clone(),
                volume_count,
            ));
        }
        if let (Some(cluster), Some(replicator)) = (&cluster, replicator) {
            let closer = registry.clone();
            let close_volume: CloseVolume = Arc::new(move |volume| {
                let release = ReleaseVolume {
                    volume,
                    volume_count,
                    healing: false,
                };
                let sent = closer.send(release);
                Box::pin(async move {
                    let _ = sent.await;
                })
            });
            cluster.serve(
                replicator,
                volumes.clone(),
                replica_counters.clone(),
                close_volume,
            );
        }
        let log = Log {
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
                replica_counters,
                cluster,
                peers,
                node_client,
                credentials,
                lag_history,
            }),
        };
        let sample_every = log.inner.config.metrics.lag_sample_ms;
        if sample_every > 0 {
            actix::spawn(super::lag_history::sample(
                Arc::downgrade(&log.inner),
                Duration::from_millis(sample_every),
            ));
        }
        Ok(log)
    }
}
