//! Many partitions on one node: open partitions are bounded (least recently used closed first,
//! `overloaded` when all are busy), file descriptors and threads do not follow the partition
//! count, and a closed partition is gone (its actor dropped, nothing logged after).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use durability::partition::DeadLetter;
use durability::store::{NewRecord, Record};
use durability::{Config, Error, Log};
use serde_json::{Value, json};

use crate::common::{TestLog, TestServer, http_exchange};

/// One `Connection: close` request to `addr`: status and JSON body.
fn request(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_exchange(addr, &request)
}

/// Appends `{"n": n}` to `topic`/`partition`, retrying while the server answers `overloaded`
/// (which it may only do while every open partition is busy); answers how often it was told so.
fn append_retrying(addr: std::net::SocketAddr, topic: &str, partition: u32, n: usize) -> usize {
    let path = format!("/topics/{topic}/partitions/{partition}/records");
    let body = json!([{ "payload": { "n": n }, "key": format!("k{n}") }]).to_string();
    let mut overloaded = 0;
    loop {
        match request(addr, "POST", &path, &body) {
            (202, _) => return overloaded,
            (503, answer) if answer["error"]["code"] == "overloaded" => {
                overloaded += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (status, answer) => panic!("append to {topic}/{partition}: {status} {answer}"),
        }
    }
}

/// The one record of `topic`/`partition`, read back over HTTP.
fn read_back(addr: std::net::SocketAddr, topic: &str, partition: u32) -> Value {
    let (status, page) = request(
        addr,
        "GET",
        &format!("/topics/{topic}/partitions/{partition}/records?from=0"),
        "",
    );
    assert_eq!(status, 200, "read {topic}/{partition}: {page}");
    page["records"][0]["payload"].clone()
}

/// File descriptors this process holds on files under `dir` now. A partition that held
/// descriptors of its own would hold them there; the process's other descriptors (sockets,
/// and the files of other tests running in this process) come and go with those tests.
fn open_fds(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |fds| {
        fds.flatten()
            .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(dir)))
            .count()
    })
}

/// With `max_open = 32`, 16 clients write 2,000 distinct partitions concurrently: every write
/// is acknowledged, the process's descriptors on the server's data folder stay within 64 of
/// where they started (no descriptor per partition), at most 32 partitions are open at any
/// time, and every partition reads back its record.
#[actix::test]
// The lock's other holders are plain threads, never a task of this runtime.
#[allow(clippy::await_holding_lock)]
async fn two_thousand_partitions_through_thirty_two_open_ones() {
    const PARTITIONS: usize = 2_000;
    const CLIENTS: usize = 16;
    let _alone = crate::common::fd_count_lock();
    let server = TestServer::start(|config| {
        config.partitions.max_open = 32;
        config.log.partitions_per_topic = 8;
    });
    let addr = server.addr;
    let data_dir = server.log.config.storage.data_dir.clone();
    let fds_before = open_fds(&data_dir);
    assert!(
        fds_before > 0,
        "the server holds its volume open under {data_dir:?}"
    );
    let peak_fds = Arc::new(AtomicUsize::new(fds_before));
    let writing = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak_fds, writing) = (peak_fds.clone(), writing.clone());
        std::thread::spawn(move || {
            while writing.load(Ordering::SeqCst) {
                peak_fds.fetch_max(open_fds(&data_dir), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let next = next.clone();
            actix_web::rt::task::spawn_blocking(move || {
                let mut overloaded = 0;
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= PARTITIONS {
                        return overloaded;
                    }
                    overloaded += append_retrying(addr, &format!("t{}", n / 8), (n % 8) as u32, n);
                }
            })
        })
        .collect();
    let mut overloaded = 0;
    for client in clients {
        overloaded += client.await.expect("a client");
        let counters = server.log.log.partition_counters();
        assert!(counters.open() <= 32, "{} open", counters.open());
    }
    writing.store(false, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = peak_fds.load(Ordering::SeqCst);
    assert!(
        peak <= fds_before + 64,
        "fds went from {fds_before} to {peak} while writing {PARTITIONS} partitions"
    );
    let counters = server.log.log.partition_counters();
    assert!(counters.open() <= 32);
    assert!(counters.closed_for_room() >= (PARTITIONS - 32) as u64);
    eprintln!("overloaded answers (then retried): {overloaded}");
    let payloads = actix_web::rt::task::spawn_blocking(move || {
        (0..PARTITIONS)
            .map(|n| read_back(addr, &format!("t{}", n / 8), (n % 8) as u32))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (n, payload) in payloads.iter().enumerate() {
        assert_eq!(payload, &json!({ "n": n }), "partition {n}");
    }
    server.stop().await;
}

/// A dead-letter destination that holds its caller until released, which keeps the partition
/// that sends to it busy.
#[derive(Debug, Default)]
struct HeldDeadLetter {
    release: tokio::sync::Notify,
    entered: tokio::sync::Notify,
}

impl DeadLetter for HeldDeadLetter {
    fn store_exhausted<'a>(
        &'a self,
        _origin: &'a durability::names::PartitionId,
        _records: &'a [Record],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send + 'a>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            Ok(())
        })
    }
}

