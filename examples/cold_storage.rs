//! Retention flushes old records to a local folder (the cold tier) and a late reader is served
//! from it transparently, across segments and into the hot window.
//!
//! Run: `cargo run --example cold_storage`

use std::time::Duration;

use durability::config::ColdKind;
use durability::store::NewRecord;
use durability::{Config, Log};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.storage.data_dir = dir.path().join("data");
    config.cold.kind = ColdKind::Fs;
    config.cold.dir = dir.path().join("cold");
    config.retention.max_records = 5; // keep only 5 records hot
    config.retention.sweep_interval_ms = 50; // and check often
    config.log.max_batch_size = 10; // segments of at most 10 records
    let log = Log::open(config)?;

    for batch in 0..4 {
        let records = (0..10)
            .map(|n| NewRecord::new(format!(r#"{{"n":{}}}"#, batch * 10 + n)))
            .collect();
        log.append("metrics", 0, records).await?;
    }
    // The retention timer runs by itself; wait until it has flushed everything but 5 records.
    while log.bounds("metrics", 0).await?.hot_offset < 35 {
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
    let bounds = log.bounds("metrics", 0).await?;
    println!(
        "bounds: oldest {} hot {} next {}",
        bounds.oldest_offset, bounds.hot_offset, bounds.next_offset
    );

    // A late reader starts at 0: pages come from the segments in the folder, then the hot window.
    let mut next = 0;
    while next < bounds.next_offset {
        let page = log.read("metrics", 0, Some(next), None).await?;
        let source = if next < bounds.hot_offset {
            "cold"
        } else {
            "hot"
        };
        println!(
            "read {} records from offset {next} ({source})",
            page.records.len()
        );
        next = page.next_offset;
    }
    let segments = std::fs::read_dir(dir.path().join("cold/segments/metrics/0"))?.count();
    println!(
        "{segments} segment files under {}",
        dir.path().join("cold").display()
    );
    log.shutdown().await?;
    Ok(())
}
