//! The benchmark suite: every figure users compare logs by, measured in one run on this
//! machine, side by side with the ceiling (raw rusqlite batched inserts with the same
//! durability) and the peer (Redis Streams `XADD` with `appendfsync always`).
//!
//! Run it with `scripts/bench`, which installs Redis, wrk and matplotlib, builds the server and
//! draws the plots. Directly: `cargo bench --bench suite -- [--server PATH] [--floor PATH]
//! [--out DIR] [--seconds N] [--quick] [--only SECTION] [--million-partitions N] [--million-idle-seconds S]`.
//! Without `--server` (or without wrk / redis-server installed) the HTTP (or Redis) rows are
//! left out. `--quick` grows the partition to 10⁶ records instead of 10⁷ for the cost-growth
//! rows, and writes 10⁵ partitions instead of 10⁶, idle 60 s instead of 300, in the million
//! section, and 10⁴ quiet partitions instead of 10⁵ in the replication section. `--only` runs
//! one section: `throughput` (which latency needs), `cpu` (needs `--server`; `--floor`, the
//! `http_floor` example, adds the framework's floor), `cold`, `partitions` (needs `--server`),
//! `scale`, `million` (needs `--server`), `replication` (needs `--server`, and starts
//! `scripts/s3-server`), `cluster` (needs `--server` and etcd; starts the S3 server, one etcd
//! member and up to three nodes; `--quick` kills 5 nodes instead of 20, and fails 1 loaded
//! cluster of 256 volumes instead of 3) or `failovers` (needs `--server` and etcd; starts the S3
//! server, one etcd member and one cluster of three nodes of 256 volumes, then 20 rounds of
//! 10 s of load, a `kill -9` and a restart; `--quick` runs 5 rounds) or `security` (needs
//! `--server`, wrk and openssl; what TLS and 10,000 scoped tokens cost, against plaintext and
//! no tokens in the same run) or `client` (needs `--server` and wrk; `durability produce` and
//! `durability consume` of 10⁶ records, 10⁵ with `--quick`, and the typed client's CPU per
//! append, each against the bench's own requests to the same server) or `kafka` (needs
//! `--server` and confluent-kafka in `.venv-kafka`, which `scripts/install-kafka-clients`
//! makes: skipped with a message without it; a confluent-kafka producer and consumer of 10⁶
//! records, 10⁵ with `--quick`, each against the bench's REST requests for the same records,
//! and the server's CPU per record of each) or `console` (needs `--server` and Selenium in
//! `.venv-browser` with Debian's chromium, which `scripts/install-browser` installs: skipped with
//! a message without them; the browser console's first paint with 10⁴ topics against one topic,
//! and its live tail fed 5,000 records/s for 10 s against a plain long-poll reader; `--quick`
//! loads the console 3 times from each server instead of 7, and runs the tail once instead of
//! 3 times). Writes
//! `DIR/BENCHMARKS.md` and `DIR/bench/results.json`; `--only` replaces only what that section
//! writes in them (`throughput`: the goals it measures, the throughput and latency tables;
//! `cold` writes nothing there).

mod client;
mod cluster;
mod console;
mod cpu;
mod embedded;
mod external;
mod failovers;
mod kafka;
mod latency;
mod million;
mod partitions;
mod raw;
mod replication;
mod report;
mod security;

use std::path::PathBuf;
use std::time::Duration;

use durability::store::SyncMode;
use report::{Measured, Report};

/// Record sizes measured, in bytes of payload text.
const SIZES: [usize; 2] = [100, 1024];
/// Partition counts the producers spread over (64 and 1,024 with 50 producers only).
const PARTITIONS: [u32; 4] = [1, 8, 64, 1024];

struct Args {
    server: Option<PathBuf>,
    /// The framework's floor (`examples/http_floor.rs`), for the CPU-per-request section.
    floor: Option<PathBuf>,
    out: PathBuf,
    seconds: f64,
    quick: bool,
    only: Option<String>,
    /// New partitions in the million section (10⁶ by default).
    million_partitions: Option<u64>,
    /// Length of its nearly idle stretch after the restart (300 s by default).
    million_idle_seconds: Option<f64>,
}

impl Args {
    fn parse() -> Self {
        let mut args = Self {
            server: None,
            floor: None,
            out: PathBuf::from("docs"),
            seconds: 3.0,
            quick: false,
            only: None,
            million_partitions: None,
            million_idle_seconds: None,
        };
        let mut given = std::env::args().skip(1);
        while let Some(arg) = given.next() {
            match arg.as_str() {
                "--server" => args.server = given.next().map(PathBuf::from),
                "--floor" => args.floor = given.next().map(PathBuf::from),
                "--out" => args.out = given.next().map(PathBuf::from).expect("--out DIR"),
                "--seconds" => {
                    args.seconds = given
                        .next()
                        .and_then(|s| s.parse().ok())
                        .expect("--seconds N")
                }
                "--quick" => args.quick = true,
                "--only" => args.only = given.next(),
                "--million-partitions" => {
                    args.million_partitions = Some(
                        given
                            .next()
                            .and_then(|s| s.parse().ok())
                            .filter(|n| *n > 0)
                            .expect("--million-partitions N (N > 0)"),
                    )
                }
                "--million-idle-seconds" => {
                    args.million_idle_seconds = Some(
                        given
                            .next()
                            .and_then(|s| s.parse().ok())
                            .expect("--million-idle-seconds S"),
                    )
                }
                // `cargo bench` passes this to every bench target.
                "--bench" => {}
                other => panic!("unknown argument {other}"),
            }
        }
        args
    }

