//! A million partitions through the server binary over HTTP, with the open-file limit most
//! machines start processes with (1024): the rate of first writes as the partitions pile up,
//! the process's peaks, `/healthz` and a `/metrics` scrape at that size, a restart on the same
//! data, the cost of the server sitting on them nearly idle, and how much `partitions.max_open`
//! changes the rate of first writes.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::external::{self, Running, free_port};
use crate::partitions::{Client, Peaks, process};
use crate::report::thousands;

/// The server's open-file limit, soft and hard (so it cannot raise it): the usual default, far
/// below one descriptor per partition.
const OPEN_FILES: u64 = 1024;
/// Concurrent keep-alive connections writing the new partitions.
const CLIENTS: u64 = 32;
/// The record every append writes.
const BODY: &str = r#"[{"payload":{"n":1}}]"#;
/// How often the process is sampled and `/healthz` timed while writing.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How often `/healthz` is timed during the `/metrics` scrape, which may be short.
const SCRAPE_HEALTHZ_EVERY: Duration = Duration::from_millis(10);
/// The pace of the appends while nearly idle.
const IDLE_APPEND_EVERY: Duration = Duration::from_millis(200);
/// The `partitions.max_open` values compared, each on a fifth of the partitions.
const MAX_OPEN: [u64; 2] = [1_000, 100_000];

/// Everything one run measured.
pub struct Million {
    pub partitions: u64,
    pub clients: u64,
    /// The server's open-file limit, as `/proc/PID/limits` reports it.
    pub open_files_limit: u64,
    pub writes: Writes,
    /// Peaks over the writes.
    pub peak_fds: u64,
    pub peak_threads: u64,
    pub peak_rss_mib: f64,
    /// Slowest `/healthz` answer over the writes, and how many were not 200.
    pub healthz_max_ms: f64,
    pub healthz_failures: u64,
    pub metrics: Scrape,
    pub restart: Restart,
    pub idle: Idle,
    pub max_open: Vec<MaxOpen>,
}

impl Million {
    /// Rate with the smallest `max_open` over the rate with the largest.
    pub fn max_open_ratio(&self) -> Option<f64> {
        let (first, last) = (self.max_open.first()?, self.max_open.last()?);
        (last.writes.rate > 0.0).then(|| first.writes.rate / last.writes.rate)
    }
}

