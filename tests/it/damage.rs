//! Damaged files fail loudly and stay read-only: a volume that lost acknowledged commits (its
//! WAL deleted, its database emptied) or that SQLite finds malformed refuses writes with
//! `corrupted` instead of handing out offsets again, across restarts too, until an operator
//! accepts the damage; other volumes go on. A volume that lost commits serves only what intact
//! cold segments hold.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use durability::store::{AppendOutcome, NewRecord};
use durability::{Config, Error, Log};

use crate::common::TestLog;
use crate::common::process::{Server, request};

const TOPIC: &str = "events";

/// Volume `index`'s database file in `data_dir`.
pub(crate) fn volume(data_dir: &Path, index: usize) -> PathBuf {
    data_dir.join(format!("volume-{index}.sqlite"))
}

/// The high-water mark the volume recorded beside itself (0 when none yet).
fn high_water(data_dir: &Path, index: usize) -> i64 {
    let mut path = volume(data_dir, index).into_os_string();
    path.push("-hwm");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Appends `count` records to `partition`; answers the offsets.
async fn append(log: &Log, partition: u32, count: usize) -> Result<Vec<u64>, Error> {
    let records = (0..count)
        .map(|n| NewRecord::new(format!("{{\"n\":{n},\"text\":\"{}\"}}", "x".repeat(200))))
        .collect();
    match log.append(TOPIC, partition, records).await?.outcome {
        AppendOutcome::Appended { offsets } => Ok(offsets),
        AppendOutcome::Rejected(rejection) => panic!("refused: {rejection}"),
    }
}

/// Waits until volume `index` has recorded at least `seq` commits as its high-water mark.
async fn await_high_water(data_dir: &Path, index: usize, seq: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while high_water(data_dir, index) < seq {
        assert!(
            Instant::now() < deadline,
            "no high-water mark {seq} recorded"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix::test]
async fn a_volume_that_lost_its_write_ahead_log_refuses_writes_and_reuses_no_offset() {
    let t = TestLog::with(|config| config.storage.volumes = 2);
    let data_dir = t.config.storage.data_dir.clone();
    for partition in 0..8 {
        assert_eq!(append(&t.log, partition, 10).await.unwrap()[9], 9);
    }
    await_high_water(&data_dir, 0, 1).await;
    await_high_water(&data_dir, 1, 1).await;
    // A crash that loses volume 0's WAL: the database file alone, which holds none of the
    // commits yet (no checkpoint ran); volume 1 keeps its WAL.
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("data");
    std::fs::create_dir_all(&copied).unwrap();
    for name in [
        "volume-0.sqlite",
        "volume-0.sqlite-hwm",
        "volume-1.sqlite",
        "volume-1.sqlite-wal",
        "volume-1.sqlite-hwm",
    ] {
        std::fs::copy(data_dir.join(name), copied.join(name)).unwrap();
    }
    t.log.shutdown().await.unwrap();

    let mut config = t.config.clone();
    config.storage.data_dir = copied.clone();
    let log = Log::open(config).unwrap();
    let (mut refused, mut continued) = (0, 0);
    for partition in 0..8 {
        match append(&log, partition, 1).await {
            Err(err) => {
                assert_eq!(err.code(), "corrupted", "{err}");
                let message = err.to_string();
                assert!(message.contains("volume-0.sqlite"), "{message}");
                refused += 1;
            }
            Ok(offsets) => {
                assert_eq!(offsets, [10], "partition {partition} continues its log");
                continued += 1;
            }
        }
    }
    assert!(
        refused > 0 && continued > 0,
        "{refused} refused, {continued} continued"
    );
    log.shutdown().await.unwrap();
}

/// A WAL lost after a kill under load, with no pause before it (so no idle moment recorded
/// the high-water mark): 500 records, a clean restart, 500 more, and at once a copy of the
/// files without the WAL, as a kill that loses it leaves them. The volume reports the loss;
/// it does not read as a log of 500.
#[actix::test]
async fn a_write_ahead_log_lost_right_after_appends_is_reported_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_tests(dir.path());
    let data_dir = config.storage.data_dir.clone();
    in_own_process(&config, |log| async move {
        for _ in 0..5 {
            append(&log, 0, 100).await.unwrap();
        }
    });
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("data");
    std::fs::create_dir_all(&copied).unwrap();
    in_own_process(&config, {
        let copied = copied.clone();
        move |log| async move {
            for _ in 0..5 {
                append(&log, 0, 100).await.unwrap();
            }
            for name in ["volume-0.sqlite", "volume-0.sqlite-hwm"] {
                std::fs::copy(data_dir.join(name), copied.join(name)).unwrap();
            }
        }
    });

    let mut config = config.clone();
    config.storage.data_dir = copied;
    let log = Log::open(config).unwrap();
    let err = log.bounds(TOPIC, 0).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    let err = append(&log, 0, 1).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    log.shutdown().await.unwrap();
}

/// The same with the server's process: 500 records, a clean restart, 500 more and at once a
/// `kill -9`, the WAL deleted, a restart: the bounds answer `500 corrupted`, not a
/// `nextOffset` of 500.
#[test]
fn a_busy_server_killed_and_its_write_ahead_log_lost_reports_the_loss() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let env = [("DURABILITY__STORAGE__VOLUMES", "1")];
    let post = |server: &Server| {
        let records: Vec<serde_json::Value> = (0..100)
            .map(|n| serde_json::json!({"payload": {"n": n}}))
            .collect();
        let path = format!("/topics/{TOPIC}/partitions/0/records");
        let (status, body) = request(server.addr, "POST", &path, Some(&records.into())).unwrap();
        assert_eq!(status, 202, "{body}");
    };
    let mut server = Server::start(&data_dir, env);
    (0..5).for_each(|_| post(&server));
    server.signal("TERM");
    assert!(server.wait_for_exit(Duration::from_secs(30)).is_some());
    let mut server = Server::start(&data_dir, env);
    (0..5).for_each(|_| post(&server));
    server.kill();
    std::fs::remove_file(data_dir.join("volume-0.sqlite-wal")).unwrap();

    let server = Server::start(&data_dir, env);
    let bounds = format!("/topics/{TOPIC}/partitions/0/bounds");
    let (status, body) = request(server.addr, "GET", &bounds, None).unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (500, Some("corrupted")),
        "{body}"
    );
}

