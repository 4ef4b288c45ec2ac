//! The suite's one table: every figure with its ratio to the ceiling and to the peer, printed,
//! written to `BENCHMARKS.md`, and saved as JSON for the plots.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::embedded::ScalePoint;
use crate::latency::Percentiles;
use crate::million::Million;
use crate::partitions::GrowthPoint;

/// Everything measured for one record size.
pub struct Measured {
    pub size: usize,
    /// Raw batched inserts, taken before, between and after the other measurements.
    pub ceiling_runs: Vec<f64>,
    /// (partitions, producers, appends/s).
    pub embedded: Vec<(u32, usize, f64)>,
    pub reads: f64,
    pub raw_scan: f64,
    pub lease_ack: f64,
    pub redis_unpipelined: Option<f64>,
    pub redis_pipelined: Option<f64>,
    pub http: Option<Http>,
}

impl Measured {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            ceiling_runs: Vec::new(),
            embedded: Vec::new(),
            reads: 0.0,
            raw_scan: 0.0,
            lease_ack: 0.0,
            redis_unpipelined: None,
            redis_pipelined: None,
            http: None,
        }
    }

    /// The median of the ceiling runs.
    pub fn ceiling(&self) -> f64 {
        median(self.ceiling_runs.clone())
    }
}

/// HTTP figures, in records per second.
pub struct Http {
    pub single: f64,
    pub batches: f64,
    pub reads: f64,
}

/// One line of the table.
struct Row {
    what: String,
    size: usize,
    value: f64,
    unit: &'static str,
    vs_ceiling: Option<f64>,
    vs_peer: Option<f64>,
    /// The goal this figure is held to, and whether it is met.
    target: Option<(String, bool)>,
}

struct Latency {
    name: String,
    rate: f64,
    percentiles: Percentiles,
}

pub struct Report {
    seconds: f64,
    sizes: Vec<Measured>,
    latencies: Vec<Latency>,
    /// (cold read-back records/s, hot reads of the same records/s).
    pub cold: Option<(f64, f64)>,
    pub scale: Vec<ScalePoint>,
    /// Distinct partitions written once each, through the server.
    pub partitions: Vec<GrowthPoint>,
    /// (partitions, appends/s) of 50 producers round-robin over that many partitions.
    pub round_robin: Option<(u64, f64)>,
    /// A million new partitions (or `--million-partitions`) through the server.
    pub million: Option<Million>,
    /// Replication to object storage, through the server.
    pub replication: Option<crate::replication::Replication>,
    pub cluster: Option<crate::cluster::Cluster>,
    /// Repeated failovers of one cluster of the default volumes.
    pub failovers: Option<crate::failovers::Failovers>,
    /// The server's CPU per HTTP request, next to the framework's floor.
    pub cpu: Option<crate::cpu::CpuPerRequest>,
    /// What TLS and scoped tokens cost, against plaintext and no tokens.
    pub security: Option<crate::security::Security>,
    /// What the client commands and the typed client cost, against the bench's own requests.
    pub client: Option<crate::client::ClientSide>,
    /// What Kafka clients get through the Kafka listener, against REST requests.
    pub kafka: Option<crate::kafka::Kafka>,
    /// What the browser console gives its user, against baselines of the same run.
    pub console: Option<crate::console::Console>,
}

fn ratio(value: f64, base: Option<f64>) -> Option<f64> {
    base.filter(|base| *base > 0.0).map(|base| value / base)
}

impl Report {
    pub fn new(seconds: f64) -> Self {
        Self {
            seconds,
            sizes: Vec::new(),
            latencies: Vec::new(),
            cold: None,
            scale: Vec::new(),
            partitions: Vec::new(),
            round_robin: None,
            million: None,
            replication: None,
            cluster: None,
            failovers: None,
            cpu: None,
            security: None,
            client: None,
            kafka: None,
            console: None,
        }
    }

    pub fn add(&mut self, measured: Measured) {
        self.sizes.push(measured);
    }

    pub fn add_latency(&mut self, name: &str, rate: f64, percentiles: Percentiles) {
        eprintln!(
            "  {name} at {rate:.0}/s: p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms",
            percentiles.p50, percentiles.p99, percentiles.p999
        );
        self.latencies.push(Latency {
            name: name.to_owned(),
            rate,
            percentiles,
        });
    }

    fn size(&self, size: usize) -> Option<&Measured> {
        self.sizes.iter().find(|measured| measured.size == size)
    }

    pub fn embedded_rate(&self, size: usize, partitions: u32, producers: usize) -> f64 {
        self.size(size)
            .and_then(|m| {
                m.embedded
                    .iter()
                    .find(|(p, n, _)| *p == partitions && *n == producers)
            })
            .map_or(0.0, |(_, _, rate)| *rate)
    }

    pub fn http_single_rate(&self, size: usize) -> Option<f64> {
        self.size(size)?.http.as_ref().map(|http| http.single)
    }