    fn runs(&self, section: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only == section)
    }
}

/// A JSON string of exactly `size` bytes: the record payload.
fn payload(size: usize) -> String {
    format!("\"{}\"", "x".repeat(size - 2))
}

fn main() {
    let args = Args::parse();
    let budget = Duration::from_secs_f64(args.seconds);
    let root = tempfile::Builder::new()
        .prefix("durability-bench-suite")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    // Every measurement starts on a quiet disk: the previous ones' files are deleted and
    // everything written so far is flushed, so their writeback does not slow its fsyncs.
    let dir = |name: &str| {
        settle(root.path());
        root.path().join(name)
    };
    let redis_installed =
        external::installed("redis-server") && external::installed("redis-benchmark");
    let server = args.server.clone().filter(|_| external::installed("wrk"));
    let mut report = Report::new(args.seconds);

    for size in SIZES.into_iter().filter(|_| args.runs("throughput")) {
        let payload = payload(size);
        let mut m = Measured::new(size);
        let ceiling =
            |name: &str| raw::batched_inserts(&dir(name), 100, &payload, SyncMode::Full, budget);
        eprintln!("{size} B records");
        m.ceiling_runs.push(ceiling(&format!("raw-{size}-a")));

        for partitions in PARTITIONS {
            let producers: &[usize] = if partitions <= 8 { &[1, 8, 50] } else { &[50] };
            for &producers in producers {
                let rate = median_of_3(|| {
                    embedded::producers(
                        dir(&format!("embedded-{size}-{partitions}-{producers}")),
                        partitions,
                        producers,
                        &payload,
                        budget,
                    )
                });
                eprintln!("  embedded {producers} producers, {partitions} partitions: {rate:.0}/s");
                m.embedded.push((partitions, producers, rate));
            }
        }
        m.ceiling_runs.push(ceiling(&format!("raw-{size}-b")));
        (m.reads, m.raw_scan) = embedded::reads(dir(&format!("reads-{size}")), &payload);
        m.lease_ack = embedded::lease_ack(dir(&format!("leases-{size}")), &payload);

        if redis_installed {
            let (_redis, port) = external::redis(&dir(&format!("redis-{size}")));
            let value = "x".repeat(size);
            m.redis_unpipelined = Some(external::redis_xadd(port, 50, 1, &value, budget));
            m.redis_pipelined = Some(external::redis_xadd(port, 50, 16, &value, budget));
        }
        if let Some(binary) = &server {
            m.http = Some(http(
                binary,
                &dir(&format!("http-{size}")),
                &payload,
                budget,
            ));
        }
        m.ceiling_runs.push(ceiling(&format!("raw-{size}-c")));
        report.add(m);
    }

    let payload = payload(100);
    let embedded_max = report.embedded_rate(100, 1, 50);
    if embedded_max > 0.0 {
        let rate = embedded_max / 2.0;
        let embedded_latency = latency::embedded(dir("latency"), &payload, rate, budget * 2);
        report.add_latency("embedded append (typed messages)", rate, embedded_latency);
    }
    if let (Some(binary), Some(http_max)) = (&server, report.http_single_rate(100)) {
        let (_server, address) = external::server(binary, &dir("latency-http"));
        let rate = http_max / 2.0;
        let body = format!("[{{\"payload\":{payload}}}]");
        let path = "/topics/bench/partitions/0/records";
        let measured = latency::http(address, path, &body, 64, rate, budget * 2);
        report.add_latency("HTTP single-record POST", rate, measured);
    }

    if let Some(binary) = server.as_ref().filter(|_| args.runs("cpu")) {
        report.cpu = Some(cpu::run(
            binary,
            args.floor.as_deref(),
            &dir("cpu"),
            &payload,
            budget,
        ));
    }

    if args.runs("cold") {
        report.cold = Some(embedded::cold_read_back(dir("cold"), &payload));
    }
    if let Some(binary) = server
        .as_ref()
        .or(args.server.as_ref())
        .filter(|_| args.runs("partitions"))
    {
        eprintln!("many partitions");
        let counts: &[u64] = if args.quick {
            &[1_000, 10_000]
        } else {
            &[1_000, 10_000, 100_000]
        };
        report.partitions = partitions::growth(binary, &dir("partitions"), counts, &payload);
        let rate =
            partitions::round_robin(binary, &dir("round-robin"), 10_000, 50, &payload, budget);
        eprintln!("  50 producers round-robin over 10,000 partitions: {rate:.0} appends/s");
        report.round_robin = Some((10_000, rate));
    }
    if args.runs("scale") {
        let sizes: &[u64] = if args.quick {
            &[10_000, 100_000, 1_000_000]
        } else {
            &[10_000, 1_000_000, 10_000_000]
        };
        report.scale = embedded::scale(dir("scale"), sizes, &payload, budget);
    }
    if let Some(binary) = args.server.as_ref().filter(|_| args.runs("million")) {
        let partitions =
            args.million_partitions
                .unwrap_or(if args.quick { 100_000 } else { 1_000_000 });
        let idle = args
            .million_idle_seconds
            .unwrap_or(if args.quick { 60.0 } else { 300.0 });
        eprintln!("a million partitions");
        report.million = Some(million::run(
            binary,
            &dir,
            partitions,
            Duration::from_secs_f64(idle),
        ));
    }

    if let Some(binary) = server.as_ref().filter(|_| args.runs("replication")) {
        report.replication = Some(replication::run(
            binary,
            &dir("replication"),
            &payload,
            budget,
            args.quick,
        ));
    }

    if let Some(binary) = args.server.as_ref().filter(|_| {
        args.runs("cluster") && external::installed("wrk") && external::installed("etcd")
    }) {
        eprintln!("a cluster");
        let (kills, loaded_rounds) = if args.quick { (5, 1) } else { (20, 3) };
        report.cluster = Some(cluster::run(
            binary,
            &dir("cluster"),
            &payload,
            budget,
            kills,
            loaded_rounds,
        ));
    }

    if let Some(binary) = args.server.as_ref().filter(|_| {
        args.runs("failovers") && external::installed("wrk") && external::installed("etcd")
    }) {
        eprintln!("repeated failovers");
        let kills = if args.quick { 5 } else { 20 };
        report.failovers = Some(failovers::run(binary, &dir("failovers"), &payload, kills));
    }

    if let Some(binary) = server
        .as_ref()
        .filter(|_| args.runs("security") && external::installed("openssl"))
    {
        report.security = Some(security::run(binary, &dir("security"), &payload, budget));
    }

    if let Some(binary) = server.as_ref().filter(|_| args.runs("client")) {
        let (records, appends) = if args.quick {
            (100_000, 1_000)
        } else {
            (1_000_000, 2_000)
        };
        report.client = Some(client::run(
            binary,
            &dir("client"),
            &payload,
            records,
            appends,
            budget,
        ));
    }

    if let Some(binary) = args.server.as_ref().filter(|_| args.runs("kafka")) {
        if kafka::installed() {
            let records = if args.quick { 100_000 } else { 1_000_000 };
            report.kafka = Some(kafka::run(binary, &dir("kafka"), &payload, records));
        } else {
            eprintln!(
                "kafka: skipped: {} cannot import confluent_kafka (scripts/install-kafka-clients \
                 installs it)",
                kafka::python().display()
            );
        }
    }

    if let Some(binary) = args.server.as_ref().filter(|_| args.runs("console")) {
        if console::installed() {
            report.console = Some(console::run(binary, &dir("console"), &payload, args.quick));
        } else {
            eprintln!(
                "console: skipped: {} cannot import selenium, or /usr/bin/chromium or \
                 /usr/bin/chromedriver is missing (scripts/install-browser installs them)",
                console::python().display()
            );
        }
    }

    report.write(&args.out, args.quick, args.only.as_deref());
}