/// Runs `work` on a log over `config` in an actix system of its own, which ends with it: the
/// log's files are closed afterwards, as when a server process exits.
fn in_own_process<F, Fut>(config: &Config, work: F)
where
    F: FnOnce(Log) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let config = config.clone();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let log = Log::open(config).unwrap();
            work(log.clone()).await;
            log.shutdown().await.unwrap();
        });
    })
    .join()
    .unwrap();
}

#[actix::test]
async fn an_emptied_database_file_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_tests(dir.path());
    let data_dir = config.storage.data_dir.clone();
    in_own_process(&config, {
        let data_dir = data_dir.clone();
        move |log| async move {
            append(&log, 0, 100).await.unwrap();
            await_high_water(&data_dir, 0, 100).await;
        }
    });
    std::fs::File::create(volume(&data_dir, 0)).unwrap();

    let log = Log::open(config).unwrap();
    let err = append(&log, 0, 1).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    let again = append(&log, 3, 1).await.unwrap_err();
    assert_eq!(
        again.code(),
        "corrupted",
        "a damaged volume stays read-only"
    );
    log.shutdown().await.unwrap();
}

#[actix::test]
async fn a_clean_restart_is_not_damage() {
    let t = TestLog::with(|_| {});
    let data_dir = t.config.storage.data_dir.clone();
    append(&t.log, 0, 50).await.unwrap();
    await_high_water(&data_dir, 0, 50).await;
    t.log.shutdown().await.unwrap();
    for round in 1..=3 {
        let log = Log::open(t.config.clone()).unwrap();
        let offsets = append(&log, 0, 50).await.unwrap();
        assert_eq!(offsets[0], 50 * round);
        log.shutdown().await.unwrap();
    }
}

