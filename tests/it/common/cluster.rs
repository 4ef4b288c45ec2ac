//! The harness of the cluster tests: a cluster of real server processes over one etcd (see
//! [`super::etcd`]) and one bucket, all on 127.0.0.1, and what the tests do through it: start,
//! kill and restart its nodes, read its view of who owns which volume, write and read records
//! through any node, keep what was acknowledged and check that every node serves it, and cut a
//! node off in a network namespace of its own. `tests/it/cluster.rs`, `chaos.rs` and
//! `embedded_cluster.rs` hold the scenarios.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use durability::cold::S3Settings;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::bucket::audit_bucket;
use super::etcd::{Etcd, Options, ServerTls};
use super::pki::Pki;
use super::process::{Server, replication_env, request, speak_tls_to, tls_client};
use super::{Rng, block_on};

/// The topic the scenarios write.
pub(crate) const TOPIC: &str = "orders";
/// Partitions written: spread over every volume of the small clusters below.
pub(crate) const PARTITIONS: u32 = 8;
/// The volumes of every cluster here (`cluster.volumes`).
pub(crate) const VOLUMES: &str = "16";
/// The nodes' lease (`cluster.lease_ttl_ms`).
pub(crate) const LEASE_TTL_MS: u64 = 3000;
/// How long a write is retried (same deduplication key) before the test gives up on it.
pub(crate) const WRITE_PATIENCE: Duration = Duration::from_secs(40);

/// Held by each test for its whole run: one cluster of processes at a time, so that a node's
/// lease and its windows are not starved of the machine by another cluster's.
pub(crate) fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CLUSTERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A free TCP port of 127.0.0.1 (free when asked; the process that binds it next gets it).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// etcd on 127.0.0.1 for a cluster: `members` members, each waited for until it answers
/// [`etcd_serves`].
pub(crate) fn start_etcd(members: usize) -> Etcd {
    Etcd::start(members, etcd_serves)
}

/// Whether the etcd member at `addr` serves: `GET /health` answers `"health": "true"`, which
/// it does once it has a leader.
pub(crate) fn etcd_serves(addr: SocketAddr) -> bool {
    matches!(request(addr, "GET", "/health", None), Ok((200, health)) if health["health"] == "true")
}

/// What a secured cluster's nodes and etcd share: certificates of one CA (see [`Pki`]), the
/// cluster's secret, and etcd's root password in a file, as containers mount secrets.
pub(crate) struct Secured {
    pub(crate) pki: Pki,
    password_file: std::path::PathBuf,
}

/// The secret the nodes of a secured cluster prove themselves with.
pub(crate) const CLUSTER_SECRET: &str = "the-cluster-secret";
/// etcd's root password in a secured cluster.
const ETCD_PASSWORD: &str = "the-etcd-password";

impl Secured {
    pub(crate) fn new() -> Self {
        let pki = Pki::new();
        let password_file = pki.path("etcd-password");
        std::fs::write(&password_file, format!("{ETCD_PASSWORD}\n")).expect("a password file");
        Self { pki, password_file }
    }

    /// etcd of `members` members over TLS with authentication on (user `root`). Not with
    /// client certificates too: etcd's JSON gateway refuses a request from a client with a
    /// certificate once authentication is on ("CommonName of client sending a request against
    /// gateway will be ignored").
    pub(crate) fn start_etcd(&self, members: usize) -> Etcd {
        let tls = ServerTls {
            cert_file: self.pki.path("server.pem"),
            key_file: self.pki.path("server.key"),
            ca_file: self.pki.path("ca.pem"),
            client_cert_auth: false,
        };
        let client = self.client();
        let ready = move |addr| {
            speak_tls_to(addr, client.clone());
            etcd_serves(addr)
        };
        let options = Options {
            tls: Some(tls),
            ..Options::default()
        };
        let etcd = Etcd::start_with(members, options, ready);
        etcd.enable_auth(ETCD_PASSWORD);
        etcd
    }

