//! A cluster on this machine, through the server binary: one etcd member, the S3 test server,
//! and 1, 2 or 3 nodes replicating to it, all sharing this machine's cores. Aggregate appends
//! per second by node count, a forwarded request against a direct one, failover times over
//! repeated kills, etcd writes per failover and per join, window PUTs per second per node, and
//! failovers of a cluster of the default 256 volumes after a spell of load.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::external::{self, Running, exchange, free_port};

/// Volumes of the benchmark's clusters (each node opens the volumes it holds).
const VOLUMES: usize = 16;
/// Volumes of the clusters failed under load: the default.
pub(crate) const DEFAULT_VOLUMES: usize = 256;
/// Seconds of load spread over 2,048 partitions before a loaded failover.
const LOAD_BEFORE_KILL: Duration = Duration::from_secs(20);
/// Topics of 8 partitions that load spreads over.
pub(crate) const LOADED_TOPICS: u32 = 256;
/// The nodes' etcd lease (the default).
pub(crate) const LEASE_TTL_MS: u64 = 5000;
/// Connections of the load, over all nodes.
const CONNECTIONS: usize = 48;
/// Connections to each node of the loads spread over 2,048 partitions ([`spread_load`]).
pub(crate) const LOADED_CONNECTIONS: usize = CONNECTIONS / 6;

/// Appends per second with `nodes` nodes.
pub struct Scale {
    pub nodes: usize,
    pub rate: f64,
    pub p50_ms: f64,
    /// Window PUTs per second, per node.
    pub puts_per_node: f64,
    /// CPU the nodes, the S3 server and etcd used, in cores.
    pub nodes_cores: f64,
    pub s3_cores: f64,
}

/// Single-record appends sent to the owner against the same sent to another node.
pub struct Forwarding {
    pub direct_rate: f64,
    pub direct_p50_ms: f64,
    pub forwarded_rate: f64,
    pub forwarded_p50_ms: f64,
}

pub struct Cluster {
    pub scale: Vec<Scale>,
    pub forwarding: Option<Forwarding>,
    /// Seconds from a kill -9 to the next acknowledged append on a moved volume, per kill.
    pub failovers: Vec<f64>,
    /// etcd revisions (writes) per failover and per join, medians.
    pub etcd_writes_per_failover: f64,
    pub etcd_writes_per_join: f64,
    /// Failovers of a fresh cluster of [`DEFAULT_VOLUMES`] after [`LOAD_BEFORE_KILL`] of load.
    pub loaded_failovers: Vec<LoadedFailover>,
}

/// One failover after a spell of load (see [`loaded_failover`]).
pub struct LoadedFailover {
    /// From the kill to the next acknowledged append on a moved volume.
    pub seconds: f64,
    /// Windows in the killed node's stream: what its volumes' takers replay.
    pub windows: f64,
    /// Answers during the load, and those that were not `2xx` (by status).
    pub answers: u64,
    pub refused: BTreeMap<u16, u64>,
}

/// One etcd member on free ports in `dir`.
pub(crate) fn etcd(dir: &Path) -> (Running, SocketAddr) {
    let (client, peer) = (free_port(), free_port());
    let address = SocketAddr::from(([127, 0, 0, 1], client));
    let (client_url, peer_url) = (
        format!("http://{address}"),
        format!("http://127.0.0.1:{peer}"),
    );
    let child = Command::new("etcd")
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("bench={peer_url}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (scripts/install-etcd)");
    external::wait_for(address);
    (Running(child), address)
}

