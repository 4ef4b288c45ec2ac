//! Prometheus metrics of the REST server, and the text that `GET /metrics` answers.
//!
//! [`Metrics`] owns its own [`prometheus::Registry`] rather than the process-global one, so
//! several servers in one process (tests) keep separate counts. Three kinds of numbers feed it:
//!
//! - events counted as they happen: the produce and read handlers count records and bytes, and
//!   a middleware times every request ([`Metrics::appended`], [`Metrics::records_read`],
//!   [`Metrics::request`]);
//! - the groups' positions, read from the open partitions at each scrape
//!   ([`Metrics::refresh`]) and kept for closed ones: consumer lag and lease counts (and the
//!   size of the lag history the log keeps);
//! - cold flushes, which the stores count themselves in a
//!   [`ColdFlushCounters`] shared by every partition (the store knows nothing of HTTP), copied
//!   in by [`Metrics::render`].
//!
//! The number of series has a bound that does not follow the topics or partitions stored:
//! the first `[metrics] max_topics` topics seen since the server started get series of their
//! own; the counts of every later topic are summed under `topic="(other)"` (a label no topic
//! can have), and their groups get no lag or lease series (summing them would mean reading
//! every open partition at each scrape). Memory is bounded the same way.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `durability_appended_records_total` | counter | `topic` |
//! | `durability_appended_bytes_total` | counter (payload bytes) | `topic` |
//! | `durability_read_records_total` | counter | `topic` |
//! | `durability_consumer_lag` | gauge (`nextOffset - cursor`, or `- first leased offset`) | `topic`, `partition`, `group` |
//! | `durability_leases` | gauge (lease rows; groups that lease only) | `topic`, `partition`, `group`, `state` |
//! | `durability_cold_flushes_total` | counter | `result` (`ok`, `error`) |
//! | `durability_http_request_duration_seconds` | histogram | `method`, `route`, `status` |
//! | `durability_kafka_request_duration_seconds` | histogram (time to answer a Kafka request, waits of fetches included; its count is the requests) | `api` (`Produce`, `Fetch`, ...), `error` (`none`, or the protocol's error, the worst of the request's parts) |
//! | `durability_kafka_batches_total` | counter (record batches Kafka producers sent, decoded whole) | `codec` (`none`, `gzip`, `snappy`, `lz4`, `zstd`) |
//! | `durability_auth_failures_total` | counter (requests refused by their token, or as a node's without the cluster's secret) | `reason` (`missing`, `unknown`, `forbidden`, `node`) |
//! | `durability_open_partitions` | gauge | |
//! | `durability_partition_actors` | gauge (actors alive: open partitions, and closed ones not yet dropped) | |
//! | `durability_partitions_opened_total`, `durability_partitions_closed_total` | counter | |
//! | `durability_partitions_closed_for_room_total` | counter (closed under `max_open`) | |
//! | `durability_overloaded_total` | counter (requests answered `overloaded`) | |
//! | `durability_retention_runs_total` | counter (retention runs of due partitions by the sweep) | |
//! | `durability_replica_windows_total`, `durability_replica_window_bytes_total` | counter (windows stored in the bucket; see the README's Replication) | |
//! | `durability_replica_put_failures_total` | counter (attempts to store a window that failed and were retried) | |
//! | `durability_replica_snapshots_total`, `durability_replica_deleted_objects_total` | counter (volume snapshots stored; objects garbage collection deleted) | |
//! | `durability_replica_batches_total` | counter (batches of landed windows stored, read by a node taking volumes over) | |
//! | `durability_replica_fenced` | gauge (1 once another node took this node's volumes: writes are refused) | |
//! | `durability_cluster_members`, `durability_cluster_held_volumes` | gauge (in a cluster only: live nodes; volumes this node serves) | |
//! | `durability_cluster_takeovers_total`, `durability_cluster_takeover_milliseconds_total` | counter (volumes taken, and how long from finding each unowned to serving it) | |
//! | `durability_cluster_forwards_total`, `durability_cluster_forward_failures_total` | counter (requests forwarded to their partition's owner; those that reached none) | |
//! | `durability_cluster_ownership_changes_total`, `durability_cluster_releases_total` | counter (changes of a volume's owner seen in etcd; volumes this node handed to another) | |
//! | `durability_damaged_volumes` | gauge (1 for each damaged volume; see the README's Guarantees) | `volume`, `kind` (`malformed`, `lost`, `unopenable`) |
//! | `durability_committer_threads`, `durability_committer_threads_busy` | gauge (threads running the volumes' committers; those running a commit now: a slow bucket never keeps one waiting) | |
//! | `durability_lag_history_groups`, `durability_lag_history_bytes` | gauge (groups of partitions whose lag history this node keeps, and the heap it takes: at most 1 KiB each) | |
//! | `durability_scrub_last_pass_seconds` | gauge (Unix time the last scrub pass over every volume ended; 0 before one) | |
//! | `durability_scrub_pages_checked_total`, `durability_scrub_records_checked_total` | counter (pages SQLite's check read; records whose checksum and offset were checked) | |
//! | `durability_scrub_damage_found_total` | counter (volumes the scrub found damaged) | |
//! | `process_open_fds`, `process_threads`, `process_resident_memory_bytes`, ... | the process's own figures (Linux) | |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::http::StatusCode;

