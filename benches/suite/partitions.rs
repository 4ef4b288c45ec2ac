//! Cost growth in partitions, through the server binary over HTTP: distinct partitions written
//! once each (first-write latency, and the process's peak descriptors, threads and memory, and
//! its memory once they are idle), and appends spread round-robin over many partitions.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::external::{Running, free_port};

/// One size of the growth measurement.
pub struct GrowthPoint {
    pub partitions: u64,
    /// First writes per second (16 clients).
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub peak_fds: u64,
    pub peak_threads: u64,
    pub peak_rss_mib: f64,
    pub idle_rss_mib: f64,
    pub start_rss_mib: f64,
    /// Slowest `/healthz` answer while writing.
    pub healthz_max_ms: f64,
}

/// Starts the server with default settings but for `idle_stop_ms` (so idle memory shows within
/// the run), no retention and no cold tier.
fn server(binary: &Path, dir: &Path, idle_stop_ms: u64) -> (Running, SocketAddr, u32) {
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child: Child = Command::new(binary)
        .env("DURABILITY__SERVER__BIND", address.to_string())
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("DURABILITY__COLD__KIND", "none")
        .env("DURABILITY__RETENTION__MAX_AGE_MS", "0")
        .env("DURABILITY__RETENTION__MAX_BYTES", "0")
        .env(
            "DURABILITY__PARTITIONS__IDLE_STOP_MS",
            idle_stop_ms.to_string(),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Running(child), address, pid)
}

/// A keep-alive HTTP/1.1 connection.
pub struct Client {
    reader: BufReader<TcpStream>,
    address: SocketAddr,
}

impl Client {
    pub fn new(address: SocketAddr) -> Self {
        let stream = TcpStream::connect(address).unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            reader: BufReader::new(stream),
            address,
        }
    }

    /// Sends a request and reads the answer: (status, body).
    pub fn send(&mut self, method: &str, path: &str, body: &str) -> (u16, String) {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Appends one record, retrying while the server answers `overloaded`.
    pub fn append(&mut self, topic: &str, partition: u64, payload: &str) {
        let path = format!("/topics/{topic}/partitions/{partition}/records");
        let body = format!("[{{\"payload\":{payload}}}]");
        loop {
            match self.send("POST", &path, &body) {
                (202, _) => return,
                (503, answer) if answer.contains("overloaded") => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                (status, answer) => panic!("append: {status} {answer}"),
            }
        }
    }
}

/// The process's descriptors, threads and resident memory (MiB).
pub fn process(pid: u32) -> (u64, u64, f64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| fds.count() as u64);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0)
    };
    (fds, field("Threads:") as u64, field("VmRSS:") / 1024.0)
}

/// Peaks of a server process (from `/proc`) and of its `/healthz` answers while something ran.
#[derive(Default)]
pub struct Peaks {
    pub fds: AtomicU64,
    pub threads: AtomicU64,
    rss_kib: AtomicU64,
    healthz_us: AtomicU64,
    /// `/healthz` answers that were not 200.
    pub healthz_failures: AtomicU64,
}

impl Peaks {
    /// Samples the process `pid` once.
    pub fn sample_process(&self, pid: u32) {
        let (fds, threads, rss_mib) = process(pid);
        self.fds.fetch_max(fds, Ordering::SeqCst);
        self.threads.fetch_max(threads, Ordering::SeqCst);
        self.rss_kib
            .fetch_max((rss_mib * 1024.0) as u64, Ordering::SeqCst);
    }

    /// Times one `GET /healthz` on `health`.
    pub fn time_healthz(&self, health: &mut Client) {
        let sent = Instant::now();
        if health.send("GET", "/healthz", "").0 != 200 {
            self.healthz_failures.fetch_add(1, Ordering::SeqCst);
        }
        self.healthz_us
            .fetch_max(sent.elapsed().as_micros() as u64, Ordering::SeqCst);
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib.load(Ordering::SeqCst) as f64 / 1024.0
    }

    pub fn healthz_ms(&self) -> f64 {
        self.healthz_us.load(Ordering::SeqCst) as f64 / 1000.0
    }
}

