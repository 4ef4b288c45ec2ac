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
//! - [`server`]: the server process and a minimal HTTP client;
//! - [`records`]: producer threads, re-sends and page-by-page read-back over HTTP;
//! - [`leases`]: the leasing worker and its book of what it acked and what it still holds.
//!
//! The seed of the random choices (batch sizes, partition keys, when to kill) is printed in the
//! summary and in every failure; `CRASH_SEED=<n>` replays one.

mod acknowledged;
mod damage;
mod leases;
mod leftovers;
mod records;
mod server;

const TOPIC: &str = "crash";
const GROUP: &str = "workers";
/// Partitions of the topic (fewer than the default 8, so retention flushes sooner).
const PARTITIONS: u32 = 4;
/// `retention.max_records`: the hot window of each partition.
const MAX_RECORDS: u64 = 200;
/// `leases.lease_ms`: how soon an unacked range is redelivered.
const LEASE_MS: u64 = 300;

/// The seed of a run: `CRASH_SEED`, or the clock.
fn seed() -> u64 {
    match std::env::var("CRASH_SEED") {
        Ok(seed) => seed.trim().parse().expect("CRASH_SEED is an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|time| time.as_nanos() as u64)
            .unwrap_or(1),
    }
}
