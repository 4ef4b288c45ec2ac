//! `durability`: a partitioned, retained, append-only log on SQLite, built on Actix.
//!
//! Producers append records to partitions (atomically per batch, idempotently with
//! deduplication keys); consumers read from their own cursors and commit forward. Each
//! partition owns one SQLite database file in WAL mode.
//!
//! # Layout
//!
//! ```text
//! http (REST, actix-web) ──┐
//! embedding application ───┴─> Log ─> PartitionRegistry ─> PartitionActor ─> LogStore ─> ColdStore
//! ```
//!
//! In data-flow order:
//! - [`http`]: the REST server's routes (today `GET /healthz`).
//! - [`store`]: [`LogStore`], every rule of one partition's log over one SQLite database:
//!   append (with group commit), read (transparently from cold segments below the hot window),
//!   commit, cursors, bounds, backlog, retention (`trim`) and `forget_cold_before`.
//! - [`cold`]: the [`ColdStore`](cold::ColdStore) trait for write-once segment objects, with a
//!   local-folder and an S3 implementation (and in-memory and failing ones for tests).
//! - [`names`]: which topic and group names are valid.
//! - [`clock`]: time as a trait, so tests move it instead of sleeping.
//! - [`config`]: the settings tree, loaded from the embedded `config/default.toml`, a file and
//!   the environment, then validated.
//! - [`error`]: the umbrella [`Error`] with stable [`Error::code`] strings.
//!
//! # Quick start
//!
//! ```
//! use durability::store::{AppendOutcome, LogStore, NewRecord, StoreOptions};
//!
//! # actix::System::new().block_on(async {
//! let dir = tempfile::tempdir()?;
//! let log = LogStore::open(dir.path().join("events-0.sqlite"), StoreOptions::default())?;
//! let outcome = log.append(&[NewRecord::keyed("order-1", r#"{"total":42}"#)])?;
//! assert_eq!(outcome, AppendOutcome::Appended { offsets: vec![0] });
//!
//! let page = log.read(Some(0), None).await?;
//! assert_eq!(page.records[0].payload, r#"{"total":42}"#);
//! log.commit("billing", page.next_offset)?;
//! assert_eq!(log.pending_deliveries()?, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

pub mod clock;
pub mod cold;
pub mod config;
pub mod error;
pub mod http;
pub mod load;
pub mod log;
pub mod names;
pub mod partition;
pub(crate) mod registry;
pub mod routing;
pub mod store;

pub use config::Config;
pub use error::Error;
pub use log::{Event, EventsOutcome, Log, LogBuilder};
pub use store::LogStore;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
