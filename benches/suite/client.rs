//! What the client side costs, each figure next to a baseline measured against the same server
//! in the same run:
//!
//! - `durability produce` sending a file of 100 B JSON lines to one partition, against the
//!   bench's own loop of 100-record POSTs. The command sends one batch of 100 at a time (the
//!   records keep the order of the lines), so the fair baseline is sequential too: one POST at
//!   a time on one keep-alive connection, the same number of records. The command gives every
//!   record a deduplication key (a UUID); the baseline's records have none, as in the rest of
//!   the suite. Two more loops show what keys cost the server: one with a random UUID per
//!   record, as the client made before it made time-ordered ones, and one with time-ordered keys (a UUIDv7's layout).
//! - `durability consume -e` printing those records (`--format '%s\n'`, to `/dev/null`),
//!   against the bench's GETs of the same records in pages of 100, in order, one at a time on
//!   one connection.
//! - The typed client's single-record append (`Client::append`) against a bare reqwest POST of
//!   a body of the same shape and size: this process's own CPU per request (`getrusage`), both
//!   on one current-thread tokio runtime.
//!
//! The bench's loops speak HTTP/1.1 over a `TcpStream` with requests built before the timing
//! starts: the leanest client, as wrk is. wrk's 16-connection figures of the throughput section
//! are measured again here for context. Each figure and its baseline alternate (AB, BA, AB),
//! and of three runs each the median is kept, so that a slow stretch of this shared machine
//! weighs on both.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use durability::client::{Client, Record};
use serde_json::value::RawValue;

use crate::external::{self, Running};

/// Records per batch of the produce command (its default) and per page read.
pub const BATCH: u64 = 100;
/// wrk connections of the context figures: the throughput section's.
pub const CONNECTIONS: usize = 16;

/// One run of a client against the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub records_per_second: f64,
    /// The server's CPU (user and system) per record, in µs.
    pub server_us: f64,
    /// The client's CPU per record, in µs: the command's process, or the bench's loop.
    pub client_us: f64,
    /// Bytes the server wrote to its files per record (`write_bytes` of `/proc/PID/io`: the
    /// pages it dirtied, log and indexes).
    pub server_bytes: f64,
}

/// One figure measured three times; the run of median rate is the figure.
#[derive(Debug, Clone, Default)]
pub struct Runs(pub Vec<Run>);

impl Runs {
    /// The run of median rate.
    pub fn median(&self) -> Run {
        let mut runs = self.0.clone();
        runs.sort_by(|a, b| a.records_per_second.total_cmp(&b.records_per_second));
        runs.get(runs.len() / 2).copied().unwrap_or_default()
    }

    /// The slowest and the fastest run's rates.
    pub fn range(&self) -> (f64, f64) {
        let rates = self.0.iter().map(|run| run.records_per_second);
        (
            rates.clone().fold(f64::MAX, f64::min),
            rates.fold(0.0, f64::max),
        )
    }
}

/// One run of sequential single-record appends from this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Appends {
    pub requests_per_second: f64,
    /// This process's CPU per request (`getrusage(RUSAGE_SELF)`), user and system, in µs.
    pub user_us: f64,
    pub system_us: f64,
    /// The CPU of the thread that ran the runtime alone (`RUSAGE_THREAD`), in µs: equal to the
    /// process's when no other thread worked meanwhile.
    pub thread_us: f64,
}

impl Appends {
    pub fn cpu_us(&self) -> f64 {
        self.user_us + self.system_us
    }
}