#[actix::test]
async fn a_malformed_page_fails_reads_then_writes_and_is_remembered_across_restarts() {
    let t = TestLog::with(|config: &mut Config| config.retention.max_records = 0);
    for _ in 0..30 {
        append(&t.log, 0, 100).await.unwrap();
    }
    t.log.shutdown().await.unwrap();
    // Shutting down checkpointed everything into the database file; overwrite a page in its
    // middle.
    let path = volume(&t.config.storage.data_dir, 0);
    let length = std::fs::metadata(&path).unwrap().len();
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(length / 2 / 4096 * 4096))
        .unwrap();
    file.write_all(&[0xFF; 4096]).unwrap();
    file.sync_all().unwrap();
    drop(file);

    let log = Log::open(t.config.clone()).unwrap();
    let mut failed = None;
    let mut from = 0;
    while from < 3_000 {
        match log.read(TOPIC, 0, Some(from), Some(100)).await {
            Ok(page) => from = page.next_offset.max(from + 1),
            Err(err) => {
                failed = Some(err);
                break;
            }
        }
    }
    let err = failed.expect("a read met the malformed page");
    assert_eq!(err.code(), "corrupted", "{err}");
    let err = append(&log, 0, 1).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    log.shutdown().await.unwrap();

    // Remembered: after a restart the volume refuses writes though nothing read the bad page.
    assert!(
        mark(&t.config.storage.data_dir, 0).exists(),
        "the damage is recorded"
    );
    for restart in 0..2 {
        let log = Log::open(t.config.clone()).unwrap();
        let err = append(&log, 1, 1).await.unwrap_err();
        assert_eq!(err.code(), "corrupted", "restart {restart}: {err}");
        assert!(err.to_string().contains("volume-0.sqlite"), "{err}");
        log.shutdown().await.unwrap();
    }
}

/// A trim never copies an altered record to the cold tier: the flush fails `corrupted` before
/// anything is stored, and the record stays where it was.
#[actix::test]
async fn a_trim_refuses_to_flush_an_altered_record() {
    trim_refused("UPDATE records SET dedup_key = 'forged' WHERE offset = 0").await;
}

/// Nor does it flush records around a hole (a row the database lost): a segment is whole.
#[actix::test]
async fn a_trim_never_flushes_a_segment_with_a_hole() {
    let err = trim_refused("DELETE FROM records WHERE offset = 1").await;
    assert!(err.to_string().contains("record 1 "), "{err}");
}

/// A trim of partition 0 past all but its newest record, to a folder cold tier, after
/// `alteration` ran behind the log's back: it fails `corrupted` (answered) and nothing reached
/// the cold tier.
async fn trim_refused(alteration: &str) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let mut config = altered_behind_the_log(dir.path(), alteration);
    config.retention.max_records = 1;
    config.cold.kind = durability::config::ColdKind::Fs;
    let cold_dir = config.cold.dir.clone();
    let log = Log::open(config).unwrap();
    let err = log.trim(TOPIC, 0).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
    let stored = walk(&cold_dir);
    assert!(
        stored.is_empty(),
        "nothing reached the cold tier: {stored:?}"
    );
    log.shutdown().await.unwrap();
    err
}

/// The configuration of a log in `dir` whose partition 0 holds `"hello"`, `"world"` and
/// `"!"`, and whose database then had `alteration` (changing one row) run on it behind the
/// log's back.
pub(crate) fn altered_behind_the_log(dir: &std::path::Path, alteration: &str) -> Config {
    let config = Config::for_tests(dir);
    in_own_process(&config, |log| async move {
        let records = ["\"hello\"", "\"world\"", "\"!\""]
            .map(NewRecord::new)
            .to_vec();
        log.append(TOPIC, 0, records).await.unwrap();
    });
    let conn = rusqlite::Connection::open(volume(&config.storage.data_dir, 0)).unwrap();
    assert_eq!(conn.execute(alteration, []).unwrap(), 1, "{alteration}");
    config
}