use prometheus::core::Collector;
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::cluster::Cluster;
use crate::log::ColdFlushCounters;
use crate::log::{GroupPosition, LeaseState, Log, PartitionCounters};
use crate::log::{ReplicaCounters, ScrubCounters};
use crate::names::PartitionId;
use crate::sync::lock;

/// The server's metrics. Cheap to clone; every clone counts into the same registry, so one
/// `Metrics` can be shared by all the workers of an `HttpServer`.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    topics: TopicCounters,
    groups: GroupPositions,
    cold_flushes: IntCounterVec,
    auth_failures: IntCounterVec,
    request_duration: HistogramVec,
    kafka_requests: HistogramVec,
    kafka_batches: IntCounterVec,
    open_partitions: IntGauge,
    partition_actors: IntGauge,
    partitions_opened: IntCounter,
    partitions_closed: IntCounter,
    partitions_closed_for_room: IntCounter,
    overloaded: IntCounter,
    retention_runs: IntCounter,
    replica_windows: IntCounter,
    replica_window_bytes: IntCounter,
    replica_put_failures: IntCounter,
    replica_snapshots: IntCounter,
    replica_batches: IntCounter,
    replica_deleted: IntCounter,
    replica_fenced: IntGauge,
    damaged_volumes: IntGaugeVec,
    committer_threads: IntGauge,
    committer_threads_busy: IntGauge,
    lag_history_groups: IntGauge,
    lag_history_bytes: IntGauge,
    scrub_last_pass: IntGauge,
    scrub_pages: IntCounter,
    scrub_records: IntCounter,
    scrub_damage: IntCounter,
    /// The stores' own counts, copied into `cold_flushes` at render time.
    flush_counters: Arc<ColdFlushCounters>,
    /// The registry's own counts, copied in at render time.
    partition_counters: Arc<PartitionCounters>,
    /// Replication's own counts, copied in at render time.
    replica_counters: Arc<ReplicaCounters>,
    /// The scrub's own counts, copied in at render time.
    scrub_counters: Arc<ScrubCounters>,
    /// The committers' threads, counted at render time.
    committers: Option<crate::store::CommitterPool>,
    /// In a cluster: its families, and the cluster whose counts they copy at render time.
    cluster: Option<(ClusterFamilies, Cluster)>,
    /// Held while the gauges are refilled and while the registry is rendered, so that a scrape
    /// never shows another scrape's half-filled gauges.
    scrape: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The cluster's families (`GET /metrics` in a cluster only).
struct ClusterFamilies {
    members: IntGauge,
    held_volumes: IntGauge,
    takeovers: IntCounter,
    takeover_ms: IntCounter,
    forwards: IntCounter,
    forward_failures: IntCounter,
    ownership_changes: IntCounter,
    releases: IntCounter,
}