/// The section.
#[derive(Debug, Clone, Default)]
pub struct ClientSide {
    /// Lines in the file produced, records consumed.
    pub records: u64,
    /// `durability produce` of the file.
    pub produce: Runs,
    /// The bench's 100-record POSTs, one at a time on one connection, no keys.
    pub posts: Runs,
    /// The same with a deduplication key per record, a random UUID (as the client made at first).
    pub keyed_posts: Runs,
    /// The same with time-ordered keys (the layout of a UUIDv7): each partition's keys go to
    /// the end of the key index instead of anywhere in it.
    pub ordered_posts: Runs,
    /// wrk's 100-record POSTs from [`CONNECTIONS`] connections (records/s, median of three).
    pub wrk_posts: f64,
    /// `durability consume -e` of the records produced.
    pub consume: Runs,
    /// The bench's GETs of the same records, pages of 100 in order, on one connection.
    pub pages: Runs,
    /// wrk's reads of pages of 100 at random offsets from [`CONNECTIONS`] connections
    /// (records/s).
    pub wrk_pages: f64,
    /// Single-record appends of each run.
    pub appends: usize,
    /// `Client::append`'s runs, then the bare reqwest POSTs'.
    pub typed: Vec<Appends>,
    pub bare: Vec<Appends>,
    /// The machine's load average over 1 minute as the section began and as it ended: what
    /// else shared the cores.
    pub load: (f64, f64),
}

impl ClientSide {
    /// Of `runs`, the one of median CPU per request.
    pub fn median_cpu(runs: &[Appends]) -> Appends {
        let mut runs = runs.to_vec();
        runs.sort_by(|a, b| a.cpu_us().total_cmp(&b.cpu_us()));
        runs.get(runs.len() / 2).copied().unwrap_or_default()
    }
}

/// The whole section: `records` lines produced and consumed, `appends` single-record appends
/// per CPU run.
pub fn run(
    binary: &Path,
    dir: &Path,
    payload: &str,
    records: u64,
    appends: usize,
    budget: Duration,
) -> ClientSide {
    eprintln!("client");
    std::fs::create_dir_all(dir).unwrap();
    let lines = dir.join("lines.json");
    std::fs::write(&lines, format!("{payload}\n").repeat(records as usize)).unwrap();
    let (running, address) = external::server(binary, dir);
    let server = Server {
        running,
        address,
        binary,
    };
    let mut section = ClientSide {
        records,
        appends,
        load: (load_average(), 0.0),
        ..ClientSide::default()
    };

    let posts = Posts::new(&server, payload, records);
    for round in 0..3 {
        let produce = |section: &mut ClientSide| {
            let topic = format!("produce-{round}");
            section
                .produce
                .0
                .push(server.produce(&topic, &lines, records));
        };
        let loops = |section: &mut ClientSide| {
            let (posts, section) = (&posts, &mut *section);
            let runs = [
                (&mut section.posts, "posts", Keys::None),
                (&mut section.keyed_posts, "keyed", Keys::Random),
                (&mut section.ordered_posts, "ordered", Keys::Ordered),
            ];
            for (runs, topic, keys) in runs {
                runs.0.push(posts.run(&format!("{topic}-{round}"), keys));
            }
        };
        if round % 2 == 0 {
            produce(&mut section);
            loops(&mut section);
        } else {
            loops(&mut section);
            produce(&mut section);
        }
    }
    report("durability produce", &section.produce);
    report("100-record POSTs, one connection, no keys", &section.posts);
    report(
        "100-record POSTs, one connection, a random UUID key per record",
        &section.keyed_posts,
    );
    report(
        "100-record POSTs, one connection, a time-ordered key per record",
        &section.ordered_posts,
    );
    let (_, hundred) = external::append_scripts(dir, payload);
    let url = format!("http://{address}/topics/bench/partitions/0/records");
    section.wrk_posts = crate::median_of_3(|| {
        external::wrk(&url, CONNECTIONS, &hundred, budget).requests_per_second * BATCH as f64
    });
    eprintln!(
        "  100-record POSTs, wrk, {CONNECTIONS} connections: {:.0} records/s",
        section.wrk_posts
    );

    // The records the command produced first, all of them read by each.
    let topic = "produce-0";
    let printed = server.consume_counting(topic);
    assert_eq!(printed, records, "durability consume printed every record");
    for round in 0..3 {
        let consume = |section: &mut ClientSide| {
            section.consume.0.push(server.consume(topic, records));
        };
        let pages = |section: &mut ClientSide| {
            section.pages.0.push(server.pages(topic, records));
        };
        if round % 2 == 0 {
            consume(&mut section);
            pages(&mut section);
        } else {
            pages(&mut section);
            consume(&mut section);
        }
    }
    report("durability consume", &section.consume);
    report(
        "GETs of pages of 100 in order, one connection",
        &section.pages,
    );
    let path = format!("/topics/{topic}/partitions/0/records");
    let reads = external::read_script(dir, &path, records);
    let url = format!("http://{address}{path}");
    section.wrk_pages =
        external::wrk(&url, CONNECTIONS, &reads, budget).requests_per_second * BATCH as f64;
    eprintln!(
        "  reads of pages of 100 at random offsets, wrk, {CONNECTIONS} connections: {:.0} \
         records/s",
        section.wrk_pages
    );

    (section.typed, section.bare) = append_cpu(address, payload, appends);
    section.load.1 = load_average();
    section
}