/// The median of three runs of `measure`: this machine's disk and scheduler vary from one
/// second to the next, and a single run of a headline figure can land on a slow stretch.
fn median_of_3(mut measure: impl FnMut() -> f64) -> f64 {
    report::median(vec![measure(), measure(), measure()])
}

/// Deletes what earlier measurements left under `root` and waits until the disk has written
/// everything.
fn settle(root: &std::path::Path) {
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let _ = std::fs::remove_dir_all(entry.path());
        let _ = std::fs::remove_file(entry.path());
    }
    let _ = std::process::Command::new("sync").status();
}

/// The HTTP figures for one record size, against a fresh server.
fn http(
    binary: &std::path::Path,
    dir: &std::path::Path,
    payload: &str,
    budget: Duration,
) -> report::Http {
    std::fs::create_dir_all(dir).unwrap();
    let (_server, address) = external::server(binary, dir);
    let path = "/topics/bench/partitions/0/records";
    let url = format!("http://{address}{path}");
    let (single, hundred) = external::append_scripts(dir, payload);

    let single = median_of_3(|| external::wrk(&url, 64, &single, budget).requests_per_second);
    eprintln!("  HTTP single-record POSTs: {single:.0}/s");
    let batches =
        median_of_3(|| external::wrk(&url, 16, &hundred, budget).requests_per_second) * 100.0;
    eprintln!("  HTTP 100-record POSTs: {batches:.0} records/s");
    let records = external::next_offset(address);
    let reads = external::read_script(dir, path, records);
    let reads = external::wrk(&url, 16, &reads, budget).requests_per_second * 100.0;
    eprintln!("  HTTP reads, pages of 100: {reads:.0} records/s");
    report::Http {
        single,
        batches,
        reads,
    }
}