    /// The tests' TLS client: it trusts the CA and shows its client certificate.
    fn client(&self) -> std::sync::Arc<rustls::ClientConfig> {
        let cert = (self.pki.path("client.pem"), self.pki.path("client.key"));
        tls_client(&self.pki.path("ca.pem"), Some((&cert.0, &cert.1)))
    }
}

/// The etcd member that leads now.
pub(crate) fn etcd_leader(etcd: &Etcd) -> usize {
    for (n, &addr) in etcd.clients.iter().enumerate() {
        if let Ok((200, status)) = request(addr, "POST", "/v3/maintenance/status", Some(&json!({})))
            && status["header"]["member_id"] == status["leader"]
        {
            return n;
        }
    }
    panic!("no etcd member leads")
}

/// A node of the cluster: its name, address and data folder survive its process.
pub(crate) struct Node {
    pub(crate) name: String,
    host: String,
    port: u16,
    /// The network namespace it runs in, if not this one.
    namespace: Option<String>,
    pub(crate) dir: TempDir,
    /// The environment of its process (see [`Node::set_env`]).
    env: Vec<(String, String)>,
    pub(crate) server: Option<Server>,
}

impl Node {
    pub(crate) fn start(name: &str, etcd: &Etcd, s3: &S3Settings) -> Self {
        Self::start_with(name, etcd, s3, &s3.endpoint, LEASE_TTL_MS)
    }

    /// A node reaching the bucket at `endpoint` (a proxy, say), with a lease of `ttl_ms`.
    pub(crate) fn start_with(
        name: &str,
        etcd: &Etcd,
        s3: &S3Settings,
        endpoint: &str,
        ttl_ms: u64,
    ) -> Self {
        Self::start_on(
            name,
            &etcd.endpoint,
            s3,
            endpoint,
            ttl_ms,
            ("127.0.0.1", None),
        )
    }

    /// A node reaching etcd at `etcd` and the bucket at `endpoint`, serving on address `host`
    /// of network namespace `namespace` (this one: `None`).
    pub(crate) fn start_on(
        name: &str,
        etcd: &str,
        s3: &S3Settings,
        endpoint: &str,
        ttl_ms: u64,
        (host, namespace): (&str, Option<&str>),
    ) -> Self {
        let mut node = Self::unstarted(name, etcd, s3, endpoint, ttl_ms, (host, namespace));
        node.restart();
        node
    }

    /// [`Node::start_on`] without starting its process: its settings may be changed first.
    pub(crate) fn unstarted(
        name: &str,
        etcd: &str,
        s3: &S3Settings,
        endpoint: &str,
        ttl_ms: u64,
        (host, namespace): (&str, Option<&str>),
    ) -> Self {
        let port = free_port();
        let mut env: Vec<(String, String)> = replication_env(s3, endpoint, name)
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        for (key, value) in [
            ("DURABILITY__SERVER__BIND", format!("{host}:{port}")),
            ("DURABILITY__CLUSTER__ETCD_ENDPOINTS", etcd.to_owned()),
            (
                "DURABILITY__CLUSTER__ADVERTISE_URL",
                format!("http://{host}:{port}"),
            ),
            ("DURABILITY__CLUSTER__LEASE_TTL_MS", ttl_ms.to_string()),
            ("DURABILITY__CLUSTER__VOLUMES", VOLUMES.to_owned()),
            ("DURABILITY__REPLICATION__PUT_RETRY_MS", "2000".to_owned()),
            ("RUST_LOG", "warn".to_owned()),
        ] {
            env.push((key.to_owned(), value));
        }
        Self {
            name: name.to_owned(),
            host: host.to_owned(),
            port,
            namespace: namespace.map(str::to_owned),
            dir: tempfile::tempdir().expect("temp dir"),
            env,
            server: None,
        }
    }

