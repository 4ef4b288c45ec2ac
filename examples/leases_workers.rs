//! Several workers share one consumer group through leases: each holds a distinct range of
//! offsets, acks it when done, and the group's cursor advances over contiguous acked ranges.
//!
//! Run: `cargo run --example leases_workers`

use std::time::Duration;

use durability::store::NewRecord;
use durability::{Config, Log};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.storage.data_dir = dir.path().join("data");
    config.cold.dir = dir.path().join("cold");
    config.leases.max_parallelism = 3;
    let log = Log::open(config)?;

    let jobs: Vec<NewRecord> = (0..30)
        .map(|n| NewRecord::new(format!(r#"{{"job":{n}}}"#)))
        .collect();
    log.append("jobs", 0, jobs).await?;

    let workers: Vec<_> = (0..3)
        .map(|worker| {
            let log = log.clone();
            actix::spawn(async move {
                let mut done = 0;
                loop {
                    match log.lease("jobs", 0, "workers", Some(4)).await? {
                        Some(lease) => {
                            // ... process lease.records ...
                            actix::clock::sleep(Duration::from_millis(5)).await;
                            done += lease.records.len();
                            println!(
                                "worker {worker}: offsets {}..={} (attempt {})",
                                lease.first_offset, lease.last_offset, lease.attempt
                            );
                            log.ack("jobs", 0, "workers", &lease.batch_id).await?;
                        }
                        None if log.cursor("jobs", 0, "workers").await? == Some(30) => break,
                        None => actix::clock::sleep(Duration::from_millis(2)).await,
                    }
                }
                Ok::<usize, durability::Error>(done)
            })
        })
        .collect();
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    println!(
        "processed {total} jobs; the group's cursor is {:?}",
        log.cursor("jobs", 0, "workers").await?
    );
    log.shutdown().await?;
    Ok(())
}