/// The machine's load average over the last minute (`/proc/loadavg`).
fn load_average() -> f64 {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let first = loadavg.split_whitespace().next();
    first
        .and_then(|value| value.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Prints the median of `runs`.
fn report(what: &str, runs: &Runs) {
    let median = runs.median();
    let (slowest, fastest) = runs.range();
    eprintln!(
        "  {what}: {:.0} records/s (runs {slowest:.0} to {fastest:.0}), server {:.2} µs CPU and \
         {:.0} bytes written per record, client {:.2} µs CPU",
        median.records_per_second, median.server_us, median.server_bytes, median.client_us
    );
}

/// The server of the section, and how its client commands are run.
struct Server<'a> {
    running: Running,
    address: SocketAddr,
    /// The `durability` binary: the server, and the client commands.
    binary: &'a Path,
}

impl Server<'_> {
    fn pid(&self) -> u32 {
        self.running.0.id()
    }

    /// The binary as a client of this server, running `args`.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.binary);
        command
            .args(args)
            .env("DURABILITY_URL", format!("http://{}", self.address))
            .env_remove("DURABILITY_TOKEN")
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    /// Waits until the server is idle: its background work of the run before (the indexer)
    /// is done, and counted in that run.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let before = external::cpu(self.pid());
            std::thread::sleep(Duration::from_millis(250));
            let spent = external::cpu(self.pid()).since(before).total();
            if spent < 0.01 || Instant::now() > deadline {
                return;
            }
        }
    }

    /// Runs `command` to its end, measured: `records` records went through.
    fn measure(&self, mut command: Command, records: u64) -> Run {
        self.settle();
        let (server_cpu, children) = (external::cpu(self.pid()), rusage(libc::RUSAGE_CHILDREN));
        let written = written_bytes(self.pid());
        let start = Instant::now();
        let output = command.output().expect("the durability binary");
        let elapsed = start.elapsed().as_secs_f64();
        self.settle();
        assert!(
            output.status.success(),
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let per_record = |seconds: f64| seconds * 1e6 / records as f64;
        Run {
            records_per_second: records as f64 / elapsed,
            server_us: per_record(external::cpu(self.pid()).since(server_cpu).total()),
            client_us: per_record(rusage(libc::RUSAGE_CHILDREN) - children),
            server_bytes: (written_bytes(self.pid()) - written) as f64 / records as f64,
        }
    }

    /// `durability produce` of `lines` to partition 0 of `topic`, new: checks that its
    /// `records` records were appended.
    fn produce(&self, topic: &str, lines: &Path, records: u64) -> Run {
        let mut command = self.command(&["produce", "-t", topic, "-p", "0", "--quiet"]);
        command.arg(lines).stdout(Stdio::null());
        let run = self.measure(command, records);
        assert_eq!(
            next_offset(self.address, topic),
            records,
            "{topic} holds every line"
        );
        run
    }

    /// `durability consume` of partition 0 of `topic` to its end, printing each payload.
    fn consume_command(&self, topic: &str) -> Command {
        self.command(&["consume", "-t", topic, "-p", "0", "-e", "--format", "%s\\n"])
    }

    /// `durability consume` of partition 0 of `topic` (`records` records), printing to
    /// `/dev/null`.
    fn consume(&self, topic: &str, records: u64) -> Run {
        let mut command = self.consume_command(topic);
        command.stdout(Stdio::null());
        self.measure(command, records)
    }

    /// The lines `durability consume` prints of partition 0 of `topic`, counted here (untimed).
    fn consume_counting(&self, topic: &str) -> u64 {
        let mut child = self
            .consume_command(topic)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the durability binary");
        let mut out = child.stdout.take().unwrap();
        let (mut lines, mut chunk) = (0u64, vec![0u8; 1 << 16]);
        loop {
            let read = out.read(&mut chunk).unwrap();
            if read == 0 {
                break;
            }
            lines += chunk[..read].iter().filter(|&&byte| byte == b'\n').count() as u64;
        }
        assert!(child.wait().unwrap().success(), "durability consume failed");
        lines
    }

    /// GETs of pages of 100 of partition 0 of `topic` from offset 0 to `records`, one at a
    /// time on one connection.
    fn pages(&self, topic: &str, records: u64) -> Run {
        let requests: Vec<String> = (0..records)
            .step_by(BATCH as usize)
            .map(|from| {
                format!(
                    "GET /topics/{topic}/partitions/0/records?from={from}&limit={BATCH} \
                     HTTP/1.1\r\nHost: {}\r\n\r\n",
                    self.address
                )
            })
            .collect();
        self.exchanges(records, requests.iter().map(String::as_bytes), |body| {
            // A full page of 100-byte payloads: something was read, not an empty page.
            assert!(body > 100 * BATCH as usize, "a page of {body} bytes");
        })
    }

    /// Sends `requests` one at a time on one keep-alive connection, reading each answer
    /// (checked 2xx, its body's length given to `check`): `records` records went through.
    fn exchanges<'r>(
        &self,
        records: u64,
        requests: impl Iterator<Item = &'r [u8]>,
        check: impl Fn(usize),
    ) -> Run {
        let mut stream = TcpStream::connect(self.address).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut buffer = Vec::with_capacity(64 * 1024);
        self.settle();
        let (server_cpu, client_cpu) = (external::cpu(self.pid()), rusage(libc::RUSAGE_THREAD));
        let written = written_bytes(self.pid());
        let start = Instant::now();
        for request in requests {
            stream.write_all(request).unwrap();
            check(read_answer(&mut stream, &mut buffer));
        }
        let elapsed = start.elapsed().as_secs_f64();
        let client_cpu = rusage(libc::RUSAGE_THREAD) - client_cpu;
        self.settle();
        let per_record = |seconds: f64| seconds * 1e6 / records as f64;
        Run {
            records_per_second: records as f64 / elapsed,
            server_us: per_record(external::cpu(self.pid()).since(server_cpu).total()),
            client_us: per_record(client_cpu),
            server_bytes: (written_bytes(self.pid()) - written) as f64 / records as f64,
        }
    }
}