impl ClusterFamilies {
    fn register(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str| register(registry, IntCounter::new(name, help));
        let gauge = |name: &str, help: &str| register(registry, IntGauge::new(name, help));
        Self {
            members: gauge(
                "durability_cluster_members",
                "Live nodes of the cluster, as this node last read them.",
            ),
            held_volumes: gauge(
                "durability_cluster_held_volumes",
                "Volumes this node holds and serves.",
            ),
            takeovers: counter(
                "durability_cluster_takeovers_total",
                "Volumes this node took (from a failed or departed owner, or unowned).",
            ),
            takeover_ms: counter(
                "durability_cluster_takeover_milliseconds_total",
                "Milliseconds those takes lasted, from finding the volume unowned to serving it.",
            ),
            forwards: counter(
                "durability_cluster_forwards_total",
                "Requests forwarded to the node owning their partition's volume.",
            ),
            forward_failures: counter(
                "durability_cluster_forward_failures_total",
                "Requests that reached no owner (answered 503 with Retry-After).",
            ),
            ownership_changes: counter(
                "durability_cluster_ownership_changes_total",
                "Changes of a volume's owner that this node saw in etcd.",
            ),
            releases: counter(
                "durability_cluster_releases_total",
                "Volumes this node handed to another node (a node joined or came back).",
            ),
        }
    }

    fn catch_up(&self, cluster: &Cluster) {
        let counters = cluster.counters();
        let read = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        catch_up(&self.takeovers, read(&counters.takeovers));
        catch_up(&self.takeover_ms, read(&counters.takeover_ms));
        catch_up(&self.forwards, read(&counters.forwards));
        catch_up(&self.forward_failures, read(&counters.forward_failures));
        catch_up(&self.ownership_changes, read(&counters.ownership_changes));
        catch_up(&self.releases, read(&counters.releases));
        let status = cluster.status();
        self.members.set(gauge(status.members.len() as u64));
        self.held_volumes.set(gauge(cluster.held_volumes() as u64));
    }
}

/// Request-duration buckets past Prometheus' defaults (5 ms to 10 s), up beyond the longest
/// long-poll ([`MAX_WAIT_MS`](crate::config::MAX_WAIT_MS), 30 s), so that a long-poll lands in a bucket of its own.
const LONG_BUCKETS: [f64; 3] = [20.0, 40.0, 60.0];

/// The buckets of the request durations: Prometheus' defaults, then [`LONG_BUCKETS`].
fn duration_buckets() -> Vec<f64> {
    prometheus::DEFAULT_BUCKETS
        .iter()
        .chain(&LONG_BUCKETS)
        .copied()
        .collect()
}

impl Metrics {
    /// Fresh metrics for `log`'s server: [`Metrics::new`] with its counters and its
    /// `[metrics] max_topics`.
    pub fn for_log(log: &Log) -> Self {
        let mut metrics = Self::new(
            log.cold_flushes(),
            log.partition_counters(),
            log.replica_counters(),
            log.config().metrics.max_topics,
        );
        let inner = Arc::get_mut(&mut metrics.inner).expect("not shared yet");
        inner.scrub_counters = log.scrub_counters();
        inner.committers = Some(log.committers());
        if let Some(cluster) = log.cluster() {
            let families = ClusterFamilies::register(&inner.registry);
            inner.cluster = Some((families, cluster.clone()));
        }
        metrics
    }