fn watch(pid: u32, address: SocketAddr, running: Arc<AtomicBool>) -> Arc<Peaks> {
    let peaks = Arc::new(Peaks::default());
    let sampled = peaks.clone();
    std::thread::spawn(move || {
        let mut health = Client::new(address);
        while running.load(Ordering::SeqCst) {
            sampled.sample_process(pid);
            sampled.time_healthz(&mut health);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    peaks
}

/// Writes one record to each of `partitions` distinct partitions (8 per topic) from 16
/// clients, on a fresh server each time, then waits for them to go idle.
pub fn growth(binary: &Path, dir: &Path, counts: &[u64], payload: &str) -> Vec<GrowthPoint> {
    const CLIENTS: u64 = 16;
    const IDLE_STOP_MS: u64 = 2_000;
    counts
        .iter()
        .map(|&partitions| {
            let dir = dir.join(format!("growth-{partitions}"));
            std::fs::create_dir_all(&dir).unwrap();
            let (_server, address, pid) = server(binary, &dir, IDLE_STOP_MS);
            let start_rss_mib = process(pid).2;
            let running = Arc::new(AtomicBool::new(true));
            let peaks = watch(pid, address, running.clone());
            let latencies = Arc::new(Mutex::new(Vec::with_capacity(partitions as usize)));
            let started = Instant::now();
            std::thread::scope(|scope| {
                for client in 0..CLIENTS {
                    let latencies = latencies.clone();
                    scope.spawn(move || {
                        let mut http = Client::new(address);
                        let mut mine = Vec::new();
                        for n in (client..partitions).step_by(CLIENTS as usize) {
                            let sent = Instant::now();
                            http.append(&format!("tenant-{}", n / 8), n % 8, payload);
                            mine.push(sent.elapsed().as_secs_f64() * 1000.0);
                        }
                        latencies.lock().unwrap().extend(mine);
                    });
                }
            });
            let rate = partitions as f64 / started.elapsed().as_secs_f64();
            running.store(false, Ordering::SeqCst);
            let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
            latencies.sort_by(f64::total_cmp);
            let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
            // Idle: every partition closed (idle_stop), the volume's page cache released (5 s
            // without appends) and freed pages handed back, then memory as it stays.
            std::thread::sleep(Duration::from_millis(IDLE_STOP_MS * 3) + Duration::from_secs(15));
            let idle_rss_mib = process(pid).2;
            let failures = peaks.healthz_failures.load(Ordering::SeqCst);
            assert_eq!(failures, 0, "/healthz answered other than 200");
            let point = GrowthPoint {
                partitions,
                rate,
                p50_ms: at(0.50),
                p99_ms: at(0.99),
                peak_fds: peaks.fds.load(Ordering::SeqCst),
                peak_threads: peaks.threads.load(Ordering::SeqCst),
                peak_rss_mib: peaks.rss_mib(),
                idle_rss_mib,
                start_rss_mib,
                healthz_max_ms: peaks.healthz_ms(),
            };
            eprintln!(
                "  {partitions} partitions written once: {rate:.0}/s, p50 {:.2} ms, p99 {:.2} ms, \
                 peak {} fds, {} threads, {:.0} MiB; idle {:.0} MiB (start {:.0}); healthz max {:.1} ms",
                point.p50_ms,
                point.p99_ms,
                point.peak_fds,
                point.peak_threads,
                point.peak_rss_mib,
                point.idle_rss_mib,
                point.start_rss_mib,
                point.healthz_max_ms
            );
            point
        })
        .collect()
}

/// Appends/s of `producers` clients each appending single records round-robin over
/// `partitions` partitions (every producer visits all of them, starting at its own), over HTTP,
/// once every partition has been written.
pub fn round_robin(
    binary: &Path,
    dir: &Path,
    partitions: u64,
    producers: u64,
    payload: &str,
    budget: Duration,
) -> f64 {
    std::fs::create_dir_all(dir).unwrap();
    let (_server, address, _) = server(binary, dir, 300_000);
    // Every partition written once first: the measurement is of appends, not of first writes.
    std::thread::scope(|scope| {
        for producer in 0..producers {
            scope.spawn(move || {
                let mut http = Client::new(address);
                for p in (producer..partitions).step_by(producers as usize) {
                    http.append(&format!("rr-{}", p / 8), p % 8, payload);
                }
            });
        }
    });
    let appended = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for producer in 0..producers {
            let appended = &appended;
            scope.spawn(move || {
                let mut http = Client::new(address);
                let mut n = producer * (partitions / producers).max(1);
                while started.elapsed() < budget {
                    let p = n % partitions;
                    http.append(&format!("rr-{}", p / 8), p % 8, payload);
                    appended.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            });
        }
    });
    appended.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
