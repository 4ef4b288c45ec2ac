//! Programs outside this process: the peer (Redis Streams with `appendfsync always`), the
//! `durability` server, and `wrk` as the closed-loop HTTP load generator.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process stopped (killed) when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time a process spent, in seconds: in user space and in the kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub user: f64,
    pub system: f64,
}

impl Cpu {
    pub fn total(self) -> f64 {
        self.user + self.system
    }

    /// What was spent since `earlier`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }
}

/// Process `pid`'s CPU time so far (`utime` and `stime` of `/proc/PID/stat`).
pub fn cpu(pid: u32) -> Cpu {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis,
    // where field 3 (state) is the first; utime and stime are fields 14 and 15.
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    let mut fields = after_name
        .split_whitespace()
        .skip(11)
        .map(|field| field.parse::<f64>().unwrap() / clock_ticks_per_second());
    Cpu {
        user: fields.next().unwrap(),
        system: fields.next().unwrap(),
    }
}

/// Clock ticks per second of `/proc/PID/stat` times (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Whether `program` can be run.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_for(address: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {address}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `redis-server` on a free port with an append-only file fsynced on every write.
pub fn redis(dir: &Path) -> (Running, u16) {
    std::fs::create_dir_all(dir).unwrap();
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    wait_for(SocketAddr::from(([127, 0, 0, 1], port)));
    (Running(child), port)
}

/// `XADD` of one field holding `value` from `clients` clients, `pipeline` commands in flight
/// per client, for about `budget`; answers operations per second (redis-benchmark's figure).
pub fn redis_xadd(
    port: u16,
    clients: usize,
    pipeline: usize,
    value: &str,
    budget: Duration,
) -> f64 {
    // redis-benchmark stops after a request count: aim at `budget` from a short probe.
    let probe = 20_000 * pipeline.min(4);
    let probe_rate = run_redis_benchmark(port, clients, pipeline, probe, value);
    let requests = ((probe_rate * budget.as_secs_f64()) as usize).max(probe);
    run_redis_benchmark(port, clients, pipeline, requests, value)
}

pub fn run_redis_benchmark(
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: usize,
    value: &str,
) -> f64 {
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-P", &pipeline.to_string()])
        .args(["-n", &requests.to_string(), "--csv"])
        .args(["XADD", "bench", "*", "f", value])
        .output()
        .expect("redis-benchmark");
    let csv = String::from_utf8_lossy(&output.stdout);
    // "test","rps",...: the second line's second field.
    csv.lines()
        .nth(1)
        .and_then(|line| line.split(',').nth(1))
        .and_then(|field| field.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("unexpected redis-benchmark output: {csv}"))
}

/// Starts the `durability` server binary on a free port: `sync = full`, no retention limit, no
/// cold tier, data in `dir`.
pub fn server(binary: &Path, dir: &Path) -> (Running, SocketAddr) {
    server_with(binary, dir, &[])
}

/// [`server`], with more environment (TLS, tokens) set after the suite's own.
pub fn server_with(
    binary: &Path,
    dir: &Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> (Running, SocketAddr) {
    let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(binary)
        .env("DURABILITY__SERVER__BIND", address.to_string())
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("DURABILITY__STORAGE__SYNC", "full")
        .env("DURABILITY__COLD__KIND", "none")
        .env("DURABILITY__RETENTION__MAX_AGE_MS", "0")
        .env("DURABILITY__RETENTION__MAX_BYTES", "0")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    wait_for(address);
    (Running(child), address)
}

/// Sends `request` (a whole HTTP/1.1 request ending its connection: `Connection: close`) to
/// `address`, and answers the whole answer, head and body.
pub fn exchange(address: SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// The next offset of partition 0 of the bench topic, asked over HTTP.
pub fn next_offset(address: SocketAddr) -> u64 {
    let answer = exchange(
        address,
        &format!(
            "GET /topics/bench/partitions/0/bounds HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        ),
    );
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let bounds: serde_json::Value = serde_json::from_str(body).unwrap();
    bounds["nextOffset"].as_u64().unwrap()
}

/// What `wrk` measured.
pub struct Wrk {
    /// Requests answered in the whole run.
    pub requests: u64,
    pub requests_per_second: f64,
    /// Latency percentiles of the answers (ms).
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// A latency percentile of `wrk --latency`'s distribution, in ms (`  99%   25.54ms`).
fn percentile(text: &str, label: &str) -> f64 {
    let value = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label} in wrk output:\n{text}"));
    let split = value
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(value.len());
    let number: f64 = value[..split].parse().unwrap_or(f64::NAN);
    match &value[split..] {
        "us" => number / 1000.0,
        "s" => number * 1000.0,
        "m" => number * 60_000.0,
        _ => number,
    }
}

/// Runs `wrk` against `url` with `connections` connections for `budget`, the request built by
/// the Lua `script`; fails on any non-2xx answer.
pub fn wrk(url: &str, connections: usize, script: &Path, budget: Duration) -> Wrk {
    let (measured, text) = wrk_output(url, connections, script, budget);
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "wrk saw failures:\n{text}"
    );
    measured
}

/// [`wrk`], answering its output whatever the answers were.
pub fn wrk_output(url: &str, connections: usize, script: &Path, budget: Duration) -> (Wrk, String) {
    let output = Command::new("wrk")
        .args(["-t2", "--latency", &format!("-c{connections}")])
        .arg(format!("-d{}s", budget.as_secs_f64().ceil().max(1.0)))
        .arg("-s")
        .arg(script)
        .arg(url)
        .output()
        .expect("wrk");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let requests_per_second = text
        .lines()
        .find_map(|line| line.strip_prefix("Requests/sec:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected wrk output:\n{text}"));
    // `  12345 requests in 3.00s, 1.23MB read`
    let requests = text
        .lines()
        .find_map(|line| line.trim().split_once(" requests in "))
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or_else(|| panic!("no request count in wrk output:\n{text}"));
    let measured = Wrk {
        requests,
        requests_per_second,
        p50_ms: percentile(&text, "50%"),
        p99_ms: percentile(&text, "99%"),
    };
    (measured, text)
}

/// wrk scripts POSTing one record of `payload`, and 100 of them, to a partition's records.
pub fn append_scripts(dir: &Path, payload: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let record = format!("{{\"payload\":{payload}}}");
    let single = post_script(dir, "single", &format!("[{record}]"));
    let hundred = post_script(
        dir,
        "hundred",
        &format!("[{}]", vec![record; 100].join(",")),
    );
    (single, hundred)
}

/// A wrk script POSTing `body`.
pub fn post_script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let body_file = dir.join(format!("{name}.json"));
    std::fs::write(&body_file, body).unwrap();
    let script = dir.join(format!("{name}.lua"));
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nlocal f = io.open(\"{}\")\nwrk.body = f:read(\"*a\")\nf:close()\n",
            body_file.display()
        ),
    )
    .unwrap();
    script
}

/// A wrk script GETting pages of 100 at random offsets below `records` of `path`.
pub fn read_script(dir: &Path, path: &str, records: u64) -> std::path::PathBuf {
    let script = dir.join("reads.lua");
    std::fs::write(
        &script,
        format!(
            "math.randomseed(7)\nrequest = function()\n  return wrk.format(\"GET\", \"{path}?limit=100&from=\" .. math.random(0, {}))\nend\n",
            records.saturating_sub(100)
        ),
    )
    .unwrap();
    script
}