    /// Runs the node's process to its end (it must stop by itself within 30 s), answering its
    /// exit status and what it wrote to its standard error.
    pub(crate) fn run_to_exit(&self) -> (std::process::ExitStatus, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_durability"))
            .env("DURABILITY__STORAGE__DATA_DIR", self.dir.path())
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server binary");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the server") {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{} did not stop by itself", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut said = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut said)
            .expect("read its standard error");
        (status, said)
    }

    /// Makes the node one of a secured cluster: it speaks mutual TLS with its clients and
    /// the other nodes (its listener shows certificate `cert` of the CA and lets in only
    /// clients with a certificate of that CA; it calls the other nodes trusting only that CA,
    /// showing `cert`), proves itself to them with [`CLUSTER_SECRET`], and reaches etcd over
    /// TLS as user `root`, its password read from a file (see [`Secured::start_etcd`]). The tests' requests to it go over
    /// TLS too (see [`speak_tls_to`]).
    pub(crate) fn secure(&mut self, secured: &Secured, cert: &str) {
        let file = |name: &str| secured.pki.path(name).display().to_string();
        let (ca, pem, key) = (
            file("ca.pem"),
            file(&format!("{cert}.pem")),
            file(&format!("{cert}.key")),
        );
        let url = format!("https://{}:{}", self.host, self.port);
        let password = secured.password_file.display().to_string();
        for (key, value) in [
            (
                "DURABILITY__SERVER__TLS",
                format!("{{cert_file={pem:?}, key_file={key:?}, client_ca_file={ca:?}}}"),
            ),
            (
                "DURABILITY__CLUSTER__TLS",
                format!("{{ca_file={ca:?}, cert_file={pem:?}, key_file={key:?}}}"),
            ),
            ("DURABILITY__CLUSTER__ADVERTISE_URL", url),
            ("DURABILITY__CLUSTER__SECRET", CLUSTER_SECRET.to_owned()),
            ("DURABILITY__CLUSTER__ETCD_CA_FILE", ca.clone()),
            ("DURABILITY__CLUSTER__ETCD_USER", "root".to_owned()),
            ("DURABILITY__CLUSTER__ETCD_PASSWORD_FILE", password),
        ] {
            self.set_env(key, &value);
        }
        speak_tls_to(self.addr(), secured.client());
    }

    /// Sets environment variable `key` of the node's next start.
    pub(crate) fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(set, _)| set != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Whether the node's process is still running (it did not stop by itself).
    pub(crate) fn running(&mut self) -> bool {
        self.server
            .as_mut()
            .is_some_and(|server| server.wait_for_exit(Duration::ZERO).is_none())
    }

    /// Starts the node's process again, over the same folder and port.
    pub(crate) fn restart(&mut self) {
        self.server = Some(Server::start_in(
            self.namespace.as_deref(),
            self.dir.path(),
            self.env.clone(),
        ));
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        format!("{}:{}", self.host, self.port)
            .parse()
            .expect("an address")
    }

    /// Waits up to `within` for the node's process to stop by itself with the status of a
    /// node that lost its lease ([`durability::cluster::EXIT_LEASE_LOST`]); `why` says what
    /// made it.
    pub(crate) fn expect_lease_lost(&mut self, within: Duration, why: &str) {
        let exited = self.server.as_mut().expect("running").wait_for_exit(within);
        assert_eq!(
            exited.and_then(|status| status.code()),
            Some(durability::cluster::EXIT_LEASE_LOST),
            "{why}"
        );
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
    }
}

/// Checks the bucket as a whole (see [`audit_bucket`]): each stream's seqs run from
/// 0 without a gap up to its fence, each window names its own place, and each manifest's epoch
/// is at least every epoch its volume's windows were written with.
pub(crate) fn audit(s3: &S3Settings) {
    let audit = block_on(audit_bucket(s3));
    assert!(
        audit.volumes_with_manifest() > 0,
        "the volumes have manifests"
    );
}

