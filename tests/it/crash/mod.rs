//! Crash safety of the `durability` binary: the real server is killed with SIGKILL mid-flight
//! and restarted on the same data folder, cycle after cycle. One module per behaviour, and the
//! machinery they share:
//!
//! - [`acknowledged`]: producers and a leasing worker run against the server; whatever was
//!   acknowledged (a `202` for an append, a `200` for a lease ack) must be there after every
//!   restart: each record exactly once, at its place, with its payload, and every acked range
//!   still settled; ranges leased but not acked come back;
//! - [`damage`]: damage found once stays refused across kills until an operator accepts it,
//!   and a write-ahead log lost in a kill is reported to readers, not served as a shorter log;
//! - [`leftovers`]: kills while partitions trim leave the cold folder holding exactly the
//!   indexed segments once the server is back;
//! - [`records`]: producer threads, re-sends and page-by-page read-back over HTTP;
//! - [`leases`]: the leasing worker and its book of what it acked and what it still holds.
//!
//! The server process and its HTTP client are [`crate::common::process`]'s, started here with
//! the harness's settings ([`start_server`]).
//!
//! The seed of the random choices (batch sizes, partition keys, when to kill) is printed in the
//! summary and in every failure; `CRASH_SEED=<n>` replays one.

mod acknowledged;
mod damage;
mod leases;
mod leftovers;
mod records;

use std::ffi::OsString;
use std::path::Path;

use crate::common::process::{self, Server};

const TOPIC: &str = "crash";
const GROUP: &str = "workers";
/// Partitions of the topic (fewer than the default 8, so retention flushes sooner).
const PARTITIONS: u32 = 4;
/// `retention.max_records`: the hot window of each partition.
const MAX_RECORDS: u64 = 200;
/// `leases.lease_ms`: how soon an unacked range is redelivered.
const LEASE_MS: u64 = 300;

/// The server over `dir/data` with the harness's settings: full sync, a cold tier in
/// `dir/cold`, [`PARTITIONS`] partitions per topic, a hot window of [`MAX_RECORDS`] swept every
/// 50 ms, leases of [`LEASE_MS`], only errors logged; `overrides` are set on top of them.
fn start_server(dir: &Path, overrides: &[(&str, &str)]) -> Server {
    let settings: [(&str, OsString); 9] = [
        ("DURABILITY__STORAGE__SYNC", "full".into()),
        ("DURABILITY__COLD__KIND", "fs".into()),
        ("DURABILITY__COLD__DIR", dir.join("cold").into()),
        (
            "DURABILITY__LOG__PARTITIONS_PER_TOPIC",
            PARTITIONS.to_string().into(),
        ),
        (
            "DURABILITY__RETENTION__MAX_RECORDS",
            MAX_RECORDS.to_string().into(),
        ),
        ("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "50".into()),
        ("DURABILITY__LEASES__ENABLED", "true".into()),
        ("DURABILITY__LEASES__LEASE_MS", LEASE_MS.to_string().into()),
        ("RUST_LOG", "error".into()),
    ];
    let overrides = overrides
        .iter()
        .map(|&(name, value)| (name, OsString::from(value)));
    Server::start(&dir.join("data"), settings.into_iter().chain(overrides))
}

/// The seed of a run: `CRASH_SEED`, or the clock.
fn seed() -> u64 {
    process::seed("CRASH_SEED")
}
