//! The log embedded in this process: typed messages to partition actors, and `Log` calls.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::Addr;
use durability::config::ColdKind;
use durability::partition::{Append, PartitionActor, Read};
use durability::store::{NewRecord, SyncMode};
use durability::{Config, Log};

/// The topic every measurement writes.
pub const TOPIC: &str = "bench";

/// A durable (`sync = full`) log in `dir` with `partitions` per topic, no retention limit and
/// no cold tier.
pub fn config(dir: &Path, partitions: u32) -> Config {
    let mut config = Config::default();
    config.storage.data_dir = dir.join("data");
    config.storage.sync = SyncMode::Full;
    config.cold.kind = ColdKind::None;
    config.log.partitions_per_topic = partitions;
    config.retention.max_age_ms = 0;
    config.retention.max_bytes = 0;
    config
}

/// The addresses of partitions `0..partitions` of the bench topic (started).
pub async fn actors(log: &Log, partitions: u32) -> Vec<Addr<PartitionActor>> {
    let mut actors = Vec::new();
    for partition in 0..partitions {
        actors.push(log.partition_actor(TOPIC, partition).await.unwrap());
    }
    actors
}

/// `producers` tasks, each sending single-record [`Append`]s round-robin over `actors` and
/// awaiting every answer (closed loop), for `budget`; answers appends per second.
pub async fn closed_loop_appends(
    actors: &[Addr<PartitionActor>],
    producers: usize,
    payload: &str,
    budget: Duration,
) -> f64 {
    let appended = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..producers)
        .map(|producer| {
            let actor = actors[producer % actors.len()].clone();
            let appended = appended.clone();
            let record = NewRecord::new(payload);
            actix::spawn(async move {
                while started.elapsed() < budget {
                    let answer = actor
                        .send(Append {
                            records: vec![record.clone()],
                        })
                        .await
                        .unwrap()
                        .unwrap();
                    assert!(answer.outcome.is_appended());
                    appended.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    appended.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Appends/s of `producers` single-record producers on `partitions` partitions.
pub fn producers(
    dir: PathBuf,
    partitions: u32,
    producers: usize,
    payload: &str,
    budget: Duration,
) -> f64 {
    let payload = payload.to_owned();
    actix::System::new().block_on(async move {
        let log = Log::open(config(&dir, partitions)).unwrap();
        let actors = actors(&log, partitions).await;
        let rate = closed_loop_appends(&actors, producers, &payload, budget).await;
        log.shutdown().await.unwrap();
        rate
    })
}

/// Appends `records` records to partition 0 in batches of 100 from 8 concurrent senders.
pub async fn fill(actor: &Addr<PartitionActor>, records: u64, payload: &str) {
    let next = Arc::new(AtomicU64::new(0));
    let batch = vec![NewRecord::new(payload); 100];
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (actor, next, batch) = (actor.clone(), next.clone(), batch.clone());
            actix::spawn(async move {
                loop {
                    let first = next.fetch_add(100, Ordering::Relaxed);
                    if first >= records {
                        break;
                    }
                    let take = (records - first).min(100) as usize;
                    let answer = actor
                        .send(Append {
                            records: batch[..take].to_vec(),
                        })
                        .await
                        .unwrap()
                        .unwrap();
                    assert!(answer.outcome.is_appended());
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
}

/// Reads `count` records from offset 0 in pages of 100 through [`Read`]; records per second.
pub async fn sequential_reads(actor: &Addr<PartitionActor>, count: u64) -> f64 {
    let started = Instant::now();
    let mut next = 0;
    while next < count {
        let page = actor
            .send(Read {
                from: Some(next),
                limit: Some(100),
            })
            .await
            .unwrap()
            .unwrap();
        next = page.next_offset;
    }
    next as f64 / started.elapsed().as_secs_f64()
}

/// Reads pages of 100 at random offsets below `records` for `budget`; records per second.
pub async fn random_reads(actor: &Addr<PartitionActor>, records: u64, budget: Duration) -> f64 {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let started = Instant::now();
    let mut read = 0;
    while started.elapsed() < budget {
        // xorshift: cheap and reproducible
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let from = seed % records.saturating_sub(100).max(1);
        let page = actor
            .send(Read {
                from: Some(from),
                limit: Some(100),
            })
            .await
            .unwrap()
            .unwrap();
        read += page.records.len() as u64;
    }
    read as f64 / started.elapsed().as_secs_f64()
}

/// Reads in pages of 100 through the actor, then the same pages with raw rusqlite on the same
/// database file: (log records/s, raw records/s).
pub fn reads(dir: PathBuf, payload: &str) -> (f64, f64) {
    const RECORDS: u64 = 100_000;
    let payload_for_raw = payload.to_owned();
    let payload = payload.to_owned();
    let dir_for_log = dir.clone();
    let rate = actix::System::new().block_on(async move {
        let log = Log::open(config(&dir_for_log, 1)).unwrap();
        let actor = log.partition_actor(TOPIC, 0).await.unwrap();
        fill(&actor, RECORDS, &payload).await;
        // Best of three passes for both, so a page-cache warm-up counts for neither.
        let mut best: f64 = 0.0;
        for _ in 0..3 {
            best = best.max(sequential_reads(&actor, RECORDS).await);
        }
        log.shutdown().await.unwrap();
        best
    });
    let file = dir.join("raw-scan.sqlite");
    let raw = (0..3)
        .map(|_| super::raw::range_scan(&file, RECORDS, &payload_for_raw, 100))
        .fold(0.0, f64::max);
    (rate, raw)
}

/// One group leasing batches of 100 and acking each; records per second.
pub fn lease_ack(dir: PathBuf, payload: &str) -> f64 {
    const RECORDS: u64 = 50_000;
    let payload = payload.to_owned();
    actix::System::new().block_on(async move {
        let log = Log::open(config(&dir, 1)).unwrap();
        let actor = log.partition_actor(TOPIC, 0).await.unwrap();
        fill(&actor, RECORDS, &payload).await;
        let started = Instant::now();
        let mut consumed = 0;
        while let Some(lease) = log.lease(TOPIC, 0, "workers", Some(100)).await.unwrap() {
            consumed += lease.records.len() as u64;
            log.ack(TOPIC, 0, "workers", &lease.batch_id).await.unwrap();
        }
        let rate = consumed as f64 / started.elapsed().as_secs_f64();
        assert_eq!(consumed, RECORDS);
        log.shutdown().await.unwrap();
        rate
    })
}

/// Records flushed to a local cold folder and read back through `Log::read`, next to hot
/// reads of the same records: (cold records/s, hot records/s).
pub fn cold_read_back(dir: PathBuf, payload: &str) -> (f64, f64) {
    const RECORDS: u64 = 50_000;
    let payload = payload.to_owned();
    actix::System::new().block_on(async move {
        let mut cold_config = config(&dir, 1);
        cold_config.cold.kind = ColdKind::Fs;
        cold_config.cold.dir = dir.join("cold");
        cold_config.retention.max_records = 1;
        let log = Log::open(cold_config).unwrap();
        let trimmed = log.partition_actor(TOPIC, 0).await.unwrap();
        fill(&trimmed, RECORDS, &payload).await;
        let flushed = log.trim(TOPIC, 0).await.unwrap();
        assert_eq!(flushed, RECORDS - 1);
        let cold = read_all(&log, 0, flushed).await;

        // The same records, still hot, in a log without retention.
        let hot_dir = dir.join("hot");
        let hot_log = Log::open(config(&hot_dir, 1)).unwrap();
        let hot_actor = hot_log.partition_actor(TOPIC, 0).await.unwrap();
        fill(&hot_actor, RECORDS, &payload).await;
        let hot = read_all(&hot_log, 0, flushed).await;
        log.shutdown().await.unwrap();
        hot_log.shutdown().await.unwrap();
        (cold, hot)
    })
}

async fn read_all(log: &Log, partition: u32, count: u64) -> f64 {
    let started = Instant::now();
    let mut next = 0;
    while next < count {
        next = log
            .read(TOPIC, partition, Some(next), Some(100))
            .await
            .unwrap()
            .next_offset;
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// Resident memory of this process, in MiB: (private, file-backed). Private memory is what
/// the process owns; file-backed pages are database pages mapped by the readers, which are the
/// OS page cache's and reclaimable.
pub fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// One point of the cost-growth measurement.
pub struct ScalePoint {
    pub records: u64,
    pub append_rate: f64,
    pub read_rate: f64,
    /// Private resident memory.
    pub rss_mib: f64,
    /// Mapped database pages resident.
    pub mapped_mib: f64,
}

/// Grows one partition through `sizes` records; at each size measures 50 single-record
/// producers and random reads of pages of 100, and resident memory.
pub fn scale(dir: PathBuf, sizes: &[u64], payload: &str, budget: Duration) -> Vec<ScalePoint> {
    let payload = payload.to_owned();
    let sizes = sizes.to_vec();
    actix::System::new().block_on(async move {
        let log = Log::open(config(&dir, 1)).unwrap();
        let actor = log.partition_actor(TOPIC, 0).await.unwrap();
        let mut points = Vec::new();
        for records in sizes {
            let bounds = log.bounds(TOPIC, 0).await.unwrap();
            if records > bounds.next_offset {
                fill(&actor, records - bounds.next_offset, &payload).await;
                // The fill's writeback must not slow the measurement's fsyncs.
                let _ = std::process::Command::new("sync").status();
            }
            let append_rate =
                closed_loop_appends(std::slice::from_ref(&actor), 50, &payload, budget).await;
            let read_rate = random_reads(&actor, records, budget).await;
            eprintln!("  {records} records: {append_rate:.0} appends/s, {read_rate:.0} reads/s");
            let (rss_mib, mapped_mib) = rss_mib();
            points.push(ScalePoint {
                records,
                append_rate,
                read_rate,
                rss_mib,
                mapped_mib,
            });
        }
        log.shutdown().await.unwrap();
        points
    })
}
