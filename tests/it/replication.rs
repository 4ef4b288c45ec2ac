//! Replication to object storage (`[replication] kind = "s3"`): the real `durability` binary,
//! run as child processes over the test S3 server (moto), sometimes through a TCP proxy that
//! cuts the bucket off or loses its answers.
//!
//! - a second node on the bucket serves everything the first acknowledged, fences the first
//!   (whose writes answer `503 unavailable` from then on, the one whose PUT was in flight while
//!   it was paused too), and the bucket's streams and manifests stay consistent;
//! - a bucket that stops answering makes writes `unavailable` (reads keep working) until it is
//!   back, and no write is lost or doubled;
//! - windows stored at once are answered in order, and a copy holding a window stored after
//!   one that never landed is set aside at the next start;
//! - a PUT whose answer is lost after it landed is counted once;
//! - why a manifest carries `version`: an `If-Match` rewrite with the same bytes keeps the ETag.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use durability::cold::S3Settings;
use durability::routing::fnv1a_utf16;
use s3::Bucket;
use s3::error::S3Error;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::bucket::{PREFIX, Proxy, audit_bucket, bucket_of, get_text, keys_under};
use crate::common::process::{
    Server, find, header, replication_env, request, request_with_head, seed,
};
use crate::common::{Rng, block_on, eventually, fd_count_lock, fresh_s3_bucket};
use crate::damage::{copy_next_page_over, page_before_its_successor};

const TOPIC: &str = "replicated";

// ---------------------------------------------------------------------------------------------
// 1. A second node fences the first
// ---------------------------------------------------------------------------------------------

/// Node A writes; node B starts on the same bucket with an empty data folder: B serves what A
/// acknowledged at the same offsets, A's next writes are refused `503 unavailable` (B sealed
/// A's stream), B's writes continue the offsets, and the bucket passes the stream audit.
#[test]
fn a_second_server_on_the_bucket_fences_the_first() {
    let s3 = block_on(fresh_s3_bucket());
    let dir_a = tempfile::tempdir().expect("temp dir");
    let dir_b = tempfile::tempdir().expect("temp dir");
    let settings = [
        ("DURABILITY__STORAGE__VOLUMES", "2"),
        // The audit reads every stream from seq 0: nothing may be snapshotted and collected
        // during the test (the defaults are far off too; pinned so that the audit says why).
        ("DURABILITY__REPLICATION__SNAPSHOT_INTERVAL_MS", "3600000"),
        ("DURABILITY__REPLICATION__GC_GRACE_MS", "3600000"),
    ];

    let a = start_node(dir_a.path(), &s3, &s3.endpoint, "a", &settings);
    let partitions = 0..4u32;
    let mut acknowledged: BTreeMap<u32, Vec<(u64, String)>> = BTreeMap::new();
    for round in 0..5 {
        for partition in partitions.clone() {
            let key = format!("a-{partition}-{round}");
            let offset = append_once(a.addr, partition, &key)
                .unwrap_or_else(|why| panic!("A's append of {key}: {why}"));
            acknowledged
                .entry(partition)
                .or_default()
                .push((offset, key));
        }
    }

    let b = start_node(dir_b.path(), &s3, &s3.endpoint, "b", &settings);
    for (partition, records) in &acknowledged {
        assert_eq!(
            &keyed_offsets(&read_all(b.addr, *partition)),
            records,
            "B serves A's acknowledged records of partition {partition} at their offsets"
        );
    }

    // A's stream is sealed: each of its writes is refused, on every partition (both volumes).
    for partition in partitions.clone() {
        let key = format!("a-after-fence-{partition}");
        let answer = append(a.addr, partition, &key)
            .unwrap_or_else(|why| panic!("A's append after the takeover: {why}"));
        assert_eq!(
            (answer.0, error_code(&answer.1)),
            (503, Some("unavailable")),
            "a fenced node refuses writes; answered {answer:?}"
        );
    }
    // The metrics say so, and how many windows A stored.
    assert_eq!(metric(a.addr, "durability_replica_fenced"), Some(1.0));
    assert_eq!(metric(b.addr, "durability_replica_fenced"), Some(0.0));
    assert!(
        metric(a.addr, "durability_replica_windows_total").is_some_and(|windows| windows >= 20.0),
        "A stored a window per acknowledged write at least"
    );
    // Still refused on a second try (the refusal is for good), and reads keep working.
    let again = append(a.addr, 0, "a-after-fence-again").expect("A answers");
    assert_eq!(
        (again.0, error_code(&again.1)),
        (503, Some("unavailable")),
        "{again:?}"
    );
    assert_eq!(
        keyed_offsets(&read_all(a.addr, 0)),
        acknowledged[&0],
        "a fenced node still serves reads"
    );

    // B continues every partition's offsets.
    for (partition, records) in &mut acknowledged {
        let key = format!("b-{partition}");
        let offset = append_once(b.addr, *partition, &key)
            .unwrap_or_else(|why| panic!("B's append of {key}: {why}"));
        assert_eq!(
            offset,
            records.len() as u64,
            "B's write continues partition {partition}"
        );
        records.push((offset, key));
        assert_eq!(&keyed_offsets(&read_all(b.addr, *partition)), records);
    }

    let audit = block_on(audit_bucket(&s3));
    assert_eq!(audit.volumes_object, "2", "the volume count is recorded");
    assert_eq!(audit.manifests.len(), 2, "a manifest per volume");
    let streams: Vec<&(String, u64)> = audit.streams.keys().collect();
    assert_eq!(
        streams,
        [&("a".to_owned(), 1), &("b".to_owned(), 1)],
        "one stream per node incarnation"
    );
    assert!(
        audit.streams[&("a".to_owned(), 1)].fenced_at.is_some(),
        "A's stream ends with a fence"
    );
    assert_eq!(
        audit.streams[&("b".to_owned(), 1)].fenced_at,
        None,
        "B's stream is open"
    );
    for (volume, manifest) in &audit.manifests {
        assert_eq!(
            manifest["owner"],
            json!({"node": "b", "inc": 1}),
            "volume {volume}: {manifest:#}"
        );
        let chain = manifest["chain"].as_array().expect("a chain");
        let of = |node: &str| {
            chain
                .iter()
                .filter(|segment| segment["node"] == node)
                .collect::<Vec<_>>()
        };
        let (of_a, of_b) = (of("a"), of("b"));
        assert!(
            of_a.iter().all(|segment| !segment["end"].is_null()),
            "volume {volume}: A's segments are closed: {manifest:#}"
        );
        let sealed = audit.streams[&("a".to_owned(), 1)].fenced_at;
        assert!(
            of_a.iter().all(|segment| segment["end"].as_u64() == sealed),
            "volume {volume}: A's segment ends at the fence (seq {sealed:?}): {manifest:#}"
        );
        assert_eq!(
            of_b.len(),
            1,
            "volume {volume}: one segment of B: {manifest:#}"
        );
        assert!(
            of_b[0]["end"].is_null(),
            "volume {volume}: B's segment is open: {manifest:#}"
        );
        assert_eq!(
            chain.last(),
            Some(of_b[0]),
            "volume {volume}: B's open segment comes last: {manifest:#}"
        );
    }
    let windows: usize = audit.streams.values().map(|stream| stream.windows).sum();
    println!(
        "fencing: {} objects audited ({windows} windows), A sealed at seq {:?}",
        audit.objects,
        audit.streams[&("a".to_owned(), 1)].fenced_at
    );
    drop((a, b));
}

/// Node A keeps writing while node B starts on the bucket: B takes A's volumes within the
/// start timeout instead of chasing A's stream (a fence that loses a race to a landing window
/// is followed by fences of the windows after it, all at once), B serves every write A
/// acknowledged at its offset, A is fenced, and the bucket passes the stream audit. With four
/// producers, with B under A's own node id (a new incarnation), and with one producer.
#[test]
fn a_second_server_takes_the_volumes_of_a_first_that_keeps_writing() {
    for (b_node, producers) in [("b", 4), ("a", 4), ("b", 1)] {
        takes_from_a_busy_node(b_node, producers);
    }
}