/// New partitions written once each.
pub struct Writes {
    /// (partitions written by the end of the block, new partitions/s within the block), one
    /// per tenth of the partitions.
    pub blocks: Vec<(u64, f64)>,
    /// New partitions/s over all of them.
    pub rate: f64,
    /// Appends not answered 2xx, and the first such answer.
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One `GET /metrics` once every partition is written.
pub struct Scrape {
    pub bytes: u64,
    pub ms: f64,
    /// Slowest `/healthz` answer while the scrape ran.
    pub healthz_max_ms: f64,
    pub peak_rss_mib: f64,
}

/// Stopping the server (SIGTERM) and starting it again on the same data.
pub struct Restart {
    /// SIGTERM → exited.
    pub shutdown_ms: f64,
    /// Spawned → `/healthz` answers 200.
    pub healthz_ms: f64,
    /// Spawned → an append to an existing topic answered 2xx.
    pub first_append_ms: f64,
}

/// The restarted server with one append every 200 ms to a random existing topic.
pub struct Idle {
    pub seconds: f64,
    pub appends: u64,
    pub errors: u64,
    /// The server's CPU time over the wall time, in % of one core.
    pub cpu_percent: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The baseline, measured in the same stretch: a 4 KiB append and fsync of a file beside
    /// the data folder, half way between two appends. An acknowledged append waits for one
    /// fsync, so its tail cannot be shorter than the disk's.
    pub fsync_p50_ms: f64,
    pub fsync_p99_ms: f64,
    pub fsync_max_ms: f64,
    /// Resident memory at the end.
    pub rss_mib: f64,
}

/// First writes under one `partitions.max_open`.
pub struct MaxOpen {
    pub max_open: u64,
    pub partitions: u64,
    pub writes: Writes,
}

/// The whole run: `partitions` new partitions on a fresh server, the scrape, the restart and
/// `idle` of near-idleness, then a fifth of the partitions under each of [`MAX_OPEN`]. `dir`
/// gives a fresh, settled folder by name.
pub fn run(
    binary: &Path,
    dir: &dyn Fn(&str) -> PathBuf,
    partitions: u64,
    idle: Duration,
) -> Million {
    let data = dir("million");
    let (mut server, address, pid) = start(binary, &data, None);
    wait_healthy(address, Instant::now());
    let open_files_limit = open_files_limit(pid);
    eprintln!(
        "  server open-file limit {open_files_limit}; {partitions} new partitions from {CLIENTS} clients"
    );

    let (writes, peaks) = watched(pid, address, SAMPLE_EVERY, || {
        write_new(address, partitions, "")
    });
    eprintln!(
        "  {} new partitions: {}/s overall, {} errors{}; peak {} fds, {} threads, {:.0} MiB; \
         slowest /healthz {:.1} ms ({} not 200)",
        thousands(partitions as f64),
        thousands(writes.rate),
        writes.errors,
        writes
            .first_error
            .as_ref()
            .map_or_else(String::new, |error| format!(" (first: {error})")),
        peaks.fds.load(Ordering::SeqCst),
        peaks.threads.load(Ordering::SeqCst),
        peaks.rss_mib(),
        peaks.healthz_ms(),
        peaks.healthz_failures.load(Ordering::SeqCst),
    );

    let ((bytes, ms), scrape_peaks) =
        watched(pid, address, SCRAPE_HEALTHZ_EVERY, || scrape(address));
    let metrics = Scrape {
        bytes,
        ms,
        healthz_max_ms: scrape_peaks.healthz_ms(),
        peak_rss_mib: scrape_peaks.rss_mib(),
    };
    eprintln!(
        "  GET /metrics: {} bytes in {:.0} ms; slowest /healthz meanwhile {:.1} ms; peak {:.0} MiB",
        thousands(bytes as f64),
        metrics.ms,
        metrics.healthz_max_ms,
        metrics.peak_rss_mib
    );

    // Restart: the stop is graceful (SIGTERM), and the new process starts on the same data.
    let stopping = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    assert!(
        killed.is_ok_and(|status| status.success()),
        "cannot SIGTERM the server"
    );
    let exit = server.0.wait().unwrap();
    let shutdown_ms = ms_since(stopping);
    drop(server);
    let spawned = Instant::now();
    let (server, address, pid) = start(binary, &data, None);
    let healthz_ms = wait_healthy(address, spawned);
    let first_append_ms = first_append(address, spawned);
    let restart = Restart {
        shutdown_ms,
        healthz_ms,
        first_append_ms,
    };
    eprintln!(
        "  restart: stopped in {shutdown_ms:.0} ms ({exit}); /healthz 200 after {healthz_ms:.0} ms, \
         first append after {first_append_ms:.0} ms"
    );

    let idle = nearly_idle(address, pid, partitions, idle, &data);
    eprintln!(
        "  {:.0} s nearly idle ({} appends, {} errors): CPU {:.1} % of a core, appends p50 {:.2} \
         ms, p99 {:.2} ms, max {:.2} ms (raw fsync p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms); \
         RSS {:.0} MiB",
        idle.seconds,
        idle.appends,
        idle.errors,
        idle.cpu_percent,
        idle.p50_ms,
        idle.p99_ms,
        idle.max_ms,
        idle.fsync_p50_ms,
        idle.fsync_p99_ms,
        idle.fsync_max_ms,
        idle.rss_mib
    );
    drop(server);

    let max_open = MAX_OPEN
        .into_iter()
        .map(|max_open| {
            let partitions = (partitions / 5).max(1);
            let (_server, address, _) = start(
                binary,
                &dir(&format!("max-open-{max_open}")),
                Some(max_open),
            );
            wait_healthy(address, Instant::now());
            let writes = write_new(address, partitions, &format!("max_open {max_open}: "));
            eprintln!(
                "  max_open {max_open}: {} new partitions at {}/s, {} errors",
                thousands(partitions as f64),
                thousands(writes.rate),
                writes.errors
            );
            MaxOpen {
                max_open,
                partitions,
                writes,
            }
        })
        .collect();

    let million = Million {
        partitions,
        clients: CLIENTS,
        open_files_limit,
        peak_fds: peaks.fds.load(Ordering::SeqCst),
        peak_threads: peaks.threads.load(Ordering::SeqCst),
        peak_rss_mib: peaks.rss_mib(),
        healthz_max_ms: peaks.healthz_ms(),
        healthz_failures: peaks.healthz_failures.load(Ordering::SeqCst),
        writes,
        metrics,
        restart,
        idle,
        max_open,
    };
    if let Some(ratio) = million.max_open_ratio() {
        eprintln!("  max_open 1,000 vs 100,000: {ratio:.2}× the rate");
    }
    million
}

/// Spawns the server on a free port with default settings but no cold tier, `data` as its
/// data folder, and its open-file limit at [`OPEN_FILES`]; does not wait for it.
fn start(binary: &Path, data: &Path, max_open: Option<u64>) -> (Running, SocketAddr, u32) {
    std::fs::create_dir_all(data).unwrap();
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut command = Command::new(binary);
    command
        .env("DURABILITY__SERVER__BIND", address.to_string())
        .env("DURABILITY__STORAGE__DATA_DIR", data)
        .env("DURABILITY__COLD__KIND", "none")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    if let Some(max_open) = max_open {
        command.env("DURABILITY__PARTITIONS__MAX_OPEN", max_open.to_string());
    }
    // SAFETY: runs in the forked child before exec; setrlimit is async-signal-safe and the
    // closure allocates nothing.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: OPEN_FILES as libc::rlim_t,
                rlim_max: OPEN_FILES as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
    let child = command
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    let pid = child.id();
    (Running(child), address, pid)
}

/// Waits until `GET /healthz` answers 200; answers the ms since `since`.
fn wait_healthy(address: SocketAddr, since: Instant) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if TcpStream::connect(address).is_ok()
            && Client::new(address).send("GET", "/healthz", "").0 == 200
        {
            return ms_since(since);
        }
        assert!(
            Instant::now() < deadline,
            "the server did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Appends to the first topic until an answer is 2xx; answers the ms since `since`.
fn first_append(address: SocketAddr, since: Instant) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut http = Client::new(address);
    loop {
        if (200..300).contains(&http.send("POST", &record_path(0), BODY).0) {
            return ms_since(since);
        }
        assert!(
            Instant::now() < deadline,
            "no append succeeded after the restart"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Partition 0 of topic `t{n}`.
fn record_path(topic: u64) -> String {
    format!("/topics/t{topic}/partitions/0/records")
}

/// Writes one record to partition 0 of each of topics `t0` .. `t{partitions-1}`, new ones,
/// from [`CLIENTS`] connections taking the next topic in turn; prints the rate of each tenth
/// as it ends, each line led by `label`.
fn write_new(address: SocketAddr, partitions: u64, label: &str) -> Writes {
    let block = (partitions / 10).max(1);
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let first_error = Mutex::new(None);
    let started = Instant::now();
    // (partitions written, when): block ends, in the order their writers got the lock.
    let marks = Mutex::new(vec![(0, started)]);
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            scope.spawn(|| {
                let mut http = Client::new(address);
                loop {
                    let topic = next.fetch_add(1, Ordering::Relaxed);
                    if topic >= partitions {
                        break;
                    }
                    let (status, answer) = http.send("POST", &record_path(topic), BODY);
                    if !(200..300).contains(&status) {
                        errors.fetch_add(1, Ordering::Relaxed);
                        let mut first = first_error.lock().unwrap();
                        if first.is_none() {
                            let answer: String = answer.chars().take(200).collect();
                            *first = Some(format!("{status} {answer}"));
                        }
                    }
                    let written = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if written.is_multiple_of(block) || written == partitions {
                        let now = Instant::now();
                        let mut marks = marks.lock().unwrap();
                        marks.push((written, now));
                        let rate = block_rate(&marks, written);
                        eprintln!(
                            "  {label}{} partitions: {}/s",
                            thousands(written as f64),
                            thousands(rate)
                        );
                    }
                }
            });
        }
    });
    let rate = partitions as f64 / started.elapsed().as_secs_f64();
    let mut marks = marks.into_inner().unwrap();
    marks.sort_by_key(|(written, _)| *written);
    let blocks = marks
        .iter()
        .skip(1)
        .map(|&(written, _)| (written, block_rate(&marks, written)))
        .collect();
    Writes {
        blocks,
        rate,
        errors: errors.into_inner(),
        first_error: first_error.into_inner().unwrap(),
    }
}

/// New partitions/s of the block ending at `written`: since the latest mark before it.
fn block_rate(marks: &[(u64, Instant)], written: u64) -> f64 {
    let (end, ended) = marks.iter().find(|(w, _)| *w == written).unwrap();
    let (start, started) = marks
        .iter()
        .filter(|(w, _)| *w < written)
        .max_by_key(|(w, _)| *w)
        .unwrap();
    (end - start) as f64 / ended.duration_since(*started).as_secs_f64()
}

/// Runs `work` while one thread samples the process `pid` from `/proc` and another times
/// `GET /healthz` on a connection of its own, each every `every`: separate threads, so a slow
/// `/healthz` does not leave the memory peak unsampled.
fn watched<T>(
    pid: u32,
    address: SocketAddr,
    every: Duration,
    work: impl FnOnce() -> T,
) -> (T, Peaks) {
    let peaks = Peaks::default();
    let running = AtomicBool::new(true);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while running.load(Ordering::SeqCst) {
                peaks.sample_process(pid);
                std::thread::sleep(every);
            }
        });
        scope.spawn(|| {
            let mut health = Client::new(address);
            while running.load(Ordering::SeqCst) {
                peaks.time_healthz(&mut health);
                std::thread::sleep(every);
            }
        });
        let result = work();
        running.store(false, Ordering::SeqCst);
        result
    });
    (result, peaks)
}