/// With `max_open = 1` and that partition busy (its lease waits on the dead-letter
/// destination), another partition cannot open: `overloaded`, nothing written. Once the busy
/// one finishes, the same append succeeds (the idle partition is closed to make room).
#[actix::test]
async fn all_open_partitions_busy_answers_overloaded_until_one_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::for_tests(dir.path());
    config.partitions.max_open = 1;
    config.leases.max_attempts = 1;
    let held = Arc::new(HeldDeadLetter::default());
    let log = Log::builder(config)
        .dead_letter(held.clone())
        .open()
        .unwrap();
    log.append("busy", 0, vec![NewRecord::new("1")])
        .await
        .unwrap();
    let lease = log.lease("busy", 0, "g", None).await.unwrap().unwrap();
    log.nack("busy", 0, "g", &lease.batch_id, 0).await.unwrap();
    // The second delivery is over the limit: the lease hands it to the held dead letters.
    let leasing = actix::spawn({
        let log = log.clone();
        async move { log.lease("busy", 0, "g", None).await }
    });
    held.entered.notified().await;

    let err = log
        .append("other", 0, vec![NewRecord::new("2")])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Overloaded { open: 1, .. }), "{err:?}");
    assert_eq!(err.code(), "overloaded");
    assert_eq!(log.partition_counters().overloaded(), 1);
    assert!(log.bounds("other", 0).await.unwrap().next_offset == 0);

    held.release.notify_one();
    assert!(matches!(leasing.await.unwrap(), Ok(None)));
    let appended = log
        .append("other", 0, vec![NewRecord::new("2")])
        .await
        .unwrap();
    assert!(appended.outcome.is_appended());
    assert_eq!(log.partition_counters().closed_for_room(), 1);
    assert_eq!(log.bounds("busy", 0).await.unwrap().next_offset, 1);
}

/// A partition closed for being idle is gone: its actor is dropped (its timers cancelled) and
/// the next message opens a fresh one that still has its data.
#[actix::test]
async fn an_idle_partition_is_dropped_and_reopens_with_its_data() {
    let t = TestLog::with(|config| {
        config.partitions.idle_stop_ms = 40;
        config.retention.sweep_interval_ms = 10;
        config.retention.max_records = 10;
    });
    t.log
        .append("idle", 0, vec![NewRecord::new("1")])
        .await
        .unwrap();
    let counters = t.log.partition_counters();
    assert_eq!(counters.actors(), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.actors() > 0 || counters.open() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} actors, {} open",
            counters.actors(),
            counters.open()
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(t.log.running_partitions().await.unwrap().is_empty());
    let page = t.log.read("idle", 0, Some(0), None).await.unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(counters.actors(), 1);
    assert_eq!(counters.opened(), 2);
}

/// Partitions of each volume file in `data_dir`: `(topic, partition)` rows per file.
fn partitions_per_volume(data_dir: &std::path::Path) -> Vec<Vec<(String, u32)>> {
    let mut volumes = Vec::new();
    for index in 0.. {
        let path = data_dir.join(format!("volume-{index}.sqlite"));
        if !path.exists() {
            break;
        }
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let mut statement = conn
            .prepare("SELECT topic, partition FROM partitions ORDER BY topic, partition")
            .unwrap();
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        volumes.push(rows.map(Result::unwrap).collect());
    }
    volumes
}