/// The name of the node that owns the most volumes in `view`.
pub(crate) fn busiest(view: &Value) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for owner in owners(view).into_values() {
        *counts.entry(owner).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(node, _)| node)
        .expect("an owner")
}

/// Nodes a, b and c of one cluster, each started by `start` with its name.
pub(crate) fn three_nodes(start: impl Fn(&str) -> Node) -> Vec<Node> {
    ["a", "b", "c"].into_iter().map(start).collect()
}

/// `GET /cluster` from `node`.
pub(crate) fn cluster_view(node: SocketAddr) -> Option<Value> {
    match request(node, "GET", "/cluster", None) {
        Ok((200, view)) => Some(view),
        _ => None,
    }
}

/// Waits until `node` sees `members` members owning every volume; answers its view.
pub(crate) fn wait_for_owners(node: SocketAddr, members: usize) -> Value {
    let what = format!("the cluster did not settle on {members} members");
    wait_within(Duration::from_secs(60), node, &what, |view| {
        view["members"].as_object().map(serde_json::Map::len) == Some(members)
            && view["unowned"].as_array().is_some_and(Vec::is_empty)
    })
}

/// Waits until `node`'s view of the cluster satisfies `settled`; answers it.
pub(crate) fn wait_for_view(
    node: SocketAddr,
    what: &str,
    settled: impl Fn(&Value) -> bool,
) -> Value {
    wait_within(Duration::from_secs(90), node, what, settled)
}