/// One `GET /metrics` on a new connection: (bytes of the body, ms until it was read).
fn scrape(address: SocketAddr) -> (u64, f64) {
    let mut http = Client::new(address);
    let sent = Instant::now();
    let (status, body) = http.send("GET", "/metrics", "");
    let ms = ms_since(sent);
    assert_eq!(
        status,
        200,
        "GET /metrics: {}",
        &body[..body.len().min(200)]
    );
    (body.len() as u64, ms)
}

/// One single-record append every [`IDLE_APPEND_EVERY`] for `length`, each to a random one of
/// the `partitions` topics written, one at a time on one connection, and half way between two
/// of them a raw 4 KiB append and fsync of a file beside `data` (the disk's own latency, the
/// baseline); the server's CPU time over that wall time, the appends' and the fsyncs'
/// percentiles, and the resident memory at the end.
fn nearly_idle(
    address: SocketAddr,
    pid: u32,
    partitions: u64,
    length: Duration,
    data: &Path,
) -> Idle {
    use std::io::Write;
    let baseline_path = data.with_extension("fsync-baseline");
    let mut baseline = std::fs::File::create(&baseline_path).unwrap();
    let mut fsyncs = Vec::new();
    let mut http = Client::new(address);
    let mut random = 0x9E37_79B9_7F4A_7C15_u64;
    let mut latencies = Vec::new();
    let mut errors = 0;
    let cpu_before = external::cpu(pid);
    let started = Instant::now();
    let mut due = started;
    while due < started + length {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        // xorshift64: uniform enough to spread the appends, and no dependency.
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let sent = Instant::now();
        let status = http.send("POST", &record_path(random % partitions), BODY).0;
        latencies.push(ms_since(sent));
        if !(200..300).contains(&status) {
            errors += 1;
        }
        std::thread::sleep((due + IDLE_APPEND_EVERY / 2).saturating_duration_since(Instant::now()));
        let synced = Instant::now();
        baseline.write_all(&[0; 4096]).unwrap();
        baseline.sync_all().unwrap();
        fsyncs.push(ms_since(synced));
        due += IDLE_APPEND_EVERY;
    }
    drop(baseline);
    let _ = std::fs::remove_file(&baseline_path);
    // The wall time is the whole stretch, the idle end after the last append included.
    std::thread::sleep((started + length).saturating_duration_since(Instant::now()));
    let wall = started.elapsed().as_secs_f64();
    let cpu_seconds = external::cpu(pid).since(cpu_before).total();
    latencies.sort_by(f64::total_cmp);
    fsyncs.sort_by(f64::total_cmp);
    let at = |sorted: &[f64], q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
    Idle {
        seconds: wall,
        appends: latencies.len() as u64,
        errors,
        cpu_percent: cpu_seconds / wall * 100.0,
        p50_ms: at(&latencies, 0.5),
        p99_ms: at(&latencies, 0.99),
        max_ms: at(&latencies, 1.0),
        fsync_p50_ms: at(&fsyncs, 0.5),
        fsync_p99_ms: at(&fsyncs, 0.99),
        fsync_max_ms: at(&fsyncs, 1.0),
        rss_mib: process(pid).2,
    }
}

/// The soft open-file limit of process `pid` (`/proc/PID/limits`), 0 if unreadable.
fn open_files_limit(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn ms_since(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
