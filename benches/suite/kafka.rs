//! What the Kafka listener gives Kafka clients, each figure next to a baseline of REST requests
//! to the same server in the same run (`sync = full`, 100 B JSON values, topics of
//! [`PARTITIONS`] partitions, a new one for each produce run, `log.max_batch_size = 1000` so
//! that REST pages of 1,000 are allowed):
//!
//! - Produce: a confluent-kafka (librdkafka) producer, `acks=all`, `linger.ms=5`, sending the
//!   records round-robin over the partitions (`tests/kafka/bench_produce.py`), against the
//!   bench's own 100-record POSTs of the same records, no keys. librdkafka keeps many requests
//!   in flight on its one connection, a batch of each partition in them; the comparable REST
//!   client has a batch of each partition in flight too: one keep-alive connection per
//!   partition, one POST at a time on each. The client section's sequential loop (one
//!   connection, one POST at a time, round-robin over the partitions) is measured for
//!   context.
//! - Fetch: a confluent-kafka consumer with `assign()`ed partitions from their beginning, no
//!   group, librdkafka's fetch defaults (`tests/kafka/bench_fetch.py`), reading the records the
//!   first producer run wrote, against the bench's GETs of the same records in pages of 1,000,
//!   one at a time on one connection (librdkafka keeps one Fetch in flight per broker, for
//!   every partition it reads from it). One connection per partition is measured for context.
//! - Groups: [`MEMBERS`] confluent-kafka consumers sharing a group (threads of one process,
//!   `tests/kafka/bench_group.py`; the group committed offset 0 beforehand, as a group that
//!   resumes has offsets) read the same records, from the first assignment to the last
//!   record, against as many consumers `assign()`ed a partition each in the same way (the two
//!   alternate too); and the time a group of
//!   [`REBALANCE_MEMBERS`] takes to rebalance after one member leaves (every other member
//!   assigned again and each with partitions reading), against its rebalance timeout.
//! - The server's CPU per record (user and system, `/proc/PID/stat`, counted until it is idle
//!   again after a run, so its indexer's work is in) of each.
//!
//! The REST loops speak HTTP/1.1 over `TcpStream`s with requests built before the timing
//! starts, as in the client section; the Kafka clients connect and read the topic's metadata
//! before theirs. `/metrics` tells how many Produce and Fetch requests the Kafka clients sent,
//! how long the server took over them, and how many record batches came. Each figure and its
//! baselines alternate (AB, BA, AB), and of three runs each the median is kept.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::client::read_answer;
use crate::external::{self, Running};

/// Partitions of the topics written and read.
pub const PARTITIONS: u64 = 8;
/// Records per REST POST.
pub const BATCH: u64 = 100;
/// Records per REST page read.
pub const PAGE: u64 = 1_000;
/// `log.max_batch_size` of the server: the largest page a REST read may ask for.
const MAX_BATCH_SIZE: u64 = PAGE;
/// Members of the group that reads the records.
pub const MEMBERS: u64 = 8;
/// Members of the group that rebalances after one leaves.
pub const REBALANCE_MEMBERS: u64 = 10;
/// The rebalance timeout (`max.poll.interval.ms`) the rebalancing group's members join with.
pub const REBALANCE_TIMEOUT_S: f64 = 10.0;
/// librdkafka's `fetch.wait.max.ms` (its default): how long the consumer's last Fetch, sent
/// once every partition is read to its end, waits on the server.
pub const FETCH_WAIT_S: f64 = 0.5;

/// The Python of `scripts/install-kafka-clients`, with confluent-kafka.
pub fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-kafka/bin/python")
}