    /// The throughput rows; the targets of the performance goals are checked on 100 B records.
    fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for m in &self.sizes {
            let ceiling = m.ceiling();
            let peer = m.redis_unpipelined;
            let targeted = m.size == 100;
            let mut row = |what: String, value: f64, unit, vs_ceiling, vs_peer, target| {
                rows.push(Row {
                    what,
                    size: m.size,
                    value,
                    unit,
                    vs_ceiling,
                    vs_peer,
                    target: if targeted { target } else { None },
                })
            };
            row(
                "ceiling: raw rusqlite, 100 rows per transaction (median of 3)".into(),
                ceiling,
                "rows/s",
                Some(1.0),
                ratio(ceiling, peer),
                None,
            );
            if let Some(redis) = m.redis_unpipelined {
                row(
                    "peer: Redis XADD always, 50 clients".into(),
                    redis,
                    "ops/s",
                    ratio(redis, Some(ceiling)),
                    Some(1.0),
                    None,
                );
            }
            if let Some(redis) = m.redis_pipelined {
                row(
                    "peer: Redis XADD always, 50 clients, pipeline 16".into(),
                    redis,
                    "ops/s",
                    ratio(redis, Some(ceiling)),
                    ratio(redis, peer),
                    None,
                );
            }
            let one_partition = m
                .embedded
                .iter()
                .find(|(partitions, producers, _)| *partitions == 1 && *producers == 50)
                .map_or(0.0, |(_, _, rate)| *rate);
            for &(partitions, producers, rate) in &m.embedded {
                let spread = |share: f64| {
                    (
                        format!(
                            "≥ {share}× the same on 1 partition ({:.2}×)",
                            rate / one_partition
                        ),
                        rate >= share * one_partition,
                    )
                };
                let target = match (partitions, producers) {
                    (1, 50) => {
                        let vs_ceiling = rate / ceiling;
                        let vs_peer = ratio(rate, peer);
                        Some((
                            "≥ 1.5× peer and ≥ 0.5× ceiling".to_owned(),
                            vs_ceiling >= 0.5 && vs_peer.is_none_or(|r| r >= 1.5),
                        ))
                    }
                    (8, 50) => Some(spread(0.8)),
                    (64, 50) => Some(spread(0.5)),
                    _ => None,
                };
                row(
                    format!(
                        "embedded: {producers} single-record producers, {partitions} partition(s)"
                    ),
                    rate,
                    "appends/s",
                    ratio(rate, Some(ceiling)),
                    ratio(rate, peer),
                    target,
                );
            }
            if let Some(http) = &m.http {
                let vs_peer = ratio(http.single, peer);
                row(
                    "HTTP: single-record POSTs, 64 connections".into(),
                    http.single,
                    "records/s",
                    ratio(http.single, Some(ceiling)),
                    vs_peer,
                    vs_peer.map(|r| ("≥ 1.0× peer".to_owned(), r >= 1.0)),
                );
                let vs_ceiling = http.batches / ceiling;
                row(
                    "HTTP: 100-record POSTs, 16 connections".into(),
                    http.batches,
                    "records/s",
                    Some(vs_ceiling),
                    ratio(http.batches, m.redis_pipelined),
                    Some(("≥ 0.7× ceiling".to_owned(), vs_ceiling >= 0.7)),
                );
            }
            row(
                "reads ceiling: raw rusqlite range scan, pages of 100".into(),
                m.raw_scan,
                "records/s",
                None,
                None,
                None,
            );
            let vs_scan = m.reads / m.raw_scan;
            row(
                "embedded: reads in pages of 100 (vs ceiling = vs raw scan)".into(),
                m.reads,
                "records/s",
                Some(vs_scan),
                None,
                Some(("≥ 0.5× raw scan".to_owned(), vs_scan >= 0.5)),
            );
            if let Some(http) = &m.http {
                row(
                    "HTTP: reads in pages of 100, 16 connections (vs ceiling = vs raw scan)".into(),
                    http.reads,
                    "records/s",
                    ratio(http.reads, Some(m.raw_scan)),
                    None,
                    None,
                );
            }
            row(
                "embedded: lease → ack, batches of 100, one worker".into(),
                m.lease_ack,
                "records/s",
                None,
                None,
                Some(("≥ 100,000 records/s".to_owned(), m.lease_ack >= 100_000.0)),
            );
        }
        rows
    }

    /// Prints the table and writes `out/BENCHMARKS.md` and `out/bench/results.json`. A run of
    /// one section (`only`) replaces the sections it writes in the files there and keeps the
    /// others.
    pub fn write(&self, out: &Path, quick: bool, only: Option<&str>) {
        let mut markdown = self.markdown(quick);
        println!("{markdown}");
        let figures = self.json();
        let mut json = serde_json::to_string_pretty(&figures).unwrap();
        let (md_path, json_path) = (out.join("BENCHMARKS.md"), out.join("bench/results.json"));
        if let Some(headings) = only
            .map(own_headings)
            .filter(|headings| !headings.is_empty())
            && let (Ok(old_md), Ok(old_json)) = (
                std::fs::read_to_string(&md_path),
                std::fs::read_to_string(&json_path),
            )
        {
            markdown = headings.iter().fold(old_md, |old_md, heading| {
                replace_section(&old_md, &markdown, heading)
            });
            json = keep_unmeasured(&old_json, figures);
        }
        if let Ok(old_md) = std::fs::read_to_string(&md_path) {
            markdown = keep_hand_written(&old_md, markdown);
        }
        std::fs::create_dir_all(out.join("bench")).unwrap();
        std::fs::write(md_path, &markdown).unwrap();
        std::fs::write(json_path, json).unwrap();
    }

    fn markdown(&self, quick: bool) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# Benchmarks\n");
        let _ = writeln!(
            md,
            "Measured by `scripts/bench` in one run on {}, {} s per measurement, durable \
             (`sync = full`: every acknowledged record was fsynced). Throughput figures of the \
             log and the ceiling are medians of three runs. Ratios compare figures of \
             the same run: **ceiling** = raw rusqlite inserting 100 rows per transaction with \
             the same durability (median of three runs spread over the run); **peer** = Redis \
             Streams `XADD` with `appendfsync always`, 50 clients, unpipelined. Load generators \
             (producers, wrk, redis-benchmark) share the machine with the system under test.\n",
            machine(),
            self.seconds
        );
        let _ = writeln!(md, "![throughput](bench/throughput.png)\n");

        let rows = self.rows();
        let _ = writeln!(md, "## Goals (100 B records)\n");
        let _ = writeln!(
            md,
            "| figure | measured | vs ceiling | vs peer | goal | met |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for row in rows.iter().filter(|row| row.target.is_some()) {
            let (goal, met) = row.target.as_ref().unwrap();
            let _ = writeln!(
                md,
                "| {} | {} {} | {} | {} | {goal} | {} |",
                row.what,
                thousands(row.value),
                row.unit,
                times(row.vs_ceiling),
                times(row.vs_peer),
                if *met { "yes" } else { "**no**" }
            );
        }
        if let Some(growth) = self.growth() {
            let _ = writeln!(md, "{growth}");
        }

        let _ = writeln!(md, "\n## Throughput\n");
        let _ = writeln!(md, "| record | figure | measured | vs ceiling | vs peer |");
        let _ = writeln!(md, "|---|---|---|---|---|");
        for row in &rows {
            let _ = writeln!(
                md,
                "| {} B | {} | {} {} | {} | {} |",
                row.size,
                row.what,
                thousands(row.value),
                row.unit,
                times(row.vs_ceiling),
                times(row.vs_peer)
            );
        }
        if let Some((cold, hot)) = self.cold {
            let _ = writeln!(
                md,
                "| 100 B | cold read-back from the local cold folder, pages of 100 (vs ceiling = vs hot reads of the same records, {} records/s) | {} records/s | {} | – |",
                thousands(hot),
                thousands(cold),
                times(Some(cold / hot))
            );
        }

        let _ = writeln!(md, "\n## Latency at half the maximum rate (open loop)\n");
        let _ = writeln!(
            md,
            "Requests are issued on a fixed schedule at 50 % of the maximum rate measured above, \
             whether or not earlier ones were answered; each latency counts from when its request \
             was due, so queueing is not hidden. 100 B records.\n"
        );
        let _ = writeln!(
            md,
            "| workload | offered rate | requests | p50 | p99 | p99.9 |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for latency in &self.latencies {
            let p = &latency.percentiles;
            let _ = writeln!(
                md,
                "| {} | {}/s | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
                latency.name,
                thousands(latency.rate),
                p.requests,
                p.p50,
                p.p99,
                p.p999
            );
        }
        let _ = writeln!(md, "\n![latency](bench/latency.png)\n");
        self.cpu_markdown(&mut md);

        let _ = writeln!(md, "## Cost growth\n");
        let _ = writeln!(
            md,
            "One partition grown to each size (100 B records{}); at each size 50 single-record \
             producers append and one reader reads pages of 100 at random offsets. Memory is \
             this benchmark process's (it embeds the log): private resident memory, and apart \
             from it the database pages the readers map (`mmap`), which belong to the OS page \
             cache and are reclaimed under pressure.\n",
            if quick {
                ", quick run: 10⁶ at most"
            } else {
                ""
            }
        );
        let _ = writeln!(
            md,
            "| records in the partition | appends/s | reads (records/s) | private memory | mapped database pages |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|");
        for point in &self.scale {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} MiB | {:.0} MiB |",
                thousands(point.records as f64),
                thousands(point.append_rate),
                thousands(point.read_rate),
                point.rss_mib,
                point.mapped_mib
            );
        }
        let _ = writeln!(md, "\n![scale](bench/scale.png)");
        self.partitions_markdown(&mut md);
        self.million_markdown(&mut md);
        self.replication_markdown(&mut md);
        self.cluster_markdown(&mut md);
        self.failovers_markdown(&mut md);
        self.security_markdown(&mut md);
        self.client_markdown(&mut md);
        self.kafka_markdown(&mut md);
        self.console_markdown(&mut md);
        md
    }

    /// The repeated-failovers section: one cluster of the default volumes, loaded, failed and
    /// restarted again and again.
    fn failovers_markdown(&self, md: &mut String) {
        let Some(f) = &self.failovers else {
            return;
        };
        let (Some(first), Some(last)) = (f.rounds.first(), f.rounds.last()) else {
            return;
        };
        let _ = writeln!(md, "\n{REPEATED_FAILOVERS}\n");
        let killed: std::collections::BTreeSet<&str> =
            f.rounds.iter().map(|round| round.killed.as_str()).collect();
        let _ = writeln!(
            md,
            "One cluster of three nodes with the default {} volumes, one etcd member and the S3 \
             test server on this machine's {} cores (`sync = normal`, lease TTL {} s), failed {} \
             times in turn. Each round: single-record POSTs of 100 B spread over 2,048 \
             partitions ({} topics × 8) through every node for {} s ({} wrk connections per \
             node), then `kill -9` of the node holding the most volumes (by rendezvous hashing \
             of the names, {}). **failover**: from the kill to the next acknowledged append on \
             one of its volumes through a surviving node (tried every {} ms); **moved**: from \
             the kill until a survivor's `GET /cluster` shows 2 members and no volume unowned \
             (read every {} ms). Then the killed node is started again on its data folder (a \
             new incarnation); **balanced**: from its restart until every node sees the {} \
             volumes where rendezvous hashing puts them over the three nodes.\n",
            f.volumes,
            std::thread::available_parallelism().map_or(0, usize::from),
            crate::cluster::LEASE_TTL_MS as f64 / 1000.0,
            f.rounds.len(),
            crate::cluster::LOADED_TOPICS,
            f.load_seconds,
            crate::cluster::LOADED_CONNECTIONS,
            if killed.len() == 1 {
                format!("node {} every round", first.killed)
            } else {
                format!(
                    "nodes {}",
                    killed.iter().copied().collect::<Vec<_>>().join(", ")
                )
            },
            crate::failovers::RETRY.as_millis(),
            crate::failovers::RETRY.as_millis(),
            f.volumes
        );
        let _ = writeln!(md, "| figure | p50 | max |\n|---|---|---|");
        for (figure, (p50, max)) in [
            (
                "failover: kill → next acknowledged append on a moved volume",
                f.p50_max(|round| round.failover),
            ),
            (
                "moved: kill → 2 members, no volume unowned",
                f.p50_max(|round| round.moved),
            ),
            (
                "balanced: restart → the volumes balanced over 3 nodes",
                f.p50_max(|round| round.balanced),
            ),
        ]
        .into_iter()
        .filter_map(|(figure, p50_max)| Some((figure, p50_max?)))
        {
            let _ = writeln!(md, "| {figure} | {p50:.2} s | {max:.2} s |");
        }
        let answers: u64 = f.rounds.iter().map(|round| round.answers).sum();
        let mut refused = std::collections::BTreeMap::new();
        for round in &f.rounds {
            for (status, count) in &round.refused {
                *refused.entry(*status).or_default() += count;
            }
        }
        let _ = writeln!(
            md,
            "\nFailover per round, in order: {}. The killed node's stream held {:.0} windows \
             before the first kill and {:.0} before the last (window PUTs of its process, which \
             starts again every round). Of the {} appends during the loads, not acknowledged: \
             {}.",
            f.rounds
                .iter()
                .map(|round| format!("{:.2} s", round.failover))
                .collect::<Vec<_>>()
                .join(", "),
            first.windows,
            last.windows,
            thousands(answers as f64),
            refused_text(&refused)
        );
    }

    /// The cluster section: nodes sharing the volumes through etcd, on this machine.
    fn cluster_markdown(&self, md: &mut String) {
        let Some(c) = &self.cluster else {
            return;
        };
        let _ = writeln!(md, "\n## Cluster\n");
        let _ = writeln!(
            md,
            "One etcd member, the S3 test server and 1 to 3 nodes on this machine's {} cores, \
             16 volumes, writes landing in the bucket before their answer (`sync = normal`). \
             Single-record POSTs of 100 B from 48 connections in all, each node's share to a \
             partition it holds. Every process shares the same cores: the figures show what \
             the machine allows, not how the design scales across machines.\n",
            std::thread::available_parallelism().map_or(0, usize::from)
        );
        let _ = writeln!(
            md,
            "| nodes | appends/s | vs 1 node | p50 | window PUTs/s per node | nodes' CPU (cores) | S3 server's CPU (cores) |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        let one = c.scale.first().map_or(0.0, |scale| scale.rate);
        for scale in &c.scale {
            let _ = writeln!(
                md,
                "| {} | {} | {:.2}× | {:.1} ms | {:.0} | {:.2} | {:.2} |",
                scale.nodes,
                thousands(scale.rate),
                scale.rate / one,
                scale.p50_ms,
                scale.puts_per_node,
                scale.nodes_cores,
                scale.s3_cores
            );
        }
        if let Some(f) = &c.forwarding {
            let _ = writeln!(
                md,
                "\nA forwarded request (sent to a node that does not hold the partition, 16 \
                 connections): {} appends/s at {:.2} ms p50, against {} appends/s at {:.2} ms \
                 sent to the owner ({:.2}× the rate).",
                thousands(f.forwarded_rate),
                f.forwarded_p50_ms,
                thousands(f.direct_rate),
                f.direct_p50_ms,
                f.forwarded_rate / f.direct_rate
            );
        }
        if !c.failovers.is_empty() {
            let mut sorted = c.failovers.clone();
            sorted.sort_by(f64::total_cmp);
            let _ = writeln!(
                md,
                "\nFailover over {} kills (`kill -9` of the node holding the most volumes, \
                 lease TTL 5 s; from the kill to the next acknowledged append on one of its \
                 volumes through another node): p50 {:.2} s, max {:.2} s (goal: TTL + 1 s = \
                 6 s). etcd writes per failover: {:.0}; per join: {:.0}.",
                sorted.len(),
                median(sorted.clone()),
                sorted.last().copied().unwrap_or_default(),
                c.etcd_writes_per_failover,
                c.etcd_writes_per_join
            );
        }
        if !c.loaded_failovers.is_empty() {
            let mut seconds: Vec<f64> = c.loaded_failovers.iter().map(|f| f.seconds).collect();
            seconds.sort_by(f64::total_cmp);
            let windows = median(c.loaded_failovers.iter().map(|f| f.windows).collect());
            let answers: u64 = c.loaded_failovers.iter().map(|f| f.answers).sum();
            let mut refused: std::collections::BTreeMap<u16, u64> = Default::default();
            for failover in &c.loaded_failovers {
                for (status, count) in &failover.refused {
                    *refused.entry(*status).or_default() += count;
                }
            }
            let refused = refused_text(&refused);
            let _ = writeln!(
                md,
                "\nFailover under load, with the default 256 volumes: {} fresh clusters of three \
                 nodes each took single-record appends spread over 2,048 partitions through every \
                 node for 20 s, then the node holding the most volumes was killed (`kill -9`); \
                 its stream held {:.0} windows at the median, which the takers replay. From the \
                 kill to the next acknowledged append on one of its volumes: {} (p50 {:.2} s, \
                 max {:.2} s). Of the {} appends during the loads, not acknowledged: {}.",
                seconds.len(),
                windows,
                seconds
                    .iter()
                    .map(|took| format!("{took:.2} s"))
                    .collect::<Vec<_>>()
                    .join(", "),
                median(seconds.clone()),
                seconds.last().copied().unwrap_or_default(),
                thousands(answers as f64),
                refused
            );
        }
    }

    /// The replication section: appends landing in a bucket next to the local disk alone.
    fn replication_markdown(&self, md: &mut String) {
        let Some(r) = &self.replication else {
            return;
        };
        let _ = writeln!(md, "\n## Replication\n");
        let _ = writeln!(
            md,
            "Every write lands in object storage before its answer (`replication.kind = \"s3\"`, \
             `storage.sync = \"normal\"`: the bucket is the durable copy), next to the local disk \
             alone (`\"none\"`, `sync = \"full\"`), in the same run, one partition, {:.0} B \
             records. The S3 server is the test server (moto) on this machine: one PUT takes \
             {:.1} ms; through a proxy adding {} ms to every answer, {:.1} ms.\n",
            100.0,
            r.put_ms.0,
            (r.put_ms.1 - r.put_ms.0).round(),
            r.put_ms.1
        );
        let _ = writeln!(
            md,
            "| configuration | 100-record POSTs, 16 conn. (records/s) | p50 / p99 | vs none | \
             single-record POSTs, 50 conn. (/s) | p50 / p99 | PUTs per record (100 / 1) | \
             threads |\n|---|---|---|---|---|---|---|---|"
        );
        let none = r.modes.first().map(|mode| mode.batches.rate);
        for mode in &r.modes {
            let puts = match (mode.batches_puts_per_record, mode.single_puts_per_record) {
                (Some(batches), Some(single)) => format!("{batches:.4} / {single:.3}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} / {:.1} ms | {} | {} | {:.1} / {:.1} ms | {puts} | {} |",
                mode.name,
                thousands(mode.batches.rate),
                mode.batches.p50_ms,
                mode.batches.p99_ms,
                ratio(mode.batches.rate, none).map_or("-".into(), |r| format!("{r:.2}×")),
                thousands(mode.single.rate),
                mode.single.p50_ms,
                mode.single.p99_ms,
                mode.threads
            );
        }
        if !r.quiet.is_empty() {
            let _ = writeln!(
                md,
                "\nPUTs per second while 16 clients append 500 records a second round-robin \
                 over many quiet partitions (local S3 server):\n\n| partitions | appends/s | \
                 PUTs/s |\n|---|---|---|"
            );
            for q in &r.quiet {
                let _ = writeln!(
                    md,
                    "| {} | {:.0} | {:.0} |",
                    thousands(q.partitions as f64),
                    q.appends_per_s,
                    q.puts_per_s
                );
            }
        }
        if let Some((records, seconds)) = r.restore {
            let _ = writeln!(
                md,
                "\nA node whose data folder was deleted, holding {} records of one partition, \
                 serves them all again {seconds:.1} s after it starts (snapshot download and \
                 replay of the windows since).",
                thousands(records as f64)
            );
        }
        let _ = writeln!(md, "\n![replication](bench/replication.png)\n");
        replication_goals(r, md);
    }

    /// The security section: what TLS and scoped tokens cost, each against its baseline of
    /// the same run.
    fn security_markdown(&self, md: &mut String) {
        let Some(s) = &self.security else {
            return;
        };
        let _ = writeln!(md, "\n{SECURITY}\n");
        let _ = writeln!(
            md,
            "What TLS and scoped tokens cost the server, each figure next to a baseline of the \
             same run: two servers of the same binary run side by side (`sync = full`, 100 B \
             records, {} wrk connections), and the runs alternate between them, three each, the \
             median kept. CPU is the server's own (user and system, from `/proc/PID/stat`) per \
             request answered. TLS: a self-signed EC P-256 certificate made by `openssl`; wrk's \
             OpenSSL and the server agree on {}.\n",
            crate::security::CONNECTIONS,
            if s.negotiated.is_empty() {
                "what `openssl s_client` did not report"
            } else {
                &s.negotiated
            }
        );
        compared_table(md, &security_rows(s));
        let ((plain, tls), (plain_close, tls_close)) = (s.appends, s.handshakes);
        let _ = writeln!(
            md,
            "\nWith `Connection: close` every request came on a connection of its own: the \
             kernel (`PassiveOpens` of `/proc/net/snmp`) accepted {:.2} connections per request \
             answered over TLS and {:.2} over plaintext, against {:.4} and {:.4} with keep-alive. \
             But wrk keeps its TLS session when it reconnects and offers it: a relay between wrk \
             and the server found {:.0} % of its handshakes resumed (the server's hello carries \
             a `pre_shared_key`: no certificate sent, no signature made), so the wrk figure is \
             the rate of returning clients; new clients make full handshakes, the `s_time` row. \
             The server's CPU per connection (handshake and request): {:.0} µs for a full TLS \
             handshake, {:.0} µs resumed, {:.0} µs plaintext; at that cost one core of the \
             server alone makes {} full handshakes a second. The clients share the machine's \
             cores with the server: `openssl s_time` spent {:.0} µs of CPU per full handshake, \
             wrk {:.0} µs per resumed one and {:.0} µs per plaintext connection. Requests/s \
             with keep-alive: {} over TLS, {} over plaintext.",
            tls_close.connections_per_request,
            plain_close.connections_per_request,
            tls.connections_per_request,
            plain.connections_per_request,
            s.resumed_share * 100.0,
            s.full_handshakes.cpu_per_connection_us(),
            tls_close.cpu_per_connection_us(),
            plain_close.cpu_per_connection_us(),
            thousands(1e6 / s.full_handshakes.cpu_per_connection_us()),
            s.full_handshakes.client_cpu_us / s.full_handshakes.connections_per_request,
            tls_close.client_cpu_us / tls_close.connections_per_request,
            plain_close.client_cpu_us / plain_close.connections_per_request,
            thousands(tls.requests_per_second),
            thousands(plain.requests_per_second),
        );
        let (open, scoped) = s.tokens;
        let _ = writeln!(
            md,
            "\nWith tokens configured, every request goes through the whole check: the header \
             read, the token hashed and looked up, the permission of the route found and asked \
             of its grants, the caller kept in the request; the in-process row times the hash, \
             the lookup and the grants alone. CPU per request of the three runs spread over \
             {:.1} µs without tokens and {:.1} µs with them: a difference smaller than that is \
             not told from noise.",
            open.cpu_spread_us, scoped.cpu_spread_us
        );
    }

    /// The client section: the client commands' rates and the typed client's CPU, each against
    /// the bench's own requests to the same server.
    fn client_markdown(&self, md: &mut String) {
        let Some(c) = &self.client else {
            return;
        };
        let _ = writeln!(md, "\n{CLIENT}\n");
        let _ = writeln!(
            md,
            "What the client side costs, each figure next to a baseline measured against the \
             same server in the same run (`sync = full`, 100 B records): the binary's \
             `durability produce` and `durability consume` against the bench's own requests, \
             and the typed client's CPU against bare reqwest. The bench's requests go one at a \
             time on one keep-alive connection, as the commands send theirs, built before the \
             timing starts and written to a `TcpStream` (the leanest client, as wrk is). A \
             figure and its baseline alternate (AB, BA, AB), and of three runs each the median \
             is kept. The commands and the bench share the machine's cores with the server.\n"
        );
        compared_table(md, &client_rows(c));
        let (produce, posts) = (c.produce.median(), c.posts.median());
        let (keyed, ordered) = (c.keyed_posts.median(), c.ordered_posts.median());
        let (consume, pages) = (c.consume.median(), c.pages.median());
        let range = |runs: &crate::client::Runs| {
            let (slowest, fastest) = runs.range();
            format!("{} to {}", thousands(slowest), thousands(fastest))
        };
        let _ = writeln!(
            md,
            "\nProduce, per record: the server spent {:.2} µs of CPU and wrote {:.0} bytes to \
             its files for the command's records, {:.2} µs and {:.0} bytes for the bench's with \
             a random UUID key each, {:.2} µs and {:.0} bytes with time-ordered keys, {:.2} µs \
             and {:.0} bytes without keys. A key is one more entry of the volume's key index \
             (partition, key), looked up at the commit and written by the indexer: random keys \
             land all over the index's B-tree, so that in a large index each one dirties a page \
             of its own, which the write-ahead log then writes whole, while time-ordered keys \
             fill the pages at its end. The command itself \
             spent {:.2} µs of CPU per record (reading and checking the line, making its key, \
             serializing, the request), the bench's loop {:.2} µs. With one batch in flight \
             the client's time adds to the server's in every batch. The server's CPU and bytes \
             are counted until it was idle again after the run, its indexer's work included. \
             Records/s of the three runs: produce {}; the bench's POSTs {}, with random keys \
             {}, with time-ordered keys {}.",
            produce.server_us,
            produce.server_bytes,
            keyed.server_us,
            keyed.server_bytes,
            ordered.server_us,
            ordered.server_bytes,
            posts.server_us,
            posts.server_bytes,
            produce.client_us,
            posts.client_us,
            range(&c.produce),
            range(&c.posts),
            range(&c.keyed_posts),
            range(&c.ordered_posts),
        );
        let _ = writeln!(
            md,
            "\nConsume, per record: the server spent {:.2} µs of CPU on the command's pages and \
             {:.2} µs on the bench's; the command itself {:.2} µs (the page's JSON parsed, each \
             record formatted and written out), the bench's loop {:.2} µs (the answer read, not \
             parsed). With one page in flight the command's time adds to the server's in every \
             page. Records/s of the three runs: consume {}; the bench's GETs {}. The machine's \
             load average (1 min, this section's own processes included) was {:.1} as the \
             section began and {:.1} as it ended, on {} cores.",
            consume.server_us,
            pages.server_us,
            consume.client_us,
            pages.client_us,
            range(&c.consume),
            range(&c.pages),
            c.load.0,
            c.load.1,
            std::thread::available_parallelism().map_or(1, usize::from),
        );
        let typed = crate::client::ClientSide::median_cpu(&c.typed);
        let bare = crate::client::ClientSide::median_cpu(&c.bare);
        let spread = |runs: &[crate::client::Appends]| {
            let cpu = runs.iter().map(crate::client::Appends::cpu_us);
            cpu.clone().fold(f64::MIN, f64::max) - cpu.fold(f64::MAX, f64::min)
        };
        let _ = writeln!(
            md,
            "\nSingle-record appends, {} sequential requests a run on a current-thread tokio \
             runtime, the same server: `Client::append` builds the URL, gives the record a \
             UUID key, serializes the body, sends it with its timeout and retry policy and \
             parses the offsets; the bare POST sends a body of the same size made before the \
             timing (a key each too) and reads the answer's bytes. CPU per request: {:.1} µs \
             user and {:.1} µs system typed, {:.1} µs and {:.1} µs bare (the runs spread over \
             {:.1} µs and {:.1} µs); the runtime's thread alone {:.1} µs and {:.1} µs. \
             Requests/s: {} typed, {} bare.",
            c.appends,
            typed.user_us,
            typed.system_us,
            bare.user_us,
            bare.system_us,
            spread(&c.typed),
            spread(&c.bare),
            typed.thread_us,
            bare.thread_us,
            thousands(typed.requests_per_second),
            thousands(bare.requests_per_second),
        );
    }

    /// The Kafka section: Kafka clients' rates and the server's CPU per record, each against
    /// REST requests for the same records to the same server.
    fn kafka_markdown(&self, md: &mut String) {
        let Some(k) = &self.kafka else {
            return;
        };
        use crate::kafka::{BATCH, FETCH_WAIT_S, PAGE, PARTITIONS, REBALANCE_TIMEOUT_S};
        let page = thousands(PAGE as f64);
        let _ = writeln!(md, "\n{KAFKA}\n");
        let _ = writeln!(
            md,
            "What Kafka clients get through the Kafka listener, each figure next to REST \
             requests for the same records to the same server in the same run (`sync = full`, \
             100 B JSON values, no keys, topics of {PARTITIONS} partitions, \
             `log.max_batch_size = {PAGE}` so that REST pages of {page} are allowed). The Kafka \
             client is confluent-kafka {} in Python (`tests/kafka/bench_produce.py`, \
             `tests/kafka/bench_fetch.py`), connected before its timing starts; the REST \
             requests are the bench's own, HTTP/1.1 on keep-alive connections opened before \
             the timing, built beforehand. The producer sends {} records round-robin over the \
             partitions with `acks=all` and `linger.ms=5`; librdkafka keeps many requests in \
             flight on its one connection, a batch of each partition in them, so the REST \
             baseline of the goal has a batch of each partition in flight too: one connection \
             per partition, one {BATCH}-record POST at a time on each. The consumer `assign()`s \
             every partition from its beginning (no group, no commits, librdkafka's fetch \
             defaults) and reads the records of the first producer run; librdkafka keeps one \
             Fetch in flight per broker, for every partition, so the REST baseline of the goal \
             is one connection reading pages of {page}, one at a time, partition after \
             partition. A figure and its baselines alternate (AB, BA, AB), and of three runs \
             each the median is kept. Server CPU is the server's own (user and system, \
             `/proc/PID/stat`) per record, counted until it is idle again after a run, so its \
             indexer's work is in (median of the three runs). Clients and server share the \
             machine's {} cores.\n",
            kafka_client_version(),
            thousands(k.records as f64),
            std::thread::available_parallelism().map_or(1, usize::from),
        );
        compared_table(md, &kafka_rows(k));
        let (produce, posts, sequential) = (
            k.produce.median(),
            k.posts.median(),
            k.sequential_posts.median(),
        );
        let (fetch, pages, parallel) = (
            k.fetch.median(),
            k.pages.median(),
            k.parallel_pages.median(),
        );
        let range = |runs: &crate::kafka::Runs| {
            let (slowest, fastest) = runs.range();
            format!("{} to {}", thousands(slowest), thousands(fastest))
        };
        let per = |total: u64, count: u64| total as f64 / count.max(1) as f64;
        let _ = writeln!(
            md,
            "\nProduce (the run of median rate): the producer sent {} Produce requests carrying \
             {} record batches, {} records a batch and {:.1} batches a request; the server \
             took {:.1} ms over each on average (from the request read to its answer made, \
             the fsync included), their times adding up to {:.0} % of the run (the \
             connection's produces are pipelined: several are in flight at once). Server CPU \
             per record: {:.2} µs user and \
             {:.2} µs system for the producer's records, of which the volume's committer \
             thread (SQLite's inserts, the fsyncs) {:.2} µs; {:.2}, {:.2} and {:.2} µs for the \
             POSTs over {PARTITIONS} connections; {:.2}, {:.2} and {:.2} µs over one. The \
             committer's share of the run: {:.0} % for the producer, {:.0} % for the POSTs over \
             {PARTITIONS} connections. The producer's process spent \
             {:.2} µs of CPU per record (the Python loop and librdkafka's threads), the \
             bench's loops {:.2} and {:.2} µs. Records/s of the three runs: the producer {}; \
             the POSTs over {PARTITIONS} connections {}, over one {}.",
            produce.requests,
            produce.batches,
            thousands(per(k.records, produce.batches)),
            per(produce.batches, produce.requests),
            produce.request_seconds * 1e3 / produce.requests.max(1) as f64,
            produce.server_busy() * 100.0,
            produce.server_user_us,
            produce.server_system_us,
            produce.committer_us,
            posts.server_user_us,
            posts.server_system_us,
            posts.committer_us,
            sequential.server_user_us,
            sequential.server_system_us,
            sequential.committer_us,
            produce.committer_us * produce.records_per_second / 1e4,
            posts.committer_us * posts.records_per_second / 1e4,
            produce.client_us,
            posts.client_us,
            sequential.client_us,
            range(&k.produce),
            range(&k.posts),
            range(&k.sequential_posts),
        );
        let working = fetch.working_requests();
        let _ = writeln!(
            md,
            "\nFetch (the run of median rate): the consumer sent {} Fetch requests that \
             carried records, {} records each on average, and {} more once \
             every partition was read, which waited `fetch.wait.max.ms` ({FETCH_WAIT_S} s) for \
             records that never came, after the timing ended; the server took {:.1} ms over \
             each of the first on average and was busy with them {:.0} % of the run: \
             librdkafka sends its next Fetch once it has taken the previous answer in. Server \
             CPU per record: {:.2} µs user and {:.2} µs system for the consumer, {:.2} and \
             {:.2} for the pages over one connection, {:.2} and {:.2} over {PARTITIONS}. The \
             consumer's process spent {:.2} µs of CPU per record, the bench's loops {:.2} and \
             {:.2} µs. Records/s of the three runs: the consumer {}; the pages over one \
             connection {}, over {PARTITIONS} {}. The machine's load average (1 min, this \
             section's own processes included) was {:.1} as the section began and {:.1} as it \
             ended.",
            working,
            thousands(per(k.records, working)),
            fetch.long_polls,
            (fetch.request_seconds - fetch.long_polls as f64 * FETCH_WAIT_S) * 1e3
                / working.max(1) as f64,
            fetch.server_busy() * 100.0,
            fetch.server_user_us,
            fetch.server_system_us,
            pages.server_user_us,
            pages.server_system_us,
            parallel.server_user_us,
            parallel.server_system_us,
            fetch.client_us,
            pages.client_us,
            parallel.client_us,
            range(&k.fetch),
            range(&k.pages),
            range(&k.parallel_pages),
            k.load.0,
            k.load.1,
        );
        let _ = writeln!(
            md,
            "\nGroups: {} consumers of one group, threads of one Python process \
             (`tests/kafka/bench_group.py read`), read the same records from the group's first \
             assignment to the last record; the group committed offset 0 of every partition \
             beforehand, as a group that resumes has offsets (without them librdkafka resets \
             each partition's offset on a 100 ms timer after the assignment). Their baseline is \
             as many consumers in the same process, each `assign()`ed a partition, each \
             connected before the timing (`bench_group.py assigned`); the two alternate. \
             Records/s of the three runs: the group {}, the assigned consumers {}. A group of \
             {} consumers (`bench_group.py rebalance`, `max.poll.interval.ms` = \
             `session.timeout.ms` = {REBALANCE_TIMEOUT_S} s, librdkafka's 3 s heartbeats) \
             rebalanced after one member left (LeaveGroup) in {} s: every other member had \
             its new assignment and each with partitions had read a record of it. The members \
             learn of the rebalance from their next heartbeat, so the heartbeat interval is \
             most of that time.",
            crate::kafka::MEMBERS,
            range(&k.group_fetch),
            range(&k.assigned_fetch),
            crate::kafka::REBALANCE_MEMBERS,
            k.rebalances
                .iter()
                .map(|seconds| format!("{seconds:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }

    /// The console section: the browser console's first paint and live tail, each against a
    /// baseline of the same run.
    fn console_markdown(&self, md: &mut String) {
        let Some(c) = &self.console else {
            return;
        };
        use crate::console::{
            BATCH, FIRST_ROW_GOAL_MS, GRACE_S, KEPT_UP_MS, RATE, SECONDS, TAIL_MAX_ROWS, TOPICS,
            TOPICS_PAGE,
        };
        let _ = writeln!(md, "\n{CONSOLE}\n");
        let _ = writeln!(
            md,
            "What the browser console (`/console/`) gives its user, in headless Chromium \
             (`chromium --version`: {}), driven by \
             Selenium (`tests/console/bench_console.py`), against the release server with a \
             token (`sync = full`, the default `log.max_batch_size`). First paint: the time from \
             the navigation's start until the first row of the topics table is in the DOM (a \
             MutationObserver installed before any script of the page, through CDP \
             `Page.addScriptToEvaluateOnNewDocument`, which also puts the token in \
             `sessionStorage` as the token form would), with {} topics (the view shows pages of \
             {TOPICS_PAGE}) against a server of 1 topic; each load is a new browser with a new \
             profile, nothing cached, that first opened the server's `/healthz`; the servers \
             alternate, {} loads each, medians. Live tail: `#/topics/{{t}}/partitions/0/tail` \
             while a producer process POSTs {BATCH} records every 10 ms ({} records/s, paced by \
             a monotonic clock, each POST waiting for its answer on one keep-alive connection) \
             for {SECONDS} s, against a plain long-poll reader (a Python process making the \
             page's requests, `limit=1000&waitMs=25000`, one at a time) reading the same \
             records at the same time. A batch's delay runs from its answer to the first frame \
             (the reader: page) holding its last record, on the machine's clock (a reader may \
             have a record before the producer has read its answer: such a delay shows as \
             0); the page has \
             {GRACE_S} s after the last answer to show it. The tail keeps up when the page \
             received every record, shows the newest {} rows (what it keeps) with contiguous \
             offsets, and showed the last within {} ms of its answer; {} runs. The browser, the \
             producer, the reader and the server share the machine's {} cores.\n",
            c.browser,
            thousands(TOPICS as f64),
            c.one.len(),
            thousands(RATE as f64),
            thousands(TAIL_MAX_ROWS as f64),
            thousands(KEPT_UP_MS),
            c.tails.len(),
            std::thread::available_parallelism().map_or(1, usize::from),
        );
        goal_table(md, console_rows(c).iter().map(ConsoleRow::line));
        let median = |loads: &[crate::console::Load],
                      figure: fn(&crate::console::Load) -> Option<f64>| {
            crate::console::Console::median_load(loads, figure)
                .map_or_else(|| "–".to_owned(), |ms| format!("{} ms", thousands(ms)))
        };
        let _ = writeln!(
            md,
            "\nFirst paint (medians): the page asked for its first page of topics at {} ({} \
             with 1 topic), the answer took {} ({}), and the frame after the first row came at \
             {} ({}). Writing the {} topics, one record each from 32 threads, took {:.1} s \
             (not in any figure); the goal of {FIRST_ROW_GOAL_MS} ms is the first row's.",
            median(&c.many, |load| load.topics_start_ms),
            median(&c.one, |load| load.topics_start_ms),
            median(&c.many, |load| load.topics_request_ms),
            median(&c.one, |load| load.topics_request_ms),
            median(&c.many, |load| Some(load.first_row_frame_ms)),
            median(&c.one, |load| Some(load.first_row_frame_ms)),
            thousands(TOPICS as f64),
            c.create_seconds,
        );
        if let Some(tail) = c.median_tail() {
            let page = &tail.page;
            let busy = |kind: &str| page.main_thread.get(kind).copied().unwrap_or_default();
            let _ = writeln!(
                md,
                "\nLive tail (the run of median records received by the page): the page drew \
                 {} rows (the rows in sight, drawn again each frame) in {} frames that showed \
                 new records; its main thread was busy {:.1} s of the {:.1} s from the \
                 first POST until the figures were read (Chromium's `Performance.getMetrics`: \
                 layout {:.1} s, style {:.1} s, script {:.1} s, the rest in other work of its \
                 tasks, painting among it). The producer sent its POSTs at most {:.0} ms after \
                 their time; the reader read {} pages. Records received by the page, each run: \
                 {}.",
                thousands(page.drawn as f64),
                thousands(page.frames as f64),
                busy("tasks"),
                page.observed_seconds,
                busy("layout"),
                busy("style"),
                busy("script"),
                tail.latest_send_ms,
                thousands(tail.reader.pages as f64),
                c.tails
                    .iter()
                    .map(|tail| thousands(tail.page.reader.received as f64))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }

    /// The CPU-per-request section: the server's CPU time per HTTP request, user and system,
    /// next to the framework's floor for the same request.
    fn cpu_markdown(&self, md: &mut String) {
        let Some(c) = &self.cpu else {
            return;
        };
        let _ = writeln!(md, "## CPU per request\n");
        let _ = writeln!(
            md,
            "The server's own CPU time (user and system, from `/proc/PID/stat`) per request \
             answered under `wrk`, 100 B records, `sync = full` (median of three runs), next to \
             the framework's floor: actix-web parsing the same body and answering without \
             storing it (`examples/http_floor.rs`), in the same run. Steadier than requests per \
             second on a shared machine.\n"
        );
        let _ = writeln!(
            md,
            "| request | requests/s | CPU per request | user / system | floor | vs floor |\n\
             |---|---|---|---|---|---|"
        );
        for cost in &c.server {
            let floor = c.floor_of(cost.what);
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} µs | {:.1} / {:.1} µs | {} | {} |",
                cost.what,
                thousands(cost.requests_per_second),
                cost.total_us(),
                cost.user_us,
                cost.system_us,
                floor.map_or("-".into(), |f| format!("{:.1} µs", f.total_us())),
                floor.map_or("-".into(), |f| format!(
                    "{:.2}×",
                    cost.total_us() / f.total_us()
                )),
            );
        }
        if let Some(redis) = &c.redis {
            let _ = writeln!(
                md,
                "| {} (the peer) | {} | {:.1} µs | {:.1} / {:.1} µs | - | - |",
                redis.what,
                thousands(redis.requests_per_second),
                redis.total_us(),
                redis.user_us,
                redis.system_us
            );
            if let Some(single) = c.server.first() {
                let _ = writeln!(
                    md,
                    "\nA single-record POST costs {:.2}× what `redis-server` spends per durable \
                     `XADD`.",
                    single.total_us() / redis.total_us()
                );
            }
        }
        let _ = writeln!(md);
    }

    /// The many-partitions section: distinct partitions written once each through the server.
    fn partitions_markdown(&self, md: &mut String) {
        if self.partitions.is_empty() && self.round_robin.is_none() {
            return;
        }
        let _ = writeln!(md, "\n## Many partitions\n");
        let _ = writeln!(
            md,
            "The server binary with its default settings (but `idle_stop_ms = 2000`), a fresh \
             data folder per row: 16 HTTP clients write one 100 B record to each of N distinct \
             partitions (8 per topic), a first write each, which adds the partition to its \
             volume. Peaks are sampled every 50 ms from `/proc` along with a `/healthz` request; \
             idle memory is read 21 s after the last write, once every partition has closed and \
             freed memory has gone back to the OS.\n"
        );
        let _ = writeln!(
            md,
            "| partitions | first writes/s | p50 | p99 | peak fds | peak threads | peak RSS | RSS at start → idle | slowest /healthz |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        for p in &self.partitions {
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} ms | {:.2} ms | {} | {} | {:.0} MiB | {:.0} → {:.0} MiB | {:.1} ms |",
                thousands(p.partitions as f64),
                thousands(p.rate),
                p.p50_ms,
                p.p99_ms,
                p.peak_fds,
                p.peak_threads,
                p.peak_rss_mib,
                p.start_rss_mib,
                p.idle_rss_mib,
                p.healthz_max_ms
            );
        }
        if let Some((partitions, rate)) = self.round_robin {
            let _ = writeln!(
                md,
                "\n50 HTTP producers appending single records round-robin over {} partitions: \
                 **{} appends/s**.",
                thousands(partitions as f64),
                thousands(rate)
            );
        }
    }

    /// The million-partitions section: first writes as partitions pile up under 1024 open
    /// files, then what the server costs holding them.
    fn million_markdown(&self, md: &mut String) {
        let Some(m) = &self.million else {
            return;
        };
        let _ = writeln!(md, "\n## A million partitions\n");
        let _ = writeln!(
            md,
            "The server binary with its default settings but no cold tier, in a fresh data \
             folder, its open-file limit at {} (soft and hard): {} keep-alive HTTP clients write \
             one record to partition 0 of each of {} new topics, a first write each. The \
             process is sampled from `/proc` every 100 ms and `/healthz` timed every 100 ms on \
             its own connection while writing; then one `GET /metrics` (with `/healthz` timed \
             every 10 ms meanwhile), a restart on the same data (SIGTERM, then a new process), \
             {:.0} s with one append every 200 ms to a random one of the topics, and the first \
             writes again on a fifth of the partitions under two `partitions.max_open` values, \
             a fresh data folder each.\n",
            m.open_files_limit,
            m.clients,
            thousands(m.partitions as f64),
            m.idle.seconds
        );
        let _ = writeln!(md, "| partitions written | new partitions/s in the block |");
        let _ = writeln!(md, "|---|---|");
        for (written, rate) in &m.writes.blocks {
            let _ = writeln!(
                md,
                "| {} | {} |",
                thousands(*written as f64),
                thousands(*rate)
            );
        }
        let _ = writeln!(md, "\n![million](bench/million.png)\n");
        let _ = writeln!(md, "| figure | measured |");
        let _ = writeln!(md, "|---|---|");
        let mut row = |figure: &str, measured: String| {
            let _ = writeln!(md, "| {figure} | {measured} |");
        };
        row(
            "new partitions/s, overall",
            format!(
                "{} ({} answers not 2xx{})",
                thousands(m.writes.rate),
                m.writes.errors,
                m.writes
                    .first_error
                    .as_ref()
                    .map_or_else(String::new, |error| format!(
                        ", the first `{}`",
                        error.replace('|', "\\|")
                    ))
            ),
        );
        row(
            "peak resident memory / threads / descriptors while writing",
            format!(
                "{:.0} MiB / {} / {}",
                m.peak_rss_mib, m.peak_threads, m.peak_fds
            ),
        );
        row(
            "slowest `/healthz` while writing",
            format!(
                "{:.1} ms ({} not 200)",
                m.healthz_max_ms, m.healthz_failures
            ),
        );
        row(
            "`GET /metrics` at the end: size / time",
            format!(
                "{} bytes / {:.0} ms",
                thousands(m.metrics.bytes as f64),
                m.metrics.ms
            ),
        );
        row(
            "slowest `/healthz` during that scrape / peak resident memory",
            format!(
                "{:.1} ms / {:.0} MiB",
                m.metrics.healthz_max_ms, m.metrics.peak_rss_mib
            ),
        );
        row(
            "restart: SIGTERM → exited",
            format!("{:.0} ms", m.restart.shutdown_ms),
        );
        row(
            "restart: spawned → `/healthz` 200 / → first append to an existing topic",
            format!(
                "{:.0} ms / {:.0} ms",
                m.restart.healthz_ms, m.restart.first_append_ms
            ),
        );
        row(
            "nearly idle (one append per 200 ms): server CPU",
            format!("{:.1} % of one core", m.idle.cpu_percent),
        );
        row(
            "nearly idle: append p50 / p99 / max",
            format!(
                "{:.2} ms / {:.2} ms / {:.2} ms ({} appends, {} not 2xx)",
                m.idle.p50_ms, m.idle.p99_ms, m.idle.max_ms, m.idle.appends, m.idle.errors
            ),
        );
        row(
            "baseline, same stretch: raw 4 KiB append + fsync p50 / p99 / max",
            format!(
                "{:.2} ms / {:.2} ms / {:.2} ms",
                m.idle.fsync_p50_ms, m.idle.fsync_p99_ms, m.idle.fsync_max_ms
            ),
        );
        row(
            "append p99 / raw fsync p99",
            times((m.idle.fsync_p99_ms > 0.0).then(|| m.idle.p99_ms / m.idle.fsync_p99_ms)),
        );
        row(
            "nearly idle: resident memory at the end",
            format!("{:.0} MiB", m.idle.rss_mib),
        );
        for max_open in &m.max_open {
            row(
                &format!(
                    "`max_open = {}`: new partitions/s, {} partitions",
                    thousands(max_open.max_open as f64),
                    thousands(max_open.partitions as f64)
                ),
                format!(
                    "{} ({} not 2xx)",
                    thousands(max_open.writes.rate),
                    max_open.writes.errors
                ),
            );
        }
        if let (Some(ratio), Some(first), Some(last)) =
            (m.max_open_ratio(), m.max_open.first(), m.max_open.last())
        {
            row(
                &format!(
                    "rate with `max_open = {}` / with `max_open = {}`",
                    thousands(first.max_open as f64),
                    thousands(last.max_open as f64)
                ),
                times(Some(ratio)),
            );
        }
        million_goals(m, md);
    }

    /// The cost-growth goal: rates at the largest size within 1.2× of those at the smallest,
    /// private memory flat.
    fn growth(&self) -> Option<String> {
        let (first, last) = (self.scale.first()?, self.scale.last()?);
        let sizes = format!(
            "at {} records vs at {}",
            thousands(last.records as f64),
            thousands(first.records as f64)
        );
        let verdict = |met: bool| if met { "yes" } else { "**no**" };
        let rate_row = |what: &str, unit: &str, rate: fn(&ScalePoint) -> f64| {
            let slowdown = rate(first) / rate(last);
            format!(
                "| {what} {sizes} | {} vs {} {unit} | {slowdown:.2}× slower | – | ≤ 1.2× slower | {} |",
                thousands(rate(last)),
                thousands(rate(first)),
                verdict(slowdown <= 1.2)
            )
        };
        let memory_flat = last.rss_mib <= first.rss_mib * 1.5 + 64.0;
        Some(format!(
            "{}\n{}\n| private memory {sizes} | {:.0} vs {:.0} MiB | – | – | flat | {} |",
            rate_row("appends", "appends/s", |p| p.append_rate),
            rate_row("reads", "records/s", |p| p.read_rate),
            last.rss_mib,
            first.rss_mib,
            verdict(memory_flat)
        ))
    }

    fn json(&self) -> serde_json::Value {
        let sized = |value: &dyn Fn(&Measured) -> Option<serde_json::Value>| {
            self.sizes
                .iter()
                .filter_map(|m| Some((m.size.to_string(), value(m)?)))
                .collect::<serde_json::Map<_, _>>()
        };
        json!({
            "seconds": self.seconds,
            "ceiling": sized(&|m| Some(json!(m.ceiling()))),
            "redis": sized(&|m| Some(json!({
                "unpipelined": m.redis_unpipelined?,
                "pipelined": m.redis_pipelined?,
            }))),
            "embedded": self.sizes.iter().flat_map(|m| m.embedded.iter().map(|(partitions, producers, rate)| json!({
                "size": m.size, "partitions": partitions, "producers": producers, "rate": rate,
            }))).collect::<Vec<_>>(),
            "latency": self.latencies.iter().map(|l| json!({
                "name": l.name, "rate": l.rate,
                "p50_ms": l.percentiles.p50, "p99_ms": l.percentiles.p99, "p999_ms": l.percentiles.p999,
            })).collect::<Vec<_>>(),
            "partitions": self.partitions.iter().map(|p| json!({
                "partitions": p.partitions,
                "rate": p.rate,
                "p50_ms": p.p50_ms,
                "p99_ms": p.p99_ms,
                "peak_fds": p.peak_fds,
                "peak_threads": p.peak_threads,
                "peak_rss_mib": p.peak_rss_mib,
                "start_rss_mib": p.start_rss_mib,
                "idle_rss_mib": p.idle_rss_mib,
                "healthz_max_ms": p.healthz_max_ms,
            })).collect::<Vec<_>>(),
            "round_robin": self.round_robin.map(|(partitions, rate)| json!({"partitions": partitions, "rate": rate})),
            "million": self.million.as_ref().map(million_json),
            "cpu": self.cpu.as_ref().map(|c| {
                let costs = |costs: &[crate::cpu::Cost]| costs.iter().map(|cost| json!({
                    "what": cost.what,
                    "requests_per_second": cost.requests_per_second,
                    "user_us": cost.user_us,
                    "system_us": cost.system_us,
                })).collect::<Vec<_>>();
                json!({
                    "server": costs(&c.server),
                    "floor": costs(&c.floor),
                    "redis": costs(c.redis.as_slice()),
                })
            }),
            "security": self.security.as_ref().map(security_json),
            "client": self.client.as_ref().map(client_json),
            "kafka": self.kafka.as_ref().map(kafka_json),
            "console": self.console.as_ref().map(console_json),
            "replication": self.replication.as_ref().map(|r| json!({
                "put_ms": [r.put_ms.0, r.put_ms.1],
                "linger_ms": r.linger_ms,
                "modes": r.modes.iter().map(|m| json!({
                    "name": m.name,
                    "batches": {"rate": m.batches.rate, "p50_ms": m.batches.p50_ms, "p99_ms": m.batches.p99_ms},
                    "single": {"rate": m.single.rate, "p50_ms": m.single.p50_ms, "p99_ms": m.single.p99_ms},
                    "batches_puts_per_record": m.batches_puts_per_record,
                    "single_puts_per_record": m.single_puts_per_record,
                    "threads": m.threads,
                })).collect::<Vec<_>>(),
                "quiet": r.quiet.iter().map(|q| json!({
                    "partitions": q.partitions, "appends_per_s": q.appends_per_s, "puts_per_s": q.puts_per_s,
                })).collect::<Vec<_>>(),
                "restore": r.restore.map(|(records, seconds)| json!({"records": records, "seconds": seconds})),
            })),
            "cluster": self.cluster.as_ref().map(|c| json!({
                "scale": c.scale.iter().map(|s| json!({
                    "nodes": s.nodes, "rate": s.rate, "p50_ms": s.p50_ms,
                    "puts_per_node": s.puts_per_node, "nodes_cores": s.nodes_cores, "s3_cores": s.s3_cores,
                })).collect::<Vec<_>>(),
                "forwarding": c.forwarding.as_ref().map(|f| json!({
                    "direct_rate": f.direct_rate, "direct_p50_ms": f.direct_p50_ms,
                    "forwarded_rate": f.forwarded_rate, "forwarded_p50_ms": f.forwarded_p50_ms,
                })),
                "failovers": c.failovers,
                "loaded_failovers": c.loaded_failovers.iter().map(|f| json!({"seconds": f.seconds, "windows": f.windows, "answers": f.answers, "refused": f.refused})).collect::<Vec<_>>(),
                "etcd_writes_per_failover": c.etcd_writes_per_failover,
                "etcd_writes_per_join": c.etcd_writes_per_join,
            })),
            "failovers": self.failovers.as_ref().map(|f| {
                let summary = |figure: fn(&crate::failovers::Round) -> f64| {
                    f.p50_max(figure).map(|(p50, max)| json!({"p50": p50, "max": max}))
                };
                json!({
                    "volumes": f.volumes,
                    "load_seconds": f.load_seconds,
                    "failover": summary(|round| round.failover),
                    "moved": summary(|round| round.moved),
                    "balanced": summary(|round| round.balanced),
                    "rounds": f.rounds.iter().map(|round| json!({
                        "killed": round.killed,
                        "failover": round.failover,
                        "moved": round.moved,
                        "balanced": round.balanced,
                        "windows": round.windows,
                        "answers": round.answers,
                        "refused": round.refused,
                    })).collect::<Vec<_>>(),
                })
            }),
            "scale": self.scale.iter().map(|p| json!({
                "records": p.records, "append_rate": p.append_rate, "read_rate": p.read_rate, "rss_mib": p.rss_mib, "mapped_mib": p.mapped_mib,
            })).collect::<Vec<_>>(),
            "rows": self.rows().iter().map(|row| json!({
                "what": row.what, "size": row.size, "value": row.value, "unit": row.unit,
                "vs_ceiling": row.vs_ceiling, "vs_peer": row.vs_peer,
                "goal": row.target.as_ref().map(|(goal, _)| goal),
                "met": row.target.as_ref().map(|(_, met)| met),
            })).collect::<Vec<_>>(),
        })
    }
}

/// The heading of `BENCHMARKS.md` that suite section `section` alone writes, if it has one.
fn own_headings(section: &str) -> &'static [&'static str] {
    match section {
        "throughput" => &[
            GOALS,
            THROUGHPUT,
            "## Latency at half the maximum rate (open loop)",
        ],
        "cold" => &[THROUGHPUT],
        "scale" => &["## Cost growth"],
        "partitions" => &["## Many partitions"],
        "million" => &["## A million partitions"],
        "replication" => &["## Replication"],
        "cluster" => &["## Cluster"],
        "failovers" => &[REPEATED_FAILOVERS],
        "cpu" => &["## CPU per request"],
        "security" => &[SECURITY],
        "client" => &[CLIENT],
        "kafka" => &[KAFKA],
        "console" => &[CONSOLE],
        _ => &[],
    }
}

/// The goals table's heading.
const GOALS: &str = "## Goals (100 B records)";
/// The throughput table's heading.
const THROUGHPUT: &str = "## Throughput";
/// The repeated-failovers section's heading.
const REPEATED_FAILOVERS: &str = "## Repeated failovers";
/// The security section's heading.
const SECURITY: &str = "## Security";
/// The client section's heading.
const CLIENT: &str = "## Client";
/// The Kafka section's heading.
const KAFKA: &str = "## Kafka protocol";
/// The console section's heading.
const CONSOLE: &str = "## Console";

/// The tables whose rows come from several sections, with how many leading cells name a row:
/// a run of one section keeps the rows of the others.
const SHARED_TABLES: [(&str, usize); 2] = [(GOALS, 1), (THROUGHPUT, 2)];

/// Sections of `BENCHMARKS.md` written by hand, not by the suite: every run keeps them.
const HAND_WRITTEN: [&str; 1] = ["## CPU per request: what each change gave"];

/// Where the section under `heading` (up to the next `## `) lies in `text`.
fn section_span(text: &str, heading: &str) -> Option<(usize, usize)> {
    let start = text.find(&format!("{heading}\n"))?;
    let end = text[start + heading.len()..]
        .find("\n## ")
        .map_or(text.len(), |at| start + heading.len() + at + 1);
    Some((start, end))
}

/// `new`, with the hand-written sections of `old` it lacks added at its end.
fn keep_hand_written(old: &str, mut new: String) -> String {
    for heading in HAND_WRITTEN {
        if let (Some((start, end)), None) =
            (section_span(old, heading), section_span(&new, heading))
        {
            new = format!("{}\n\n{}", new.trim_end(), &old[start..end]);
        }
    }
    new
}

/// `old` with its section under `heading` (up to the next `## `) taken from `new`; a shared
/// table keeps the rows of `old` that `new` lacks.
fn replace_section(old: &str, new: &str, heading: &str) -> String {
    let section = |text: &str| section_span(text, heading);
    let Some((new_start, new_end)) = section(new) else {
        return old.to_owned();
    };
    let Some((old_start, old_end)) = section(old) else {
        // A section the file does not have yet: added at its end.
        return format!("{}\n\n{}", old.trim_end(), &new[new_start..new_end]);
    };
    let mut replacement = new[new_start..new_end].to_owned();
    if let Some((_, naming)) = SHARED_TABLES.iter().find(|(shared, _)| *shared == heading) {
        replacement = keep_rows(&old[old_start..old_end], &replacement, *naming);
    }
    format!("{}{replacement}{}", &old[..old_start], &old[old_end..])
}

/// The table of section `new` with the rows of section `old`'s table that it lacks (a row is
/// named by its first `naming` cells) added after its own.
fn keep_rows(old: &str, new: &str, naming: usize) -> String {
    let name = |row: &str| {
        row.split('|')
            .skip(1)
            .take(naming)
            .collect::<Vec<_>>()
            .join("|")
    };
    fn rows(text: &str) -> Vec<&str> {
        text.lines().filter(|line| line.starts_with('|')).collect()
    }
    let names: Vec<String> = rows(new).into_iter().map(name).collect();
    let kept: Vec<&str> = rows(old)
        .into_iter()
        .filter(|row| !names.contains(&name(row)))
        .collect();
    let Some(last_row) = new.lines().rfind(|line| line.starts_with('|')) else {
        return new.to_owned();
    };
    if kept.is_empty() {
        return new.to_owned();
    }
    let at = new.rfind(last_row).unwrap() + last_row.len();
    format!("{}\n{}{}", &new[..at], kept.join("\n"), &new[at..])
}

/// `new` as pretty JSON, with each figure this run did not measure (empty or null) taken from
/// `old` (pretty JSON too) as written there, byte for byte: a float parsed and printed again
/// may change in its last digit, which would show as a change of a section that did not run.
fn keep_unmeasured(old: &str, new: serde_json::Value) -> String {
    use serde_json::value::RawValue;
    let unmeasured = |value: &serde_json::Value| match value {
        serde_json::Value::Null => true,
        serde_json::Value::Array(items) => items.is_empty(),
        serde_json::Value::Object(fields) => fields.is_empty(),
        _ => false,
    };
    let (Ok(old), serde_json::Value::Object(new)) = (
        serde_json::from_str::<std::collections::BTreeMap<String, Box<RawValue>>>(old),
        &new,
    ) else {
        return serde_json::to_string_pretty(&new).unwrap();
    };
    let keys: std::collections::BTreeSet<&String> = new.keys().chain(old.keys()).collect();
    let fields: Vec<String> = keys
        .into_iter()
        .map(|key| {
            let value = match (new.get(key), old.get(key)) {
                (Some(value), Some(kept)) if unmeasured(value) => kept.get().to_owned(),
                (None, Some(kept)) => kept.get().to_owned(),
                // Printed one level deep, as `to_string_pretty` prints a field.
                (Some(value), _) => serde_json::to_string_pretty(value)
                    .unwrap()
                    .replace('\n', "\n  "),
                (None, None) => unreachable!("a key of either"),
            };
            format!("  {}: {value}", serde_json::to_string(key).unwrap())
        })
        .collect();
    format!("{{\n{}\n}}", fields.join(",\n"))
}

/// Answers that were not `2xx`, by status: `none`, or `3 answered 503, 1 answered 500`.
fn refused_text(refused: &std::collections::BTreeMap<u16, u64>) -> String {
    if refused.is_empty() {
        return "none".to_owned();
    }
    refused
        .iter()
        .map(|(status, count)| format!("{count} answered {status}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The goals of the replication run, each with what was measured and whether it is met.
fn replication_goals(r: &crate::replication::Replication, md: &mut String) {
    let [none, local, slow] = &r.modes[..] else {
        return;
    };
    let met = |ok: bool| if ok { "met" } else { "**not met**" };
    let batches = local.batches.rate / none.batches.rate;
    let _ = writeln!(md, "| goal | measured | |\n|---|---|---|");
    let _ = writeln!(
        md,
        "| 100-record POSTs with `s3` ≥ 0.5× `none` (local S3 server) | {batches:.2}× | {} |",
        met(batches >= 0.5)
    );
    for (mode, put) in [(local, r.put_ms.0), (slow, r.put_ms.1)] {
        let bound = r.linger_ms as f64 + 2.0 * put;
        let _ = writeln!(
            md,
            "| single-record ack p50 ≤ linger + 2 PUTs ({}) | {:.1} ms ≤ {bound:.1} ms | {} |",
            mode.name,
            mode.single.p50_ms,
            met(mode.single.p50_ms <= bound)
        );
    }
    if let Some(puts) = local.batches_puts_per_record {
        let _ = writeln!(
            md,
            "| PUTs per record ≤ 1/20 under load (100-record POSTs) | {puts:.4} | {} |",
            met(puts <= 0.05)
        );
    }
    let extra = local.threads.max(slow.threads).saturating_sub(none.threads);
    let _ = writeln!(
        md,
        "| threads bounded (`s3` adds a fixed few to `none`'s {}) | +{extra} | {} |",
        none.threads,
        met(extra <= 4)
    );
    let _ = writeln!(
        md,
        "\nRun alone with `scripts/bench --only replication --quick` (10^3 and 10^4 quiet \
         partitions; the full run adds 10^5). Each 100-record connection waits for its answer, \
         so their rate is what 16 requests carry per round trip: a commit with its changes \
         captured, then the window's PUT, which the S3 test server serves one at a time at \
         about 3.3 ms of CPU each, whatever its size; the committer thread is busy about half \
         of the time."
    );
}

/// Writes `rows` as a table of figures against their baselines, with their goals.
fn compared_table(md: &mut String, rows: &[Compared]) {
    goal_table(md, rows.iter().map(Compared::line));
}

/// One line of a table of figures against their baselines: each part as written.
struct GoalLine<'a> {
    figure: &'a str,
    measured: String,
    baseline: String,
    baseline_is: &'a str,
    ratio: Option<f64>,
    goal: Option<&'a (String, bool)>,
}

/// Writes `lines` as a table of figures against their baselines, with their goals.
fn goal_table<'a>(md: &mut String, lines: impl IntoIterator<Item = GoalLine<'a>>) {
    let _ = writeln!(
        md,
        "| figure | measured | baseline | ratio | goal | met |\n|---|---|---|---|---|---|"
    );
    for line in lines {
        let (goal, met) = line.goal.map_or(("–", "–"), |(goal, met)| {
            (goal.as_str(), if *met { "yes" } else { "**no**" })
        });
        let _ = writeln!(
            md,
            "| {} | {} | {} ({}) | {} | {goal} | {met} |",
            line.figure,
            line.measured,
            line.baseline,
            line.baseline_is,
            times(line.ratio),
        );
    }
}

/// One line of the security or the client table: a figure, its baseline measured in the same
/// run, and its goal.
struct Compared {
    figure: String,
    value: f64,
    baseline: f64,
    /// What the baseline measured: "plaintext", "no token configured".
    baseline_is: &'static str,
    unit: &'static str,
    /// The goal, and whether the figure meets it.
    goal: Option<(String, bool)>,
}

impl Compared {
    fn ratio(&self) -> Option<f64> {
        ratio(self.value, Some(self.baseline))
    }

    fn line(&self) -> GoalLine<'_> {
        GoalLine {
            figure: &self.figure,
            measured: amount(self.value, self.unit),
            baseline: amount(self.baseline, self.unit),
            baseline_is: self.baseline_is,
            ratio: self.ratio(),
            goal: self.goal.as_ref(),
        }
    }
}

/// `value` in `unit`: µs with a decimal, the rest in whole thousands.
fn amount(value: f64, unit: &str) -> String {
    match unit {
        "µs" => format!("{value:.1} µs"),
        "/s" => format!("{}/s", thousands(value)),
        _ => format!("{} {unit}", thousands(value)),
    }
}

/// The security figures against their baselines, with the goals of the issue that asked for
/// them.
fn security_rows(s: &crate::security::Security) -> Vec<Compared> {
    use crate::security::{CONNECTIONS, TOKENS};
    let (plain, tls) = s.appends;
    let (plain_close, tls_close) = s.handshakes;
    let (open, scoped) = s.tokens;
    let handshakes = tls_close.connections_per_second();
    let full = s.full_handshakes.connections_per_second();
    let added = scoped.cpu_us - open.cpu_us;
    vec![
        Compared {
            figure: format!(
                "CPU per single-record POST over TLS, keep-alive, {CONNECTIONS} connections"
            ),
            value: tls.cpu_us,
            baseline: plain.cpu_us,
            baseline_is: "plaintext",
            unit: "µs",
            goal: Some(("≤ 1.3× plaintext".into(), tls.cpu_us <= 1.3 * plain.cpu_us)),
        },
        Compared {
            figure: format!(
                "new TLS connections/s: wrk, `GET /healthz` with `Connection: close`, \
                 {CONNECTIONS} connections ({:.0} % of the handshakes resumed a session)",
                s.resumed_share * 100.0
            ),
            value: handshakes,
            baseline: plain_close.connections_per_second(),
            baseline_is: "plaintext",
            unit: "/s",
            goal: Some(("≥ 1,000/s".into(), handshakes >= 1_000.0)),
        },
        Compared {
            figure: format!(
                "full TLS handshakes/s, never resumed: `openssl s_time -new`, {} processes, \
                 `GET /healthz` on each connection",
                s.full_handshake_clients
            ),
            value: full,
            baseline: plain_close.connections_per_second(),
            baseline_is: "plaintext, wrk",
            unit: "/s",
            goal: Some(("≥ 1,000/s".into(), full >= 1_000.0)),
        },
        Compared {
            figure: format!(
                "CPU per single-record POST with {} scoped tokens configured",
                thousands(TOKENS as f64)
            ),
            value: scoped.cpu_us,
            baseline: open.cpu_us,
            baseline_is: "no token configured",
            unit: "µs",
            goal: Some((format!("adds ≤ 1 µs ({added:+.1} µs)"), added <= 1.0)),
        },
        Compared {
            figure: format!(
                "credential check in process (hash the token, look it up, ask its grants), {} \
                 tokens",
                thousands(TOKENS as f64)
            ),
            value: s.check_ns.1,
            baseline: s.check_ns.0,
            baseline_is: "1 token",
            unit: "ns",
            goal: None,
        },
    ]
}

/// The `security` entry of the results.
fn security_json(s: &crate::security::Security) -> serde_json::Value {
    let load = |load: &crate::security::Load| {
        json!({
            "requests_per_second": load.requests_per_second,
            "cpu_us": load.cpu_us,
            "cpu_spread_us": load.cpu_spread_us,
            "client_cpu_us": load.client_cpu_us,
            "connections_per_request": load.connections_per_request,
            "connections_per_second": load.connections_per_second(),
        })
    };
    json!({
        "connections": crate::security::CONNECTIONS,
        "tokens_configured": crate::security::TOKENS,
        "negotiated": s.negotiated,
        "appends": {"plaintext": load(&s.appends.0), "tls": load(&s.appends.1)},
        "handshakes": {
            "plaintext": load(&s.handshakes.0),
            "tls": load(&s.handshakes.1),
            "tls_resumed_share": s.resumed_share,
            "full_tls": load(&s.full_handshakes),
            "full_tls_clients": s.full_handshake_clients,
        },
        "tokens": {"none": load(&s.tokens.0), "configured": load(&s.tokens.1)},
        "check_ns": {"one": s.check_ns.0, "configured": s.check_ns.1},
        "rows": security_rows(s).iter().map(|row| json!({
            "what": row.figure,
            "value": row.value,
            "unit": row.unit,
            "baseline": row.baseline,
            "baseline_is": row.baseline_is,
            "ratio": row.ratio(),
            "goal": row.goal.as_ref().map(|(goal, _)| goal),
            "met": row.goal.as_ref().map(|(_, met)| met),
        })).collect::<Vec<_>>(),
    })
}

/// The client figures against their baselines, with the goals of the issue that asked for
/// them.
fn client_rows(c: &crate::client::ClientSide) -> Vec<Compared> {
    use crate::client::{BATCH, CONNECTIONS, ClientSide};
    let records = thousands(c.records as f64);
    let (posts, pages) = (c.posts.median(), c.pages.median());
    let produce = c.produce.median().records_per_second;
    let consume = c.consume.median().records_per_second;
    let (typed, bare) = (
        ClientSide::median_cpu(&c.typed).cpu_us(),
        ClientSide::median_cpu(&c.bare).cpu_us(),
    );
    let one_at_a_time = "the bench's POSTs, one at a time, no keys";
    vec![
        Compared {
            figure: format!(
                "`durability produce` of a file of {records} 100 B JSON lines to one partition: \
                 batches of {BATCH}, one in flight, a time-ordered deduplication key (UUIDv7) made for each \
                 record"
            ),
            value: produce,
            baseline: posts.records_per_second,
            baseline_is: one_at_a_time,
            unit: "records/s",
            goal: Some((
                "≥ 0.8× baseline".into(),
                produce >= 0.8 * posts.records_per_second,
            )),
        },
        Compared {
            figure: "the bench's 100-record POSTs, one at a time on one connection, a random \
                     UUID key per record (as the client made at first)"
                .into(),
            value: c.keyed_posts.median().records_per_second,
            baseline: posts.records_per_second,
            baseline_is: one_at_a_time,
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: "the bench's 100-record POSTs, one at a time on one connection, a \
                     time-ordered key per record (a UUIDv7's layout)"
                .into(),
            value: c.ordered_posts.median().records_per_second,
            baseline: posts.records_per_second,
            baseline_is: one_at_a_time,
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: format!("100-record POSTs, wrk, {CONNECTIONS} connections, no keys"),
            value: c.wrk_posts,
            baseline: posts.records_per_second,
            baseline_is: one_at_a_time,
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: format!(
                "`durability consume -e --format '%s\\n'` of the same {records} records, to \
                 `/dev/null`"
            ),
            value: consume,
            baseline: pages.records_per_second,
            baseline_is: "the bench's GETs of pages of 100 in order, one at a time",
            unit: "records/s",
            goal: Some((
                "≥ 0.8× baseline".into(),
                consume >= 0.8 * pages.records_per_second,
            )),
        },
        Compared {
            figure: format!(
                "reads of pages of 100 at random offsets of the same records, wrk, \
                 {CONNECTIONS} connections"
            ),
            value: c.wrk_pages,
            baseline: pages.records_per_second,
            baseline_is: "the bench's GETs in order, one at a time",
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: "client CPU per single-record append: `Client::append`, one at a time".into(),
            value: typed,
            baseline: bare,
            baseline_is: "a bare reqwest POST of the same body",
            unit: "µs",
            goal: Some(("≤ 1.5× baseline".into(), typed <= 1.5 * bare)),
        },
    ]
}

/// The `client` entry of the results.
fn client_json(c: &crate::client::ClientSide) -> serde_json::Value {
    let runs = |runs: &crate::client::Runs| {
        let run = |run: &crate::client::Run| {
            json!({
                "records_per_second": run.records_per_second,
                "server_us": run.server_us,
                "server_bytes": run.server_bytes,
                "client_us": run.client_us,
            })
        };
        json!({
            "median": run(&runs.median()),
            "runs": runs.0.iter().map(run).collect::<Vec<_>>(),
        })
    };
    let appends = |runs: &[crate::client::Appends]| {
        let append = |a: &crate::client::Appends| {
            json!({
                "requests_per_second": a.requests_per_second,
                "cpu_us": a.cpu_us(),
                "user_us": a.user_us,
                "system_us": a.system_us,
                "thread_us": a.thread_us,
            })
        };
        json!({
            "median": append(&crate::client::ClientSide::median_cpu(runs)),
            "runs": runs.iter().map(append).collect::<Vec<_>>(),
        })
    };
    json!({
        "records": c.records,
        "load_average": [c.load.0, c.load.1],
        "produce": runs(&c.produce),
        "posts": runs(&c.posts),
        "keyed_posts": runs(&c.keyed_posts),
        "ordered_posts": runs(&c.ordered_posts),
        "wrk_posts": c.wrk_posts,
        "consume": runs(&c.consume),
        "pages": runs(&c.pages),
        "wrk_pages": c.wrk_pages,
        "wrk_connections": crate::client::CONNECTIONS,
        "appends": c.appends,
        "typed_append": appends(&c.typed),
        "bare_append": appends(&c.bare),
        "rows": client_rows(c).iter().map(|row| json!({
            "what": row.figure,
            "value": row.value,
            "unit": row.unit,
            "baseline": row.baseline,
            "baseline_is": row.baseline_is,
            "ratio": row.ratio(),
            "goal": row.goal.as_ref().map(|(goal, _)| goal),
            "met": row.goal.as_ref().map(|(_, met)| met),
        })).collect::<Vec<_>>(),
    })
}

/// The version of confluent-kafka in `.venv-kafka`, as it says.
fn kafka_client_version() -> String {
    let output = std::process::Command::new(crate::kafka::python())
        .args([
            "-c",
            "import confluent_kafka as c; print(c.__version__, '(librdkafka', c.libversion()[0] + ')')",
        ])
        .output();
    output
        .ok()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|version| !version.is_empty())
        .unwrap_or_else(|| "(version unknown)".into())
}

/// The Kafka figures against their baselines, with the goals of the issue that asked for them.
fn kafka_rows(k: &crate::kafka::Kafka) -> Vec<Compared> {
    use crate::kafka::PARTITIONS;
    let records = thousands(k.records as f64);
    let produce = k.produce.median().records_per_second;
    let (posts, sequential) = (
        k.posts.median().records_per_second,
        k.sequential_posts.median().records_per_second,
    );
    let fetch = k.fetch.median().records_per_second;
    let group_fetch = k.group_fetch.median().records_per_second;
    let assigned_fetch = k.assigned_fetch.median().records_per_second;
    let rebalance = k.rebalances.iter().copied().fold(0.0, f64::max);
    let (pages, parallel) = (
        k.pages.median().records_per_second,
        k.parallel_pages.median().records_per_second,
    );
    let (produce_cpu, posts_cpu, sequential_cpu) = (
        k.produce.median_server_us(),
        k.posts.median_server_us(),
        k.sequential_posts.median_server_us(),
    );
    let (fetch_cpu, pages_cpu) = (k.fetch.median_server_us(), k.pages.median_server_us());
    let producer = format!(
        "confluent-kafka producer: {records} 100 B JSON values round-robin over {PARTITIONS} \
         partitions, `acks=all`, `linger.ms=5`"
    );
    let consumer = format!(
        "confluent-kafka consumer: the same {records} records, {PARTITIONS} partitions \
         `assign()`ed from the beginning, fetch defaults"
    );
    let per_connection =
        "REST: 100-record POSTs, one connection per partition, one at a time on each";
    let one_connection =
        "REST: 100-record POSTs, one connection, one at a time, partitions in turn";
    vec![
        Compared {
            figure: producer.clone(),
            value: produce,
            baseline: posts,
            baseline_is: per_connection,
            unit: "records/s",
            goal: Some(("≥ 1.0× baseline".into(), produce >= posts)),
        },
        Compared {
            figure: producer,
            value: produce,
            baseline: sequential,
            baseline_is: one_connection,
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: consumer.clone(),
            value: fetch,
            baseline: pages,
            baseline_is: "REST: GETs of pages of 1,000, one connection, one at a time, \
                          partition after partition",
            unit: "records/s",
            goal: Some(("≥ 1.0× baseline".into(), fetch >= pages)),
        },
        Compared {
            figure: consumer,
            value: fetch,
            baseline: parallel,
            baseline_is: "REST: GETs of pages of 1,000, one connection per partition",
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: "server CPU per record produced by the confluent-kafka producer".into(),
            value: produce_cpu,
            baseline: posts_cpu,
            baseline_is: per_connection,
            unit: "µs",
            goal: Some(("≤ 1.2× baseline".into(), produce_cpu <= 1.2 * posts_cpu)),
        },
        Compared {
            figure: "server CPU per record produced by the confluent-kafka producer".into(),
            value: produce_cpu,
            baseline: sequential_cpu,
            baseline_is: one_connection,
            unit: "µs",
            goal: None,
        },
        Compared {
            figure: format!(
                "{} confluent-kafka consumers of one group: the same {records} records, from the \
                 first assignment",
                crate::kafka::MEMBERS
            ),
            value: group_fetch,
            baseline: assigned_fetch,
            baseline_is: "as many consumers, a partition `assign()`ed to each, no group",
            unit: "records/s",
            goal: Some((
                "≥ 0.9× baseline".into(),
                group_fetch >= 0.9 * assigned_fetch,
            )),
        },
        Compared {
            figure: format!(
                "{} confluent-kafka consumers of one group: the same {records} records, from the \
                 first assignment",
                crate::kafka::MEMBERS
            ),
            value: group_fetch,
            baseline: fetch,
            baseline_is: "the one confluent-kafka consumer above, every partition `assign()`ed",
            unit: "records/s",
            goal: None,
        },
        Compared {
            figure: format!(
                "a group of {} confluent-kafka consumers after one leaves: every other member \
                 assigned again and reading (the slowest of three)",
                crate::kafka::REBALANCE_MEMBERS
            ),
            value: rebalance,
            baseline: crate::kafka::REBALANCE_TIMEOUT_S,
            baseline_is: "the rebalance timeout (`max.poll.interval.ms`)",
            unit: "s",
            goal: Some((
                "≤ baseline + 1 s".into(),
                rebalance <= crate::kafka::REBALANCE_TIMEOUT_S + 1.0,
            )),
        },
        Compared {
            figure: "server CPU per record fetched by the confluent-kafka consumer".into(),
            value: fetch_cpu,
            baseline: pages_cpu,
            baseline_is: "REST: GETs of pages of 1,000, one connection",
            unit: "µs",
            goal: None,
        },
    ]
}

/// The `kafka` entry of the results.
fn kafka_json(k: &crate::kafka::Kafka) -> serde_json::Value {
    let runs = |runs: &crate::kafka::Runs| {
        let run = |run: &crate::kafka::Run| {
            json!({
                "records_per_second": run.records_per_second,
                "seconds": run.seconds,
                "server_us": run.server_us(),
                "server_user_us": run.server_user_us,
                "server_system_us": run.server_system_us,
                "committer_us": run.committer_us,
                "client_us": run.client_us,
                "requests": run.requests,
                "request_seconds": run.request_seconds,
                "long_polls": run.long_polls,
                "batches": run.batches,
            })
        };
        json!({
            "median": run(&runs.median()),
            "median_server_us": runs.median_server_us(),
            "runs": runs.0.iter().map(run).collect::<Vec<_>>(),
        })
    };
    json!({
        "records": k.records,
        "partitions": crate::kafka::PARTITIONS,
        "load_average": [k.load.0, k.load.1],
        "produce": runs(&k.produce),
        "posts": runs(&k.posts),
        "sequential_posts": runs(&k.sequential_posts),
        "fetch": runs(&k.fetch),
        "group_fetch": runs(&k.group_fetch),
        "assigned_fetch": runs(&k.assigned_fetch),
        "rebalance_seconds": k.rebalances,
        "pages": runs(&k.pages),
        "parallel_pages": runs(&k.parallel_pages),
        "rows": kafka_rows(k).iter().map(|row| json!({
            "what": row.figure,
            "value": row.value,
            "unit": row.unit,
            "baseline": row.baseline,
            "baseline_is": row.baseline_is,
            "ratio": row.ratio(),
            "goal": row.goal.as_ref().map(|(goal, _)| goal),
            "met": row.goal.as_ref().map(|(_, met)| met),
        })).collect::<Vec<_>>(),
    })
}

/// One line of the console table: a figure, its baseline of the same run, its goal.
struct ConsoleRow {
    figure: String,
    /// The figure as written (a delay may be "not within 30 s"), and its value if it has one.
    measured: String,
    value: Option<f64>,
    baseline: String,
    baseline_value: Option<f64>,
    baseline_is: &'static str,
    goal: Option<(String, bool)>,
}

impl ConsoleRow {
    fn ratio(&self) -> Option<f64> {
        self.value
            .and_then(|value| ratio(value, self.baseline_value))
    }

    fn line(&self) -> GoalLine<'_> {
        GoalLine {
            figure: &self.figure,
            measured: self.measured.clone(),
            baseline: self.baseline.clone(),
            baseline_is: self.baseline_is,
            ratio: self.ratio(),
            goal: self.goal.as_ref(),
        }
    }
}