fn takes_from_a_busy_node(b_node: &str, producers: u32) {
    let s3 = block_on(fresh_s3_bucket());
    let dir_a = tempfile::tempdir().expect("temp dir");
    let dir_b = tempfile::tempdir().expect("temp dir");
    let settings = [
        ("DURABILITY__STORAGE__VOLUMES", "2"),
        ("DURABILITY__REPLICATION__SNAPSHOT_INTERVAL_MS", "3600000"),
        ("DURABILITY__REPLICATION__GC_GRACE_MS", "3600000"),
    ];
    let a = start_node(dir_a.path(), &s3, &s3.endpoint, "a", &settings);
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..producers)
        .map(|partition| {
            let (addr, stop) = (a.addr, stop.clone());
            thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = format!("a-{partition}-{n}");
                    match append(addr, partition, &key) {
                        Ok((202, body)) => acknowledged.push((single_offset(&body), key)),
                        Ok((503, _)) => thread::sleep(Duration::from_millis(20)),
                        other => panic!("A's append of {key}: {other:?}"),
                    }
                }
                (partition, acknowledged)
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(3));

    let started = Instant::now();
    let b = start_node(dir_b.path(), &s3, &s3.endpoint, b_node, &settings);
    let took = started.elapsed();
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let acknowledged: BTreeMap<u32, Vec<(u64, String)>> = producers
        .into_iter()
        .map(|producer| producer.join().expect("a producer"))
        .collect();
    let count: usize = acknowledged.values().map(Vec::len).sum();
    println!(
        "B ({b_node}) served {took:?} after its start, while A acknowledged {count} writes \
         from {} producers",
        acknowledged.len()
    );

    assert_eq!(metric(a.addr, "durability_replica_fenced"), Some(1.0));
    for (partition, records) in &acknowledged {
        let held = keyed_offsets(&read_all(b.addr, *partition));
        assert_contiguous_and_unique(&held);
        for (offset, key) in records {
            assert_eq!(
                held.get(*offset as usize).map(|(_, held)| held),
                Some(key),
                "B serves A's acknowledged {key} of partition {partition} at {offset}"
            );
        }
    }
    let audit = block_on(audit_bucket(&s3));
    assert!(
        audit.streams[&("a".to_owned(), 1)].fenced_at.is_some(),
        "A's stream ends with a fence"
    );
    drop((a, b));
}

/// A replicated volume heals itself. A page of the volume holding partition 0 is overwritten
/// with its neighbour while the server is stopped (a well-formed page holding other rows:
/// SQLite does not notice). Restarted, with a producer writing to a partition of the other
/// volume all along, a reader of every offset of partition 0 meets the hole: the volume is
/// set aside and rebuilt from the bucket, its reads answer `503 unavailable` with
/// `Retry-After` meanwhile and then every acknowledged record at its offset (never another
/// one); partition 0 takes writes again at its next offset, and the other volume lost
/// nothing.
#[test]
fn a_damaged_volume_heals_itself_from_the_bucket() {
    let s3 = block_on(fresh_s3_bucket());
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = [("DURABILITY__STORAGE__VOLUMES", "2")];
    let damaged = write_then_damage(dir.path(), &s3, &settings);

    let node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
    let other = other_volume_partition();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (addr, stop) = (node.addr, stop.clone());
        thread::spawn(move || {
            let mut acknowledged = Vec::new();
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let key = format!("other-{n}");
                acknowledged.push((
                    append_once(addr, other, &key).expect("the other volume"),
                    key,
                ));
            }
            acknowledged
        })
    };
    let (mut unavailable, mut retry_after) = (0, 0);
    let started = Instant::now();
    for from in 0..3_000u64 {
        loop {
            let path = format!("/topics/{TOPIC}/partitions/0/records?from={from}&limit=1");
            let (status, head, body) =
                request_with_head(node.addr, "GET", &path, None).expect("an answer");
            if status == 200 {
                assert_eq!(
                    keyed_offsets(body["records"].as_array().expect("records")),
                    [(from, format!("k-{from}"))],
                    "a read from {from}"
                );
                break;
            }
            assert_eq!(
                (status, error_code(&body)),
                (503, Some("unavailable")),
                "a read from {from}: {body}"
            );
            unavailable += 1;
            retry_after += usize::from(header(&head, "retry-after").is_some());
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the volume was not rebuilt: {body}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(unavailable > 0, "no read met the damaged page");
    assert_eq!(retry_after, unavailable, "every 503 says when to retry");
    println!(
        "healed: {unavailable} reads answered 503 in {:?}",
        started.elapsed()
    );
    assert_eq!(
        append_once(node.addr, 0, "after").expect("partition 0 takes writes again"),
        3_000
    );
    stop.store(true, Ordering::SeqCst);
    let acknowledged = producer.join().expect("the producer");
    assert!(!acknowledged.is_empty());
    let held = keyed_offsets(&read_all(node.addr, other));
    assert_eq!(
        held, acknowledged,
        "the other volume's partition lost nothing"
    );
    assert_eq!(
        set_aside_copies(dir.path(), damaged),
        1,
        "the damaged copy is set aside, not deleted"
    );
    drop(node);
}

/// A replicated server killed under load whose WAL is then lost comes back whole: its copy
/// stands at an older window, from which the start replays the bucket's history, so it serves
/// every acknowledged record (with `sync = "full"`, its high-water mark agrees).
#[test]
fn a_lost_write_ahead_log_is_replayed_from_the_bucket() {
    let s3 = block_on(fresh_s3_bucket());
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = [
        ("DURABILITY__STORAGE__VOLUMES", "1"),
        ("DURABILITY__STORAGE__SYNC", "full"),
    ];
    let mut acknowledged = Vec::new();
    let mut node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
    for round in 0..2 {
        for n in 0..200 {
            let key = format!("k-{round}-{n}");
            acknowledged.push((append_once(node.addr, 0, &key).expect("an append"), key));
        }
        if round == 0 {
            node.signal("TERM");
            assert!(node.wait_for_exit(Duration::from_secs(30)).is_some());
            node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
        }
    }
    node.kill();
    std::fs::remove_file(dir.path().join("volume-0.sqlite-wal")).expect("the WAL");

    let node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
    assert_eq!(keyed_offsets(&read_all(node.addr, 0)), acknowledged);
    assert_eq!(append_once(node.addr, 0, "after"), Ok(400));
    drop(node);
}

/// Writes 3,000 keyed records to partition 0 on a node over `data_dir`, stops it, and
/// overwrites a page of its records in the middle of the volume holding it with the next one,
/// also of records: answers that volume.
fn write_then_damage(data_dir: &Path, s3: &S3Settings, settings: &[(&str, &str)]) -> u32 {
    let mut node = start_node(data_dir, s3, &s3.endpoint, "a", settings);
    let path = format!("/topics/{TOPIC}/partitions/0/records");
    for round in 0..30 {
        let records: Vec<Value> = (0..100)
            .map(|n| {
                let key = format!("k-{}", round * 100 + n);
                json!({"payload": {"key": key}, "key": key})
            })
            .collect();
        let (status, body) =
            request(node.addr, "POST", &path, Some(&json!(records))).expect("an answer");
        assert_eq!(status, 202, "{body}");
    }
    node.signal("TERM");
    assert!(
        node.wait_for_exit(Duration::from_secs(30)).is_some(),
        "the server stops on SIGTERM"
    );
    let damaged = fnv1a_utf16(&format!("{TOPIC}:0")) % 2;
    let index = damaged as usize;
    copy_next_page_over(
        data_dir,
        index,
        page_before_its_successor(data_dir, index, "records"),
    );
    damaged
}

/// How many copies of volume `volume` were set aside in `data_dir`.
fn set_aside_copies(data_dir: &Path, volume: u32) -> usize {
    std::fs::read_dir(data_dir)
        .expect("the data folder")
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("volume-{volume}.sqlite-set-aside-"))
                && !name.ends_with("-wal")
                && !name.ends_with("-damaged")
        })
        .count()
}

/// The scrub finds a damaged page nobody reads, and the volume is rebuilt from the bucket:
/// every acknowledged record is served after, with nothing read before.
#[test]
fn a_damaged_page_found_by_the_scrub_heals_from_the_bucket() {
    let s3 = block_on(fresh_s3_bucket());
    let dir = tempfile::tempdir().expect("temp dir");
    let damaged = write_then_damage(dir.path(), &s3, &[("DURABILITY__STORAGE__VOLUMES", "2")]);
    let settings = [
        ("DURABILITY__STORAGE__VOLUMES", "2"),
        ("DURABILITY__STORAGE__SCRUB_INTERVAL_MS", "200"),
    ];
    let node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
    let started = Instant::now();
    await_set_aside(dir.path(), damaged, started, || {});
    assert_eq!(
        metric(node.addr, "durability_scrub_damage_found_total"),
        Some(1.0)
    );
    let expected: Vec<(u64, String)> = (0..3_000).map(|n| (n, format!("k-{n}"))).collect();
    assert_eq!(rebuilt_partition_0(node.addr, started), expected);
    drop(node);
}

