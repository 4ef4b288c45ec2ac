//! `durability`: a partitioned, retained, append-only log on SQLite, built on Actix.
//!
//! Producers append records to partitions (atomically per batch, idempotently with
//! deduplication keys); consumers read from their own cursors and commit forward. Each
//! partition is an actor, the single writer of its log; the partitions of a node share a fixed
//! set of SQLite databases in WAL mode ([`Volume`](store::Volume)s), each with one committer
//! that commits the appends of all its partitions together, the committers of all volumes
//! running on one small pool of threads. A node may replicate every write to a bucket before
//! answering it, and several nodes may share the volumes as a cluster.
//!
//! # Layout
//!
//! ```text
//! http (REST) ──────────┐     cached address / shortcut
//! embedding application ┴─> Log ──────────────────┐
//!                            │ PartitionRegistry ─┴─> PartitionActor ─> LogStore ─> Volume
//!                            │   (on a miss: opens)          │                │      │ committer
//!                            └─<─ DeadLetter <─ exhausted ───┘                │      │ (pool)
//!                                                                 ColdStore <─┘      v
//!                     Cluster (etcd: who owns which volume) ──> Replicator ──> bucket
//!   Log ──> Peers (typed calls to the other nodes' REST API, for partitions held there)
//! ```
//!
//! In data-flow order:
//! - [`http`]: the REST server's routes; it talks only to [`Log`]. Every request but
//!   `/healthz` passes one check of its bearer token against the credentials of [`auth`] and
//!   the permission its route needs (`http/auth.rs`, written beside each route); [`tls`]
//!   gives the listener its certificate, reloaded without a restart. Its `metrics`
//!   module holds the server's Prometheus metrics (`GET /metrics`), fed by the handlers and by
//!   [`Log`].
//! - [`log`]: [`Log`], the cloneable handle: validates names, routes keyed events with the
//!   partitioning function, and sends each operation to its partition's actor, straight to
//!   the address it last located (a cache shared by every handle, from which the registry
//!   removes a partition it closes) or through the registry. Its files group the operations
//!   as [`http`] does (produce, consume, leases, operations). The server's dead-letter
//!   destination is a topic of the same `Log`: a partition hands an exhausted lease range to
//!   it, and skips the range once it is stored. A replicated single node's `Log` rebuilds a
//!   volume found damaged from the bucket (`heal.rs`).
//! - `registry` (internal): the `PartitionRegistry` actor, a supervisor that finds the volume
//!   holding each partition (each volume lists its own), opens a partition's actor on its first
//!   message, keeps at most `partitions.max_open` open (closing the least recently used idle
//!   one, or answering [`Error::Overloaded`]), closes idle ones, and restarts one whose store
//!   failed. Its one timer starts the retention `sweep` (internal), which asks each volume for
//!   the partitions whose retention is due (an index range) and runs it, a few at a time:
//!   mostly partitions that are not open, since an open one runs its own when due (the sweep
//!   retries its failed runs).
//! - [`partition`]: [`PartitionActor`](partition::PartitionActor), one per open partition, owning
//!   no thread: one typed message per operation, group commit through its volume's committer,
//!   other work on a fixed pool of workers, in the partition's order (on a replicated node on
//!   their blocking pools, so that a write waiting for its window keeps no shared thread);
//!   [`Log`]'s appends and hot reads go around the actor through its shortcut (`shortcut.rs`),
//!   saving two thread switches; and one
//!   `run_interval` tick that checks for idleness and is its retention alarm (it runs
//!   retention once the due time the store keeps in memory has passed; never two runs of one
//!   partition at once).
//! - [`store`]: [`LogStore`], every rule of one partition's log over its share of a
//!   [`Volume`](store::Volume) (one SQLite database of many partitions, with one committer,
//!   run on the node's [`CommitterPool`](store::CommitterPool), and a background index):
//!   append (with group commit across partitions), read
//!   (transparently from cold segments below the hot window), commit, cursors, bounds, backlog,
//!   retention (`trim`), `forget_cold_before`, and leases. Its `Volumes` (internal) opens the
//!   volumes of the data folder and finds the one holding a partition; its `scrub` (internal)
//!   checks every volume in the background, at a bounded pace, for damage nobody reads.
//! - `replica` (internal): replication to a bucket. A node's `Replicator` claims an
//!   incarnation, takes volumes (replaying their history, sealing a previous owner's stream)
//!   and stores every write's changes in its stream before the write is answered; its
//!   maintenance snapshots volumes and collects what no history needs.
//! - [`cluster`]: several nodes over one bucket. [`Cluster`](cluster::Cluster) keeps this
//!   node's etcd lease, claims and hands over volumes (rendezvous hashing, [`cluster::placement`])
//!   and tells where each volume is served; a node that may own nothing any more stops serving
//!   and says why ([`Log::stopped`], [`cluster::StopReason`]), and the application decides
//!   what follows. [`cluster::peer`] is the typed seam between nodes: [`Log`] reaches the
//!   partitions other nodes hold through its [`Peers`](cluster::peer::Peers) (appends, keyed
//!   events, group polls and commits, bounds, leases, a topic's description, the topic list:
//!   `log/spread.rs`), so an embedded `Log` answers as the server does, and [`http`] only
//!   proxies a partition's own requests to its owner (`forward.rs`).
//! - [`wire`]: the JSON shapes nodes and clients exchange, written by [`http`] and read by
//!   [`cluster::peer`] and the typed client (`client`, feature `client`).
//! - [`cold`]: the [`ColdStore`](cold::ColdStore) trait for write-once segment objects, with a
//!   local-folder and an S3 implementation (and in-memory and failing ones for tests).
//! - [`routing`]: the partitioning function (the original's FNV-1a), which picks an event's
//!   partition.
//! - [`load`]: load snapshots (appends in flight and completed, backlog).
//! - [`names`], [`clock`], [`config`], [`error`]: naming rules, time, settings (the embedded
//!   `config/default.toml` overlaid by a file and the environment, a file per section) and the
//!   umbrella [`Error`] with stable [`Error::code`] strings; `sync` (internal) the one rule for
//!   taking a lock.
//!
//! One append's path through these layers, with each thread hand-off and the two group-commit
//! queues it crosses (its partition's, then its volume's), is told once in
//! `docs/append-pipeline.md`.
//!
//! # Runtime
//!
//! [`Log::open`] starts actors, so it must run inside an actix `System`
//! (`#[actix::main]` or `#[actix_web::main]`). [`LogStore`] alone needs no runtime for
//! appends and commits; its reads and trims are `async` because they may await the cold tier.
//!
//! # Quick start
//!
//! ```
//! use durability::store::{AppendOutcome, NewRecord};
//! use durability::{Config, Log};
//!
//! # actix::System::new().block_on(async {
//! let dir = tempfile::tempdir()?;
//! let mut config = Config::default();
//! config.storage.data_dir = dir.path().join("data");
//! config.cold.dir = dir.path().join("cold");
//! let log = Log::open(config)?;
//!
//! // A batch is atomic; a re-sent deduplication key returns the original offset.
//! log.append("orders", 0, vec![NewRecord::keyed("order-1", r#"{"total":42}"#)]).await?;
//! let retry = log.append("orders", 0, vec![NewRecord::keyed("order-1", r#"{"total":42}"#)]).await?;
//! assert_eq!(retry.outcome, AppendOutcome::Appended { offsets: vec![0] });
//!
//! // Consumers read from their own cursor and commit forward.
//! let page = log.read("orders", 0, log.cursor("orders", 0, "billing").await?, None).await?;
//! assert_eq!(page.records[0].payload, r#"{"total":42}"#);
//! log.commit("orders", 0, "billing", page.next_offset).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

pub mod auth;
pub(crate) mod background;
// A typed client of the REST API (feature `client`); its own doc says more (a `///` here would
// be prepended to it).
#[cfg(feature = "client")]
pub mod client;
pub mod clock;
pub mod cluster;
pub mod cold;
pub mod config;
pub mod error;
mod error_code;
pub mod http;
pub mod kafka;
pub mod load;
pub mod log;
pub(crate) mod memory;
pub mod names;
pub mod partition;
pub(crate) mod registry;
mod replica;

pub use registry::PartitionCounters;
pub mod routing;
pub mod store;
mod sweep;
mod sync;
pub mod tls;
pub mod wire;

pub use config::Config;
pub use error::{Error, ErrorCode};
pub use log::{Event, EventsOutcome, Log, LogBuilder};
pub use store::LogStore;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
