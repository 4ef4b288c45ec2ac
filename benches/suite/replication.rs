//! Replication to object storage, through the server binary: appends whose every write lands
//! in a bucket before its answer (`replication.kind = "s3"`) next to the local disk alone
//! (`"none"`, `sync = full`) in the same run, against the S3 test server as it is and through
//! a proxy adding 25 ms to every S3 answer (S3 Standard's order of magnitude); PUTs per record,
//! PUTs per second with many quiet partitions, threads, and the time to restore a node whose
//! data folder was deleted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::external::{self, Running, exchange, free_port, next_offset};
use crate::partitions::{Client, process};

/// Added to every S3 answer by the slow proxy.
const S3_DELAY: Duration = Duration::from_millis(25);
pub const BUCKET: &str = "bench-replica";

/// One load: records/s and the answer latency's percentiles.
pub struct Load {
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One configuration's figures.
pub struct Mode {
    pub name: String,
    /// 100-record POSTs, 16 connections (records/s).
    pub batches: Load,
    /// Single-record POSTs, 50 connections.
    pub single: Load,
    /// Window PUTs per record written under each load (none without a bucket).
    pub batches_puts_per_record: Option<f64>,
    pub single_puts_per_record: Option<f64>,
    /// Threads of the server process after the loads.
    pub threads: u64,
}

/// PUTs per second while appends trickle into many partitions.
pub struct Quiet {
    pub partitions: u64,
    pub appends_per_s: f64,
    pub puts_per_s: f64,
}

pub struct Replication {
    pub modes: Vec<Mode>,
    pub quiet: Vec<Quiet>,
    /// (records, seconds from start to serving) of a node whose data folder was deleted.
    pub restore: Option<(u64, f64)>,
    /// The commit linger the runs used, for the latency goal.
    pub linger_ms: u64,
    /// Median time of one small create-only PUT to the S3 server, directly and through the
    /// slow proxy (ms).
    pub put_ms: (f64, f64),
}

/// Median time of a create-only 1 KiB PUT to the bucket through `via` (ms). The test server
/// closes every connection after its answer, so each PUT connects anew, as the server's
/// client does with it.
fn put_ms(via: SocketAddr, prefix: &str) -> f64 {
    let body = "x".repeat(1024);
    let mut times: Vec<f64> = (0..50)
        .map(|n| {
            let request = format!(
                "PUT /{BUCKET}/{prefix}/probe-{n} HTTP/1.1\r\nHost: {via}\r\nIf-None-Match: *\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let started = Instant::now();
            let mut stream = TcpStream::connect(via).unwrap();
            stream.set_nodelay(true).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            // The answer's head is enough (the server then takes its time closing).
            let mut answer = [0; 12];
            stream.read_exact(&mut answer).unwrap();
            assert!(answer.starts_with(b"HTTP/1.1 200"), "probe PUT: {answer:?}");
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The S3 test server (`scripts/s3-server`) on a free port, with the bucket created.
pub fn s3_server(dir: &Path) -> (Running, SocketAddr) {
    std::fs::create_dir_all(dir).unwrap();
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server");
    let log = std::fs::File::create(dir.join("s3.log")).unwrap();
    let child = Command::new(&script)
        .arg(address.port().to_string())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", script.display()));
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(300);
    while TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "the S3 server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let answer = exchange(
        address,
        &format!(
            "PUT /{BUCKET} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "create bucket: {answer}"
    );
    (running, address)
}

/// A TCP proxy to `upstream` that holds every answer's first bytes back for `delay`: each S3
/// call (one request, one answer) takes `delay` longer. Runs until the process ends.
fn slow_proxy(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            let (client_in, server_out) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pipe(client_in, server_out, None));
            std::thread::spawn(move || pipe(server, client, Some(delay)));
        }
    });
    address
}

/// Copies `from` to `to`; with `delay`, waits that long before each chunk that starts an
/// answer (`HTTP/1.`).
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Option<Duration>) {
    let mut buffer = vec![0; 64 << 10];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(delay) = delay
            && buffer[..n].starts_with(b"HTTP/1.")
        {
            std::thread::sleep(delay);
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Where a server replicates: the S3 server's address and the prefix of its objects.
type Bucket<'a> = (SocketAddr, &'a str);

/// Starts the server: retention off, data in `dir`; with `s3`, replication and the cold tier
/// in that bucket (`sync = normal`: the bucket is the durable copy), else `sync = full` and no
/// cold tier.
fn server(binary: &Path, dir: &Path, s3: Option<Bucket>) -> (Running, SocketAddr, u32) {
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = Command::new(binary);
    command
        .env("DURABILITY__SERVER__BIND", address.to_string())
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("DURABILITY__RETENTION__MAX_AGE_MS", "0")
        .env("DURABILITY__RETENTION__MAX_BYTES", "0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    match s3 {
        Some((s3, prefix)) => command
            .env("DURABILITY__STORAGE__SYNC", "normal")
            .env("DURABILITY__REPLICATION__PREFIX", prefix)
            .env("DURABILITY__COLD__KIND", "s3")
            .env("DURABILITY__COLD__S3_ENDPOINT", format!("http://{s3}"))
            .env("DURABILITY__COLD__S3_BUCKET", BUCKET)
            .env("DURABILITY__COLD__S3_REGION", "eu-west-1")
            .env("DURABILITY__COLD__S3_ACCESS_KEY", "bench")
            .env("DURABILITY__COLD__S3_SECRET_KEY", "bench")
            .env("DURABILITY__REPLICATION__KIND", "s3")
            .env("DURABILITY__REPLICATION__NODE_ID", "bench"),
        None => command
            .env("DURABILITY__STORAGE__SYNC", "full")
            .env("DURABILITY__COLD__KIND", "none"),
    };
    let child = command
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    let pid = child.id();
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(600);
    while TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (running, address, pid)
}

/// Window PUTs under `prefix`: every stream object but the incarnations' claims (seq 0).
fn windows((s3, prefix): Bucket) -> u64 {
    let mut count = 0;
    let mut after = String::new();
    loop {
        let answer = exchange(
            s3,
            &format!(
                "GET /{BUCKET}?list-type=2&prefix={prefix}/wal/&start-after={after} HTTP/1.1\r\nHost: {s3}\r\nConnection: close\r\n\r\n"
            ),
        );
        let keys: Vec<&str> = answer
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split("</Key>").next())
            .collect();
        count += keys
            .iter()
            .filter(|key| !key.ends_with("/0000000000000000"))
            .count() as u64;
        match keys.last() {
            Some(last) if answer.contains("<IsTruncated>true</IsTruncated>") => {
                after = (*last).to_owned()
            }
            _ => return count,
        }
    }
}