/// The deduplication keys of the bench's POSTs.
#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    /// A random UUID per record, as the client made at first.
    Random,
    /// Time-ordered keys of a UUID's length, increasing.
    Ordered,
}

/// The bench's own loop of 100-record POSTs.
struct Posts<'a> {
    server: &'a Server<'a>,
    /// One record of the body: `{"payload":...}`.
    record: String,
    records: u64,
}

impl<'a> Posts<'a> {
    fn new(server: &'a Server<'a>, payload: &str, records: u64) -> Self {
        Self {
            server,
            record: format!("{{\"payload\":{payload}"),
            records,
        }
    }

    /// `records` records to partition 0 of `topic`, new, in POSTs of 100 one at a time on one
    /// connection, each record with a deduplication key as `keys` says.
    fn run(&self, topic: &str, keys: Keys) -> Run {
        let head = format!(
            "POST /topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: {}\r\nContent-Type: \
             application/json\r\n",
            self.server.address
        );
        // A UUIDv7's layout: 48 bits of ms since the epoch, the version, then a sequence.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let ms = now.unwrap().as_millis() as u64;
        let prefix = format!("{:08x}-{:04x}-7000-8000", ms >> 16, ms & 0xffff);
        let request = |batch: u64| {
            let records: Vec<String> = (0..BATCH)
                .map(|n| match keys {
                    Keys::None => format!("{}}}", self.record),
                    Keys::Random => {
                        format!("{},\"key\":\"{}\"}}", self.record, uuid::Uuid::new_v4())
                    }
                    Keys::Ordered => format!(
                        "{},\"key\":\"{prefix}-{:012x}\"}}",
                        self.record,
                        batch * BATCH + n
                    ),
                })
                .collect();
            let body = format!("[{}]", records.join(","));
            format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
        };
        let requests: Vec<Vec<u8>> = (0..self.records / BATCH).map(request).collect();
        let run = self
            .server
            .exchanges(self.records, requests.iter().map(Vec::as_slice), |_| {});
        assert_eq!(next_offset(self.server.address, topic), self.records);
        run
    }
}

