//! Cold leftovers across SIGKILL: kills while partitions trim continuously leave objects stored
//! but never indexed and partial temporary files; once the server is back and every partition
//! trimmed, nothing of them is left in the cold folder, and every partition still reads from
//! offset 0 to its end with no gap.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use super::records::{bounds, produce, read_all};
use super::{PARTITIONS, TOPIC, seed, start_server};
use crate::common::Rng;
use crate::common::process::request;

/// Kill/restart cycles of the leftovers test.
const TRIM_KILLS: usize = 8;

/// The locator of every segment indexed in the volumes of `data_dir` (the server is stopped).
fn indexed_locators(data_dir: &Path) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(data_dir).expect("the data folder") {
        let path = entry.expect("a data folder entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !(name.starts_with("volume-") && name.ends_with(".sqlite")) {
            continue;
        }
        let conn = rusqlite::Connection::open(&path).expect("open a volume");
        let mut statement = conn
            .prepare("SELECT locator FROM segments")
            .expect("the segment index");
        let rows = statement
            .query_map([], |row| row.get::<_, String>(0))
            .expect("read the segment index");
        found.extend(rows.map(|row| row.expect("a segment row")));
    }
    found
}

/// Every file under `cold`, as a path relative to it with `/` separators.
fn cold_files(cold: &Path) -> std::collections::BTreeSet<String> {
    crate::common::files_under(cold)
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| {
            let relative = path.strip_prefix(cold).expect("under the cold folder");
            relative.to_string_lossy().replace('\\', "/")
        })
        .collect()
}

/// SIGKILLs while partitions trim continuously (a hot window of 10 records, retention every
/// 5 ms, passes of at most 7 records) leave objects stored but never indexed and partial
/// temporary files; once the server is restarted and every partition trimmed, the cold folder
/// holds exactly the segments the index names and no temporary file, and every partition still
/// reads from offset 0 to its end with no gap.
#[test]
fn sigkills_during_trims_leave_no_cold_leftovers() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = [
        ("DURABILITY__RETENTION__MAX_RECORDS", "10"),
        ("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "5"),
        ("DURABILITY__LOG__MAX_BATCH_SIZE", "7"),
        ("DURABILITY__LEASES__ENABLED", "false"),
    ];
    let mut server = start_server(dir.path(), &settings);
    for cycle in 0..TRIM_KILLS {
        let addr = server.addr;
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..2)
            .map(|thread| {
                let stop = Arc::clone(&stop);
                let seed = rng.next();
                thread::spawn(move || produce(addr, cycle, thread, seed, &stop))
            })
            .collect();
        let run_ms = 100 + rng.below(300);
        thread::sleep(Duration::from_millis(run_ms));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for producer in producers {
            let report = producer.join().expect("a producer thread");
            assert!(
                report.problems.is_empty(),
                "seed {seed}, cycle {cycle}: {}",
                report.problems.join("\n")
            );
        }
        server = start_server(dir.path(), &settings);
    }

    let addr = server.addr;
    let mut problems = Vec::new();
    for partition in 0..PARTITIONS {
        let path = format!("/topics/{TOPIC}/partitions/{partition}/trim");
        match request(addr, "POST", &path, None) {
            Ok((200, _)) => {}
            Ok((status, body)) => problems.push(format!("trim {partition}: {status} {body}")),
            Err(err) => problems.push(format!("trim {partition}: {err}")),
        }
        match bounds(addr, partition) {
            Ok((_, _, next)) => {
                let readback = read_all(addr, partition, next, &mut problems);
                if readback.records.len() as u64 != next {
                    problems.push(format!(
                        "partition {partition}: {} records read below nextOffset {next}",
                        readback.records.len()
                    ));
                }
            }
            Err(err) => problems.push(err),
        }
    }
    server.kill();
    assert!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));

    let stored = cold_files(&dir.path().join("cold"));
    let indexed = indexed_locators(&dir.path().join("data"));
    assert!(!indexed.is_empty(), "nothing was flushed (seed {seed})");
    let is_temporary = |path: &&String| {
        let name = path.rsplit('/').next().unwrap_or_default();
        name.starts_with(".tmp-")
    };
    let temporaries: Vec<_> = stored.iter().filter(is_temporary).collect();
    let unindexed: Vec<_> = stored
        .difference(&indexed)
        .filter(|path| !is_temporary(path))
        .collect();
    let missing: Vec<_> = indexed.difference(&stored).collect();
    assert!(
        temporaries.is_empty() && unindexed.is_empty() && missing.is_empty(),
        "seed {seed}: {} temporary files left: {temporaries:?}; {} segments stored that no \
         index names: {unindexed:?}; {} indexed segments not stored: {missing:?}",
        temporaries.len(),
        unindexed.len(),
        missing.len()
    );
}