/// The two loads against a fresh server, and what they cost.
fn loads(
    binary: &Path,
    dir: &Path,
    name: &str,
    s3: Option<Bucket>,
    counted: Option<Bucket>,
    payload: &str,
    budget: Duration,
) -> Mode {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (_server, address, pid) = server(binary, dir, s3);
    let url = format!("http://{address}/topics/bench/partitions/0/records");
    let (single, hundred) = external::append_scripts(dir, payload);
    // Window PUTs per record written by `load`.
    let per_record = |load: &mut dyn FnMut() -> external::Wrk| {
        let before = (counted.map(windows), next_offset(address));
        let measured = load();
        let records = next_offset(address) - before.1;
        let puts = counted
            .zip(before.0)
            .map(|(s3, before)| windows(s3) - before);
        (measured, puts.map(|puts| puts as f64 / records as f64))
    };
    let (batches, batches_puts_per_record) =
        per_record(&mut || external::wrk(&url, 16, &hundred, budget));
    let (single, single_puts_per_record) =
        per_record(&mut || external::wrk(&url, 50, &single, budget));
    let threads = process(pid).1;
    eprintln!(
        "  {name}: 100-record POSTs {:.0} records/s (p50 {:.1} ms), single {:.0}/s (p50 {:.1} ms), \
         {threads} threads{}",
        batches.requests_per_second * 100.0,
        batches.p50_ms,
        single.requests_per_second,
        single.p50_ms,
        batches_puts_per_record.map_or(String::new(), |p| format!(", {p:.4} PUTs per record"))
    );
    Mode {
        name: name.to_owned(),
        batches: Load {
            rate: batches.requests_per_second * 100.0,
            p50_ms: batches.p50_ms,
            p99_ms: batches.p99_ms,
        },
        single: Load {
            rate: single.requests_per_second,
            p50_ms: single.p50_ms,
            p99_ms: single.p99_ms,
        },
        batches_puts_per_record,
        single_puts_per_record,
        threads,
    }
}