    /// Fresh metrics, all zero, reading cold flushes from `flush_counters`
    /// ([`Log::cold_flushes`]) and partitions opened and closed from `partition_counters`
    /// ([`Log::partition_counters`]), with series of their own for at most `max_topics`
    /// topics (see the module docs).
    ///
    /// # Panics
    /// Never in practice: it only registers fixed, valid metric names in a new registry.
    pub fn new(
        flush_counters: Arc<ColdFlushCounters>,
        partition_counters: Arc<PartitionCounters>,
        replica_counters: Arc<ReplicaCounters>,
        max_topics: usize,
    ) -> Self {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("the process collector is registered once in a fresh registry");
        let counter = |name: &str, help: &str| register(&registry, IntCounter::new(name, help));
        let inner = Inner {
            topics: register(&registry, Ok(TopicCounters::new(max_topics))),
            groups: register(&registry, Ok(GroupPositions::default())),
            cold_flushes: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "durability_cold_flushes_total",
                        "Segments flushed to the cold store, by result (ok, error).",
                    ),
                    &["result"],
                ),
            ),
            auth_failures: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "durability_auth_failures_total",
                        "Requests refused by their token, by reason (missing, unknown, forbidden, node).",
                    ),
                    &["reason"],
                ),
            ),
            request_duration: register(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "durability_http_request_duration_seconds",
                        "Time to answer an HTTP request (long-poll waits included), per route.",
                    )
                    .buckets(duration_buckets()),
                    &["method", "route", "status"],
                ),
            ),
            kafka_requests: register(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "durability_kafka_request_duration_seconds",
                        "Time to answer a Kafka request (fetch waits included), per API and error.",
                    )
                    .buckets(duration_buckets()),
                    &["api", "error"],
                ),
            ),
            kafka_batches: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "durability_kafka_batches_total",
                        "Record batches Kafka producers sent, by the codec they came compressed with.",
                    ),
                    &["codec"],
                ),
            ),
            open_partitions: register(
                &registry,
                IntGauge::new("durability_open_partitions", "Partitions open now."),
            ),
            partition_actors: register(
                &registry,
                IntGauge::new(
                    "durability_partition_actors",
                    "Partition actors alive: open partitions, and closed ones not yet dropped.",
                ),
            ),
            partitions_opened: counter(
                "durability_partitions_opened_total",
                "Partitions opened since the server started.",
            ),
            partitions_closed: counter(
                "durability_partitions_closed_total",
                "Partitions closed (idle, to make room, or at shutdown).",
            ),
            partitions_closed_for_room: counter(
                "durability_partitions_closed_for_room_total",
                "Partitions closed to make room for another under partitions.max_open.",
            ),
            overloaded: counter(
                "durability_overloaded_total",
                "Requests answered overloaded: every open partition was busy.",
            ),
            retention_runs: counter(
                "durability_retention_runs_total",
                "Retention runs of partitions the sweep found due.",
            ),
            replica_windows: counter(
                "durability_replica_windows_total",
                "Windows of writes stored in the replica's bucket.",
            ),
            replica_window_bytes: counter(
                "durability_replica_window_bytes_total",
                "Bytes of the windows stored in the replica's bucket.",
            ),
            replica_put_failures: counter(
                "durability_replica_put_failures_total",
                "Attempts to store a window that failed (each is retried).",
            ),
            replica_snapshots: counter(
                "durability_replica_snapshots_total",
                "Volume snapshots stored in the replica's bucket.",
            ),
            replica_batches: counter(
                "durability_replica_batches_total",
                "Batches of landed windows stored in the replica's bucket.",
            ),
            replica_deleted: counter(
                "durability_replica_deleted_objects_total",
                "Replica objects deleted by garbage collection.",
            ),
            replica_fenced: register(
                &registry,
                IntGauge::new(
                    "durability_replica_fenced",
                    "1 once another node took this node's volumes: writes are refused.",
                ),
            ),
            damaged_volumes: register(
                &registry,
                Ok(gauges(
                    "durability_damaged_volumes",
                    "Damaged volumes: 1 for each, by volume number and kind of damage \
                     (malformed, lost, unopenable). Their partitions refuse writes.",
                    &["volume", "kind"],
                )),
            ),
            committer_threads: register(
                &registry,
                IntGauge::new(
                    "durability_committer_threads",
                    "Threads running the volumes' committers.",
                ),
            ),
            committer_threads_busy: register(
                &registry,
                IntGauge::new(
                    "durability_committer_threads_busy",
                    "Committer threads running a commit now.",
                ),
            ),
            lag_history_groups: register(
                &registry,
                IntGauge::new(
                    "durability_lag_history_groups",
                    "Groups of partitions whose lag history this node keeps.",
                ),
            ),
            lag_history_bytes: register(
                &registry,
                IntGauge::new(
                    "durability_lag_history_bytes",
                    "Heap the groups' lag history takes on this node.",
                ),
            ),
            scrub_last_pass: register(
                &registry,
                IntGauge::new(
                    "durability_scrub_last_pass_seconds",
                    "Unix time the last scrub pass over every volume ended (0 before one).",
                ),
            ),
            scrub_pages: counter(
                "durability_scrub_pages_checked_total",
                "Pages of the volumes read by SQLite's integrity check in the scrub.",
            ),
            scrub_records: counter(
                "durability_scrub_records_checked_total",
                "Records whose checksum and offset the scrub checked.",
            ),
            scrub_damage: counter(
                "durability_scrub_damage_found_total",
                "Volumes the scrub found damaged (they are marked, as a read would).",
            ),
            registry,
            flush_counters,
            partition_counters,
            replica_counters,
            scrub_counters: Arc::default(),
            committers: None,
            cluster: None,
            scrape: Mutex::new(()),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Counts `records` records of `bytes` payload bytes appended to `topic`.
    pub fn appended(&self, topic: &str, records: u64, bytes: u64) {
        self.inner.topics.add(topic, [records, bytes, 0]);
    }

    /// Counts a request refused by its token (see `http/auth.rs`).
    pub(crate) fn count_auth_failure(&self, refusal: crate::http::auth::Refusal) {
        self.inner
            .auth_failures
            .with_label_values(&[refusal.label()])
            .inc();
    }

    /// Counts `records` records returned by a read or poll of `topic` (nothing when zero, so
    /// empty reads of unknown topics add no series).
    pub fn records_read(&self, topic: &str, records: u64) {
        if records > 0 {
            self.inner.topics.add(topic, [0, 0, records]);
        }
    }

    /// Records how long a request took. `route` is the matched route pattern
    /// (`/topics/{topic}`), never the raw path, so topic names do not multiply the series.
    pub fn request(&self, method: &str, route: &str, status: StatusCode, elapsed: Duration) {
        self.inner
            .request_duration
            .with_label_values(&[method, route, status.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// Records how long a Kafka request of `api` took, and its error (`none`, or the
    /// protocol's name of it).
    pub fn kafka_request(&self, api: &str, error: &str, elapsed: Duration) {
        self.inner
            .kafka_requests
            .with_label_values(&[api, error])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a record batch a Kafka producer sent compressed with `codec` (`none` too).
    pub fn kafka_batch(&self, codec: &str) {
        self.inner.kafka_batches.with_label_values(&[codec]).inc();
    }

    /// Refreshes the consumer-lag and lease gauges of the open partitions of the topics with
    /// series of their own from `log`. A scrape reads their stores directly: it never opens a
    /// partition nor keeps one from stopping. A stopped partition keeps the values it showed
    /// last (nothing changes them while it is stopped); after a restart, its series come back
    /// when it is next opened. A partition that cannot be read keeps its previous values (and
    /// is logged).
    pub async fn refresh(&self, log: &Log) {
        let damaged = log.damaged_volumes();
        let history = log.lag_history_usage();
        {
            let _scrape = self.lock();
            self.inner
                .lag_history_groups
                .set(gauge(history.groups as u64));
            self.inner
                .lag_history_bytes
                .set(gauge(history.bytes as u64));
            self.inner.damaged_volumes.reset();
            for (volume, kind) in damaged {
                self.inner
                    .damaged_volumes
                    .with_label_values(&[&volume.to_string(), kind])
                    .set(1);
            }
        }
        let topics = self.inner.topics.clone();
        match log
            .open_group_positions(move |topic| topics.admit(topic))
            .await
        {
            Ok(partitions) => {
                let _scrape = self.lock();
                for (id, groups) in partitions {
                    self.inner.groups.update(id, groups);
                }
            }
            Err(err) => log::warn!("metrics: cannot read the open partitions: {err}"),
        }
    }

    /// Every metric in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let _scrape = self.lock();
        let counters = &self.inner.flush_counters;
        catch_up(
            &self.inner.cold_flushes.with_label_values(&["ok"]),
            counters.flushed(),
        );
        catch_up(
            &self.inner.cold_flushes.with_label_values(&["error"]),
            counters.failed(),
        );
        let partitions = &self.inner.partition_counters;
        catch_up(&self.inner.partitions_opened, partitions.opened());
        catch_up(&self.inner.partitions_closed, partitions.closed());
        catch_up(
            &self.inner.partitions_closed_for_room,
            partitions.closed_for_room(),
        );
        catch_up(&self.inner.overloaded, partitions.overloaded());
        catch_up(&self.inner.retention_runs, partitions.retention_runs());
        let replica = &self.inner.replica_counters;
        catch_up(&self.inner.replica_windows, replica.windows());
        catch_up(&self.inner.replica_window_bytes, replica.window_bytes());
        catch_up(&self.inner.replica_put_failures, replica.put_failures());
        catch_up(&self.inner.replica_snapshots, replica.snapshots());
        catch_up(&self.inner.replica_batches, replica.batches());
        catch_up(&self.inner.replica_deleted, replica.deleted());
        self.inner.replica_fenced.set(i64::from(replica.fenced()));
        if let Some(committers) = &self.inner.committers {
            self.inner
                .committer_threads
                .set(gauge(committers.threads() as u64));
            self.inner
                .committer_threads_busy
                .set(gauge(committers.busy() as u64));
        }
        let scrub = &self.inner.scrub_counters;
        self.inner.scrub_last_pass.set(gauge(scrub.last_pass()));
        catch_up(&self.inner.scrub_pages, scrub.pages_checked());
        catch_up(&self.inner.scrub_records, scrub.records_checked());
        catch_up(&self.inner.scrub_damage, scrub.damage_found());
        if let Some((families, cluster)) = &self.inner.cluster {
            families.catch_up(cluster);
        }
        self.inner.open_partitions.set(gauge(partitions.open()));
        self.inner.partition_actors.set(gauge(partitions.actors()));
        TextEncoder::new()
            .encode_to_string(&self.inner.registry.gather())
            .unwrap_or_else(|err| {
                log::error!("metrics: cannot encode: {err}");
                String::new()
            })
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data, only the order of scrapes: a poisoned one is still fine.
        lock(&self.inner.scrape)
    }
}

/// The `topic` label under which the topics past `max_topics` are summed: parentheses are
/// not allowed in topic names, so it is never a topic's own.
const OTHER_TOPICS: &str = "(other)";

/// The per-topic counters, kept compact because a node may serve a topic per tenant: one map
/// entry of three numbers per topic (about 80 bytes, where a labelled counter of the
/// `prometheus` crate takes several hundred), for at most `max_topics` topics, turned into
/// counter families only while a scrape renders them.
#[derive(Clone)]
struct TopicCounters {
    counts: Arc<Mutex<Counts>>,
    max_topics: usize,
    /// The families, empty: what [`Collector::desc`] describes, and the template each scrape
    /// fills.
    families: [IntCounterVec; 3],
}

/// Appended records, appended payload bytes and records read.
type Three = [u64; 3];

#[derive(Default)]
struct Counts {
    /// The topics with series of their own, the first `max_topics` seen.
    by_topic: HashMap<Box<str>, Three>,
    /// Every other topic's, summed.
    other: Three,
}

impl TopicCounters {
    fn new(max_topics: usize) -> Self {
        let family = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), &["topic"])
                .expect("metric names and labels are valid")
        };
        Self {
            counts: Arc::default(),
            max_topics,
            families: [
                family(
                    "durability_appended_records_total",
                    "Records appended, per topic.",
                ),
                family(
                    "durability_appended_bytes_total",
                    "Payload bytes appended, per topic.",
                ),
                family(
                    "durability_read_records_total",
                    "Records returned by reads and polls, per topic.",
                ),
            ],
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        lock(&self.counts)
    }

    fn add(&self, topic: &str, amounts: Three) {
        let mut counts = self.lock();
        let (counts, _) = counts.of(topic, self.max_topics);
        for (count, amount) in counts.iter_mut().zip(amounts) {
            *count += amount;
        }
    }

    /// Whether `topic` has series of its own, giving it them if there is room.
    fn admit(&self, topic: &str) -> bool {
        self.lock().of(topic, self.max_topics).1
    }
}