/// Every file under `dir` (none when it does not exist).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

/// The partitions stored in volume `index` of `topic`.
fn partitions_in(data_dir: &Path, index: usize, topic: &str) -> Vec<u32> {
    let conn = rusqlite::Connection::open(volume(data_dir, index)).unwrap();
    let mut statement = conn
        .prepare("SELECT partition FROM partitions WHERE topic = ?1 ORDER BY partition")
        .unwrap();
    statement
        .query_map([topic], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A volume that cannot be opened at all (its header overwritten) does not stop the log: the
/// partitions of the other volumes serve on, while its own answer `corrupted`, and so does a
/// partition found in no volume that opened (it may be stored in the damaged one), which is
/// never created anew.
#[actix::test]
async fn an_unopenable_volume_leaves_the_other_volumes_serving() {
    let t = TestLog::with(|config| config.storage.volumes = 2);
    let data_dir = t.config.storage.data_dir.clone();
    for partition in 0..8 {
        append(&t.log, partition, 3).await.unwrap();
    }
    t.log.shutdown().await.unwrap();
    let (healthy, damaged) = (
        partitions_in(&data_dir, 0, TOPIC)[0],
        partitions_in(&data_dir, 1, TOPIC)[0],
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(volume(&data_dir, 1))
        .unwrap();
    file.write_all(&[0xA5; 100]).unwrap();
    file.sync_all().unwrap();
    drop(file);

    let log = Log::open(t.config.clone()).expect("the log opens without the damaged volume");
    let page = log.read(TOPIC, healthy, Some(0), None).await.unwrap();
    assert_eq!(page.records.len(), 3);
    assert_eq!(append(&log, healthy, 1).await.unwrap(), vec![3]);
    for err in [
        log.read(TOPIC, damaged, Some(0), None).await.unwrap_err(),
        append(&log, damaged, 1).await.unwrap_err(),
        append_to(&log, "fresh", 0).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "corrupted", "{err}");
        assert!(err.to_string().contains("volume-1.sqlite"), "{err}");
    }
    log.shutdown().await.unwrap();
    assert!(
        partitions_in(&data_dir, 0, "fresh").is_empty(),
        "a partition that may be in the damaged volume is not created in another"
    );
}

/// Appends one record to `topic`'s `partition`.
async fn append_to(log: &Log, topic: &str, partition: u32) -> Result<(), Error> {
    let records = vec![NewRecord::new("1")];
    log.append(topic, partition, records).await.map(drop)
}

/// The damage mark beside volume `index`.
pub(crate) fn mark(data_dir: &Path, index: usize) -> PathBuf {
    let mut path = volume(data_dir, index).into_os_string();
    path.push("-damaged");
    path.into()
}

/// A payload altered inside the database (what SQLite cannot notice) fails its record's
/// checksum: the read answers `corrupted` naming the record, and the volume refuses writes,
/// across restarts too, until an operator accepts the damage, which is recorded beside the
/// volume; writes then resume.
#[actix::test]
async fn an_altered_record_is_remembered_until_an_operator_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = altered_behind_the_log(
        dir.path(),
        "UPDATE records SET payload = '\"HELLO\"' WHERE payload = '\"hello\"'",
    );
    let data_dir = config.storage.data_dir.clone();
    in_own_process(&config, |log| async move {
        let err = log.read(TOPIC, 0, Some(0), None).await.unwrap_err();
        assert_eq!(err.code(), "corrupted", "{err}");
        assert!(err.to_string().contains("record 0"), "{err}");
        let err = append(&log, 0, 1).await.unwrap_err();
        assert_eq!(err.code(), "corrupted", "{err}");
    });
    in_own_process(&config, |log| async move {
        let err = append(&log, 0, 1).await.unwrap_err();
        assert_eq!(
            err.code(),
            "corrupted",
            "no read first, still refused: {err}"
        );
        assert!(
            err.to_string().contains("record 0"),
            "names the cause: {err}"
        );
    });

    let accepted =
        durability::store::accept_damage(&volume(&data_dir, 0), "ops: record 0 restored by hand")
            .unwrap();
    assert!(!mark(&data_dir, 0).exists());
    let mut record_file = volume(&data_dir, 0).into_os_string();
    record_file.push("-accepted");
    let recorded = std::fs::read_to_string(record_file).unwrap();
    assert!(
        recorded.contains("accepted by ops: record 0 restored by hand"),
        "{recorded}"
    );
    assert!(recorded.contains(&accepted.mark.cause), "{recorded}");

    let log = Log::open(config).unwrap();
    assert_eq!(append(&log, 0, 1).await.unwrap(), [3]);
    log.shutdown().await.unwrap();
}

/// Partition 0 of a one-volume log with a folder cold tier holding its first `cold` records
/// (in segments of 100), with `hot` more records in its hot window.
fn flushed_and_hot(dir: &Path, cold: usize, hot: usize) -> Config {
    let mut config = Config::for_tests(dir);
    config.cold.kind = durability::config::ColdKind::Fs;
    config.retention.max_records = hot as u64;
    config.retention.sweep_interval_ms = 3_600_000;
    in_own_process(&config, move |log| async move {
        for _ in 0..(cold + hot) / 100 {
            append(&log, 0, 100).await.unwrap();
        }
        assert_eq!(log.trim(TOPIC, 0).await.unwrap(), cold as u64);
    });
    config
}

/// Asserts what a reader of a volume with a known loss gets: the records of the intact cold
/// segments, and `corrupted` naming the volume for everything else of the partition.
async fn assert_only_cold_served(log: &Log, cold: u64) {
    let page = log.read(TOPIC, 0, Some(0), Some(100)).await.unwrap();
    assert_eq!(page.records.len(), 100);
    assert_eq!(page.records[99].offset, 99);
    let page = log.read(TOPIC, 0, None, Some(100)).await.unwrap();
    assert_eq!(
        page.records[0].offset, 0,
        "a read with no offset starts in the cold tier"
    );
    let page = log
        .read(TOPIC, 0, Some(cold - 10), Some(100))
        .await
        .unwrap();
    assert_eq!(
        page.records.len(),
        10,
        "a page stops where the cold tier ends"
    );
    assert_eq!(page.next_offset, cold);
    let bounds = log.bounds(TOPIC, 0).await.map(drop);
    let hot = log.read(TOPIC, 0, Some(cold), Some(100)).await.map(drop);
    let poll = log
        .poll(TOPIC, "readers", Some(10), Duration::ZERO)
        .await
        .map(drop);
    let lease = log.lease(TOPIC, 0, "workers", Some(10)).await.map(drop);
    let topics = log.topics().await.map(drop);
    let cursors = log.cursors(TOPIC, 0).await.map(drop);
    for (what, answer) in [
        ("bounds", bounds),
        ("hot read", hot),
        ("poll", poll),
        ("lease", lease),
        ("topics", topics),
        ("cursors", cursors),
    ] {
        let err = answer.expect_err(what);
        assert_eq!(err.code(), "corrupted", "{what}: {err}");
        assert!(err.to_string().contains("volume-0.sqlite"), "{what}: {err}");
    }
    let err = append(log, 0, 1).await.unwrap_err();
    assert_eq!(err.code(), "corrupted", "{err}");
}

/// A volume whose write-ahead log was lost after a kill holds an older state: its partitions
/// serve only what intact cold segments hold, never the older state as if it were the log.
#[actix::test]
async fn a_lost_write_ahead_log_is_reported_to_readers() {
    let dir = tempfile::tempdir().unwrap();
    let config = flushed_and_hot(dir.path(), 300, 100);
    let data_dir = config.storage.data_dir.clone();
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("data");
    let mut config = config;
    // No more flushes: the cold tier holds offsets 0 to 299.
    config.retention.max_records = 0;
    {
        // 500 more records acknowledged, and then the WAL lost in a crash.
        let log = Log::open(config.clone()).unwrap();
        for _ in 0..5 {
            append(&log, 0, 100).await.unwrap();
        }
        await_high_water(&data_dir, 0, 900).await;
        std::fs::create_dir_all(&copied).unwrap();
        for name in ["volume-0.sqlite", "volume-0.sqlite-hwm"] {
            std::fs::copy(data_dir.join(name), copied.join(name)).unwrap();
        }
        log.shutdown().await.unwrap();
    }
    config.storage.data_dir = copied.clone();
    let log = Log::open(config.clone()).unwrap();
    assert_only_cold_served(&log, 300).await;
    log.shutdown().await.unwrap();

    // Accepted, the volume serves what it still holds and writes again from there.
    let accepted = durability::store::accept_damage(&volume(&copied, 0), "ops").unwrap();
    assert_eq!(accepted.mark.kind, durability::store::DamageKind::Lost);
    let log = Log::open(config).unwrap();
    assert_eq!(log.bounds(TOPIC, 0).await.unwrap().next_offset, 400);
    assert_eq!(append(&log, 0, 1).await.unwrap(), [400]);
    log.shutdown().await.unwrap();
}

/// An emptied volume has lost even its catalog: its partitions, found in no volume, are
/// answered from the cold tier where intact segments serve, `corrupted` everywhere else.
#[actix::test]
async fn an_emptied_volume_serves_its_intact_cold_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = flushed_and_hot(dir.path(), 300, 100);
    let data_dir = config.storage.data_dir.clone();
    std::fs::File::create(volume(&data_dir, 0)).unwrap();
    let log = Log::open(config.clone()).unwrap();
    assert_only_cold_served(&log, 300).await;
    let err = log.read("other", 0, Some(0), None).await.unwrap_err();
    assert_eq!(
        err.code(),
        "corrupted",
        "a partition never seen may be in it: {err}"
    );
    log.shutdown().await.unwrap();
    assert!(mark(&data_dir, 0).exists());
}

