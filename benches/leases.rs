//! Lease → ack cycles next to plain read + commit of the same records, in the same run.
//!
//! Run: `cargo bench --bench leases` (set `BENCH_RECORDS` to change the record count, default
//! 20,000). For batches of 1, 10 and 100 records it measures how many records per second one
//! group consumes (a) by leasing a range and acking it, and (b) by reading a page and
//! committing its end, each on its own store holding the same records, `sync = full`.

use std::time::Instant;

use durability::store::{AppendOutcome, LeaseOutcome, LogStore, NewRecord, StoreOptions};

fn main() {
    let records: u64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let root = tempfile::Builder::new()
        .prefix("durability-bench-leases")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    actix::System::new().block_on(async move {
        println!("Consuming {records} records of 100 B with sync = full\n");
        println!("| records per batch | lease + ack records/s | read + commit records/s | ratio |");
        println!("|---|---|---|---|");
        for batch in [1u64, 10, 100] {
            // Fewer records for tiny batches: each cycle is two fsynced transactions.
            let count = if batch == 1 { records / 10 } else { records };
            let leased = filled(&root.path().join(format!("lease-{batch}.sqlite")), count);
            let read = filled(&root.path().join(format!("read-{batch}.sqlite")), count);

            let started = Instant::now();
            loop {
                match leased.lease("workers", Some(batch as usize)).await.unwrap() {
                    LeaseOutcome::Leased(lease) => {
                        leased.ack("workers", &lease.batch_id).unwrap();
                    }
                    LeaseOutcome::Idle => break,
                    LeaseOutcome::Exhausted(_) => unreachable!("no max_attempts"),
                }
            }
            let lease_rate = count as f64 / started.elapsed().as_secs_f64();
            assert_eq!(leased.cursor("workers").unwrap(), Some(count));

            let started = Instant::now();
            let mut next = 0;
            while next < count {
                let page = read.read(Some(next), Some(batch as usize)).await.unwrap();
                next = read.commit("readers", page.next_offset).unwrap();
            }
            let read_rate = count as f64 / started.elapsed().as_secs_f64();
            println!(
                "| {batch} | {lease_rate:.0} | {read_rate:.0} | {:.2}× |",
                lease_rate / read_rate
            );
        }
    });
}

fn filled(path: &std::path::Path, records: u64) -> LogStore {
    let store = LogStore::open(path, StoreOptions::default()).unwrap();
    let payload = format!("\"{}\"", "x".repeat(98));
    let batch: Vec<NewRecord> = vec![NewRecord::new(payload); 100];
    let mut appended = 0;
    while appended < records {
        let take = batch.len().min((records - appended) as usize);
        let AppendOutcome::Appended { offsets } = store.append(&batch[..take]).unwrap() else {
            panic!("rejected")
        };
        appended += offsets.len() as u64;
    }
    store
}