/// etcd's revision: it grows by one with every write.
fn etcd_revision(etcd: SocketAddr) -> u64 {
    let body = r#"{"key":"AA=="}"#;
    let answer = exchange(
        etcd,
        &format!(
            "POST /v3/kv/range HTTP/1.1\r\nHost: {etcd}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let json: serde_json::Value =
        serde_json::from_str(&answer[answer.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    json["header"]["revision"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A node of cluster `name`: its process, address and pid.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) address: SocketAddr,
    dir: PathBuf,
    command: Vec<(String, String)>,
    running: Option<(Running, u32)>,
}

impl Node {
    pub(crate) fn start(
        binary: &Path,
        dir: &Path,
        name: &str,
        cluster: &str,
        etcd: SocketAddr,
        s3: SocketAddr,
        volumes: usize,
    ) -> Self {
        let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let command = [
            ("DURABILITY__SERVER__BIND", address.to_string()),
            ("DURABILITY__STORAGE__SYNC", "normal".into()),
            ("DURABILITY__RETENTION__MAX_AGE_MS", "0".into()),
            ("DURABILITY__RETENTION__MAX_BYTES", "0".into()),
            ("DURABILITY__COLD__KIND", "s3".into()),
            ("DURABILITY__COLD__S3_ENDPOINT", format!("http://{s3}")),
            (
                "DURABILITY__COLD__S3_BUCKET",
                crate::replication::BUCKET.into(),
            ),
            ("DURABILITY__COLD__S3_REGION", "eu-west-1".into()),
            ("DURABILITY__COLD__S3_ACCESS_KEY", "bench".into()),
            ("DURABILITY__COLD__S3_SECRET_KEY", "bench".into()),
            ("DURABILITY__REPLICATION__KIND", "s3".into()),
            ("DURABILITY__REPLICATION__PREFIX", cluster.into()),
            ("DURABILITY__REPLICATION__NODE_ID", name.into()),
            (
                "DURABILITY__CLUSTER__ETCD_ENDPOINTS",
                format!("http://{etcd}"),
            ),
            (
                "DURABILITY__CLUSTER__ADVERTISE_URL",
                format!("http://{address}"),
            ),
            ("DURABILITY__CLUSTER__NAME", cluster.into()),
            ("DURABILITY__CLUSTER__VOLUMES", volumes.to_string()),
            (
                "DURABILITY__CLUSTER__LEASE_TTL_MS",
                LEASE_TTL_MS.to_string(),
            ),
            ("RUST_LOG", "error".into()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
        let mut node = Self {
            name: name.to_owned(),
            address,
            dir: dir.join(name),
            command,
            running: None,
        };
        node.restart(binary);
        node
    }

    /// Starts the node's process again on its data folder (a new incarnation).
    pub(crate) fn restart(&mut self, binary: &Path) {
        let child = Command::new(binary)
            .env("DURABILITY__STORAGE__DATA_DIR", &self.dir)
            .envs(self.command.iter().map(|(key, value)| (key, value)))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        let pid = child.id();
        self.running = Some((Running(child), pid));
        external::wait_for(self.address);
    }

    /// `kill -9` of the node's process.
    pub(crate) fn kill(&mut self) {
        self.running = None;
    }

    fn pid(&self) -> u32 {
        self.running.as_ref().map_or(0, |(_, pid)| *pid)
    }
}

/// `GET /cluster` of `node`.
pub(crate) fn view(node: SocketAddr) -> serde_json::Value {
    let answer = exchange(
        node,
        &format!("GET /cluster HTTP/1.1\r\nHost: {node}\r\nConnection: close\r\n\r\n"),
    );
    serde_json::from_str(&answer[answer.find("\r\n\r\n").map_or(0, |at| at + 4)..])
        .unwrap_or_default()
}

/// Waits until `node` sees `members` members with every one of `volumes` volumes where
/// rendezvous hashing puts it; answers each volume's owner.
pub(crate) fn settled(node: SocketAddr, members: usize, volumes: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let view = view(node);
        let names: Vec<String> = view["members"]
            .as_object()
            .map(|members| members.keys().cloned().collect())
            .unwrap_or_default();
        let mut owners = vec![String::new(); volumes];
        for (name, member) in view["members"].as_object().into_iter().flatten() {
            for volume in member["volumes"].as_array().into_iter().flatten() {
                owners[volume.as_u64().unwrap() as usize] = name.clone();
            }
        }
        let balanced = (0..volumes).all(|volume| {
            durability::cluster::placement::owner_of(volume, names.iter().map(String::as_str))
                == Some(owners[volume].as_str())
        });
        if names.len() == members && balanced && view["releasing"].is_null() {
            return owners;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not settle: {view}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A partition of the bench topic whose volume `owner` holds, other than `not`.
fn partition_of(owners: &[String], owner: &str, not: &[u32]) -> u32 {
    (0..4096)
        .filter(|partition| !not.contains(partition))
        .find(|&partition| {
            let id = durability::names::PartitionId::new("bench", partition).unwrap();
            owners[durability::cluster::placement::volume_of(&id, owners.len())] == owner
        })
        .expect("a partition on every node")
}

/// Window PUTs the node has stored so far (`durability_replica_windows_total`).
pub(crate) fn windows(node: SocketAddr) -> f64 {
    let answer = exchange(
        node,
        &format!("GET /metrics HTTP/1.1\r\nHost: {node}\r\nConnection: close\r\n\r\n"),
    );
    answer
        .lines()
        .find_map(|line| line.strip_prefix("durability_replica_windows_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// One single-record append to `partition` of `topic` through `node`: whether it was
/// acknowledged.
pub(crate) fn append(node: SocketAddr, topic: &str, partition: u32, payload: &str) -> bool {
    let body = format!("[{{\"payload\":{payload}}}]");
    let Ok(mut stream) = std::net::TcpStream::connect(node) else {
        return false;
    };
    let request = format!(
        "POST /topics/{topic}/partitions/{partition}/records HTTP/1.1\r\nHost: {node}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    use std::io::{Read, Write};
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 202")
}

/// Runs the section (see the module docs) with `kills` failovers.
pub fn run(
    binary: &Path,
    dir: &Path,
    payload: &str,
    budget: Duration,
    kills: usize,
    loaded_rounds: usize,
) -> Cluster {
    std::fs::create_dir_all(dir).unwrap();
    let (_s3, s3) = crate::replication::s3_server(&dir.join("s3"));
    let (_etcd, etcd_address) = etcd(dir);
    let script = external::post_script(dir, "single", &format!("[{{\"payload\":{payload}}}]"));
    let mut scale = Vec::new();
    let mut forwarding = None;
    let mut failovers = Vec::new();
    let mut per_failover = Vec::new();
    let mut per_join = Vec::new();
    for count in 1..=3 {
        let cluster = format!("bench-{count}");
        let names = ["a", "b", "c"];
        let mut nodes: Vec<Node> = Vec::new();
        for name in &names[..count] {
            let before = etcd_revision(etcd_address);
            nodes.push(Node::start(
                binary,
                &dir.join(&cluster),
                name,
                &cluster,
                etcd_address,
                s3,
                VOLUMES,
            ));
            settled(nodes[0].address, nodes.len(), VOLUMES);
            if nodes.len() > 1 {
                per_join.push((etcd_revision(etcd_address) - before) as f64);
            }
        }
        let owners = settled(nodes[0].address, count, VOLUMES);
        // Each node's share of the connections appends to a partition it holds.
        let windows_before: Vec<f64> = nodes.iter().map(|node| windows(node.address)).collect();
        let cpu_before: Vec<external::Cpu> = nodes.iter().map(|n| external::cpu(n.pid())).collect();
        let s3_cpu_before = process_cpu("moto_server");
        let loads: Vec<_> = nodes
            .iter()
            .map(|node| {
                let partition = partition_of(&owners, &node.name, &[]);
                let url = format!(
                    "http://{}/topics/bench/partitions/{partition}/records",
                    node.address
                );
                let script = script.clone();
                std::thread::spawn(move || {
                    external::wrk(&url, CONNECTIONS / count, &script, budget)
                })
            })
            .collect();
        let measured: Vec<external::Wrk> =
            loads.into_iter().map(|load| load.join().unwrap()).collect();
        let seconds = budget.as_secs_f64().ceil().max(1.0);
        let puts: f64 = nodes
            .iter()
            .zip(&windows_before)
            .map(|(node, before)| windows(node.address) - before)
            .sum();
        let nodes_cpu: f64 = nodes
            .iter()
            .zip(&cpu_before)
            .map(|(node, before)| external::cpu(node.pid()).since(*before).total())
            .sum();
        let rate = measured.iter().map(|wrk| wrk.requests_per_second).sum();
        let p50_ms = crate::report::median(measured.iter().map(|wrk| wrk.p50_ms).collect());
        eprintln!("  {count} nodes: {rate:.0} appends/s, p50 {p50_ms:.1} ms");
        scale.push(Scale {
            nodes: count,
            rate,
            p50_ms,
            puts_per_node: puts / seconds / count as f64,
            nodes_cores: nodes_cpu / seconds,
            s3_cores: (process_cpu("moto_server") - s3_cpu_before) / seconds,
        });
        if count == 3 {
            forwarding = Some(forwarded(&nodes, &owners, &script, budget));
            for kill in 0..kills {
                let (took, writes) = failover(binary, &mut nodes, etcd_address, payload);
                eprintln!("  failover {}: {took:.2} s, {writes} etcd writes", kill + 1);
                failovers.push(took);
                per_failover.push(writes as f64);
            }
        }
    }
    let loaded_failovers = (0..loaded_rounds)
        .map(|round| loaded_failover(binary, dir, round, etcd_address, s3, payload))
        .collect();
    Cluster {
        scale,
        forwarding,
        failovers,
        etcd_writes_per_failover: crate::report::median(per_failover),
        etcd_writes_per_join: crate::report::median(per_join),
        loaded_failovers,
    }
}

/// A fresh cluster of three nodes and [`DEFAULT_VOLUMES`] volumes takes single-record appends
/// spread over 2,048 partitions through every node for [`LOAD_BEFORE_KILL`]; then the node
/// holding the most volumes is killed, and the next acknowledged append on one of its volumes
/// through another node is timed.
fn loaded_failover(
    binary: &Path,
    dir: &Path,
    round: usize,
    etcd: SocketAddr,
    s3: SocketAddr,
    payload: &str,
) -> LoadedFailover {
    let cluster = format!("loaded-{round}");
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            Node::start(
                binary,
                &dir.join(&cluster),
                name,
                &cluster,
                etcd,
                s3,
                DEFAULT_VOLUMES,
            )
        })
        .collect();
    let owners = settled(nodes[0].address, nodes.len(), DEFAULT_VOLUMES);
    let script = loaded_script(dir, payload);
    let (answers, refused) = spread_load(&nodes, &script, LOAD_BEFORE_KILL);
    eprintln!("  loaded: {answers} answers, not 2xx: {refused:?}");
    let at = most_volumes(&nodes, &owners);
    let (topic, partition) = loaded_partition_of(&owners, &nodes[at].name);
    let survivor = nodes[(at + 1) % nodes.len()].address;
    let stream = windows(nodes[at].address);
    nodes[at].kill();
    let killed = Instant::now();
    while !append(survivor, &topic, partition, payload) {
        assert!(killed.elapsed() < Duration::from_secs(120), "no failover");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = killed.elapsed().as_secs_f64();
    eprintln!(
        "  loaded failover {}: {took:.2} s, {stream:.0} windows",
        round + 1
    );
    LoadedFailover {
        seconds: took,
        windows: stream,
        answers,
        refused,
    }
}

/// The wrk script of the loads before a failover, in `dir`: single-record POSTs of `payload`,
/// each to a random one of the 8 partitions of a random one of [`LOADED_TOPICS`] topics. At
/// the end it prints how many answers each status had, a line each (`status 503 12`): see
/// [`spread_load`].
pub(crate) fn loaded_script(dir: &Path, payload: &str) -> PathBuf {
    let body = dir.join("loaded.json");
    std::fs::write(&body, format!("[{{\"payload\":{payload}}}]")).unwrap();
    let script = dir.join("loaded.lua");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nlocal f = io.open(\"{}\")\nlocal body = f:read(\"*a\")\nf:close()\nlocal threads = {{}}\nfunction setup(thread) table.insert(threads, thread) end\nfunction init(args) statuses = {{}} end\nrequest = function()\n  return wrk.format(nil, \"/topics/t\" .. math.random(0, {}) .. \"/partitions/\" .. math.random(0, 7) .. \"/records\", nil, body)\nend\nfunction response(status, headers, body) statuses[status] = (statuses[status] or 0) + 1 end\nfunction done(summary, latency, requests)\n  for _, thread in ipairs(threads) do\n    for status, count in pairs(thread:get(\"statuses\")) do io.write(string.format(\"status %d %d\\n\", status, count)) end\n  end\nend\n",
            body.display(),
            LOADED_TOPICS - 1
        ),
    )
    .unwrap();
    script
}

/// Runs the [`loaded_script`] `script` through every node of `nodes` at once for `duration`,
/// [`LOADED_CONNECTIONS`] connections each. Answers how many answers came, and those that were
/// not `2xx` by status: some are `503` while the view settles, and are retried by real clients.
pub(crate) fn spread_load(
    nodes: &[Node],
    script: &Path,
    duration: Duration,
) -> (u64, BTreeMap<u16, u64>) {
    let loads: Vec<_> = nodes
        .iter()
        .map(|node| {
            let (url, script) = (format!("http://{}", node.address), script.to_owned());
            std::thread::spawn(move || {
                external::wrk_output(&url, LOADED_CONNECTIONS, &script, duration)
            })
        })
        .collect();
    let mut refused = BTreeMap::new();
    let mut answers = 0;
    for load in loads {
        let (measured, text) = load.join().unwrap();
        answers += measured.requests;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some("status"), Some(status), Some(count)) =
                (words.next(), words.next(), words.next())
                && let (Ok(status), Ok(count)) = (status.parse::<u16>(), count.parse::<u64>())
                && !(200..300).contains(&status)
            {
                *refused.entry(status).or_insert(0) += count;
            }
        }
    }
    (answers, refused)
}

/// Where in `nodes` the node holding the most volumes of `owners` (each volume's owner) is.
pub(crate) fn most_volumes(nodes: &[Node], owners: &[String]) -> usize {
    nodes
        .iter()
        .enumerate()
        .max_by_key(|(_, node)| owners.iter().filter(|owner| **owner == node.name).count())
        .map(|(at, _)| at)
        .unwrap()
}

/// A partition of the [`loaded_script`]'s topics whose volume `owner` holds.
pub(crate) fn loaded_partition_of(owners: &[String], owner: &str) -> (String, u32) {
    (0..LOADED_TOPICS)
        .flat_map(|topic| (0..8).map(move |partition| (format!("t{topic}"), partition)))
        .find(|(topic, partition)| {
            let id = durability::names::PartitionId::new(topic, *partition).unwrap();
            owners[durability::cluster::placement::volume_of(&id, owners.len())] == owner
        })
        .expect("a partition of the node's")
}

/// Direct and forwarded single-record appends from 16 connections to node a.
fn forwarded(nodes: &[Node], owners: &[String], script: &Path, budget: Duration) -> Forwarding {
    let node = &nodes[0];
    let url = |partition: u32| {
        format!(
            "http://{}/topics/bench/partitions/{partition}/records",
            node.address
        )
    };
    let own = partition_of(owners, &node.name, &[]);
    let other = owners
        .iter()
        .find(|owner| **owner != node.name)
        .map(|owner| partition_of(owners, owner, &[]))
        .expect("another node holds a volume");
    let direct = external::wrk(&url(own), 16, script, budget);
    let forwarded = external::wrk(&url(other), 16, script, budget);
    eprintln!(
        "  direct {:.0}/s (p50 {:.2} ms), forwarded {:.0}/s (p50 {:.2} ms)",
        direct.requests_per_second, direct.p50_ms, forwarded.requests_per_second, forwarded.p50_ms
    );
    Forwarding {
        direct_rate: direct.requests_per_second,
        direct_p50_ms: direct.p50_ms,
        forwarded_rate: forwarded.requests_per_second,
        forwarded_p50_ms: forwarded.p50_ms,
    }
}

/// Kills the node holding the most volumes and times the next acknowledged append on one of
/// its volumes through another node; then starts it again and waits for the balance. Answers
/// the seconds, and etcd's writes from the kill to the volumes' takeover.
fn failover(binary: &Path, nodes: &mut [Node], etcd: SocketAddr, payload: &str) -> (f64, u64) {
    let owners = settled(nodes[0].address, nodes.len(), VOLUMES);
    let at = most_volumes(nodes, &owners);
    let partition = partition_of(&owners, &nodes[at].name, &[]);
    let survivor = nodes[if at == 0 { 1 } else { 0 }].address;
    let before = etcd_revision(etcd);
    nodes[at].kill();
    let killed = Instant::now();
    while !append(survivor, "bench", partition, payload) {
        assert!(killed.elapsed() < Duration::from_secs(60), "no failover");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = killed.elapsed().as_secs_f64();
    let writes = etcd_revision(etcd) - before;
    nodes[at].restart(binary);
    settled(nodes[0].address, nodes.len(), VOLUMES);
    (took, writes)
}

/// CPU seconds used so far by the processes whose command line contains `name`.
fn process_cpu(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(name))
                && std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
        })
        .map(|pid| external::cpu(pid).total())
        .sum()
}