/// A cold segment replaced by a folder is a lost segment: `log_truncated`, like a deleted one,
/// with where to continue.
#[actix::test]
async fn a_folder_in_place_of_a_cold_segment_is_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let config = flushed_and_hot(dir.path(), 200, 100);
    let segment = walk(&config.cold.dir)
        .into_iter()
        .min()
        .expect("a stored segment");
    std::fs::remove_file(&segment).unwrap();
    std::fs::create_dir(&segment).unwrap();
    let log = Log::open(config).unwrap();
    match log.read(TOPIC, 0, Some(0), None).await.unwrap_err() {
        Error::Store(durability::store::StoreError::Truncated {
            requested_offset,
            oldest_offset,
        }) => assert_eq!((requested_offset, oldest_offset), (0, 100)),
        err => panic!("not truncation: {err:?}"),
    }
    assert_eq!(
        log.read(TOPIC, 0, Some(100), None).await.unwrap().records[0].offset,
        100
    );
    log.shutdown().await.unwrap();
}

/// Overwrites the 4 KiB page at `at` of volume `index` with a copy of the page after it, as a
/// misdirected or stale write would: a page SQLite finds well formed, holding other rows.
pub(crate) fn copy_next_page_over(data_dir: &Path, index: usize, at: u64) {
    let path = volume(data_dir, index);
    let bytes = std::fs::read(&path).unwrap();
    let next = usize::try_from(at).unwrap() + 4096;
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(&bytes[next..next + 4096]).unwrap();
    file.sync_all().unwrap();
}