/// The console figures against their baselines, with the goals of the console.
fn console_rows(c: &crate::console::Console) -> Vec<ConsoleRow> {
    use crate::console::{
        Console, FIRST_ROW_GOAL_MS, GRACE_S, KEPT_UP_MS, RATE, SECONDS, TAIL_MAX_ROWS, TOPICS,
    };
    let ms = |value: Option<f64>| {
        value.map_or_else(|| "–".to_owned(), |ms| format!("{} ms", thousands(ms)))
    };
    let delay = |value: Option<f64>| {
        value.map_or_else(
            || format!("not within {GRACE_S} s"),
            |ms| format!("{} ms", thousands(ms)),
        )
    };
    let mib = |bytes: Option<f64>| {
        bytes.map_or_else(
            || "–".to_owned(),
            |bytes| format!("{:.1} MiB", bytes / 1048576.0),
        )
    };
    let loads = c.many.len();
    let topics = thousands(TOPICS as f64);
    let first_row = Console::median_load(&c.many, |load| Some(load.first_row_ms));
    let first_row_one = Console::median_load(&c.one, |load| Some(load.first_row_ms));
    let fcp = Console::median_load(&c.many, |load| load.fcp_ms);
    let fcp_one = Console::median_load(&c.one, |load| load.fcp_ms);
    let mut rows = vec![
        ConsoleRow {
            figure: format!(
                "first topic row in the DOM from navigation start, {topics} topics (median of \
                 {loads} loads)"
            ),
            measured: ms(first_row),
            value: first_row,
            baseline: ms(first_row_one),
            baseline_value: first_row_one,
            baseline_is: "the same, a server of 1 topic",
            goal: first_row.map(|first_row| {
                (
                    format!("≤ {FIRST_ROW_GOAL_MS} ms"),
                    first_row <= FIRST_ROW_GOAL_MS,
                )
            }),
        },
        ConsoleRow {
            figure: format!("first-contentful-paint, {topics} topics (median of {loads} loads)"),
            measured: ms(fcp),
            value: fcp,
            baseline: ms(fcp_one),
            baseline_value: fcp_one,
            baseline_is: "the same, a server of 1 topic",
            goal: None,
        },
    ];
    let Some(median) = c.median_tail() else {
        return rows;
    };
    let runs = c.tails.len();
    let fewest = |received: fn(&crate::console::Tail) -> u64| {
        c.tails.iter().map(received).min().unwrap_or_default()
    };
    let (page_received, reader_received) = (
        fewest(|tail| tail.page.reader.received),
        fewest(|tail| tail.reader.received),
    );
    let produced = thousands(median.produced as f64);
    let tail = format!(
        "live tail, {} records/s for {SECONDS} s",
        thousands(RATE as f64)
    );
    let page_delay = c.median_delay(|tail| tail.page.reader.last_delay_ms);
    let reader_delay = c.median_delay(|tail| tail.reader.last_delay_ms);
    let page_p99 = c.median_delay(|tail| tail.page.reader.p99_delay_ms);
    let reader_p99 = c.median_delay(|tail| tail.reader.p99_delay_ms);
    let rate = median_of(c.tails.iter().map(|tail| tail.produce_rate));
    let page = &median.page;
    let offsets = match (page.oldest, page.newest) {
        (Some(oldest), Some(newest)) => format!(
            "{} rows, offsets {} to {}, {} gaps",
            thousands(page.rows as f64),
            thousands(oldest as f64),
            thousands(newest as f64),
            page.reader.gaps
        ),
        _ => "no rows".to_owned(),
    };
    rows.extend([
        ConsoleRow {
            figure: format!("{tail}: records the page received (the fewest of {runs} runs)"),
            measured: format!("{} of {produced}", thousands(page_received as f64)),
            value: Some(page_received as f64),
            baseline: format!("{} of {produced}", thousands(reader_received as f64)),
            baseline_value: Some(reader_received as f64),
            baseline_is: "a plain long-poll reader of the same records",
            goal: Some((
                format!(
                    "keeps up: every record, the newest {} rows shown with contiguous offsets, \
                     the last within {} ms of its answer (every run)",
                    thousands(TAIL_MAX_ROWS as f64),
                    thousands(KEPT_UP_MS)
                ),
                c.tails.iter().all(crate::console::Tail::kept_up),
            )),
        },
        ConsoleRow {
            figure: format!("{tail}: the rows the page shows at the end (run of median received)"),
            measured: offsets,
            value: None,
            baseline: format!("{} gaps", median.reader.gaps),
            baseline_value: None,
            baseline_is: "the reader: offsets out of sequence",
            goal: None,
        },
        ConsoleRow {
            figure: format!(
                "{tail}: delay from the last record's answer to its row (median of {runs} runs)"
            ),
            measured: delay(page_delay),
            value: page_delay,
            baseline: delay(reader_delay),
            baseline_value: reader_delay,
            baseline_is: "the reader: to the page holding it",
            goal: None,
        },
        ConsoleRow {
            figure: format!(
                "{tail}: delay from a batch's answer to its row, p99 of the batches shown \
                 (median of {runs} runs)"
            ),
            measured: delay(page_p99),
            value: page_p99,
            baseline: delay(reader_p99),
            baseline_value: reader_p99,
            baseline_is: "the reader",
            goal: None,
        },
        ConsoleRow {
            figure: format!("{tail}: records/s produced (median of {runs} runs)"),
            measured: format!("{}/s", thousands(rate)),
            value: Some(rate),
            baseline: format!("{}/s", thousands(RATE as f64)),
            baseline_value: Some(RATE as f64),
            baseline_is: "the rate asked",
            goal: None,
        },
        ConsoleRow {
            figure: format!(
                "{tail}: the page's JS heap at the end (`usedJSHeapSize`, run of median \
                 received)"
            ),
            measured: mib(page.heap_bytes),
            value: page.heap_bytes,
            baseline: mib(page.heap_start_bytes),
            baseline_value: page.heap_start_bytes,
            baseline_is: "when the tail had opened",
            goal: None,
        },
    ]);
    rows
}