/// Reads one HTTP/1.1 answer with a `Content-Length` body, checks that it is a 2xx, and answers
/// the body's length. Shared by the sections whose loops speak HTTP themselves.
pub fn read_answer(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> usize {
    buffer.clear();
    let mut chunk = [0u8; 64 * 1024];
    let mut searched = 0usize;
    loop {
        let read = stream.read(&mut chunk).unwrap();
        assert!(read > 0, "the server closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
        let Some(end) = buffer[searched.saturating_sub(3)..]
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .map(|at| at + searched.saturating_sub(3))
        else {
            searched = buffer.len();
            continue;
        };
        let head = std::str::from_utf8(&buffer[..end]).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 2"),
            "the server answered {}",
            head.lines().next().unwrap_or_default()
        );
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a Content-Length");
        while buffer.len() < end + 4 + length {
            let read = stream.read(&mut chunk).unwrap();
            assert!(read > 0, "the server closed the connection");
            buffer.extend_from_slice(&chunk[..read]);
        }
        return length;
    }
}

/// The next offset of partition 0 of `topic`.
fn next_offset(address: SocketAddr, topic: &str) -> u64 {
    let answer = external::exchange(
        address,
        &format!(
            "GET /topics/{topic}/partitions/0/bounds HTTP/1.1\r\nHost: {address}\r\nConnection: \
             close\r\n\r\n"
        ),
    );
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let bounds: serde_json::Value = serde_json::from_str(body).unwrap();
    bounds["nextOffset"].as_u64().unwrap()
}

/// Bytes process `pid` has written to files so far (`write_bytes` of `/proc/PID/io`).
fn written_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("write_bytes in /proc/PID/io")
}

/// CPU time (user and system, in seconds) of `who`: `RUSAGE_SELF`, `RUSAGE_THREAD` or
/// `RUSAGE_CHILDREN` (those waited for).
fn rusage(who: libc::c_int) -> f64 {
    let (user, system) = rusage_split(who);
    user + system
}