/// Where in volume `index` the leaf pages of `table` start, in the order of their keys (the
/// order of their paths down the tree; the file's order may differ, as pages are reused).
fn leaves_in_key_order(data_dir: &Path, index: usize, table: &str) -> Vec<u64> {
    let conn = rusqlite::Connection::open(volume(data_dir, index)).unwrap();
    let mut statement = conn
        .prepare("SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'leaf' ORDER BY path")
        .unwrap();
    let pages = statement
        .query_map([table], |row| row.get::<_, u64>(0))
        .unwrap();
    pages.map(|page| (page.unwrap() - 1) * 4096).collect()
}

/// The middle one of volume `index`'s leaf pages of `table` whose next page in the file holds
/// the table's next keys: copied over it, a page hides the rows it held and repeats later ones,
/// which SQLite's integrity check names it for (a page copied from lower keys passes its
/// parent's bound and is named by the parent instead).
pub(crate) fn page_before_its_successor(data_dir: &Path, index: usize, table: &str) -> u64 {
    let leaves = leaves_in_key_order(data_dir, index, table);
    let followed: Vec<u64> = leaves
        .windows(2)
        .filter(|pair| pair[1] == pair[0] + 4096)
        .map(|pair| pair[0])
        .collect();
    assert!(!followed.is_empty(), "no two adjacent pages of {table}");
    followed[followed.len() / 2]
}