/// PUTs per second while 16 clients append `rate` records a second, round-robin over
/// `partitions` partitions that exist already.
fn quiet(
    binary: &Path,
    dir: &Path,
    s3: Bucket,
    partitions: u64,
    rate: f64,
    budget: Duration,
) -> Quiet {
    const CLIENTS: u64 = 16;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (_server, address, _) = server(binary, dir, Some(s3));
    let payload = "\"q\"";
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            scope.spawn(move || {
                let mut http = Client::new(address);
                for p in (client..partitions).step_by(CLIENTS as usize) {
                    http.append(&format!("quiet-{}", p / 8), p % 8, payload);
                }
            });
        }
    });
    let before = windows(s3);
    let started = Instant::now();
    let appended: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let mut http = Client::new(address);
                    let interval = Duration::from_secs_f64(CLIENTS as f64 / rate);
                    let mut n = 0;
                    let mut p = client;
                    while started.elapsed() < budget {
                        http.append(&format!("quiet-{}", (p % partitions) / 8), p % 8, payload);
                        n += 1;
                        p += CLIENTS;
                        let due = interval * n as u32;
                        if let Some(wait) = due.checked_sub(started.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                    n
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let puts = windows(s3) - before;
    let measured = Quiet {
        partitions,
        appends_per_s: appended as f64 / elapsed,
        puts_per_s: puts as f64 / elapsed,
    };
    eprintln!(
        "  {partitions} quiet partitions: {:.0} appends/s, {:.0} PUTs/s",
        measured.appends_per_s, measured.puts_per_s
    );
    measured
}

/// Writes at least `records` records to one partition, kills the server, deletes its data
/// folder and starts it again: the records written, and the seconds from the start until it
/// serves, having restored every one.
fn restore(binary: &Path, dir: &Path, s3: Bucket, records: u64, payload: &str) -> (u64, f64) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (server_run, address, _) = server(binary, dir, Some(s3));
    let url = format!("http://{address}/topics/bench/partitions/0/records");
    let (_, hundred) = external::append_scripts(dir, payload);
    while next_offset(address) < records {
        external::wrk(&url, 16, &hundred, Duration::from_secs(5));
    }
    // wrk stops with requests in flight: what they write lands a moment later, or, when the
    // S3 test server is busy taking a snapshot, up to a second or so later.
    let mut written = next_offset(address);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = next_offset(address);
        if now == written {
            break;
        }
        written = now;
    }
    drop(server_run);
    std::fs::remove_dir_all(dir.join("data")).unwrap();
    let started = Instant::now();
    let (_server, address, _) = server(binary, dir, Some(s3));
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(next_offset(address), written, "every record restored");
    eprintln!("  restored {written} records in {seconds:.1} s");
    (written, seconds)
}

/// The whole section.
pub fn run(
    binary: &Path,
    root: &Path,
    payload: &str,
    budget: Duration,
    quick: bool,
) -> Replication {
    eprintln!("replication");
    let (_s3, s3) = s3_server(&root.join("s3"));
    let slow = slow_proxy(s3, S3_DELAY);
    let put_ms = (put_ms(s3, "probe"), put_ms(slow, "probe-slow"));
    eprintln!(
        "  one PUT: {:.1} ms, {:.1} ms through the slow proxy",
        put_ms.0, put_ms.1
    );
    let modes = vec![
        loads(
            binary,
            &root.join("none"),
            "none (local disk, sync = full)",
            None,
            None,
            payload,
            budget,
        ),
        loads(
            binary,
            &root.join("s3"),
            "s3, local S3 server",
            Some((s3, "local")),
            Some((s3, "local")),
            payload,
            budget,
        ),
        loads(
            binary,
            &root.join("s3-slow"),
            "s3, +25 ms per S3 call",
            Some((slow, "slow")),
            Some((s3, "slow")),
            payload,
            budget,
        ),
    ];
    let counts: &[u64] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let quiet = counts
        .iter()
        .map(|&partitions| {
            let prefix = format!("quiet-{partitions}");
            quiet(
                binary,
                &root.join(&prefix),
                (s3, &prefix),
                partitions,
                500.0,
                budget,
            )
        })
        .collect();
    let restored = restore(
        binary,
        &root.join("restore"),
        (s3, "restore"),
        1_000_000,
        payload,
    );
    Replication {
        modes,
        quiet,
        restore: Some(restored),
        linger_ms: 2,
        put_ms,
    }
}