/// Whether [`python`] runs and has confluent-kafka: without it the section is skipped.
pub fn installed() -> bool {
    Command::new(python())
        .args(["-c", "import confluent_kafka"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// One run of a client against the server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub records_per_second: f64,
    /// The server's CPU per record, in µs: user and system.
    pub server_user_us: f64,
    pub server_system_us: f64,
    /// Of it, the volume's committer thread's (SQLite's inserts and the fsyncs), in µs.
    pub committer_us: f64,
    /// The client's CPU per record, in µs: the Python process (its loop and librdkafka's
    /// threads) over its timed span, or the bench's loops' threads.
    pub client_us: f64,
    /// Requests the client sent: Produce or Fetch requests (from `/metrics`), or REST requests.
    pub requests: u64,
    /// Kafka: the server's time over those requests, in s (from `/metrics`: from the request
    /// read to its answer made); REST: 0.
    pub request_seconds: f64,
    /// Kafka: of [`requests`](Self::requests), the Fetches that waited [`FETCH_WAIT_S`] for
    /// records that never came (the last, once every partition was read); 0 otherwise.
    pub long_polls: u64,
    /// Kafka produce: record batches received (`durability_kafka_batches_total`).
    pub batches: u64,
    /// The run's length, in s.
    pub seconds: f64,
}

impl Run {
    /// The server's CPU per record, in µs.
    pub fn server_us(&self) -> f64 {
        self.server_user_us + self.server_system_us
    }

    /// Requests that carried records: those that did not wait at the end.
    pub fn working_requests(&self) -> u64 {
        self.requests - self.long_polls
    }

    /// The share of the run the server spent on the client's requests (Kafka only: each
    /// connection answers its requests one at a time), the long-polls at the end left out.
    pub fn server_busy(&self) -> f64 {
        (self.request_seconds - self.long_polls as f64 * FETCH_WAIT_S).max(0.0) / self.seconds
    }
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

    /// The median of the runs' server CPU per record, in µs (steadier than the one of the run
    /// of median rate).
    pub fn median_server_us(&self) -> f64 {
        crate::report::median(self.0.iter().map(Run::server_us).collect())
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

/// The section.
#[derive(Debug, Clone, Default)]
pub struct Kafka {
    /// Records of each produce run, and records fetched by each read.
    pub records: u64,
    /// The confluent-kafka producer.
    pub produce: Runs,
    /// The bench's 100-record POSTs, one connection per partition.
    pub posts: Runs,
    /// The same, one connection, round-robin over the partitions.
    pub sequential_posts: Runs,
    /// The confluent-kafka consumer.
    pub fetch: Runs,
    /// The bench's GETs of pages of 1,000, one connection, one partition after the other.
    pub pages: Runs,
    /// The same, one connection per partition.
    pub parallel_pages: Runs,
    /// [`MEMBERS`] consumers of one group.
    pub group_fetch: Runs,
    /// [`MEMBERS`] consumers `assign()`ed a partition each, no group.
    pub assigned_fetch: Runs,
    /// Seconds a group of [`REBALANCE_MEMBERS`] took to rebalance after a member left, each
    /// run.
    pub rebalances: Vec<f64>,
    /// The machine's load average over 1 minute as the section began and as it ended.
    pub load: (f64, f64),
}

/// The whole section: `records` records produced by each run, and read.
pub fn run(binary: &Path, dir: &Path, payload: &str, records: u64) -> Kafka {
    eprintln!("kafka");
    assert!(
        records.is_multiple_of(PARTITIONS * BATCH),
        "records spread evenly in batches"
    );
    std::fs::create_dir_all(dir).unwrap();
    let server = Server::start(binary, dir);
    let mut section = Kafka {
        records,
        load: (load_average(), 0.0),
        ..Kafka::default()
    };
    let posts = Posts::new(&server, payload, records);
    for round in 0..3 {
        let produce = |section: &mut Kafka| {
            let run = server.produce(&format!("kafka-{round}"), payload, records);
            section.produce.0.push(run);
        };
        let loops = |section: &mut Kafka| {
            let run = posts.run(&format!("posts-{round}"), PARTITIONS as usize);
            section.posts.0.push(run);
            let run = posts.run(&format!("sequential-{round}"), 1);
            section.sequential_posts.0.push(run);
        };
        if round % 2 == 0 {
            produce(&mut section);
            loops(&mut section);
        } else {
            loops(&mut section);
            produce(&mut section);
        }
    }
    report("confluent-kafka producer", &section.produce);
    report(
        "100-record POSTs, one connection per partition",
        &section.posts,
    );
    report(
        "100-record POSTs, one connection, round-robin",
        &section.sequential_posts,
    );

    // The records the producer wrote first, read once untimed (checked whole), then by each.
    let topic = "kafka-0";
    server.fetch(topic, records);
    for round in 0..3 {
        let fetch = |section: &mut Kafka| {
            section.fetch.0.push(server.fetch(topic, records));
            let group = |section: &mut Kafka| {
                let run = server.group_fetch("read", topic, records);
                section.group_fetch.0.push(run);
            };
            let assigned = |section: &mut Kafka| {
                let run = server.group_fetch("assigned", topic, records);
                section.assigned_fetch.0.push(run);
            };
            if round % 2 == 0 {
                group(section);
                assigned(section);
            } else {
                assigned(section);
                group(section);
            }
        };
        let pages = |section: &mut Kafka| {
            section.pages.0.push(server.pages(topic, records, 1));
            let run = server.pages(topic, records, PARTITIONS as usize);
            section.parallel_pages.0.push(run);
        };
        if round % 2 == 0 {
            fetch(&mut section);
            pages(&mut section);
        } else {
            pages(&mut section);
            fetch(&mut section);
        }
    }
    report("confluent-kafka consumer", &section.fetch);
    report(
        "confluent-kafka consumers of one group",
        &section.group_fetch,
    );
    report(
        "confluent-kafka consumers assigned a partition each",
        &section.assigned_fetch,
    );
    section.rebalances = (0..3).map(|_| server.rebalance(topic)).collect();
    eprintln!(
        "  a group of {REBALANCE_MEMBERS} rebalanced after a member left in {:?} s",
        section.rebalances
    );
    report("GETs of pages of 1,000, one connection", &section.pages);
    report(
        "GETs of pages of 1,000, one connection per partition",
        &section.parallel_pages,
    );
    section.load.1 = load_average();
    section
}

/// Prints the median of `runs`.
fn report(what: &str, runs: &Runs) {
    let median = runs.median();
    let (slowest, fastest) = runs.range();
    let requests = if median.request_seconds > 0.0 {
        format!(
            ", {} requests ({} long-polls at the end), the server busy with them {:.0} % of \
             the time",
            median.requests,
            median.long_polls,
            median.server_busy() * 100.0
        )
    } else {
        String::new()
    };
    eprintln!(
        "  {what}: {:.0} records/s (runs {slowest:.0} to {fastest:.0}), server {:.2} µs CPU per \
         record ({:.2} user, {:.2} system; the committer {:.2}), client {:.2} µs{requests}",
        median.records_per_second,
        median.server_us(),
        median.server_user_us,
        median.server_system_us,
        median.committer_us,
        median.client_us
    );
}

/// The machine's load average over the last minute (`/proc/loadavg`).
fn load_average() -> f64 {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let first = loadavg.split_whitespace().next();
    first
        .and_then(|value| value.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The server of the section, with its REST and Kafka addresses.
struct Server {
    running: Running,
    /// Its standard output, kept open (it is read to its two lines of addresses).
    _stdout: BufReader<ChildStdout>,
    address: SocketAddr,
    kafka: SocketAddr,
}

impl Server {
    /// The binary as the suite runs it ([`external::server`]'s settings), with the Kafka
    /// listener on a free port and pages of up to [`PAGE`] records.
    fn start(binary: &Path, dir: &Path) -> Self {
        let mut child = Command::new(binary)
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__KAFKA__BIND", "127.0.0.1:0")
            .env(
                "DURABILITY__LOG__MAX_BATCH_SIZE",
                MAX_BATCH_SIZE.to_string(),
            )
            .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
            .env("DURABILITY__STORAGE__SYNC", "full")
            .env("DURABILITY__COLD__KIND", "none")
            .env("DURABILITY__RETENTION__MAX_AGE_MS", "0")
            .env("DURABILITY__RETENTION__MAX_BYTES", "0")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let running = Running(child);
        let (mut address, mut kafka) = (None, None);
        let mut line = String::new();
        while address.is_none() || kafka.is_none() {
            line.clear();
            let read = stdout.read_line(&mut line).unwrap();
            assert!(read > 0, "the server stopped before it listened");
            if let Some(rest) = line.strip_prefix("listening on http://") {
                address = Some(rest.trim().parse().expect("listening on ADDRESS"));
            } else if let Some(rest) = line.strip_prefix("kafka listening on ") {
                let bound = rest.split_whitespace().next().unwrap_or_default();
                kafka = Some(bound.parse().expect("kafka listening on ADDRESS"));
            }
        }
        let (address, kafka) = (address.unwrap(), kafka.unwrap());
        external::wait_for(address);
        external::wait_for(kafka);
        Self {
            running,
            _stdout: stdout,
            address,
            kafka,
        }
    }

    fn pid(&self) -> u32 {
        self.running.0.id()
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

    /// Measures `client` (which answers the run's length in s, the client's CPU in s, and the
    /// requests it sent): the server's CPU from before it until the server is idle again, and
    /// what `/metrics` counted of `api`'s requests meanwhile.
    fn measure(
        &self,
        records: u64,
        api: Option<&str>,
        client: impl FnOnce() -> (f64, f64, u64),
    ) -> Run {
        self.settle();
        let metrics = api.map(|api| KafkaMetrics::read(self.address, api));
        let (server_cpu, committer) = (external::cpu(self.pid()), committer_cpu(self.pid()));
        let (seconds, client_cpu, requests) = client();
        if api == Some("Fetch") {
            // A consumer's last Fetch waits on the server after it left: counted before the
            // metrics are read again.
            std::thread::sleep(Duration::from_secs_f64(FETCH_WAIT_S + 0.2));
        }
        self.settle();
        let spent = external::cpu(self.pid()).since(server_cpu);
        let per_record = |seconds: f64| seconds * 1e6 / records as f64;
        let mut run = Run {
            records_per_second: records as f64 / seconds,
            server_user_us: per_record(spent.user),
            server_system_us: per_record(spent.system),
            committer_us: per_record(committer_since(&committer_cpu(self.pid()), &committer)),
            client_us: per_record(client_cpu),
            requests,
            seconds,
            ..Run::default()
        };
        if let (Some(api), Some(before)) = (api, metrics) {
            let after = KafkaMetrics::read(self.address, api);
            run.requests = after.requests - before.requests;
            run.request_seconds = after.seconds - before.seconds;
            run.long_polls = run.requests - (after.within_wait - before.within_wait);
            run.batches = after.batches - before.batches;
        }
        run
    }

    /// The Python driver `script` with `args`, to its end: its JSON summary line.
    fn python(&self, script: &str, args: &[&str]) -> serde_json::Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/kafka")
            .join(script);
        let output = Command::new(python())
            .arg(&script)
            .arg(self.kafka.to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the Python of .venv-kafka");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{} {args:?} failed: {}{stdout}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: serde_json::Value = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .unwrap_or_else(|| panic!("no summary from {}: {stdout}", script.display()));
        let errors = &summary["errors"];
        assert!(
            errors.as_object().is_some_and(|errors| errors.is_empty()),
            "{} {args:?}: the client reported errors: {summary}",
            script.display()
        );
        summary
    }

    /// The confluent-kafka producer sending `records` records of `payload` round-robin over
    /// the partitions of `topic`, new: checks that every partition holds its share.
    fn produce(&self, topic: &str, payload: &str, records: u64) -> Run {
        let (count, partitions) = (records.to_string(), PARTITIONS.to_string());
        let run = self.measure(records, Some("Produce"), || {
            let summary = self.python("bench_produce.py", &[topic, &count, &partitions, payload]);
            assert_eq!(summary["left"], 0, "every record delivered: {summary}");
            (
                summary["seconds"].as_f64().unwrap(),
                summary["cpu_seconds"].as_f64().unwrap(),
                0,
            )
        });
        self.check_written(topic, records);
        run
    }

    /// The confluent-kafka consumer reading the `records` records of `topic` from the
    /// beginning of each partition: checks that it read each once, whole.
    fn fetch(&self, topic: &str, records: u64) -> Run {
        let (count, partitions) = (records.to_string(), PARTITIONS.to_string());
        self.read_by("bench_fetch.py", &[topic, &count, &partitions], records)
    }

    /// [`MEMBERS`] confluent-kafka consumers reading the `records` records of `topic`, as a
    /// new group (`how` is `read`) or assigned a partition each (`assigned`): checks that they
    /// read each once, whole.
    fn group_fetch(&self, how: &str, topic: &str, records: u64) -> Run {
        let (count, members) = (records.to_string(), MEMBERS.to_string());
        self.read_by("bench_group.py", &[how, topic, &count, &members], records)
    }

    /// The read of `records` records by the consumer program `script`, measured: checks from
    /// its summary that it read each once, whole.
    fn read_by(&self, script: &str, args: &[&str], records: u64) -> Run {
        self.measure(records, Some("Fetch"), || {
            let summary = self.python(script, args);
            assert_eq!(
                summary["records"], records,
                "every record read once: {summary}"
            );
            assert_eq!(
                summary["value_bytes"].as_u64(),
                Some(records * 100),
                "every value whole: {summary}"
            );
            (
                summary["seconds"].as_f64().unwrap(),
                summary["cpu_seconds"].as_f64().unwrap(),
                0,
            )
        })
    }

    /// The seconds a group of [`REBALANCE_MEMBERS`] consumers of `topic` takes to rebalance
    /// after one of them leaves.
    fn rebalance(&self, topic: &str) -> f64 {
        let members = REBALANCE_MEMBERS.to_string();
        let summary = self.python("bench_group.py", &["rebalance", topic, &members]);
        assert_eq!(
            summary["rebalance_timeout_seconds"].as_f64(),
            Some(REBALANCE_TIMEOUT_S)
        );
        summary["rebalance_seconds"].as_f64().unwrap()
    }

    /// Checks that each partition of `topic` holds its share of `records`.
    fn check_written(&self, topic: &str, records: u64) {
        for partition in 0..PARTITIONS {
            assert_eq!(
                next_offset(self.address, topic, partition),
                records / PARTITIONS,
                "{topic} partition {partition} holds its share"
            );
        }
    }

    /// GETs of pages of [`PAGE`] of every partition of `topic` (`records` records in all),
    /// from each partition's first offset to its last, over `connections` connections: one
    /// for all the partitions in turn, or one per partition.
    fn pages(&self, topic: &str, records: u64, connections: usize) -> Run {
        let share = records / PARTITIONS;
        let request = |partition: u64, from: u64| {
            let limit = PAGE.min(share - from);
            let request = format!(
                "GET /topics/{topic}/partitions/{partition}/records?from={from}&limit={limit} \
                 HTTP/1.1\r\nHost: {}\r\n\r\n",
                self.address
            );
            (request.into_bytes(), limit)
        };
        let requests: Vec<Vec<(Vec<u8>, u64)>> = (0..PARTITIONS)
            .map(|partition| {
                (0..share)
                    .step_by(PAGE as usize)
                    .map(|from| request(partition, from))
                    .collect()
            })
            .collect();
        let requests = spread(requests, connections);
        self.measure(records, None, || {
            exchanges(self.address, &requests, |body, limit| {
                // A full page of 100-byte payloads: something was read, not an empty page.
                assert!(body > 100 * limit as usize, "a page of {body} bytes");
            })
        })
    }
}

/// The requests of each partition, in order, over `connections` connections: one per
/// partition, or all on one, the partitions in turn.
fn spread<T>(by_partition: Vec<Vec<T>>, connections: usize) -> Vec<Vec<T>> {
    if connections == by_partition.len() {
        return by_partition;
    }
    assert_eq!(connections, 1, "one connection, or one per partition");
    vec![by_partition.into_iter().flatten().collect()]
}

/// Sends the requests of each list on a connection of its own, one at a time, reading each
/// answer (checked 2xx, its body's length given to `check` with the records the request is
/// about); every connection opens before the timing starts. Answers the time from the start
/// until the last answer, the CPU the connections' threads spent, and the requests sent.
fn exchanges(
    address: SocketAddr,
    connections: &[Vec<(Vec<u8>, u64)>],
    check: impl Fn(usize, u64) + Sync,
) -> (f64, f64, u64) {
    let start = Barrier::new(connections.len() + 1);
    let (start, check) = (&start, &check);
    std::thread::scope(|scope| {
        let threads: Vec<_> = connections
            .iter()
            .map(|requests| {
                scope.spawn(move || {
                    let mut stream = TcpStream::connect(address).unwrap();
                    stream.set_nodelay(true).unwrap();
                    let mut buffer = Vec::with_capacity(256 * 1024);
                    start.wait();
                    let cpu = thread_cpu();
                    for (request, records) in requests {
                        stream.write_all(request).unwrap();
                        check(read_answer(&mut stream, &mut buffer), *records);
                    }
                    (Instant::now(), thread_cpu() - cpu)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let ends: Vec<(Instant, f64)> = threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
        let last = ends.iter().map(|(end, _)| *end).max().unwrap();
        let cpu = ends.iter().map(|(_, cpu)| cpu).sum();
        let requests = connections.iter().map(Vec::len).sum::<usize>() as u64;
        ((last - started).as_secs_f64(), cpu, requests)
    })
}

/// The bench's 100-record POSTs, no keys.
struct Posts<'a> {
    server: &'a Server,
    /// One record of the body: `{"payload":...}`.
    record: String,
    records: u64,
}

impl<'a> Posts<'a> {
    fn new(server: &'a Server, payload: &str, records: u64) -> Self {
        Self {
            server,
            record: format!("{{\"payload\":{payload}}}"),
            records,
        }
    }

    /// `records` records to the partitions of `topic`, new, in POSTs of [`BATCH`], an equal
    /// share each, over `connections` connections (one per partition, or one for all, the
    /// partitions in turn), one POST at a time on each.
    fn run(&self, topic: &str, connections: usize) -> Run {
        let body = format!("[{}]", vec![self.record.as_str(); BATCH as usize].join(","));
        let request = |partition: u64| {
            let request = format!(
                "POST /topics/{topic}/partitions/{partition}/records HTTP/1.1\r\nHost: {}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                self.server.address,
                body.len()
            );
            (request.into_bytes(), BATCH)
        };
        let batches = self.records / PARTITIONS / BATCH;
        let by_partition: Vec<Vec<(Vec<u8>, u64)>> = (0..PARTITIONS)
            .map(|partition| (0..batches).map(|_| request(partition)).collect())
            .collect();
        let requests = if connections == 1 {
            // One connection: the partitions in turn, a batch each.
            let mut turns = Vec::with_capacity((batches * PARTITIONS) as usize);
            let mut lists: Vec<_> = by_partition.into_iter().map(Vec::into_iter).collect();
            for _ in 0..batches {
                turns.extend(lists.iter_mut().map(|list| list.next().unwrap()));
            }
            vec![turns]
        } else {
            spread(by_partition, connections)
        };
        let run = self.server.measure(self.records, None, || {
            exchanges(self.server.address, &requests, |_, _| {})
        });
        self.server.check_written(topic, self.records);
        run
    }
}

/// What `/metrics` counted of one Kafka API so far.
#[derive(Debug, Clone, Copy, Default)]
struct KafkaMetrics {
    /// Requests answered, whatever their error.
    requests: u64,
    /// The server's time over them, in s.
    seconds: f64,
    /// Of them, those answered within [`FETCH_WAIT_S`].
    within_wait: u64,
    /// Record batches produced (every API's).
    batches: u64,
}

impl KafkaMetrics {
    fn read(address: SocketAddr, api: &str) -> Self {
        let answer = external::exchange(
            address,
            &format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        );
        let body = &answer[answer.find("\r\n\r\n").expect("an HTTP answer") + 4..];
        let mut metrics = Self::default();
        let ours = format!("api=\"{api}\"");
        for line in body.lines().filter(|line| !line.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            if name.starts_with("durability_kafka_batches_total") {
                metrics.batches += value as u64;
            }
            if !name.contains(&ours) {
                continue;
            }
            if name.starts_with("durability_kafka_request_duration_seconds_count") {
                metrics.requests += value as u64;
            } else if name.starts_with("durability_kafka_request_duration_seconds_sum") {
                metrics.seconds += value;
            } else if name.starts_with("durability_kafka_request_duration_seconds_bucket")
                && name.contains(&format!("le=\"{FETCH_WAIT_S}\""))
            {
                metrics.within_wait += value as u64;
            }
        }
        metrics
    }
}

/// The next offset of `partition` of `topic`.
fn next_offset(address: SocketAddr, topic: &str, partition: u64) -> u64 {
    let answer = external::exchange(
        address,
        &format!(
            "GET /topics/{topic}/partitions/{partition}/bounds HTTP/1.1\r\nHost: {address}\r\n\
             Connection: close\r\n\r\n"
        ),
    );
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let bounds: serde_json::Value = serde_json::from_str(body).unwrap();
    bounds["nextOffset"].as_u64().unwrap()
}

/// The CPU time (user and system, in s) of each of process `pid`'s committer threads so far
/// (`durability-commit-N`), by thread id.
fn committer_cpu(pid: u32) -> HashMap<u32, f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with("durability-comm"))
        })
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .map(|thread: u32| (thread, thread_stat_cpu(pid, thread)))
        .collect()
}

/// What the committer threads of `now` spent since `before` (a thread started since, all it
/// spent; one that ended since is not counted).
fn committer_since(now: &HashMap<u32, f64>, before: &HashMap<u32, f64>) -> f64 {
    now.iter()
        .map(|(thread, cpu)| cpu - before.get(thread).unwrap_or(&0.0))
        .sum()
}

/// Thread `thread` of process `pid`'s CPU time so far (user and system, in s): `utime` and
/// `stime` of its `/proc/PID/task/TID/stat`, as [`external::cpu`] reads a process's.
fn thread_stat_cpu(pid: u32, thread: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{thread}/stat")) else {
        return 0.0;
    };
    // Fields after the name's closing parenthesis; utime and stime are the 12th and 13th.
    let after_name = &stat[stat.rfind(')').map_or(0, |at| at + 1)..];
    let ticks: f64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks
        / if per_second > 0 {
            per_second as f64
        } else {
            100.0
        }
}

/// The CPU time (user and system, in s) of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: an all-zero `rusage` is a valid value, which getrusage overwrites.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`.
    let status = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(status, 0, "getrusage");
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