impl Counts {
    /// The counts `topic` adds to: its own (given a place if fewer than `max_topics` have one),
    /// or else every other topic's sum; and whether they are its own.
    fn of(&mut self, topic: &str, max_topics: usize) -> (&mut Three, bool) {
        if !self.by_topic.contains_key(topic) {
            if self.by_topic.len() >= max_topics {
                return (&mut self.other, false);
            }
            self.by_topic.insert(topic.into(), Three::default());
        }
        let own = self.by_topic.get_mut(topic).expect("present or just added");
        (own, true)
    }
}

impl Collector for TopicCounters {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.families.iter().flat_map(Collector::desc).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let families = self.families.clone().map(|family| {
            // A fresh family of the same description for every scrape (clones share values).
            let desc = family.desc()[0];
            IntCounterVec::new(Opts::new(&desc.fq_name, &desc.help), &["topic"])
                .expect("metric names and labels are valid")
        });
        let counts = self.lock();
        let other = (OTHER_TOPICS, &counts.other);
        let topics = counts
            .by_topic
            .iter()
            .map(|(topic, counts)| (&**topic, counts));
        for (topic, counts) in topics.chain([other]) {
            for (family, &count) in families.iter().zip(counts) {
                // A topic only read, or only written, shows no series for the other side.
                if count > 0 {
                    family.with_label_values(&[topic]).inc_by(count);
                }
            }
        }
        families.iter().flat_map(Collector::collect).collect()
    }
}

