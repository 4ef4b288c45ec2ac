//! Retention and the cold tier: trim throughput (records flushed per second) to a local folder
//! and to an S3-compatible server, and cold read-back next to hot reads of the same records,
//! measured in the same run.
//!
//! Run: `scripts/with-s3 cargo bench --bench cold` (starts a local S3 server; set
//! `BENCH_RECORDS` to change the record count, default 20,000 records of 100 B).

use std::sync::Arc;
use std::time::Instant;

use durability::cold::{ColdStore, FsColdStore, S3ColdStore, S3Settings};
use durability::store::{AppendOutcome, ColdTier, LogStore, NewRecord, Retention, StoreOptions};

fn main() {
    let records: u64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let endpoint = std::env::var("DURABILITY_TEST_S3_ENDPOINT")
        .expect("run with scripts/with-s3 so that an S3-compatible server is up");
    let root = tempfile::Builder::new()
        .prefix("durability-bench-cold")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    actix::System::new().block_on(async move {
        println!("Trim and cold read-back, {records} records of 100 B\n");
        println!("| cold store | records per segment | trim records/s | cold read records/s | hot read records/s | cold/hot |");
        println!("|---|---|---|---|---|---|");
        for segment_size in [100, 1000] {
            let fs: Arc<dyn ColdStore> = Arc::new(FsColdStore::new(root.path().join(format!("cold-{segment_size}"))));
            let s3: Arc<dyn ColdStore> = Arc::new(S3ColdStore::new(&s3_bucket(&endpoint, segment_size).await).unwrap());
            for (name, cold) in [("fs", fs), ("s3 (moto)", s3)] {
                let dir = root.path().join(format!("{name}-{segment_size}").replace(' ', ""));
                let row = measure(&dir, cold, records, segment_size).await;
                println!(
                    "| {name} | {segment_size} | {:.0} | {:.0} | {:.0} | {:.2}× |",
                    row.trim, row.cold_read, row.hot_read, row.cold_read / row.hot_read
                );
            }
        }
    });
}

struct Row {
    trim: f64,
    cold_read: f64,
    hot_read: f64,
}

async fn measure(
    dir: &std::path::Path,
    cold: Arc<dyn ColdStore>,
    records: u64,
    segment_size: usize,
) -> Row {
    std::fs::create_dir_all(dir).unwrap();
    let options = StoreOptions::default().max_batch_size(segment_size);
    let tier = ColdTier {
        store: cold,
        prefix: "segments".into(),
        topic: "bench".into(),
        partition: 0,
    };
    let trimmed = LogStore::open(
        dir.join("trimmed.sqlite"),
        options
            .clone()
            .retention(Retention {
                max_records: Some(1),
                ..Retention::default()
            })
            .cold(tier),
    )
    .unwrap();
    let hot = LogStore::open(dir.join("hot.sqlite"), options).unwrap();
    fill(&trimmed, records, segment_size);
    fill(&hot, records, segment_size);

    let started = Instant::now();
    let removed = trimmed.trim().await.unwrap();
    let trim = removed as f64 / started.elapsed().as_secs_f64();
    assert_eq!(removed, records - 1);

    Row {
        trim,
        cold_read: read_all(&trimmed, removed).await,
        hot_read: read_all(&hot, removed).await,
    }
}

fn fill(store: &LogStore, records: u64, batch: usize) {
    let payload = format!("\"{}\"", "x".repeat(98));
    let batch: Vec<NewRecord> = vec![NewRecord::new(payload); batch];
    let mut appended = 0;
    while appended < records {
        let take = batch.len().min((records - appended) as usize);
        let AppendOutcome::Appended { offsets } = store.append(&batch[..take]).unwrap() else {
            panic!("rejected")
        };
        appended += offsets.len() as u64;
    }
}

/// Reads `count` records from offset 0 page by page; returns records per second.
async fn read_all(store: &LogStore, count: u64) -> f64 {
    let started = Instant::now();
    let mut next = 0;
    while next < count {
        let page = store.read(Some(next), None).await.unwrap();
        next = page.next_offset;
    }
    next as f64 / started.elapsed().as_secs_f64()
}

async fn s3_bucket(endpoint: &str, segment_size: usize) -> S3Settings {
    let settings = S3Settings {
        endpoint: endpoint.to_owned(),
        bucket: format!("bench-{}-{segment_size}", std::process::id()),
        region: "eu-central-1".into(),
        access_key: "bench".into(),
        secret_key: "bench".into(),
        path_style: true,
    };
    s3::Bucket::create_with_path_style(
        &settings.bucket,
        settings.region().unwrap(),
        settings.credentials().unwrap(),
        s3::BucketConfiguration::default(),
    )
    .await
    .unwrap();
    settings
}
