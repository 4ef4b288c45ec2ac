//! CPU per HTTP request: the server's own CPU time (user and system, from `/proc/PID/stat`)
//! divided by the requests `wrk` got answered, for single-record POSTs, 100-record POSTs and
//! reads of pages of 100, next to the framework's floor (`examples/http_floor.rs`: actix-web
//! parsing the same bodies and answering without storing), in the same run. CPU per request is
//! far steadier than requests per second on a shared machine.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::external::{self, Running, Wrk};

/// One kind of request, measured against one server.
#[derive(Debug, Clone)]
pub struct Cost {
    pub what: &'static str,
    pub requests_per_second: f64,
    /// CPU per request, in µs.
    pub user_us: f64,
    pub system_us: f64,
}

impl Cost {
    pub fn total_us(&self) -> f64 {
        self.user_us + self.system_us
    }
}

/// The section: the server's costs, the floor's (when its binary is given), and the peer's:
/// what `redis-server` spends per `XADD` with `appendfsync always` (when installed).
#[derive(Debug, Clone, Default)]
pub struct CpuPerRequest {
    pub server: Vec<Cost>,
    pub floor: Vec<Cost>,
    pub redis: Option<Cost>,
}

/// Runs `run` three times, each answering how many requests it got answered and at what
/// rate, and keeps the run of median CPU per request of process `pid`.
fn median_cost(what: &'static str, pid: u32, mut run: impl FnMut() -> (u64, f64)) -> Cost {
    let mut runs: Vec<Cost> = (0..3)
        .map(|_| {
            let before = external::cpu(pid);
            let (requests, requests_per_second) = run();
            let spent = external::cpu(pid).since(before);
            let per_request = |seconds: f64| seconds * 1e6 / requests.max(1) as f64;
            Cost {
                what,
                requests_per_second,
                user_us: per_request(spent.user),
                system_us: per_request(spent.system),
            }
        })
        .collect();
    runs.sort_by(|a, b| a.total_us().total_cmp(&b.total_us()));
    let median = runs.swap_remove(1);
    eprintln!(
        "  {what}: {:.0} requests/s, {:.1} µs CPU each ({:.1} user, {:.1} system)",
        median.requests_per_second,
        median.total_us(),
        median.user_us,
        median.system_us
    );
    median
}

/// [`median_cost`] of `wrk` with `connections` running `script` against `url`.
fn measure(
    what: &'static str,
    pid: u32,
    url: &str,
    connections: usize,
    script: &Path,
    budget: Duration,
) -> Cost {
    median_cost(what, pid, || {
        let Wrk {
            requests,
            requests_per_second,
            ..
        } = external::wrk(url, connections, script, budget);
        (requests, requests_per_second)
    })
}

/// The POSTs measured against both the server and the floor: single records from 64
/// connections, 100 records from 16.
fn posts(pid: u32, url: &str, (single, hundred): (&Path, &Path), budget: Duration) -> Vec<Cost> {
    vec![
        measure("single-record POST, 64 conn.", pid, url, 64, single, budget),
        measure("100-record POST, 16 conn.", pid, url, 16, hundred, budget),
    ]
}

/// `redis-server`'s CPU per `XADD` of `value` from 50 clients, one command in flight each,
/// each run sized to last about `budget`.
fn redis_xadd(dir: &Path, value: &str, budget: Duration) -> Cost {
    let (running, port) = external::redis(dir);
    let probe = external::run_redis_benchmark(port, 50, 1, 20_000, value);
    let requests = ((probe * budget.as_secs_f64()) as usize).max(20_000);
    median_cost(
        "Redis XADD, appendfsync always, 50 clients",
        running.0.id(),
        || {
            let rate = external::run_redis_benchmark(port, 50, 1, requests, value);
            (requests as u64, rate)
        },
    )
}

/// Starts the floor binary on a free port.
fn floor_server(binary: &Path) -> (Running, SocketAddr) {
    let address = SocketAddr::from(([127, 0, 0, 1], external::free_port()));
    let child = Command::new(binary)
        .arg(address.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    external::wait_for(address);
    (Running(child), address)
}

/// The whole section.
pub fn run(
    server: &Path,
    floor: Option<&Path>,
    dir: &Path,
    payload: &str,
    budget: Duration,
) -> CpuPerRequest {
    eprintln!("CPU per request");
    std::fs::create_dir_all(dir).unwrap();
    let path = "/topics/bench/partitions/0/records";
    let (single, hundred) = external::append_scripts(dir, payload);
    let mut section = CpuPerRequest::default();

    let scripts = (single.as_path(), hundred.as_path());
    let (running, address) = external::server(server, dir);
    let (pid, url) = (running.0.id(), format!("http://{address}{path}"));
    section.server = posts(pid, &url, scripts, budget);
    let reads = external::read_script(dir, path, external::next_offset(address));
    section.server.push(measure(
        "read of a page of 100, 16 conn.",
        pid,
        &url,
        16,
        &reads,
        budget,
    ));
    drop(running);

    if let Some(floor) = floor {
        let (running, address) = floor_server(floor);
        let url = format!("http://{address}{path}");
        section.floor = posts(running.0.id(), &url, scripts, budget);
    }
    if external::installed("redis-server") && external::installed("redis-benchmark") {
        let value = payload.trim_matches('"');
        section.redis = Some(redis_xadd(&dir.join("redis"), value, budget));
    }
    section
}

impl CpuPerRequest {
    /// The floor's cost of the same request, if measured.
    pub fn floor_of(&self, what: &str) -> Option<&Cost> {
        self.floor.iter().find(|cost| cost.what == what)
    }
}