/// The consumer-lag and lease gauges: the last state a scrape found of each group of each
/// partition, kept compact like [`TopicCounters`] (a node may hold a partition per tenant),
/// and turned into gauge families only while a scrape renders them.
#[derive(Clone)]
struct GroupPositions {
    partitions: Arc<Mutex<HashMap<PartitionId, Box<[GroupPosition]>>>>,
    /// `durability_consumer_lag` and `durability_leases`, empty: what [`Collector::desc`]
    /// describes, and the template each scrape fills.
    families: [IntGaugeVec; 2],
}

const LAG_LABELS: [&str; 3] = ["topic", "partition", "group"];
const LEASE_LABELS: [&str; 4] = ["topic", "partition", "group", "state"];

impl Default for GroupPositions {
    fn default() -> Self {
        Self {
            partitions: Arc::default(),
            families: [
                gauges(
                    "durability_consumer_lag",
                    "Records between a group's cursor and the partition's next offset.",
                    &LAG_LABELS,
                ),
                gauges(
                    "durability_leases",
                    "Lease rows of a group in a partition, per state.",
                    &LEASE_LABELS,
                ),
            ],
        }
    }
}

impl GroupPositions {
    /// Replaces what partition `id` shows by `groups`, read from it now. A group that leased
    /// before keeps its lease series (at zero) once its rows are gone, so they never vanish
    /// while the group exists.
    fn update(&self, id: PartitionId, mut groups: Vec<GroupPosition>) {
        let mut partitions = lock(&self.partitions);
        if let Some(before) = partitions.get(&id) {
            for group in groups.iter_mut().filter(|group| group.leases.is_none()) {
                let leased_before = before
                    .iter()
                    .any(|old| old.group == group.group && old.leases.is_some());
                if leased_before {
                    group.leases = Some([0; 4]);
                }
            }
        }
        if groups.is_empty() {
            partitions.remove(&id);
        } else {
            partitions.insert(id, groups.into_boxed_slice());
        }
    }
}