/// 3,000 keyed records of about 200 B in `partition`, in appends of 100.
pub(crate) async fn append_keyed(log: &Log, partition: u32) {
    for round in 0..30 {
        let records = (0..100)
            .map(|n| {
                let key = format!("k{}", round * 100 + n);
                NewRecord::keyed(
                    key,
                    format!("{{\"n\":{n},\"text\":\"{}\"}}", "x".repeat(170)),
                )
            })
            .collect();
        log.append(TOPIC, partition, records).await.unwrap();
    }
}

/// A page overwritten with another well-formed page hides rows without SQLite noticing. No
/// read may skip them: each read answers the offset it asked for or `corrupted`, the volume is
/// marked damaged, and it refuses writes (a re-sent key of a hidden record would otherwise be
/// answered with its old offset, or a new one).
#[actix::test]
async fn a_page_overwritten_with_another_hides_no_record_from_reads() {
    for eighth in [2, 3, 4, 5] {
        let t = TestLog::with(|config: &mut Config| config.retention.max_records = 0);
        append_keyed(&t.log, 0).await;
        t.log.shutdown().await.unwrap();
        let data_dir = &t.config.storage.data_dir;
        let length = std::fs::metadata(volume(data_dir, 0)).unwrap().len();
        copy_next_page_over(data_dir, 0, length * eighth / 8 / 4096 * 4096);

        let log = Log::open(t.config.clone()).unwrap();
        let mut refused = 0;
        for from in 0..3_000 {
            match log.read(TOPIC, 0, Some(from), Some(1)).await {
                Ok(page) => assert_eq!(
                    page.records[0].offset, from,
                    "a read from {from} skipped records"
                ),
                Err(err) => {
                    assert_eq!(err.code(), "corrupted", "{err}");
                    refused += 1;
                }
            }
        }
        let mut from = 0;
        while let Ok(page) = log.read(TOPIC, 0, Some(from), Some(100)).await {
            let offsets: Vec<u64> = page.records.iter().map(|r| r.offset).collect();
            assert!(
                offsets
                    .iter()
                    .copied()
                    .eq(from..from + offsets.len() as u64)
            );
            from = page.next_offset;
            if from == 3_000 {
                break;
            }
        }
        assert!(from < 3_000, "a page served across the hole");
        assert!(refused > 0, "the damaged page hid nothing ({eighth}/8)");
        assert!(mark(data_dir, 0).exists(), "the damage is recorded");
        let resent = NewRecord::keyed("k1", "{}");
        let err = log.append(TOPIC, 0, vec![resent]).await.unwrap_err();
        assert_eq!(err.code(), "corrupted", "{err}");
        log.shutdown().await.unwrap();
    }
}
