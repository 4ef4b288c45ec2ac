//! The ceiling: what rusqlite alone does on this machine, with the same durability. Shared by
//! the suite and `benches/append.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use durability::store::SyncMode;
use rusqlite::{Connection, params};

/// Inserts `rows` rows per transaction of `payload` (WAL, SQLite's `synchronous` set to `sync`,
/// no key, no index but the primary key) for `budget`; answers rows per second.
pub fn batched_inserts(
    path: &Path,
    rows: usize,
    payload: &str,
    sync: SyncMode,
    budget: Duration,
) -> f64 {
    let mut conn = open(path, sync);
    conn.execute_batch(
        "CREATE TABLE records (offset INTEGER PRIMARY KEY, payload TEXT NOT NULL, appended_at INTEGER NOT NULL)",
    )
    .unwrap();
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

/// Writes `records` records of `payload` into a plain table at `path` (offset as primary key,
/// every column a record has), then reads them in pages of `page` records from offset 0, each
/// page in its own read transaction; answers records per second read.
pub fn range_scan(path: &Path, records: u64, payload: &str, page: u64) -> f64 {
    let mut conn = open(path, SyncMode::Normal);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (offset INTEGER PRIMARY KEY, dedup_key TEXT,
         payload TEXT NOT NULL, appended_at INTEGER NOT NULL)",
    )
    .unwrap();
    let present: u64 = conn
        .query_row("SELECT COUNT(*) FROM records", [], |row| row.get(0))
        .unwrap();
    if present < records {
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records VALUES (?1, NULL, ?2, 0)")
                .unwrap();
            for offset in present..records {
                insert.execute(params![offset, payload]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let started = Instant::now();
    let mut next = 0;
    let mut read = 0;
    while next < records {
        let tx = conn.transaction().unwrap();
        let rows: Vec<(u64, Option<String>, String, i64)> = tx
            .prepare_cached(
                "SELECT offset, dedup_key, payload, appended_at FROM records
                 WHERE offset >= ?1 ORDER BY offset LIMIT ?2",
            )
            .unwrap()
            .query_map(params![next, page], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        tx.commit().unwrap();
        read += rows.len() as u64;
        next = rows.last().map_or(records, |last| last.0 + 1);
    }
    read as f64 / started.elapsed().as_secs_f64()
}

fn open(path: &Path, sync: SyncMode) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .unwrap();
    let synchronous = match sync {
        SyncMode::Full => "FULL",
        SyncMode::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .unwrap();
    conn
}