/// The median of `values` (0 for none).
fn median_of(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.collect();
    if values.is_empty() {
        0.0
    } else {
        median(values)
    }
}

/// The `console` entry of the results.
fn console_json(c: &crate::console::Console) -> serde_json::Value {
    json!({
        "browser": c.browser,
        "topics": crate::console::TOPICS,
        "create_seconds": c.create_seconds,
        "loads": {"many": c.many, "one": c.one},
        "tails": c.tails,
        "rows": console_rows(c).iter().map(|row| json!({
            "what": row.figure,
            "measured": row.measured,
            "value": row.value,
            "baseline": row.baseline,
            "baseline_value": row.baseline_value,
            "baseline_is": row.baseline_is,
            "ratio": row.ratio(),
            "goal": row.goal.as_ref().map(|(goal, _)| goal),
            "met": row.goal.as_ref().map(|(_, met)| met),
        })).collect::<Vec<_>>(),
    })
}

/// The goals of the million-partitions run, each with what was measured and whether it is met.
fn million_goals(m: &Million, md: &mut String) {
    let verdict = |met: bool| if met { "yes" } else { "**no**" };
    let _ = writeln!(md, "\n| goal | measured | met |\n|---|---|---|");
    let mut goal = |goal: &str, measured: String, met: bool| {
        let _ = writeln!(md, "| {goal} | {measured} | {} |", verdict(met));
    };
    if let (Some((_, first)), Some((_, last))) = (m.writes.blocks.first(), m.writes.blocks.last()) {
        goal(
            "last block of new partitions ≥ 0.8× the rate of the first",
            format!(
                "{} / {} = {:.2}×",
                thousands(*last),
                thousands(*first),
                last / first
            ),
            last / first >= 0.8,
        );
    }
    if let Some(ratio) = m.max_open_ratio() {
        goal(
            "rates with `max_open` 1,000 and 100,000 within 0.8× of each other",
            format!("{ratio:.2}×"),
            (0.8..=1.25).contains(&ratio),
        );
    }
    goal(
        "every append acknowledged",
        format!("{} not 2xx", m.writes.errors),
        m.writes.errors == 0,
    );
    goal(
        "after the restart: server CPU ≤ 5 % of one core",
        format!("{:.1} %", m.idle.cpu_percent),
        m.idle.cpu_percent <= 5.0,
    );
    goal(
        "after the restart: single-append p99 ≤ 5 ms",
        format!("{:.2} ms", m.idle.p99_ms),
        m.idle.p99_ms <= 5.0,
    );
    goal(
        "`/healthz` within 5 s of start",
        format!("{:.0} ms", m.restart.healthz_ms),
        m.restart.healthz_ms <= 5_000.0,
    );
    goal(
        "resident memory ≤ 128 MiB idle after the restart, ≤ 512 MiB at the peak",
        format!("{:.0} MiB / {:.0} MiB", m.idle.rss_mib, m.peak_rss_mib),
        m.idle.rss_mib <= 128.0 && m.peak_rss_mib <= 512.0,
    );
    goal(
        "`/metrics` ≤ 1 MB and ≤ 100 ms; `/healthz` ≤ 100 ms while it runs",
        format!(
            "{} bytes, {:.0} ms; {:.1} ms",
            thousands(m.metrics.bytes as f64),
            m.metrics.ms,
            m.metrics.healthz_max_ms
        ),
        m.metrics.bytes <= 1_000_000 && m.metrics.ms <= 100.0 && m.metrics.healthz_max_ms <= 100.0,
    );
}