impl Collector for GroupPositions {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.families.iter().flat_map(Collector::desc).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let [lag, leases] = &self.families;
        let (lag, leases) = (
            gauges(&lag.desc()[0].fq_name, &lag.desc()[0].help, &LAG_LABELS),
            gauges(
                &leases.desc()[0].fq_name,
                &leases.desc()[0].help,
                &LEASE_LABELS,
            ),
        );
        let partitions = lock(&self.partitions);
        for (id, groups) in partitions.iter() {
            let (topic, partition) = (id.topic(), id.index().to_string());
            for group in groups.iter() {
                let labels = [topic, partition.as_str(), &group.group];
                lag.with_label_values(&labels).set(gauge(group.lag));
                for (state, count) in LeaseState::ALL.iter().zip(group.leases.iter().flatten()) {
                    leases
                        .with_label_values(&[labels[0], labels[1], labels[2], state.as_str()])
                        .set(gauge(*count));
                }
            }
        }
        [lag, leases].iter().flat_map(Collector::collect).collect()
    }
}

fn gauges(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("metric names and labels are valid")
}

/// Registers `metric` (built from fixed, valid names) in a registry of its own.
fn register<M>(registry: &Registry, metric: prometheus::Result<M>) -> M
where
    M: prometheus::core::Collector + Clone + 'static,
{
    let metric = metric.expect("metric names and labels are valid");
    registry
        .register(Box::new(metric.clone()))
        .expect("each metric is registered once in a fresh registry");
    metric
}

