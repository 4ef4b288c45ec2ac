//! The scrub finds damage nobody reads: a volume whose page was overwritten with its
//! neighbour's copy, or whose record was altered behind the log's back, is marked damaged by
//! the background scrub alone, with no read, and refuses writes; a healthy volume is checked
//! whole and left alone, also while appends and trims run beside the scrub.

use std::time::{Duration, Instant};

use durability::http::metrics::Metrics;
use durability::store::NewRecord;
use durability::{Config, Log};

use crate::common::TestLog;
use crate::damage::{
    altered_behind_the_log, append_keyed, copy_next_page_over, mark, page_before_its_successor,
};

const TOPIC: &str = "events";
/// The scrub interval of the tests that wait for a scrub: the first pass starts after it.
const SHORT_INTERVAL_MS: u64 = 50;
/// The longest wait for a scrub to find what it must.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until `done` holds, at most [`PATIENCE`]; `what` says what was awaited.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The value of the metric line `name` in `metrics`, rendered now.
fn metric(metrics: &Metrics, name: &str) -> u64 {
    let text = metrics.render();
    let line = text
        .lines()
        .find(|line| line.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Opens `config`'s log with a short scrub interval, reads nothing, and asserts that the
/// scrub marks volume 0 damaged with a cause holding `cause`, that appends then answer
/// `corrupted`, and that the damage is counted once.
async fn assert_scrub_finds(mut config: Config, cause: &str) {
    config.storage.scrub_interval_ms = SHORT_INTERVAL_MS;
    let data_dir = config.storage.data_dir.clone();
    let log = Log::open(config).unwrap();
    let metrics = Metrics::for_log(&log);
    eventually("the scrub marks the volume", || mark(&data_dir, 0).exists()).await;
    let recorded = std::fs::read_to_string(mark(&data_dir, 0)).unwrap();
    assert!(recorded.contains("the scrub found"), "{recorded}");
    assert!(recorded.contains(cause), "{recorded}");
    let refused = log.append(TOPIC, 0, vec![NewRecord::new("{}")]).await;
    let err = refused.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    assert!(err.to_string().contains("volume-0.sqlite"), "{err}");
    // Later passes leave the damaged volume alone: the damage is counted once.
    eventually("a pass after the damage ends", || {
        metric(&metrics, "durability_scrub_last_pass_seconds") > 0
    })
    .await;
    actix_web::rt::time::sleep(Duration::from_millis(5 * SHORT_INTERVAL_MS)).await;
    assert_eq!(metric(&metrics, "durability_scrub_damage_found_total"), 1);
    log.shutdown().await.unwrap();
}

/// A page overwritten with a copy of its neighbour (well formed, holding other rows: SQLite
/// reads through it, and reads skipped 17 to 19 records before they checked contiguity) is
/// found by the scrub before anyone reads it: in the middle of the file (records), and in the
/// lookup index, which only SQLite's `integrity_check` catches (not `quick_check`).
#[actix::test]
async fn a_page_copied_over_its_neighbour_is_found_without_a_read() {
    for table in ["records", "record_index"] {
        let t = TestLog::with(|config: &mut Config| {
            config.retention.max_records = 0;
            config.storage.scrub_interval_ms = 0;
        });
        append_keyed(&t.log, 0).await;
        t.log.shutdown().await.unwrap();
        let data_dir = &t.config.storage.data_dir;
        let at = page_before_its_successor(data_dir, 0, table);
        copy_next_page_over(data_dir, 0, at);
        let cause = match table {
            "records" => format!("page {}", at / 4096 + 1),
            _ => "record_index".to_owned(),
        };
        assert_scrub_finds(t.config.clone(), &cause).await;
    }
}

/// A payload altered inside the database (which SQLite cannot notice) is found by the scrub
/// alone: it fails its record's checksum, named in the mark.
#[actix::test]
async fn an_altered_payload_is_found_without_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = altered_behind_the_log(
        dir.path(),
        "UPDATE records SET payload = '\"HELLO\"' WHERE payload = '\"hello\"'",
    );
    assert_scrub_finds(
        config,
        "record 0 of partition events:0 failing its checksum",
    )
    .await;
}

/// A healthy volume of several partitions is checked whole, every record once per pass, and
/// nothing is found.
#[actix::test]
async fn a_healthy_volume_is_checked_whole_and_left_alone() {
    let t = TestLog::with(|config: &mut Config| {
        config.retention.max_records = 0;
        config.storage.scrub_interval_ms = 0;
    });
    for partition in 0..4 {
        append_keyed(&t.log, partition).await;
    }
    t.log.shutdown().await.unwrap();
    let mut config = t.config.clone();
    // Long enough that the counts are read before a second pass starts.
    config.storage.scrub_interval_ms = 2_000;
    let log = Log::open(config).unwrap();
    let metrics = Metrics::for_log(&log);
    eventually("a first pass ends", || {
        metric(&metrics, "durability_scrub_last_pass_seconds") > 0
    })
    .await;
    assert_eq!(
        metric(&metrics, "durability_scrub_records_checked_total"),
        4 * 3_000
    );
    assert!(metric(&metrics, "durability_scrub_pages_checked_total") > 0);
    assert_eq!(metric(&metrics, "durability_scrub_damage_found_total"), 0);
    assert!(!mark(&t.config.storage.data_dir, 0).exists());
    log.append(TOPIC, 0, vec![NewRecord::new("{}")])
        .await
        .unwrap();
    log.shutdown().await.unwrap();
}

/// Appends and trims running beside a scrub that never rests between passes are not taken
/// for damage: a trim between two chunks removes records the scrub read in the earlier one.
#[actix::test]
async fn appends_and_trims_beside_the_scrub_are_not_damage() {
    let t = TestLog::with(|config: &mut Config| {
        config.retention.max_records = 700;
        config.storage.scrub_interval_ms = 1;
    });
    let counters = t.log.scrub_counters();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(3) || counters.last_pass() == 0 {
        for partition in 0..3 {
            let records = (0..100)
                .map(|n| NewRecord::keyed(format!("k{round}-{n}"), "{\"n\":1}"))
                .collect();
            t.log.append(TOPIC, partition, records).await.unwrap();
            if round % 3 == partition {
                t.log.trim(TOPIC, partition).await.unwrap();
            }
        }
        round += 1;
        assert!(started.elapsed() < PATIENCE, "no pass ended");
    }
    assert_eq!(counters.damage_found(), 0);
    assert!(counters.records_checked() > 0);
    assert!(!mark(&t.config.storage.data_dir, 0).exists());
    t.log.shutdown().await.unwrap();
}