/// New partitions are spread over `storage.volumes` volumes; with fewer volumes configured
/// later, each partition is still found in the volume that holds it (never added to a second
/// one), the topic list covers every volume, and a read of an unknown partition adds nothing.
#[actix::test]
async fn partitions_stay_in_their_volume_when_the_volume_count_changes() {
    let t = TestLog::with(|config| config.storage.volumes = 3);
    let partitions: Vec<(String, u32)> = (0..3)
        .flat_map(|topic| (0..8).map(move |partition| (format!("tenant-{topic}"), partition)))
        .collect();
    for (topic, partition) in &partitions {
        t.log
            .append(topic, *partition, vec![NewRecord::new("1")])
            .await
            .unwrap();
    }
    let data_dir = t.config.storage.data_dir.clone();
    let before = partitions_per_volume(&data_dir);
    assert_eq!(before.len(), 3);
    assert!(
        before.iter().filter(|volume| !volume.is_empty()).count() >= 2,
        "spread over the volumes: {before:?}"
    );
    t.log.shutdown().await.unwrap();

    let mut config = t.config.clone();
    config.storage.volumes = 1;
    let log = Log::open(config).unwrap();
    for (topic, partition) in &partitions {
        let appended = log
            .append(topic, *partition, vec![NewRecord::new("2")])
            .await
            .unwrap();
        let durability::store::AppendOutcome::Appended { offsets } = appended.outcome else {
            panic!("{topic}/{partition} refused the append");
        };
        assert_eq!(offsets, [1], "{topic}/{partition} continues its log");
    }
    assert!(
        log.read("tenant-9", 0, Some(0), None).await.is_err()
            || log
                .read("tenant-9", 0, Some(0), None)
                .await
                .unwrap()
                .records
                .is_empty()
    );
    let topics: Vec<String> = log
        .topics()
        .await
        .unwrap()
        .into_iter()
        .map(|topic| topic.name)
        .collect();
    assert_eq!(topics, ["tenant-0", "tenant-1", "tenant-2"]);
    log.shutdown().await.unwrap();
    assert_eq!(
        partitions_per_volume(&data_dir),
        before,
        "no partition moved or was added to a second volume"
    );
}

/// A topic-wide long-poll keeps waiting while its partitions are closed to make room
/// (`max_open = 2`), and a record appended afterwards (reopening its partition) wakes it.
#[actix::test]
async fn a_long_poll_wakes_after_its_partition_was_closed_for_room() {
    let t = TestLog::with(|config| config.partitions.max_open = 2);
    let log = t.log.clone();
    log.append("waited", 0, vec![NewRecord::new("1")])
        .await
        .unwrap();
    log.commit("waited", 0, "g", 1).await.unwrap();
    let polling = actix::spawn({
        let log = log.clone();
        async move { log.poll("waited", "g", None, Duration::from_secs(20)).await }
    });
    actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    for topic in ["a", "b", "c"] {
        log.append(topic, 0, vec![NewRecord::new("0")])
            .await
            .unwrap();
    }
    assert!(
        !log.running_partitions()
            .await
            .unwrap()
            .iter()
            .any(|id| id.topic() == "waited"),
        "the waited partition was closed to make room"
    );
    assert!(log.partition_counters().closed_for_room() >= 1);
    log.append("waited", 0, vec![NewRecord::new("2")])
        .await
        .unwrap();
    let pages = actix_web::rt::time::timeout(Duration::from_secs(5), polling)
        .await
        .expect("the poll wakes")
        .unwrap()
        .unwrap();
    assert_eq!(pages[0].records[0].payload, "2");
}

// ---------------------------------------------------------------------------------------------
// The server binary
// ---------------------------------------------------------------------------------------------

/// The `durability` binary started with `shell_prefix` (for example a `ulimit`) and extra
/// environment, on an ephemeral port over a temporary folder; its stderr is collected.
struct Binary {
    child: Child,
    addr: std::net::SocketAddr,
    stderr: Arc<std::sync::Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Binary {
    fn start(shell_prefix: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("{shell_prefix} exec \"$0\""))
            .arg(env!("CARGO_BIN_EXE_durability"))
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__STORAGE__DATA_DIR", dir.path().join("data"))
            .env("DURABILITY__COLD__KIND", "none")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start the server binary");
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap());
        let collected = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = stdout
            .find_map(|line| {
                line.ok()?
                    .split_once("listening on http://")
                    .map(|(_, addr)| addr.trim().to_owned())
            })
            .expect("the server announces its address")
            .parse()
            .unwrap();
        std::thread::spawn(move || stdout.for_each(drop));
        Self {
            child,
            addr,
            stderr,
            _dir: dir,
        }
    }

    /// Writes one record to each of `partitions` partitions (8 per topic) from 8 clients.
    fn write(&self, partitions: usize, topic_prefix: &str) {
        let next = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let next = next.clone();
                scope.spawn(move || {
                    loop {
                        let n = next.fetch_add(1, Ordering::SeqCst);
                        if n >= partitions {
                            break;
                        }
                        let topic = format!("{topic_prefix}{}", n / 8);
                        append_retrying(self.addr, &topic, (n % 8) as u32, n);
                    }
                });
            }
        });
    }

    /// The server's metrics by name (series without labels).
    fn metrics(&self) -> BTreeMap<String, f64> {
        let request = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        let mut stream = std::net::TcpStream::connect(self.addr).unwrap();
        std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.split_once(' ')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// Resident memory of the server process, in KiB.
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Under a hard limit of 256 open files, the server writes and reads back 5,000 partitions
/// (before, each open partition held about ten descriptors and about 100 topics were enough to
/// exhaust 1,024).
#[test]
fn the_server_serves_five_thousand_partitions_under_256_fds() {
    const PARTITIONS: usize = 5_000;
    let server = Binary::start("ulimit -n 256 &&", &[]);
    server.write(PARTITIONS, "tenant-");
    for n in (0..PARTITIONS).step_by(7) {
        assert_eq!(
            read_back(server.addr, &format!("tenant-{}", n / 8), (n % 8) as u32),
            json!({ "n": n })
        );
    }
    let metrics = server.metrics();
    assert!(metrics["process_open_fds"] < 256.0, "{metrics:?}");
    assert!(
        server
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("open-file limit: soft 256")),
        "the limits are logged"
    );
}