/// Moves `counter` up to `total`, a count kept elsewhere that only grows.
fn catch_up(counter: &IntCounter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{GroupPosition, LONG_BUCKETS, Metrics, PartitionCounters, StatusCode};
    use crate::config::MAX_WAIT_MS;
    use crate::log::ColdFlushCounters;
    use crate::names::PartitionId;

    /// Every metric of the contract renders under its name once it has a value, with the
    /// labels it was given; cold flushes render (at zero) before any flush.
    #[test]
    fn renders_every_metric_by_name() {
        let metrics = Metrics::new(
            Arc::new(ColdFlushCounters::default()),
            Arc::new(PartitionCounters::default()),
            Arc::default(),
            100,
        );
        metrics.appended("events", 3, 42);
        metrics.records_read("events", 2);
        metrics.request(
            "GET",
            "/topics/{topic}",
            StatusCode::OK,
            Duration::from_millis(3),
        );
        metrics.inner.groups.update(
            PartitionId::new("events", 0).unwrap(),
            vec![GroupPosition {
                group: "billing".into(),
                cursor: Some(0),
                lag: 5,
                leases: Some([1, 0, 0, 0]),
            }],
        );
        let text = metrics.render();
        for expected in [
            r#"durability_appended_records_total{topic="events"} 3"#,
            r#"durability_appended_bytes_total{topic="events"} 42"#,
            r#"durability_read_records_total{topic="events"} 2"#,
            r#"durability_consumer_lag{group="billing",partition="0",topic="events"} 5"#,
            r#"durability_leases{group="billing",partition="0",state="active",topic="events"} 1"#,
            r#"durability_cold_flushes_total{result="ok"} 0"#,
            r#"durability_cold_flushes_total{result="error"} 0"#,
            "durability_replica_windows_total 0",
            "durability_replica_fenced 0",
            "durability_scrub_last_pass_seconds 0",
            "durability_scrub_pages_checked_total 0",
            "durability_scrub_records_checked_total 0",
            "durability_scrub_damage_found_total 0",
            r#"durability_http_request_duration_seconds_count{method="GET",route="/topics/{topic}",status="200"} 1"#,
            "# TYPE durability_http_request_duration_seconds histogram",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
    }

    /// Reading empty pages adds no series, so unknown topics do not show up.
    #[test]
    fn empty_reads_add_no_series() {
        let metrics = Metrics::new(
            Arc::new(ColdFlushCounters::default()),
            Arc::new(PartitionCounters::default()),
            Arc::default(),
            100,
        );
        metrics.records_read("nothing-here", 0);
        assert!(!metrics.render().contains("nothing-here"));
    }

    /// A group shows the values it was last read with until its partition is read again;
    /// one that leased keeps its lease series at zero, one that never leased has none.
    #[test]
    fn groups_keep_their_last_values_and_only_leasing_groups_get_lease_series() {
        let metrics = Metrics::new(
            Arc::new(ColdFlushCounters::default()),
            Arc::new(PartitionCounters::default()),
            Arc::default(),
            100,
        );
        let id = PartitionId::new("events", 0).unwrap();
        let group = |name: &str, lag, leases| GroupPosition {
            group: name.into(),
            cursor: None,
            lag,
            leases,
        };
        metrics.inner.groups.update(
            id.clone(),
            vec![
                group("workers", 4, Some([1, 0, 0, 0])),
                group("audit", 9, None),
            ],
        );
        let text = metrics.render();
        assert!(text.contains(
            r#"durability_leases{group="workers",partition="0",state="active",topic="events"} 1"#
        ));
        assert!(
            !text.contains(r#"durability_leases{group="audit""#),
            "{text}"
        );
        // Rendering again without reading the partition shows the same values.
        assert!(
            metrics.render().contains(
                r#"durability_consumer_lag{group="audit",partition="0",topic="events"} 9"#
            )
        );

        metrics
            .inner
            .groups
            .update(id, vec![group("workers", 0, None), group("audit", 9, None)]);
        let text = metrics.render();
        assert!(text.contains(r#"durability_leases{group="workers",partition="0",state="active",topic="events"} 0"#), "{text}");
        assert!(text.contains(
            r#"durability_consumer_lag{group="workers",partition="0",topic="events"} 0"#
        ));
    }

    /// A long-poll's longest wait lands in a finite bucket, not only in `+Inf`.
    #[test]
    fn duration_buckets_cover_the_longest_long_poll() {
        let longest = MAX_WAIT_MS as f64 / 1000.0;
        assert!(LONG_BUCKETS.iter().any(|&bucket| bucket > longest * 1.2));
        let metrics = Metrics::new(
            Arc::new(ColdFlushCounters::default()),
            Arc::new(PartitionCounters::default()),
            Arc::default(),
            100,
        );
        metrics.request(
            "GET",
            "/poll",
            StatusCode::OK,
            Duration::from_millis(MAX_WAIT_MS + 50),
        );
        let text = metrics.render();
        let finite_hit = text.lines().any(|line| {
            line.starts_with("durability_http_request_duration_seconds_bucket")
                && !line.contains("+Inf")
                && line.ends_with(" 1")
        });
        assert!(finite_hit, "{text}");
    }
}