/// [`wait_for_view`], for `within` at most.
fn wait_within(
    within: Duration,
    node: SocketAddr,
    what: &str,
    settled: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        if let Some(view) = cluster_view(node).filter(|view| settled(view)) {
            return view;
        }
        assert!(
            started.elapsed() < within,
            "{what}: {:?}",
            cluster_view(node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `node` sees `members` members, each with the volumes rendezvous hashing gives
/// it; answers the view.
pub(crate) fn wait_for_balance(node: SocketAddr, members: usize) -> Value {
    wait_for_view(node, &format!("{members} nodes, balanced"), |view| {
        view["members"].as_object().map(serde_json::Map::len) == Some(members) && balanced(view)
    })
}

/// Where node `name` is in `nodes`.
pub(crate) fn position(nodes: &[Node], name: &str) -> usize {
    nodes
        .iter()
        .position(|node| node.name == name)
        .expect("a node of the cluster")
}

/// Whether every volume of `view` is with the node rendezvous hashing picks among its members,
/// and nothing is moving.
pub(crate) fn balanced(view: &Value) -> bool {
    let members = members(view);
    let owned = owners(view);
    Some(owned.len() as u64) == view["volumes"].as_u64()
        && owned.iter().all(|(volume, owner)| {
            let pick = durability::cluster::placement::owner_of(
                *volume as usize,
                members.iter().map(String::as_str),
            );
            pick == Some(owner.as_str())
        })
        && view["releasing"].is_null()
}

/// The node owning each volume in `view`.
pub(crate) fn owners(view: &Value) -> BTreeMap<u64, String> {
    let mut owners = BTreeMap::new();
    for (node, member) in view["members"].as_object().expect("members") {
        for volume in member["volumes"].as_array().expect("volumes") {
            owners.insert(volume.as_u64().expect("a volume"), node.clone());
        }
    }
    owners
}

/// The volume partition `partition` of [`TOPIC`] is in.
pub(crate) fn volume_of(partition: u32) -> u64 {
    volume_holding(TOPIC, partition)
}

/// The volume partition `partition` of topic `topic` is in, of [`VOLUMES`].
pub(crate) fn volume_holding(topic: &str, partition: u32) -> u64 {
    let id = durability::names::PartitionId::new(topic, partition).expect("a name");
    durability::cluster::placement::volume_of(&id, VOLUMES.parse().expect("a count")) as u64
}

/// Appends one record with deduplication key `key` through `node`: its offset, or why not.
pub(crate) fn append(node: SocketAddr, partition: u32, key: &str) -> Result<u64, String> {
    append_to(node, TOPIC, partition, key)
}

/// [`append`] to partition `partition` of topic `topic`.
pub(crate) fn append_to(
    node: SocketAddr,
    topic: &str,
    partition: u32,
    key: &str,
) -> Result<u64, String> {
    let path = format!("/topics/{topic}/partitions/{partition}/records");
    let batch = json!([{"payload": {"key": key}, "key": key}]);
    match request(node, "POST", &path, Some(&batch))? {
        (202, body) => match body["offsets"].as_array().map(Vec::as_slice) {
            Some([offset]) => offset.as_u64().ok_or_else(|| format!("{body}")),
            _ => Err(format!("one offset expected: {body}")),
        },
        (status, body) => Err(format!("{status} {body}")),
    }
}

/// Produces one keyed event with deduplication key `key` through `node` (its partition picked
/// from `partition_key`): its partition and offset, or why not.
pub(crate) fn produce(
    node: SocketAddr,
    partition_key: &str,
    key: &str,
) -> Result<(u32, u64), String> {
    let path = format!("/topics/{TOPIC}/records");
    let events = json!([{"partitionKey": partition_key, "payload": {"key": key}, "key": key}]);
    match request(node, "POST", &path, Some(&events))? {
        (202, body) => match body["records"].as_array().map(Vec::as_slice) {
            Some([placed]) => Ok((
                placed["partition"].as_u64().ok_or("a partition")? as u32,
                placed["offset"].as_u64().ok_or("an offset")?,
            )),
            _ => Err(format!("one place expected: {body}")),
        },
        (status, body) => Err(format!("{status} {body}")),
    }
}

/// The acknowledged writes: each key's partition and offset.
#[derive(Default)]
pub(crate) struct Acknowledged {
    pub(crate) keys: BTreeMap<String, (u32, u64)>,
}

impl Acknowledged {
    /// Appends `key` to `partition` through random nodes of `nodes` until one acknowledges it
    /// (the same key each time, so a retry of a write that did land is deduplicated). Answers
    /// how long that took.
    pub(crate) fn write(
        &mut self,
        rng: &mut Rng,
        nodes: &[SocketAddr],
        partition: u32,
        key: &str,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let node = nodes[rng.below(nodes.len() as u64) as usize];
            match append(node, partition, key) {
                Ok(offset) => {
                    if let Some(earlier) = self.keys.insert(key.to_owned(), (partition, offset)) {
                        assert_eq!(earlier, (partition, offset), "{key} acknowledged twice");
                    }
                    return started.elapsed();
                }
                Err(why) => {
                    assert!(
                        started.elapsed() < WRITE_PATIENCE,
                        "{key} was not acknowledged within {WRITE_PATIENCE:?}: {why}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Appends `count` records keyed `{prefix}-{n}` over the partitions in turn, as
    /// [`Acknowledged::write`] does each.
    pub(crate) fn write_many(
        &mut self,
        rng: &mut Rng,
        nodes: &[SocketAddr],
        count: u32,
        prefix: &str,
    ) {
        for n in 0..count {
            self.write(rng, nodes, n % PARTITIONS, &format!("{prefix}-{n}"));
        }
    }

    /// Produces the keyed event `key` through random nodes of `nodes` until one acknowledges
    /// it, as [`Acknowledged::write`] appends.
    pub(crate) fn produce(&mut self, rng: &mut Rng, nodes: &[SocketAddr], key: &str) {
        let started = Instant::now();
        loop {
            let node = nodes[rng.below(nodes.len() as u64) as usize];
            match produce(node, &format!("user-{key}"), key) {
                Ok(placed) => {
                    if let Some(earlier) = self.keys.insert(key.to_owned(), placed) {
                        assert_eq!(earlier, placed, "{key} acknowledged twice");
                    }
                    return;
                }
                Err(why) => {
                    assert!(
                        started.elapsed() < WRITE_PATIENCE,
                        "{key} was not acknowledged within {WRITE_PATIENCE:?}: {why}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Every partition, read through `node`, holds exactly the acknowledged records at their
    /// offsets, contiguous from 0, each key once.
    pub(crate) fn check(&self, node: SocketAddr) {
        let mut expected: BTreeMap<u32, BTreeMap<u64, String>> = BTreeMap::new();
        for (key, &(partition, offset)) in &self.keys {
            expected
                .entry(partition)
                .or_default()
                .insert(offset, key.clone());
        }
        for partition in 0..PARTITIONS {
            let records = read_all(node, partition);
            let mut seen = HashMap::new();
            for (at, record) in records.iter().enumerate() {
                let offset = record["offset"].as_u64().expect("an offset");
                assert_eq!(
                    offset, at as u64,
                    "partition {partition}: offsets contiguous"
                );
                let key = record["key"].as_str().expect("a key").to_owned();
                assert_eq!(record["payload"], json!({"key": key}));
                if let Some(earlier) = seen.insert(key.clone(), offset) {
                    panic!("partition {partition}: {key} at {earlier} and {offset}");
                }
            }
            for (offset, key) in expected.get(&partition).into_iter().flatten() {
                let found = records
                    .get(*offset as usize)
                    .and_then(|r| r["key"].as_str());
                assert_eq!(
                    found,
                    Some(key.as_str()),
                    "partition {partition}: acknowledged {key} at {offset}"
                );
            }
        }
    }
}

/// Every record of a partition, through `node`.
pub(crate) fn read_all(node: SocketAddr, partition: u32) -> Vec<Value> {
    read_partition(node, TOPIC, partition)
}

/// [`read_all`] of partition `partition` of topic `topic`.
pub(crate) fn read_partition(node: SocketAddr, topic: &str, partition: u32) -> Vec<Value> {
    read_partition_within(node, topic, partition, WRITE_PATIENCE)
        .unwrap_or_else(|why| panic!("{why}"))
}

/// [`read_partition`], each page asked again while it fails for `patience` at most: why not,
/// past that.
pub(crate) fn read_partition_within(
    node: SocketAddr,
    topic: &str,
    partition: u32,
    patience: Duration,
) -> Result<Vec<Value>, String> {
    let mut records: Vec<Value> = Vec::new();
    let started = Instant::now();
    loop {
        let path = format!(
            "/topics/{topic}/partitions/{partition}/records?from={}&limit=100",
            records.len()
        );
        match request(node, "GET", &path, None) {
            Ok((200, body)) => match body["records"].as_array() {
                Some(page) if page.is_empty() => return Ok(records),
                Some(page) => records.extend(page.iter().cloned()),
                None => return Err(format!("GET {path} through {node}: {body}")),
            },
            other if started.elapsed() >= patience => {
                return Err(format!("GET {path} through {node}: {other:?}"));
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// One partition in each volume: `(topic, partition)` by volume.
pub(crate) fn one_partition_per_volume() -> Vec<(String, u32)> {
    let volumes: usize = VOLUMES.parse().expect("a count");
    let mut found: Vec<Option<(String, u32)>> = vec![None; volumes];
    for n in 0.. {
        let topic = format!("pa{n}");
        for partition in 0..PARTITIONS {
            let id = durability::names::PartitionId::new(&topic, partition).expect("a name");
            let volume = durability::cluster::placement::volume_of(&id, volumes);
            found[volume].get_or_insert_with(|| (topic.clone(), partition));
        }
        if found.iter().all(Option::is_some) {
            return found.into_iter().flatten().collect();
        }
    }
    unreachable!("every volume holds some partition")
}

/// Writes `count` keyed records to each of `partitions` through `node` (each retried with its
/// key until acknowledged), recording each key's place in `acknowledged`.
pub(crate) fn write_each(
    acknowledged: &mut BTreeMap<String, (String, u32, u64)>,
    node: SocketAddr,
    partitions: &[(String, u32)],
    count: u32,
    round: &str,
) {
    for (topic, partition) in partitions {
        for n in 0..count {
            let key = format!("{round}-{topic}-{partition}-{n}");
            let started = Instant::now();
            let offset = loop {
                match append_to(node, topic, *partition, &key) {
                    Ok(offset) => break offset,
                    Err(why) => assert!(
                        started.elapsed() < WRITE_PATIENCE,
                        "{key} was not acknowledged: {why}"
                    ),
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            acknowledged.insert(key, (topic.clone(), *partition, offset));
        }
    }
}

/// The acknowledged records of `acknowledged` (key: topic, partition, offset) that `node` does
/// not read at their offsets; panics where a partition's offsets are not contiguous.
pub(crate) fn lost_records(
    node: SocketAddr,
    acknowledged: &BTreeMap<String, (String, u32, u64)>,
) -> Vec<String> {
    let mut by_partition: BTreeMap<(&str, u32), Vec<(&str, u64)>> = BTreeMap::new();
    for (key, (topic, partition, offset)) in acknowledged {
        by_partition
            .entry((topic.as_str(), *partition))
            .or_default()
            .push((key.as_str(), *offset));
    }
    let mut lost = Vec::new();
    for ((topic, partition), keys) in by_partition {
        let records = read_partition(node, topic, partition);
        for (at, record) in records.iter().enumerate() {
            assert_eq!(
                record["offset"], at as u64,
                "{topic}/{partition}: contiguous"
            );
        }
        for (key, offset) in keys {
            let found = records.get(offset as usize).and_then(|r| r["key"].as_str());
            if found != Some(key) {
                lost.push(format!(
                    "{key} at {topic}/{partition}:{offset} (found {found:?})"
                ));
            }
        }
    }
    lost
}

/// The nodes `view` names as members.
pub(crate) fn members(view: &Value) -> Vec<String> {
    view["members"]
        .as_object()
        .map(|members| members.keys().cloned().collect())
        .unwrap_or_default()
}

/// Writes keyed records from `threads` threads through random nodes of `nodes` to random
/// partitions of `topics` topics until `stop` is set, each retried with its key until
/// acknowledged; answers what was acknowledged.
pub(crate) fn load(
    nodes: Vec<SocketAddr>,
    topics: u32,
    threads: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<BTreeMap<String, (String, u32, u64)>> {
    std::thread::spawn(move || {
        let writers: Vec<_> = (0..threads)
            .map(|thread| {
                let (nodes, stop) = (nodes.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::new(u64::from(thread) + 1);
                    let mut acknowledged = BTreeMap::new();
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let topic = format!("load{}", rng.below(u64::from(topics)));
                        let partition = rng.below(u64::from(PARTITIONS)) as u32;
                        let key = format!("load-{thread}-{n}");
                        n += 1;
                        let started = Instant::now();
                        loop {
                            let node = nodes[rng.below(nodes.len() as u64) as usize];
                            match append_to(node, &topic, partition, &key) {
                                Ok(offset) => {
                                    acknowledged.insert(key, (topic, partition, offset));
                                    break;
                                }
                                Err(why) => assert!(
                                    started.elapsed() < WRITE_PATIENCE,
                                    "{key} was not acknowledged: {why}"
                                ),
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                    acknowledged
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|writer| writer.join().expect("a writer"))
            .collect()
    })
}

// ---------------------------------------------------------------------------------------------
// A node cut off in a network namespace
// ---------------------------------------------------------------------------------------------

/// A veth pair between this network namespace and [`Namespace`]'s, on subnet `10.231.{n}.0/24`:
/// `.1` here, `.2` there.
pub(crate) struct Link {
    /// This side's device, and the namespace's.
    here: &'static str,
    there: &'static str,
    n: u8,
}

impl Link {
    pub(crate) fn host_side(&self) -> String {
        format!("10.231.{}.1", self.n)
    }

    pub(crate) fn namespace_side(&self) -> String {
        format!("10.231.{}.2", self.n)
    }

    fn subnet(&self) -> String {
        format!("10.231.{}.0/24", self.n)
    }
}

/// The namespace's way to etcd, the other nodes and the clients.
pub(crate) const NETWORK: Link = Link {
    here: "dur-net-host",
    there: "dur-net-ns",
    n: 0,
};
/// The namespace's way to the bucket (through a proxy listening on this side).
pub(crate) const BUCKET: Link = Link {
    here: "dur-s3-host",
    there: "dur-s3-ns",
    n: 1,
};

/// A network namespace joined to this one by [`NETWORK`] and [`BUCKET`], made with `ip netns`
/// (root only); deleted when dropped. Taking a link down cuts what runs there off from what it
/// reaches through that link; packets are then dropped (a blackhole route), as in a real
/// partition, rather than sent to the default gateway.
pub(crate) struct Namespace {
    /// Its name, for `ip netns exec`.
    pub(crate) name: &'static str,
}

/// Runs `ip` with `args`: whether it succeeded.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether this process runs as root (`id -u` is 0).
fn root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

impl Namespace {
    /// The namespace, or `None` when not root (only root may make one). Made by one test at a
    /// time: hold [`one_cluster_at_a_time`] first.
    pub(crate) fn create() -> Option<Self> {
        if !root() {
            return None;
        }
        let namespace = Self {
            name: "durability-cut",
        };
        namespace.remove();
        let name = namespace.name;
        let made = ip(&["netns", "add", name])
            && ip(&["netns", "exec", name, "ip", "link", "set", "lo", "up"])
            && [NETWORK, BUCKET].iter().all(|link| {
                let (here, there) = (link.here, link.there);
                let (host, other) = (
                    format!("{}/24", link.host_side()),
                    format!("{}/24", link.namespace_side()),
                );
                ip(&["link", "add", here, "type", "veth", "peer", "name", there])
                    && ip(&["link", "set", there, "netns", name])
                    && ip(&["addr", "add", &host, "dev", here])
                    && ip(&["link", "set", here, "up"])
                    && ip(&["route", "add", "blackhole", &link.subnet(), "metric", "100"])
                    && ip(&[
                        "netns", "exec", name, "ip", "addr", "add", &other, "dev", there,
                    ])
                    && ip(&["netns", "exec", name, "ip", "link", "set", there, "up"])
            });
        assert!(made, "as root, `ip` could not make the network namespace");
        Some(namespace)
    }

    pub(crate) fn cut(&self, links: &[Link]) {
        for link in links {
            assert!(ip(&["link", "set", link.here, "down"]), "cut {}", link.here);
        }
    }

    /// Brings `links` back up, and waits until the namespace connects to each of `reach`
    /// (`http://host:port`) again: a link's routes come back a moment after it does.
    pub(crate) fn heal(&self, links: &[Link], reach: &[String]) {
        for link in links {
            assert!(
                ip(&["link", "set", link.here, "up"]),
                "restore {}",
                link.here
            );
        }
        for url in reach {
            let (host, port) = url
                .trim_start_matches("http://")
                .rsplit_once(':')
                .expect("host:port");
            let connect = format!("exec 3<>/dev/tcp/{host}/{port}");
            let started = Instant::now();
            while !ip(&["netns", "exec", self.name, "bash", "-c", &connect]) {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the namespace does not reach {url} again"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Removes what an earlier run may have left too. A link goes first, which removes both
    /// its ends at once (the namespace's deletion would remove them later, in the background).
    fn remove(&self) {
        for link in [NETWORK, BUCKET] {
            ip(&["link", "del", link.here]);
            ip(&["route", "del", "blackhole", &link.subnet(), "metric", "100"]);
        }
        ip(&["netns", "del", self.name]);
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.remove();
    }
}