/// [`rusage`], user and system apart.
fn rusage_split(who: libc::c_int) -> (f64, f64) {
    // SAFETY: an all-zero `rusage` is a valid value, which getrusage overwrites.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`.
    let status = unsafe { libc::getrusage(who, &mut usage) };
    assert_eq!(status, 0, "getrusage");
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// `requests` sequential single-record appends from this process, through `Client::append`
/// and through bare reqwest POSTs of a body of the same shape and size, alternating (AB, BA,
/// AB) on one current-thread runtime: each one's runs.
fn append_cpu(address: SocketAddr, payload: &str, requests: usize) -> (Vec<Appends>, Vec<Appends>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let typed = Client::builder([format!("http://{address}")])
        .build()
        .unwrap();
    let bare = reqwest::Client::new();
    let url = format!("http://{address}/topics/bare/partitions/0/records");
    let url = reqwest::Url::parse(&url).unwrap();
    let payload: Box<RawValue> = serde_json::from_str(payload).unwrap();
    // The typed client sends `[{"payload":...,"key":"<UUID>"}]`, a key made for the record.
    // The bare POSTs send the same, with keys of the same length, none the same (so that the
    // server does the same work), made before the timing starts.
    let mut made = 0u64;
    let mut bodies = |count: usize| -> Vec<String> {
        (0..count)
            .map(|_| {
                made += 1;
                format!(
                    "[{{\"payload\":{},\"key\":\"00000000-0000-4000-8000-{made:012}\"}}]",
                    payload.get()
                )
            })
            .collect()
    };
    // Warm-up: each opens its connection, and the server creates its topic.
    let warm_up = bodies(20);
    runtime.block_on(async {
        typed_appends(&typed, &payload, 20).await;
        bare_posts(&bare, &url, warm_up).await;
    });
    let (mut typed_runs, mut bare_runs) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_typed in order {
            let bodies = (!is_typed).then(|| bodies(requests));
            let (process, thread) = (rusage_split(libc::RUSAGE_SELF), rusage(libc::RUSAGE_THREAD));
            let start = Instant::now();
            match bodies {
                None => runtime.block_on(typed_appends(&typed, &payload, requests)),
                Some(bodies) => runtime.block_on(bare_posts(&bare, &url, bodies)),
            }
            let elapsed = start.elapsed().as_secs_f64();
            let (user, system) = rusage_split(libc::RUSAGE_SELF);
            let per_request = |seconds: f64| seconds * 1e6 / requests as f64;
            let appends = Appends {
                requests_per_second: requests as f64 / elapsed,
                user_us: per_request(user - process.0),
                system_us: per_request(system - process.1),
                thread_us: per_request(rusage(libc::RUSAGE_THREAD) - thread),
            };
            if is_typed {
                typed_runs.push(appends)
            } else {
                bare_runs.push(appends)
            }
        }
    }
    for (what, runs) in [
        ("Client::append", &typed_runs),
        ("bare reqwest POST", &bare_runs),
    ] {
        let median = ClientSide::median_cpu(runs);
        eprintln!(
            "  single-record appends, {what}: {:.0} requests/s, {:.1} µs CPU each in this \
             process ({:.1} user, {:.1} system; its thread {:.1})",
            median.requests_per_second,
            median.cpu_us(),
            median.user_us,
            median.system_us,
            median.thread_us
        );
    }
    (typed_runs, bare_runs)
}

/// `count` single-record appends of `payload` to partition 0 of topic `typed`, one at a time,
/// through the typed client.
async fn typed_appends(client: &Client, payload: &RawValue, count: usize) {
    for _ in 0..count {
        let record = Record::raw(payload.to_owned());
        let appended = client.append("typed", 0, [record]).await.unwrap();
        assert_eq!(appended.offsets.len(), 1);
    }
}

/// POSTs of `bodies` to `url`, one at a time, through bare reqwest: the status checked, the
/// answer read.
async fn bare_posts(http: &reqwest::Client, url: &reqwest::Url, bodies: Vec<String>) {
    for body in bodies {
        let answer = http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
        answer.bytes().await.unwrap();
    }
}