/// Threads of the server process whose name starts with `prefix` (names are cut at 15 bytes).
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .count()
}

/// A node of 64 volumes, each written through many partitions at once, commits on no more
/// threads than its committer pool has (`storage.committers`, 3 here): its threads do not
/// follow its volumes (each volume had a thread of its own before).
#[test]
fn sixty_four_volumes_commit_on_the_committer_pool_threads() {
    const VOLUMES: usize = 64;
    let server = Binary::start(
        "",
        &[
            ("DURABILITY__STORAGE__VOLUMES", "64"),
            ("DURABILITY__STORAGE__COMMITTERS", "3"),
        ],
    );
    server.write(VOLUMES * 16, "spread-");
    let used = partitions_per_volume(&server._dir.path().join("data"));
    assert_eq!(used.len(), VOLUMES);
    assert!(
        used.iter().all(|partitions| !partitions.is_empty()),
        "every volume was written"
    );
    let committers = threads_named(server.child.id(), "durability-comm");
    assert!(
        (1..=3).contains(&committers),
        "{committers} committer threads"
    );
    let threads = server.metrics()["process_threads"];
    assert!(threads < VOLUMES as f64, "{threads} threads");
    for n in (0..VOLUMES * 16).step_by(9) {
        assert_eq!(
            read_back(server.addr, &format!("spread-{}", n / 8), (n % 8) as u32),
            json!({ "n": n })
        );
    }
}

/// Ten cycles of 1,000 partitions written and then left idle: after each idle period no
/// partition is open and no partition actor is alive, nothing is logged about a stopped
/// partition, and resident memory after the last cycle is within 1.2× of after the first.
#[test]
fn stop_start_cycles_return_every_partition_and_its_memory() {
    const PARTITIONS: usize = 1_000;
    let server = Binary::start(
        "",
        &[
            ("DURABILITY__PARTITIONS__IDLE_STOP_MS", "200"),
            ("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "50"),
            ("DURABILITY__RETENTION__MAX_RECORDS", "100"),
        ],
    );
    let mut rss_after_idle = Vec::new();
    for cycle in 0..10 {
        server.write(PARTITIONS, "cycle-");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let metrics = server.metrics();
            if metrics["durability_open_partitions"] == 0.0
                && metrics["durability_partition_actors"] == 0.0
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: still {} open, {} actors",
                metrics["durability_open_partitions"],
                metrics["durability_partition_actors"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        rss_after_idle.push(server.rss_kib());
    }
    let (first, last) = (rss_after_idle[0], rss_after_idle[9]);
    assert!(
        last as f64 <= first as f64 * 1.2,
        "RSS after idle, per cycle (KiB): {rss_after_idle:?}"
    );
    let stderr = server.stderr.lock().unwrap();
    let complaints: Vec<&String> = stderr
        .iter()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
}

/// Making room closes the open partition used least recently: one read after its open keeps
/// the first-opened partition, and the second-opened one, untouched since, is closed instead;
/// then the read one, when it is the oldest use.
#[actix::test]
async fn room_is_made_by_closing_the_least_recently_used_partition() {
    let t = TestLog::with(|config| config.partitions.max_open = 3);
    let pause = || actix_web::rt::time::sleep(Duration::from_millis(5));
    for topic in ["a", "b", "c"] {
        t.log
            .append(topic, 0, vec![NewRecord::new("1")])
            .await
            .unwrap();
        pause().await;
    }
    t.log.read("a", 0, Some(0), None).await.unwrap();
    pause().await;
    t.log
        .append("d", 0, vec![NewRecord::new("1")])
        .await
        .unwrap();
    let open = |topics: &[&str]| -> Vec<String> {
        topics.iter().map(|topic| format!("{topic}:0")).collect()
    };
    let running = |log: &Log| {
        let log = log.clone();
        async move {
            log.running_partitions()
                .await
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(running(&t.log).await, open(&["a", "c", "d"]));
    pause().await;
    t.log
        .append("e", 0, vec![NewRecord::new("1")])
        .await
        .unwrap();
    assert_eq!(running(&t.log).await, open(&["a", "d", "e"]));
    assert_eq!(t.log.partition_counters().closed_for_room(), 2);
}