/// Waits until a copy of volume `volume` was set aside in `data_dir`, at most a minute after
/// `started`, doing `meanwhile` every 50 ms.
fn await_set_aside(data_dir: &Path, volume: u32, started: Instant, mut meanwhile: impl FnMut()) {
    while set_aside_copies(data_dir, volume) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "volume {volume}'s damaged copy was never set aside"
        );
        meanwhile();
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every record of partition 0 once its volume, being rebuilt from the bucket (`503`
/// meanwhile), serves again, at most a minute after `started`.
fn rebuilt_partition_0(addr: SocketAddr, started: Instant) -> Vec<(u64, String)> {
    loop {
        let path = format!("/topics/{TOPIC}/partitions/0/records?from=0&limit=1");
        match request(addr, "GET", &path, None).expect("an answer") {
            (200, _) => return keyed_offsets(&read_all(addr, 0)),
            (503, _) if started.elapsed() < Duration::from_secs(60) => {
                thread::sleep(Duration::from_millis(50));
            }
            other => panic!("the rebuilt volume answers {other:?}"),
        }
    }
}

/// A snapshot never copies a damaged volume into the bucket: the volume is checked first,
/// and found damaged (with nothing read) it is rebuilt from the bucket, as a read that meets
/// the damage would have it.
#[test]
fn a_snapshot_refuses_a_damaged_copy_and_the_volume_heals() {
    let s3 = block_on(fresh_s3_bucket());
    let dir = tempfile::tempdir().expect("temp dir");
    let damaged = write_then_damage(dir.path(), &s3, &[("DURABILITY__STORAGE__VOLUMES", "2")]);
    let settings = [
        ("DURABILITY__STORAGE__VOLUMES", "2"),
        ("DURABILITY__REPLICATION__SNAPSHOT_INTERVAL_MS", "100"),
    ];
    let node = start_node(dir.path(), &s3, &s3.endpoint, "a", &settings);
    let started = Instant::now();
    let mut appended = 0;
    await_set_aside(dir.path(), damaged, started, || {
        // A write to the damaged volume lands a window, after which its snapshot is due.
        if let Ok((202, _)) = append(node.addr, 0, &format!("after-{appended}")) {
            appended += 1;
        }
    });
    let expected: Vec<(u64, String)> = (0..3_000)
        .map(|n| (n, format!("k-{n}")))
        .chain((0..appended).map(|n| (3_000 + n, format!("after-{n}"))))
        .collect();
    assert_eq!(rebuilt_partition_0(node.addr, started), expected);
    drop(node);
}

/// Node A is stopped (SIGSTOP) with a window PUT in flight (held by its proxy); node B takes
/// the volumes meanwhile, sealing A's stream at that window's seq. Resumed, A's PUT meets the
/// fence: the write is answered `503 unavailable`, never `202`, and neither node serves it.
#[test]
fn a_writer_paused_with_a_put_in_flight_is_fenced_when_it_resumes() {
    let a = ProxiedNode::start("a", "30000");
    let acknowledged: Vec<(u64, String)> = (0..3)
        .map(|n| {
            let key = format!("before-{n}");
            let offset = append_once(a.server.addr, 0, &key).expect("an append before the pause");
            (offset, key)
        })
        .collect();
    *a.proxy.state.hold_containing.lock().unwrap() = Some(br#"{"key":"paused"}"#.to_vec());
    let addr = a.server.addr;
    let paused = thread::spawn(move || append(addr, 0, "paused"));
    let proxy = &a.proxy;
    assert!(
        block_on(eventually(Duration::from_secs(30), async || {
            proxy.state.holding.load(Ordering::SeqCst) > 0
        })),
        "the write's window reaches the proxy"
    );
    a.server.signal("STOP");

    let dir_b = temp_dir();
    let b = start_node(dir_b.path(), &a.s3, &a.s3.endpoint, "b", &[]);
    assert_eq!(
        keyed_offsets(&read_all(b.addr, 0)),
        acknowledged,
        "B serves what A acknowledged, and not the write in flight"
    );

    a.server.signal("CONT");
    a.proxy.release();
    let answer = paused.join().expect("the paused write").expect("A answers");
    assert_eq!(
        (answer.0, error_code(&answer.1)),
        (503, Some("unavailable")),
        "the write in flight is refused once A meets the fence: {answer:?}"
    );
    assert_eq!(
        metric(a.server.addr, "durability_replica_fenced"),
        Some(1.0)
    );
    assert_eq!(keyed_offsets(&read_all(b.addr, 0)), acknowledged);
    let audit = block_on(audit_bucket(&a.s3));
    assert!(
        audit.streams[&("a".to_owned(), 1)].fenced_at.is_some(),
        "A's stream ends with a fence"
    );
}

/// The bucket holds the answers to the windows of two cursor commits, on two of four volumes,
/// for 5 s, on a node with one committer thread. The committer thread does not wait with
/// them: the node's `durability_committer_threads_busy` is 0 in at least three samples of four
/// (a busy sample is a commit caught in passing; before, the thread waited for the whole hold,
/// busy in every sample, and no volume committed anything), so
/// the appends sent to every volume meanwhile are committed and answered as soon as the
/// bucket answers, and reads, bounds and `/healthz` of every volume answer meanwhile (reads and
/// bounds run on the caller's thread).
#[test]
fn a_write_waiting_for_its_window_keeps_no_committer_thread_waiting() {
    let node = ProxiedNode::start_with(
        "solo",
        "30000",
        &[
            ("DURABILITY__STORAGE__VOLUMES", "4"),
            ("DURABILITY__STORAGE__COMMITTERS", "1"),
        ],
    );
    let addr = node.server.addr;
    // One partition in each volume.
    let mut partitions: BTreeMap<u32, u32> = BTreeMap::new();
    for partition in 0..64 {
        let volume = fnv1a_utf16(&format!("{TOPIC}:{partition}")) % 4;
        partitions.entry(volume).or_insert(partition);
    }
    let partitions: Vec<u32> = partitions.into_values().collect();
    assert_eq!(partitions.len(), 4);
    for &partition in &partitions {
        append_once(addr, partition, &format!("first-{partition}")).expect("an append");
    }

    *node.proxy.state.hold_containing.lock().unwrap() = Some(b"held-group".to_vec());
    let commits: Vec<_> = partitions[..2]
        .iter()
        .map(|&partition| {
            thread::spawn(move || {
                let path = format!("/topics/{TOPIC}/partitions/{partition}/cursors/held-group");
                request(addr, "PUT", &path, Some(&json!({"offset": 1})))
            })
        })
        .collect();
    let proxy = &node.proxy;
    assert!(
        block_on(eventually(Duration::from_secs(30), async || {
            proxy.state.holding.load(Ordering::SeqCst) > 0
        })),
        "the commits' windows reach the proxy"
    );
    let appends: Vec<_> = partitions
        .iter()
        .map(|&partition| thread::spawn(move || append_once(addr, partition, "during")))
        .collect();

    let held_since = Instant::now();
    let (mut samples, mut busy_samples, mut slowest) = (0, 0, Duration::ZERO);
    while held_since.elapsed() < Duration::from_secs(5) {
        let busy = metric(addr, "durability_committer_threads_busy").expect("the gauge");
        samples += 1;
        busy_samples += usize::from(busy > 0.0);
        for &partition in &partitions {
            let bounds = format!("/topics/{TOPIC}/partitions/{partition}/bounds");
            let read = format!("/topics/{TOPIC}/partitions/{partition}/records?from=0");
            for path in ["/healthz", bounds.as_str(), read.as_str()] {
                let asked = Instant::now();
                let (status, body) = request(addr, "GET", path, None).expect("an answer");
                assert_eq!(status, 200, "GET {path} while the bucket holds: {body}");
                slowest = slowest.max(asked.elapsed());
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
    println!(
        "while the bucket held 5 s: {busy_samples} of {samples} samples with a busy committer \
         thread; the slowest GET took {slowest:?}"
    );
    assert!(
        busy_samples * 4 <= samples,
        "the committer thread waited for the held writes: {busy_samples} of {samples} samples"
    );
    assert!(
        appends.iter().all(|append| !append.is_finished()),
        "no append is answered before its window landed"
    );

    node.proxy.release();
    for commit in commits {
        let (status, body) = commit.join().expect("a commit").expect("an answer");
        assert_eq!(status, 200, "the held commit lands: {body}");
    }
    for append in appends {
        append
            .join()
            .expect("an append")
            .expect("answered once the bucket answers");
    }
}

/// The bucket holds the answer to a cursor commit's window, on a node with one worker thread
/// and one committer thread. The commit waits for its window holding neither its volume's
/// writer nor the worker: meanwhile the cursors of a partition of another volume (an operation
/// the worker runs) and the bounds of two partitions never opened, one of the held volume and
/// one of another (the registry opens them, looking them up under their volume's writer),
/// answer, and the commit is still unanswered. Before, the commit kept the worker and the
/// writer until its window landed, and these waited for it.
#[test]
fn a_write_waiting_for_its_window_keeps_neither_its_volume_nor_the_worker() {
    let node = ProxiedNode::start_with(
        "solo",
        "30000",
        &[
            ("DURABILITY__STORAGE__VOLUMES", "4"),
            ("DURABILITY__STORAGE__COMMITTERS", "1"),
            ("DURABILITY__STORAGE__WORKERS", "1"),
        ],
    );
    let addr = node.server.addr;
    let volume = |partition: u32| fnv1a_utf16(&format!("{TOPIC}:{partition}")) % 4;
    let held = 0;
    let elsewhere = |after: u32| (after + 1..).find(|&p| volume(p) != volume(held)).unwrap();
    let never_opened_here = (1..).find(|&p| volume(p) == volume(held)).unwrap();
    let other = elsewhere(0);
    let never_opened_elsewhere = elsewhere(other);
    append_once(addr, held, "first").expect("an append");
    append_once(addr, other, "first").expect("an append");

    *node.proxy.state.hold_containing.lock().unwrap() = Some(b"held-group".to_vec());
    let commit = thread::spawn(move || {
        let path = format!("/topics/{TOPIC}/partitions/{held}/cursors/held-group");
        request(addr, "PUT", &path, Some(&json!({"offset": 1})))
    });
    let proxy = &node.proxy;
    assert!(
        block_on(eventually(Duration::from_secs(30), async || {
            proxy.state.holding.load(Ordering::SeqCst) > 0
        })),
        "the commit's window reaches the proxy"
    );
    let meanwhile = [
        format!("/topics/{TOPIC}/partitions/{other}/cursors"),
        format!("/topics/{TOPIC}/partitions/{never_opened_here}/bounds"),
        format!("/topics/{TOPIC}/partitions/{never_opened_elsewhere}/bounds"),
    ];
    for path in &meanwhile {
        let (status, body) = request(addr, "GET", path, None).expect("an answer");
        assert_eq!(status, 200, "GET {path} while the bucket holds: {body}");
        assert!(
            !commit.is_finished() && proxy.state.holding.load(Ordering::SeqCst) > 0,
            "GET {path} was answered only once the held commit was: {:?}",
            commit.is_finished()
        );
    }

    node.proxy.release();
    let (status, body) = commit.join().expect("the commit").expect("an answer");
    assert_eq!(status, 200, "the held commit lands: {body}");
}

// ---------------------------------------------------------------------------------------------
// 2. The bucket stops answering
// ---------------------------------------------------------------------------------------------

/// The bucket is reached through a proxy that is taken down: writes answer `503 unavailable`
/// and reads keep answering. Once the proxy is back, the write whose window was still being
/// retried lands and is served, every write is accepted again, and re-sent writes (same
/// deduplication keys) leave each record exactly once, at contiguous offsets.
#[test]
fn a_bucket_that_stops_answering_makes_writes_unavailable_until_it_is_back() {
    let node = ProxiedNode::start("solo", "500");
    let (server, proxy) = (&node.server, &node.proxy);

    let mut keys = Vec::new();
    for n in 0..5 {
        let key = format!("before-{n}");
        let offset = append_once(server.addr, 0, &key).expect("an append before the outage");
        assert_eq!(offset, n);
        keys.push(key);
    }
    let before = keyed_offsets(&read_all(server.addr, 0));

    proxy.set_down(true);
    // Both refused: the first because its window does not land in time, the second because
    // the first's outcome is not known yet (or its own window does not land either).
    let mut outage_keys = Vec::new();
    for n in 0..2 {
        let key = format!("during-{n}");
        let answer = append(server.addr, 0, &key).expect("the server answers");
        assert_eq!(
            (answer.0, error_code(&answer.1)),
            (503, Some("unavailable")),
            "a write while the bucket is unreachable; answered {answer:?}"
        );
        outage_keys.push(key);
    }
    assert_eq!(
        keyed_offsets(&read_all(server.addr, 0)),
        before,
        "reads keep answering while the bucket is unreachable"
    );
    proxy.set_down(false);

    // The first refused write's window is retried in the background until it lands, and once
    // it has, the volume applies it by itself (`Shared::settle`, also run by the idle
    // committer): it is served at the next offset without any further write. The second
    // refused write never reached the stream.
    let mut expected = before.clone();
    expected.push((before.len() as u64, outage_keys[0].clone()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut served = keyed_offsets(&read_all(server.addr, 0));
    while served != expected && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
        served = keyed_offsets(&read_all(server.addr, 0));
    }
    assert_eq!(
        served, expected,
        "once the bucket is back, the write whose landing was pending is served (no further \
         write sent)"
    );

    // The bucket answers and nothing is pending: each write is accepted at once. The re-sent
    // keys answer their original offsets (the landed one) or new ones (the one that never
    // reached the stream).
    let mut answered = HashMap::new();
    for key in &outage_keys {
        let offset = append_once(server.addr, 0, key)
            .unwrap_or_else(|why| panic!("re-sending {key} once the bucket is back: {why}"));
        answered.insert(key.clone(), offset);
    }
    assert_eq!(
        answered[&outage_keys[0]],
        before.len() as u64,
        "the landed write's key answers its offset"
    );
    for n in 0..5 {
        let key = format!("after-{n}");
        let offset = append_once(server.addr, 0, &key)
            .unwrap_or_else(|why| panic!("appending {key} once the bucket is back: {why}"));
        answered.insert(key.clone(), offset);
        keys.push(key);
    }
    keys.extend(outage_keys);

    let records = keyed_offsets(&read_all(server.addr, 0));
    assert_contiguous_and_unique(&records);
    let found: BTreeSet<&String> = records.iter().map(|(_, key)| key).collect();
    let sent: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(
        found, sent,
        "every key sent is stored once, and nothing else"
    );
    for (offset, key) in &records {
        if let Some(answer) = answered.get(key) {
            assert_eq!(
                answer, offset,
                "{key} is stored at the offset its 202 answered"
            );
        }
    }
    println!(
        "outage: {} records, {} connections cut",
        records.len(),
        proxy.state.cut.load(Ordering::Relaxed)
    );
}

/// A write commits locally before its window lands (it is answered only after): the node is
/// killed while one's window cannot reach the bucket. At the next start its copy holds a window
/// the bucket never got, so the copy is set aside and rebuilt: the unacknowledged write is not
/// served, the writes after it continue the bucket's history, and a node rebuilding from the
/// bucket alone serves exactly the same records.
#[test]
fn a_copy_holding_a_window_that_never_landed_is_set_aside_at_start() {
    let mut node = ProxiedNode::start("solo", "300");
    let mut before = Vec::new();
    for n in 0..3 {
        let key = format!("before-{n}");
        append_once(node.server.addr, 0, &key).expect("an append before the outage");
        before.push(key);
    }
    let landed = keyed_offsets(&read_all(node.server.addr, 0));

    node.proxy.set_down(true);
    let answer = append(node.server.addr, 0, "never-landed").expect("the server answers");
    assert_eq!(
        (answer.0, error_code(&answer.1)),
        (503, Some("unavailable"))
    );
    node.server.kill();
    node.proxy.set_down(false);

    let data_dir = node._data_dir.path().to_owned();
    node.server = start_node(&data_dir, &node.s3, &node.proxy.url(), "solo", &[]);
    assert_eq!(
        keyed_offsets(&read_all(node.server.addr, 0)),
        landed,
        "the restarted node serves what landed, and not the write that did not"
    );
    let set_aside = std::fs::read_dir(&data_dir)
        .expect("the data folder")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().contains("set-aside"))
        .count();
    assert_eq!(set_aside, 1, "the copy off its history is kept aside");
    for n in 0..3 {
        let offset = append_once(node.server.addr, 0, &format!("after-{n}"))
            .expect("an append after the restart");
        assert_eq!(offset, landed.len() as u64 + n);
    }
    let served = keyed_offsets(&read_all(node.server.addr, 0));
    node.server.kill();

    let rebuilt_dir = temp_dir();
    let rebuilt = start_node(rebuilt_dir.path(), &node.s3, &node.proxy.url(), "solo", &[]);
    assert_eq!(
        keyed_offsets(&read_all(rebuilt.addr, 0)),
        served,
        "a node rebuilt from the bucket serves the same records"
    );
}

/// Windows are stored two at a time (the default `max_puts_in_flight`): the proxy holds one
/// write's window back while the next write's window, from another volume, lands. The second
/// write is answered only once the first's window landed too (its answer would otherwise
/// promise a record that a restart drops: the bucket's history ends at the window missing
/// before it), and both are stored.
#[test]
fn a_window_is_answered_only_after_the_windows_before_it() {
    let node = ProxiedNode::start_with("solo", "10000", &[("DURABILITY__STORAGE__VOLUMES", "2")]);
    let (addr, proxy) = (node.server.addr, &node.proxy);
    let writes = two_windows_holding_the_first(&node);
    // Time for the second window's answer to come back, had it been answered alone.
    thread::sleep(Duration::from_millis(300));
    assert!(
        !writes.second.is_finished(),
        "the second write waits for the first window"
    );
    let released = Instant::now();
    proxy.release();

    let (first, _) = writes.first.join().expect("the first write");
    let (second, second_at) = writes.second.join().expect("the second write");
    let (first, second) = (first.expect("answered"), second.expect("answered"));
    assert_eq!((first.0, second.0), (202, 202), "{first:?} then {second:?}");
    assert!(
        second_at >= released,
        "answered after the window before it landed"
    );
    assert_eq!((single_offset(&first.1), single_offset(&second.1)), (1, 1));
    for (partition, key) in [(0, "first"), (other_volume_partition(), "second")] {
        assert_eq!(
            keyed_offsets(&read_all(addr, partition)),
            vec![(0, "before".to_owned()), (1, key.to_owned())]
        );
    }
}

/// The node is killed while the first of two windows stored at once is held back and the
/// second landed: the bucket's history ends before the first, so neither write was
/// acknowledged. At the next start the copy whose own window landed is set aside too (it
/// holds a write beyond the history, though the window it resumes after is in the bucket),
/// and the node serves what a node rebuilt from the bucket alone serves.
#[test]
fn a_copy_whose_window_landed_after_one_that_did_not_is_set_aside_at_start() {
    let volumes = [("DURABILITY__STORAGE__VOLUMES", "2")];
    let mut node = ProxiedNode::start_with("solo", "10000", &volumes);
    let writes = two_windows_holding_the_first(&node);
    node.server.kill();
    // Cut while held: the first window never reaches the bucket.
    node.proxy.set_down(true);
    assert!(
        block_on(eventually(Duration::from_secs(10), async || {
            node.proxy.state.holding.load(Ordering::SeqCst) == 0
        })),
        "the held window is dropped"
    );
    node.proxy.release();
    node.proxy.set_down(false);
    for write in [writes.first, writes.second] {
        let (answer, _) = write.join().expect("a write");
        assert!(
            answer.is_err(),
            "no write is answered before the kill: {answer:?}"
        );
    }
    let stored = block_on(keys_under(&bucket_of(&node.s3), &format!("{PREFIX}/wal/")));
    assert!(
        !stored.contains(&writes.held) && stored.contains(&writes.landed),
        "{} never lands, {} did: {stored:?}",
        writes.held,
        writes.landed
    );

    let data_dir = node._data_dir.path().to_owned();
    node.server = start_node(&data_dir, &node.s3, &node.proxy.url(), "solo", &volumes);
    let before = vec![(0, "before".to_owned())];
    let partitions = [0, other_volume_partition()];
    for partition in partitions {
        assert_eq!(
            keyed_offsets(&read_all(node.server.addr, partition)),
            before,
            "partition {partition} serves what was acknowledged, and neither held write"
        );
    }
    let set_aside: BTreeSet<String> = std::fs::read_dir(&data_dir)
        .expect("the data folder")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("set-aside"))
        .collect();
    assert_eq!(
        set_aside.len(),
        2,
        "both copies off the history are kept aside: {set_aside:?}"
    );
    node.server.kill();

    let rebuilt_dir = temp_dir();
    let rebuilt = start_node(
        rebuilt_dir.path(),
        &node.s3,
        &node.proxy.url(),
        "solo",
        &volumes,
    );
    for partition in partitions {
        assert_eq!(keyed_offsets(&read_all(rebuilt.addr, partition)), before);
    }
}

/// A partition on the other volume than partition 0's (of two): its committer does not wait
/// for partition 0's groups, only the stream orders their windows.
fn other_volume_partition() -> u32 {
    let volume = |partition: u32| fnv1a_utf16(&format!("{TOPIC}:{partition}")) % 2;
    (1..)
        .find(|&partition| volume(partition) != volume(0))
        .expect("a partition")
}

/// A write being answered on its own thread: its answer, and when it came.
type Answering = thread::JoinHandle<(Result<(u16, Value), String>, Instant)>;

/// Two writes on different volumes whose windows are stored at once.
struct TwoWindows {
    /// Its window is held back by the proxy.
    first: Answering,
    /// Sent once the first's window reached the proxy; its window is in the bucket.
    second: Answering,
    /// The keys of the first's and the second's windows.
    held: String,
    landed: String,
}

/// Appends "before" to partition 0 and to [`other_volume_partition`], waits for the stream to
/// go quiet, then appends "first" to partition 0, whose window the proxy holds back, then
/// "second" to the other, and waits until its window is stored.
fn two_windows_holding_the_first(node: &ProxiedNode) -> TwoWindows {
    let (addr, proxy) = (node.server.addr, &node.proxy);
    let other = other_volume_partition();
    append_once(addr, 0, "before").expect("an append before the hold");
    append_once(addr, other, "before").expect("an append before the hold");
    // Each volume indexes its records once idle, a write of its own that waits for its window
    // (and so for the held one, were it after it): the test waits for those to be stored.
    let mut windows = metric(addr, "durability_replica_windows_total");
    loop {
        thread::sleep(Duration::from_millis(300));
        let now = metric(addr, "durability_replica_windows_total");
        if now == windows {
            break;
        }
        windows = now;
    }

    *proxy.state.hold_containing.lock().unwrap() = Some(br#"{"key":"first"}"#.to_vec());
    let first = thread::spawn(move || (append(addr, 0, "first"), Instant::now()));
    assert!(
        block_on(eventually(Duration::from_secs(30), async || {
            proxy.state.holding.load(Ordering::SeqCst) > 0
        })),
        "the first write's window reaches the proxy"
    );
    let held = {
        let target = proxy.state.held_target.lock().unwrap();
        let (_, key) = target
            .as_deref()
            .expect("a held PUT")
            .split_once(&format!("/{PREFIX}/wal/"))
            .expect("a window's path");
        format!("{PREFIX}/wal/{key}")
    };
    let second = thread::spawn(move || (append(addr, other, "second"), Instant::now()));
    let bucket = bucket_of(&node.s3);
    let (mut landed, mut seen) = (None, BTreeSet::new());
    assert!(
        block_on(eventually(Duration::from_secs(30), async || {
            landed = window_holding(&bucket, &held, br#"{"key":"second"}"#, &mut seen).await;
            landed.is_some()
        })),
        "the second write's window is stored while the first's is held"
    );
    TwoWindows {
        first,
        second,
        held,
        landed: landed.expect("stored"),
    }
}

/// The key of a window after `after` in the bucket whose bytes hold `bytes`, reading only
/// those not `seen` yet.
async fn window_holding(
    bucket: &Bucket,
    after: &str,
    bytes: &[u8],
    seen: &mut BTreeSet<String>,
) -> Option<String> {
    for key in keys_under(bucket, &format!("{PREFIX}/wal/")).await {
        if key.as_str() <= after || !seen.insert(key.clone()) {
            continue;
        }
        let object = bucket.get_object(&key).await.expect("get a window");
        if find(object.as_slice(), bytes).is_some() {
            return Some(key);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// 3. Answers lost after the PUT landed
// ---------------------------------------------------------------------------------------------

/// About one in ten window PUTs lands but its answer never reaches the server (the proxy cuts
/// the connection once the bucket starts answering): the retry finds the window there, so each
/// write is stored once, at the offset its `202` answered, and the offsets stay contiguous;
/// a node rebuilding the log from the bucket finds the same records, once each.
#[test]
fn answers_lost_after_landing_make_no_duplicate() {
    const WRITES: u64 = 200;
    // The seed of the proxy's choices.
    let seed = seed("REPLICATION_SEED");
    let node = ProxiedNode::start("lossy", "2000");
    let (server, proxy, s3) = (&node.server, &node.proxy, &node.s3);
    // The proxy draws from its generator only while it loses answers (below).
    *proxy.state.rng.lock().unwrap() = Some(Rng::new(seed));
    // Only once the server has started: a lost answer to the incarnation's claim fails the
    // start (which is the claim's documented behaviour, not what this test is about).
    proxy.state.drop_percent.store(10, Ordering::Relaxed);

    let deadline = Instant::now() + Duration::from_secs(45);
    let mut answered = BTreeMap::new();
    let mut refused = 0u64;
    for n in 0..WRITES {
        let key = format!("lossy-{n:03}");
        loop {
            assert!(
                Instant::now() < deadline,
                "seed {seed}: {key} not accepted in time"
            );
            let answer = append(server.addr, 0, &key)
                .unwrap_or_else(|why| panic!("seed {seed}: append {key}: {why}"));
            match answer {
                (202, body) => {
                    answered.insert(key.clone(), single_offset(&body));
                    break;
                }
                (503, body) if error_code(&body) == Some("unavailable") => {
                    refused += 1;
                    thread::sleep(Duration::from_millis(50));
                }
                other => panic!("seed {seed}: append {key} answered {other:?}"),
            }
        }
    }
    proxy.state.drop_percent.store(0, Ordering::Relaxed);
    let dropped = proxy.state.dropped.load(Ordering::Relaxed);
    let wal_puts = proxy.state.wal_puts.load(Ordering::Relaxed);
    println!(
        "lost answers (seed {seed}): {dropped} of {wal_puts} window PUT answers dropped, \
         {refused} writes answered 503 and re-sent"
    );
    assert!(
        dropped > 0,
        "seed {seed}: the proxy dropped no answer ({wal_puts} window PUTs)"
    );

    let records = keyed_offsets(&read_all(server.addr, 0));
    assert_contiguous_and_unique(&records);
    assert_eq!(
        records.len() as u64,
        WRITES,
        "seed {seed}: every write stored once"
    );
    for (offset, key) in &records {
        assert_eq!(
            answered.get(key),
            Some(offset),
            "seed {seed}: {key} is stored at the offset its 202 answered"
        );
    }

    // The bucket holds the same log once: a node rebuilding it from the stream (an empty data
    // folder, the bucket reached directly) serves exactly these records, and the stream has
    // no gap (a window stored twice under two seqs would replay twice).
    let replay_dir = tempfile::tempdir().expect("temp dir");
    let replay = start_node(replay_dir.path(), s3, &s3.endpoint, "replay", &[]);
    assert_eq!(
        keyed_offsets(&read_all(replay.addr, 0)),
        records,
        "seed {seed}: the log rebuilt from the bucket is the log served"
    );
    let audit = block_on(audit_bucket(s3));
    let lossy = &audit.streams[&("lossy".to_owned(), 1)];
    assert!(
        lossy.fenced_at.is_some(),
        "seed {seed}: the replaying node sealed the stream"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Why a manifest carries a version
// ---------------------------------------------------------------------------------------------

/// Snapshots and garbage collection after a takeover delete the old owner's windows but keep
/// its fence. The negative control deletes the fence, as a collection that did not keep fences
/// would: the old owner's next write is then stored where the fence was and answered `202`,
/// yet the new owner does not have it, nor does a node that takes the volume from the bucket
/// afterwards. An acknowledged write is lost: the reason fences are kept for ever.
#[test]
fn collection_keeps_fences_and_a_deleted_fence_loses_an_acknowledged_write() {
    let s3 = block_on(fresh_s3_bucket());
    let (dir_a, dir_b, dir_c) = (temp_dir(), temp_dir(), temp_dir());
    // Snapshot after every landed window and delete what is unneeded at once.
    let settings = [
        ("DURABILITY__REPLICATION__SNAPSHOT_BYTES", "1"),
        ("DURABILITY__REPLICATION__GC_GRACE_MS", "0"),
    ];
    let a = start_node(dir_a.path(), &s3, &s3.endpoint, "a", &settings);
    for n in 0..5 {
        append_once(a.addr, 0, &format!("a-{n}")).expect("A's append");
    }
    let b = start_node(dir_b.path(), &s3, &s3.endpoint, "b", &settings);
    let bucket = bucket_of(&s3);
    let a_stream = format!("{PREFIX}/wal/a/0000000001/");
    let fence = block_on(async {
        let keys = keys_under(&bucket, &a_stream).await;
        for key in &keys {
            // B's collections may delete A's windows meanwhile.
            if let Ok(object) = bucket.get_object(key).await
                && object.as_slice().starts_with(b"DURABILITY-FENCE")
            {
                return key.clone();
            }
        }
        panic!("B sealed A's stream with a fence: {keys:?}")
    });
    // B's writes snapshot the volume; each snapshot's collection deletes what its history no
    // longer needs: A's windows, but neither A's claim nor the fence.
    let claim = format!("{a_stream}0000000000000000");
    let collected = block_on(eventually(Duration::from_secs(30), async || {
        append_once(b.addr, 0, "b-write").expect("B's append");
        let keys = keys_under(&bucket, &a_stream).await;
        keys.iter().all(|key| *key == claim || *key == fence)
    }));
    let left = block_on(keys_under(&bucket, &a_stream));
    assert!(collected, "A's windows were collected: {left:?} left");
    assert_eq!(
        left,
        [claim.clone(), fence.clone()],
        "the claim and the fence are kept"
    );

    // The negative control: without the fence, the stale owner acknowledges a write...
    block_on(bucket.delete_object(&fence)).expect("delete the fence");
    let lost = append_once(a.addr, 0, "a-after-the-fence-is-gone")
        .expect("without its fence, the stale owner's write lands and is acknowledged");
    assert_eq!(lost, 5, "A appends after its own records");
    // ...that no history holds.
    let b_records = keyed_offsets(&read_all(b.addr, 0));
    assert!(
        !b_records
            .iter()
            .any(|(_, key)| key == "a-after-the-fence-is-gone"),
        "the new owner does not have it: {b_records:?}"
    );
    drop(b);
    let c = start_node(dir_c.path(), &s3, &s3.endpoint, "c", &settings);
    let c_records = keyed_offsets(&read_all(c.addr, 0));
    assert!(
        !c_records
            .iter()
            .any(|(_, key)| key == "a-after-the-fence-is-gone"),
        "a node taking the volume from the bucket does not have it either: {c_records:?}"
    );
    assert_eq!(c_records.len(), b_records.len(), "C holds what B held");
}

/// Under a long run of writes with small snapshots and no grace, the bucket's object count
/// stays bounded while the windows written keep growing; a node whose data folder is deleted
/// then restores every record from the latest snapshot and the windows after it.
#[test]
fn snapshots_and_collection_keep_the_object_count_bounded() {
    const ROUNDS: u64 = 6;
    const PER_ROUND: u64 = 50;
    let s3 = block_on(fresh_s3_bucket());
    let dir = temp_dir();
    let settings = [
        ("DURABILITY__REPLICATION__SNAPSHOT_BYTES", "4096"),
        ("DURABILITY__REPLICATION__GC_GRACE_MS", "0"),
    ];
    let mut node = start_node(dir.path(), &s3, &s3.endpoint, "soak", &settings);
    let bucket = bucket_of(&s3);
    let mut counts = Vec::new();
    let mut written = Vec::new();
    for round in 0..ROUNDS {
        for n in 0..PER_ROUND {
            let key = format!("soak-{round}-{n}");
            let offset = append_once(node.addr, (n % 4) as u32, &key).expect("an append");
            written.push(((n % 4) as u32, offset, key));
        }
        // Snapshots and collections run behind the writes (slower on a busy machine): the
        // count is read once they caught up, or after 20 s.
        let caught_up = Instant::now() + Duration::from_secs(20);
        let count = loop {
            let count = block_on(keys_under(&bucket, &format!("{PREFIX}/"))).len();
            if count as u64 <= ROUNDS * PER_ROUND / 2 || Instant::now() >= caught_up {
                break count;
            }
            thread::sleep(Duration::from_millis(200));
        };
        counts.push(count);
    }
    // Every write is a window of its own. Those older than the latest snapshots are gone,
    // once the collections ran: the count follows the snapshot size, not the writes.
    let windows_written = ROUNDS * PER_ROUND;
    let keys = block_on(keys_under(&bucket, &format!("{PREFIX}/")));
    let oldest_window = keys
        .iter()
        .filter_map(|key| key.strip_prefix(&format!("{PREFIX}/wal/soak/0000000001/")))
        .filter_map(|seq| seq.parse::<u64>().ok())
        .filter(|&seq| seq > 0)
        .min();
    assert!(
        oldest_window.is_some_and(|seq| seq > windows_written / 3),
        "the windows of the first third were collected; the bucket holds {keys:?}"
    );
    assert!(
        counts
            .iter()
            .all(|&count| count as u64 <= windows_written / 2),
        "objects after each round {counts:?} stay well below the {windows_written} windows \
         written; the bucket holds {keys:?}"
    );

    node.kill();
    std::fs::remove_dir_all(dir.path()).expect("delete the data folder");
    let restored = start_node(dir.path(), &s3, &s3.endpoint, "soak", &settings);
    for partition in 0..4 {
        let expected: Vec<(u64, String)> = written
            .iter()
            .filter(|(p, _, _)| *p == partition)
            .map(|(_, offset, key)| (*offset, key.clone()))
            .collect();
        assert_eq!(
            keyed_offsets(&read_all(restored.addr, partition)),
            expected,
            "partition {partition} restored from the snapshot and the windows after it"
        );
    }
}

/// The value of the unlabelled metric `name` in the server's `GET /metrics`.
fn metric(addr: SocketAddr, name: &str) -> Option<f64> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

fn temp_dir() -> TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Two writers hold the same ETag of a manifest and both replace it with `If-Match`. When the
/// new bytes differ from the old (the version grew), the first write changes the ETag and the
/// second is refused `412`: exactly one wins. When a writer stores the very bytes already
/// there, the ETag (the MD5 of the bytes) does not change, and the stale writer wins too: the
/// reason every manifest write bumps `version`.
#[test]
fn identical_manifest_rewrites_cannot_both_win() {
    block_on(async {
        let s3 = fresh_s3_bucket().await;
        let bucket = bucket_of(&s3);
        let manifest = |version: u64| {
            json!({"version": version, "epoch": 1, "owner": {"node": "a", "inc": 1},
                   "snapshot": null, "chain": []})
            .to_string()
        };

        // With a version: the two writers' bodies differ from the stored one by it.
        let key = "manifests/versioned";
        let etag = put_plain(&bucket, key, &manifest(1)).await;
        let first = put_if_match(&bucket, key, &manifest(2), &etag).await;
        let second = put_if_match(&bucket, key, &manifest(2), &etag).await;
        assert_eq!(
            (first, second),
            (Ok(()), Err(412)),
            "with a version, exactly one of the writers holding the same ETag wins"
        );
        assert_eq!(get_text(&bucket, key).await, manifest(2));

        // Without it (the body stored again as it is): the ETag stays, so both win, and the
        // second write cannot tell that another happened since it read the manifest.
        let key = "manifests/unversioned";
        let etag = put_plain(&bucket, key, &manifest(1)).await;
        let first = put_if_match(&bucket, key, &manifest(1), &etag).await;
        let after_first = etag_of(&bucket, key).await;
        let second = put_if_match(&bucket, key, &manifest(1), &etag).await;
        assert_eq!(
            after_first, etag,
            "storing the same bytes keeps the ETag (it is their MD5)"
        );
        assert_eq!(
            (first, second),
            (Ok(()), Ok(())),
            "identical rewrites both win on this server"
        );
    });
}

async fn put_plain(bucket: &Bucket, key: &str, body: &str) -> String {
    let response = bucket
        .put_object(key, body.as_bytes())
        .await
        .expect("a plain PUT");
    assert_eq!(response.status_code(), 200);
    etag_of(bucket, key).await
}

/// `Ok` when stored, `Err(status)` when refused.
async fn put_if_match(bucket: &Bucket, key: &str, body: &str, etag: &str) -> Result<(), u16> {
    let request = bucket
        .put_object_builder(key, body.as_bytes())
        .with_header("If-Match", etag)
        .expect("an If-Match header");
    match request.execute().await {
        Ok(response) if response.status_code() / 100 == 2 => Ok(()),
        Ok(response) => Err(response.status_code()),
        Err(S3Error::HttpFailWithBody(status, _)) => Err(status),
        Err(err) => panic!("PUT {key}: {err}"),
    }
}

async fn etag_of(bucket: &Bucket, key: &str) -> String {
    let response = bucket.get_object(key).await.expect("GET");
    response
        .headers()
        .get("etag")
        .cloned()
        .expect("an ETag header")
}

// ---------------------------------------------------------------------------------------------
// Records over HTTP
// ---------------------------------------------------------------------------------------------

/// `POST` one record with deduplication key `key` to partition `partition`.
fn append(addr: SocketAddr, partition: u32, key: &str) -> Result<(u16, Value), String> {
    let body = json!([{"payload": {"key": key}, "key": key}]);
    request(
        addr,
        "POST",
        &format!("/topics/{TOPIC}/partitions/{partition}/records"),
        Some(&body),
    )
}

/// An append that must be accepted at once: its offset.
fn append_once(addr: SocketAddr, partition: u32, key: &str) -> Result<u64, String> {
    match append(addr, partition, key)? {
        (202, body) => Ok(single_offset(&body)),
        other => Err(format!("answered {other:?}")),
    }
}

fn single_offset(body: &Value) -> u64 {
    match body["offsets"].as_array().map(Vec::as_slice) {
        Some([offset]) => offset.as_u64().expect("an offset"),
        _ => panic!("one offset expected: {body}"),
    }
}

fn error_code(body: &Value) -> Option<&str> {
    body["error"]["code"].as_str()
}

/// Every record of a partition, page by page.
fn read_all(addr: SocketAddr, partition: u32) -> Vec<Value> {
    let mut records = Vec::new();
    loop {
        let path = format!(
            "/topics/{TOPIC}/partitions/{partition}/records?from={}&limit=100",
            records.len()
        );
        let (status, body) =
            request(addr, "GET", &path, None).unwrap_or_else(|why| panic!("GET {path}: {why}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        let page = body["records"].as_array().expect("records").clone();
        if page.is_empty() {
            return records;
        }
        records.extend(page);
    }
}

/// `(offset, key)` of each record.
fn keyed_offsets(records: &[Value]) -> Vec<(u64, String)> {
    records
        .iter()
        .map(|record| {
            let offset = record["offset"].as_u64().expect("an offset");
            let key = record["key"].as_str().expect("a key").to_owned();
            assert_eq!(record["payload"], json!({"key": key}), "record {offset}");
            (offset, key)
        })
        .collect()
}

/// Offsets run from 0 without a gap, and no key appears twice.
fn assert_contiguous_and_unique(records: &[(u64, String)]) {
    let offsets: Vec<u64> = records.iter().map(|(offset, _)| *offset).collect();
    let expected: Vec<u64> = (0..records.len() as u64).collect();
    assert_eq!(offsets, expected, "offsets run from 0 without a gap");
    let mut seen = HashMap::new();
    for (offset, key) in records {
        if let Some(earlier) = seen.insert(key, offset) {
            panic!("{key} is stored twice: at {earlier} and {offset}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Replicating nodes
// ---------------------------------------------------------------------------------------------

/// The `durability` binary over `data_dir` as node `node`, with its cold tier and its
/// replication in `s3`'s bucket, reached at `endpoint`, logging warnings; `overrides` are set
/// on top.
fn start_node(
    data_dir: &Path,
    s3: &S3Settings,
    endpoint: &str,
    node: &str,
    overrides: &[(&str, &str)],
) -> Server {
    let settings = replication_env(s3, endpoint, node);
    let log = [("RUST_LOG", "warn")];
    Server::start(
        data_dir,
        settings.iter().chain(&log).chain(overrides).copied(),
    )
}

/// A node on a fresh bucket that it reaches through a [`Proxy`], retrying a window PUT that
/// failed every `put_retry_ms`. Holds [`fd_count_lock`] while it lives: the proxy's sockets
/// count among this process's file descriptors.
struct ProxiedNode {
    // Dropped in this order: the server is killed before its data folder is removed and
    // before its proxy stops.
    server: Server,
    _data_dir: TempDir,
    proxy: Proxy,
    s3: S3Settings,
    _alone: MutexGuard<'static, ()>,
}

impl ProxiedNode {
    fn start(node: &str, put_retry_ms: &str) -> Self {
        Self::start_with(node, put_retry_ms, &[])
    }

    /// [`ProxiedNode::start`], with `overrides` set on top.
    fn start_with(node: &str, put_retry_ms: &str, overrides: &[(&str, &str)]) -> Self {
        let alone = fd_count_lock();
        let s3 = block_on(fresh_s3_bucket());
        let proxy = Proxy::start(&s3.endpoint);
        let data_dir = tempfile::tempdir().expect("temp dir");
        let server = start_node(
            data_dir.path(),
            &s3,
            &proxy.url(),
            node,
            &[
                [("DURABILITY__REPLICATION__PUT_RETRY_MS", put_retry_ms)].as_slice(),
                overrides,
            ]
            .concat(),
        );
        Self {
            server,
            _data_dir: data_dir,
            proxy,
            s3,
            _alone: alone,
        }
    }
}

/// Appends `count` records keyed `{prefix}-{n}` to partition 0 one at a time: one window each.
fn append_windows(addr: SocketAddr, count: usize, prefix: &str) {
    for n in 0..count {
        append_once(addr, 0, &format!("{prefix}-{n}")).expect("an append");
    }
}

/// Waits up to 30 s until the bucket holds at least `count` keys under `prefix`.
fn wait_for_keys(bucket: &Bucket, prefix: &str, count: usize, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while block_on(keys_under(bucket, prefix)).len() < count {
        assert!(Instant::now() < deadline, "{why}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// A take that replays a long history snapshots the volume at once: whoever takes it next
/// (after a failure, say) starts from there instead of replaying the same windows again.
#[test]
fn a_take_that_replays_a_long_history_snapshots_the_volume() {
    const LONG: usize = 1_100;
    let s3 = block_on(fresh_s3_bucket());
    let first = temp_dir();
    let mut node = start_node(first.path(), &s3, &s3.endpoint, "long", &[]);
    // One window per append: a history of 1,100 windows (more than a take replays without
    // snapshotting after), far below snapshot_bytes.
    append_windows(node.addr, LONG, "long");
    node.kill();
    let bucket = bucket_of(&s3);
    let snapshots = format!("{PREFIX}/vol/0000/snapshot/");
    assert!(
        block_on(keys_under(&bucket, &snapshots)).is_empty(),
        "no snapshot before the take"
    );
    // A fresh data folder: the take replays the whole history from the bucket.
    let second = temp_dir();
    let node = start_node(second.path(), &s3, &s3.endpoint, "long", &[]);
    wait_for_keys(&bucket, &snapshots, 1, "the volume was not snapshotted");
    assert_eq!(read_all(node.addr, 0).len(), LONG);
}

/// The windows of a long history are stored again in batches once landed, and a node taking
/// the volume reads them a batch at a time: far fewer GETs than windows (one per window
/// before), and every record back at its offset.
#[test]
fn a_take_reads_a_long_history_through_its_batches() {
    const WINDOWS: usize = 200;
    let s3 = block_on(fresh_s3_bucket());
    let first = temp_dir();
    let mut node = start_node(first.path(), &s3, &s3.endpoint, "batched", &[]);
    append_windows(node.addr, WINDOWS, "batched");
    let bucket = bucket_of(&s3);
    let batches = format!("{PREFIX}/batch/batched/");
    wait_for_keys(&bucket, &batches, WINDOWS / 64, "no batches were stored");
    node.kill();
    let proxy = Proxy::start(&s3.endpoint);
    let second = temp_dir();
    let node = start_node(second.path(), &s3, &proxy.url(), "batched", &[]);
    let expected: Vec<(u64, String)> = (0..WINDOWS)
        .map(|n| (n as u64, format!("batched-{n}")))
        .collect();
    assert_eq!(keyed_offsets(&read_all(node.addr, 0)), expected);
    let gets = proxy.state.wal_gets.load(Ordering::Relaxed);
    assert!(
        gets < WINDOWS as u64 / 2,
        "{gets} window GETs to take a history of {WINDOWS} windows"
    );
}

/// How many windows a node taking a volume over replays at most, by its manifest: each
/// segment from its first window to its end, or to `newest` (the stream's newest window) while
/// it is open.
fn replay_span(manifest: &Value, newest: u64) -> u64 {
    manifest["chain"]
        .as_array()
        .expect("a chain")
        .iter()
        .map(|segment| {
            let first = segment["first"].as_u64().expect("a first window");
            let end = segment["end"].as_u64().unwrap_or(newest + 1);
            end.saturating_sub(first)
        })
        .sum()
}

/// With `snapshot_windows` at 128, one volume written a window at a time and the others idle:
/// every volume's history stays within about 128 windows of the stream (plus a batch, as the
/// bound is looked at every 64 windows), the busy one through snapshots, the idle ones without
/// any (their histories just start later), and a node rebuilt from the bucket holds every
/// record.
#[test]
fn every_history_stays_within_the_replay_bound() {
    const WINDOWS: usize = 600;
    const BOUND: u64 = 128;
    let s3 = block_on(fresh_s3_bucket());
    let first = temp_dir();
    let settings = [("DURABILITY__REPLICATION__SNAPSHOT_WINDOWS", "128")];
    let mut node = start_node(first.path(), &s3, &s3.endpoint, "bounded", &settings);
    append_windows(node.addr, WINDOWS, "bounded");
    let bucket = bucket_of(&s3);
    let spans = || {
        let keys = block_on(keys_under(&bucket, &format!("{PREFIX}/")));
        let newest = keys
            .iter()
            .filter_map(|key| key.strip_prefix(&format!("{PREFIX}/wal/bounded/0000000001/")))
            .filter_map(|seq| seq.parse::<u64>().ok())
            .max()
            .expect("windows");
        keys.iter()
            .filter(|key| key.ends_with("/manifest"))
            .map(|key| {
                let manifest: Value =
                    serde_json::from_str(&block_on(get_text(&bucket, key))).expect("a manifest");
                (key.clone(), replay_span(&manifest, newest))
            })
            .collect::<Vec<_>>()
    };
    // Shortening runs behind the writes: the spans are read once it caught up, or after 20 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = spans();
        if spans.iter().all(|(_, span)| *span <= BOUND + 64) || Instant::now() >= deadline {
            break spans;
        }
        thread::sleep(Duration::from_millis(200));
    };
    assert!(
        spans.iter().all(|(_, span)| *span <= BOUND + 64),
        "a taker replays at most {BOUND} windows and a batch: {spans:?}"
    );
    let keys = block_on(keys_under(&bucket, &format!("{PREFIX}/vol/")));
    let snapshotted: BTreeSet<&str> = keys
        .iter()
        .filter(|key| key.contains("/snapshot/"))
        .filter_map(|key| key.split("/snapshot/").next())
        .collect();
    assert_eq!(
        snapshotted.len(),
        1,
        "only the volume written to was snapshotted: {snapshotted:?}"
    );

    node.kill();
    let second = temp_dir();
    let node = start_node(second.path(), &s3, &s3.endpoint, "bounded", &settings);
    let expected: Vec<(u64, String)> = (0..WINDOWS)
        .map(|n| (n as u64, format!("bounded-{n}")))
        .collect();
    assert_eq!(keyed_offsets(&read_all(node.addr, 0)), expected);
}
