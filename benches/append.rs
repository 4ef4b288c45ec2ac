//! LogStore appends next to raw rusqlite inserts of the same rows, measured in the same run.
//!
//! Run: `cargo bench --bench append` (set `BENCH_SECONDS` to change the time per measurement,
//! default 1). For each sync mode, payload size and batch size it measures records/s of raw
//! `INSERT`s (one transaction per batch, no key, no index: the ceiling) and of
//! `LogStore::append` with the same batches, alternating three rounds of each on fresh
//! databases, and prints the medians and their ratio. A last table shows group commit:
//! `append_batches` of ten 10-record batches per transaction against raw 100-row transactions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durability::clock::SystemClock;
use durability::store::{AppendOutcome, LogStore, NewRecord, StoreOptions, SyncMode};

// The ceiling, shared with the suite (which also uses its range scan).
#[allow(dead_code)]
#[path = "suite/raw.rs"]
mod raw;

const ROUNDS: usize = 3;

fn main() {
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let budget = Duration::from_secs_f64(seconds);
    let root = tempfile::Builder::new()
        .prefix("durability-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let runs = std::cell::Cell::new(0);
    let fresh_path = || {
        runs.set(runs.get() + 1);
        root.path().join(format!("run-{}.sqlite", runs.get()))
    };

    println!(
        "LogStore append vs raw rusqlite inserts ({seconds} s per measurement, median of {ROUNDS})\n"
    );
    println!("| sync | payload | records/append | raw rows/s | LogStore records/s | ratio |");
    println!("|---|---|---|---|---|---|");
    for sync in [SyncMode::Full, SyncMode::Normal] {
        for payload_bytes in [100, 1024] {
            for batch_size in [1, 10, 100] {
                let batch = batch_of(batch_size, payload_bytes);
                let payload = batch[0].payload.as_json().unwrap();
                let (raw, store) = median_pair(
                    || raw::batched_inserts(&fresh_path(), batch_size, payload, sync, budget),
                    || store_appends(&fresh_path(), sync, &[&batch], budget),
                );
                print_row(sync, payload_bytes, &batch_size.to_string(), raw, store);
            }
        }
    }

    println!(
        "\nGroup commit: 10 batches of 10 records per transaction, against raw 100-row transactions\n"
    );
    println!("| sync | payload | batches × records | raw rows/s | LogStore records/s | ratio |");
    println!("|---|---|---|---|---|---|");
    for sync in [SyncMode::Full, SyncMode::Normal] {
        for payload_bytes in [100, 1024] {
            let batch = batch_of(10, payload_bytes);
            let group: Vec<&[NewRecord]> = vec![&batch; 10];
            let payload = batch[0].payload.as_json().unwrap();
            let (raw, store) = median_pair(
                || raw::batched_inserts(&fresh_path(), 100, payload, sync, budget),
                || store_appends(&fresh_path(), sync, &group, budget),
            );
            print_row(sync, payload_bytes, "10 × 10", raw, store);
        }
    }
}

fn print_row(sync: SyncMode, payload_bytes: usize, shape: &str, raw: f64, store: f64) {
    println!(
        "| {sync:?} | {payload_bytes} B | {shape} | {raw:.0} | {store:.0} | {:.2}× |",
        store / raw
    );
}

/// Runs the two measurements alternately and returns the median of each.
fn median_pair(mut raw: impl FnMut() -> f64, mut store: impl FnMut() -> f64) -> (f64, f64) {
    let mut raws = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..ROUNDS {
        raws.push(raw());
        stores.push(store());
    }
    (median(raws), median(stores))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Keyless records whose payload is a JSON string of exactly `payload_bytes` bytes.
fn batch_of(records: usize, payload_bytes: usize) -> Vec<NewRecord> {
    let payload = format!("\"{}\"", "x".repeat(payload_bytes - 2));
    vec![NewRecord::new(payload); records]
}

/// The log: `append` for one batch, `append_batches` (group commit) for several.
fn store_appends(
    path: &std::path::Path,
    sync: SyncMode,
    group: &[&[NewRecord]],
    budget: Duration,
) -> f64 {
    let options = StoreOptions::default()
        .sync(sync)
        .clock(Arc::new(SystemClock));
    let store = LogStore::open(path, options).unwrap();
    let mut records: u64 = 0;
    let started = Instant::now();
    while started.elapsed() < budget {
        let outcomes = store.append_batches(group).unwrap();
        for outcome in outcomes {
            let AppendOutcome::Appended { offsets } = outcome else {
                panic!("rejected: {outcome:?}")
            };
            records += offsets.len() as u64;
        }
    }
    records as f64 / started.elapsed().as_secs_f64()
}