/// The `million` entry of the results.
fn million_json(m: &Million) -> serde_json::Value {
    let writes = |w: &crate::million::Writes| {
        json!({
            "rate": w.rate,
            "errors": w.errors,
            "first_error": w.first_error,
            "blocks": w.blocks.iter().map(|(partitions, rate)| json!({
                "partitions": partitions, "rate": rate,
            })).collect::<Vec<_>>(),
        })
    };
    json!({
        "partitions": m.partitions,
        "clients": m.clients,
        "open_files_limit": m.open_files_limit,
        "writes": writes(&m.writes),
        "peak_rss_mib": m.peak_rss_mib,
        "peak_threads": m.peak_threads,
        "peak_fds": m.peak_fds,
        "healthz_max_ms": m.healthz_max_ms,
        "healthz_failures": m.healthz_failures,
        "metrics": {
            "bytes": m.metrics.bytes,
            "ms": m.metrics.ms,
            "healthz_max_ms": m.metrics.healthz_max_ms,
            "peak_rss_mib": m.metrics.peak_rss_mib,
        },
        "restart": {
            "shutdown_ms": m.restart.shutdown_ms,
            "healthz_ms": m.restart.healthz_ms,
            "first_append_ms": m.restart.first_append_ms,
        },
        "idle": {
            "seconds": m.idle.seconds,
            "appends": m.idle.appends,
            "errors": m.idle.errors,
            "cpu_percent": m.idle.cpu_percent,
            "p50_ms": m.idle.p50_ms,
            "p99_ms": m.idle.p99_ms,
            "max_ms": m.idle.max_ms,
            "fsync_p50_ms": m.idle.fsync_p50_ms,
            "fsync_p99_ms": m.idle.fsync_p99_ms,
            "fsync_max_ms": m.idle.fsync_max_ms,
            "rss_mib": m.idle.rss_mib,
        },
        "max_open": m.max_open.iter().map(|run| json!({
            "max_open": run.max_open,
            "partitions": run.partitions,
            "writes": writes(&run.writes),
        })).collect::<Vec<_>>(),
        "max_open_ratio": m.max_open_ratio(),
    })
}

/// The middle value (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn times(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "–".to_owned(), |ratio| format!("{ratio:.2}×"))
}

/// Cores, CPU model, memory and kernel of this machine.
fn machine() -> String {
    let read = |path| std::fs::read_to_string(path).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|line| {
            line.strip_prefix("model name")?
                .split(':')
                .nth(1)
                .map(str::trim)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|line| {
            line.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    format!(
        "{cores} cores ({cpu}), {memory_gib:.0} GiB of memory, Linux {}",
        read("/proc/sys/kernel/osrelease").trim()
    )
}
