//! Durable appends through typed messages to partition actors, next to raw rusqlite batched
//! inserts measured in the same run; and reads in pages of 100.
//!
//! Run: `cargo bench --bench actors` (set `BENCH_SECONDS` to change the time per measurement,
//! default 2). Producers are actix tasks, each sending single 100-byte records
//! (`partition::Append`) and awaiting each answer, so durability is per record (`sync = full`).
//! Group commit is what lets many of them share one fsync.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use durability::partition::{Append, Read};
use durability::store::{NewRecord, SyncMode};
use durability::{Config, Log};
use rusqlite::{Connection, params};

fn payload() -> String {
    format!("\"{}\"", "x".repeat(98))
}

fn main() {
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let budget = Duration::from_secs_f64(seconds);
    let root = tempfile::Builder::new()
        .prefix("durability-bench-actors")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();

    // `BENCH_CASE=50x1` runs only 50 producers on 1 partition (for profiling).
    let only = std::env::var("BENCH_CASE").ok();
    let raw_budget = if only.is_some() {
        Duration::from_millis(10)
    } else {
        budget
    };
    let raw = raw_batched_inserts(&root.path().join("raw.sqlite"), 100, raw_budget);
    let raw_50 = raw_batched_inserts(&root.path().join("raw-50.sqlite"), 50, raw_budget);
    println!(
        "Durable (sync = full) single-record appends of 100 B through typed messages, {seconds} s each\n"
    );
    println!("raw rusqlite, 100 rows per transaction (the ceiling): {raw:.0} rows/s");
    println!(
        "raw rusqlite, 50 rows per transaction (one row per producer of the 50): {raw_50:.0} rows/s\n"
    );
    println!(
        "| producers | partitions | appends/s | appends per commit (partition 0) | vs raw 100-row | vs raw 50-row |"
    );
    println!("|---|---|---|---|---|---|");
    let mut run = 0;
    for partitions in [1u32, 8] {
        for producers in [1usize, 8, 50] {
            run += 1;
            if only
                .as_ref()
                .is_some_and(|only| *only != format!("{producers}x{partitions}"))
            {
                continue;
            }
            let dir = root.path().join(format!("log-{run}"));
            let (rate, grouped) =
                actix::System::new().block_on(appends(dir, partitions, producers, budget));
            println!(
                "| {producers} | {partitions} | {rate:.0} | {grouped:.1} | {:.2}× | {:.2}× |",
                rate / raw,
                rate / raw_50
            );
        }
    }
    let dir = root.path().join("reads");
    let (records, rate) = actix::System::new().block_on(reads(dir));
    println!(
        "\nReads through `partition::Read`, pages of 100: {rate:.0} records/s ({records} records)"
    );
}

fn config(dir: std::path::PathBuf, partitions: u32) -> Config {
    let mut config = Config::default();
    config.storage.data_dir = dir.join("data");
    config.storage.sync = SyncMode::Full;
    config.cold.kind = durability::config::ColdKind::None;
    config.log.partitions_per_topic = partitions;
    config
}

/// Appends per second, and the average number of appends per commit on partition 0.
async fn appends(
    dir: std::path::PathBuf,
    partitions: u32,
    producers: usize,
    budget: Duration,
) -> (f64, f64) {
    let log = Log::open(config(dir, partitions)).unwrap();
    let mut actors = Vec::new();
    for partition in 0..partitions {
        actors.push(log.partition_actor("bench", partition).await.unwrap());
    }
    let appended = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|producer| {
            let actor = actors[producer % actors.len()].clone();
            let appended = appended.clone();
            actix::spawn(async move {
                let record = NewRecord::new(payload());
                while started.elapsed() < budget {
                    actor
                        .send(Append {
                            records: vec![record.clone()],
                        })
                        .await
                        .unwrap()
                        .unwrap();
                    appended.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let rate = appended.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    let stats = log.stats("bench", 0).await.unwrap();
    let grouped = stats.appends as f64 / stats.commits.max(1) as f64;
    log.shutdown().await.unwrap();
    (rate, grouped)
}

async fn reads(dir: std::path::PathBuf) -> (u64, f64) {
    const RECORDS: u64 = 100_000;
    let log = Log::open(config(dir, 1)).unwrap();
    let actor = log.partition_actor("bench", 0).await.unwrap();
    let batch = vec![NewRecord::new(payload()); 100];
    for _ in 0..RECORDS / 100 {
        actor
            .send(Append {
                records: batch.clone(),
            })
            .await
            .unwrap()
            .unwrap();
    }
    let started = Instant::now();
    let mut next = 0;
    while next < RECORDS {
        next = actor
            .send(Read {
                from: Some(next),
                limit: Some(100),
            })
            .await
            .unwrap()
            .unwrap()
            .next_offset;
    }
    let rate = RECORDS as f64 / started.elapsed().as_secs_f64();
    log.shutdown().await.unwrap();
    (RECORDS, rate)
}

/// The ceiling: `rows` per transaction, no index but the primary key, `synchronous = FULL`.
fn raw_batched_inserts(path: &std::path::Path, rows: usize, budget: Duration) -> f64 {
    let mut conn = Connection::open(path).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE records (offset INTEGER PRIMARY KEY, payload TEXT NOT NULL, appended_at INTEGER NOT NULL)").unwrap();
    let payload = payload();
    let mut offset: u64 = 0;
    let started = Instant::now();
    while started.elapsed() < budget {
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records VALUES (?1, ?2, ?3)")
                .unwrap();
            for _ in 0..rows {
                insert.execute(params![offset, payload, 0]).unwrap();
                offset += 1;
            }
        }
        tx.commit().unwrap();
    }
    offset as f64 / started.elapsed().as_secs_f64()
}
