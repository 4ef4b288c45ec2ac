//! A seeded randomized fault test in the Jepsen style: clients append, produce keyed events,
//! poll and commit, and claim and ack leases through random nodes of a three-node cluster while
//! a nemesis kills, stops and restarts nodes, kills etcd members and takes the bucket away,
//! one fault at a time or two close together. Each client keeps a history of what it was
//! acknowledged; once everything is healed, the history is checked against what the cluster
//! holds and every violation is reported at once. `CHAOS_SEED` replays a run's schedule of
//! faults (and each client's choices); `CHAOS_SECONDS` sets how long faults go on (120 s).
//! The same runs over TLS (mutual TLS between clients and nodes and between nodes, the nodes
//! proving themselves with the cluster's secret, etcd over TLS with a user), for
//! `CHAOS_TLS_SECONDS` (60 s).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durability::cold::S3Settings;
use serde_json::{Value, json};

use crate::common::bucket::Proxy;
use crate::common::cluster::{
    LEASE_TTL_MS, Node, Secured, audit, cluster_view, one_cluster_at_a_time, owners,
    read_partition_within, start_etcd, volume_holding, wait_for_owners,
};
use crate::common::etcd::Etcd;
use crate::common::process::{request, seed};
use crate::common::{Rng, block_on, fresh_s3_bucket};

/// Three topics of eight partitions: 24 partitions, over every volume.
const TOPICS: [&str; 3] = ["chaos-a", "chaos-b", "chaos-c"];
const PARTITIONS: u64 = 8;
/// Poll-and-commit groups, shared by every client so that their commits race.
const GROUPS: [&str; 2] = ["g0", "g1"];
/// The lease group, apart from the poll groups so that acks and commits do not mix.
const WORKERS: &str = "workers";
/// Short holds, so that ranges expire and are granted again within a run.
const LEASE_MS: i64 = 2000;
/// How long a write is sent again (same keys) before it is left uncertain.
const PATIENCE: Duration = Duration::from_secs(60);
const NAMES: [&str; 3] = ["a", "b", "c"];
/// The faults, each drawn while a draw below 100 is below its bound: kill -9 and restart;
/// SIGSTOP and SIGCONT (past the lease half the time); SIGTERM and restart; an etcd member
/// killed and restarted; the bucket away from one node or all; a node killed again as soon as
/// its new incarnation holds a volume; two nodes killed close together; a node stopped while
/// another is killed.
const FAULTS: [(&str, u64); 8] = [
    ("kill", 18),
    ("pause", 32),
    ("term", 42),
    ("etcd", 52),
    ("bucket", 66),
    ("kill-again", 82),
    ("kill-two", 93),
    ("pause-and-kill", 100),
];

/// The wall clock, in the unit of the servers' lease expiries.
fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.map_or(0, |since| since.as_millis() as i64)
}

/// What the clients and the nemesis share: when to stop, which nodes to send to, and when the
/// run started (the times in the messages count from there).
struct Shared {
    stop: AtomicBool,
    live: [AtomicBool; 3],
    started_ms: i64,
}

impl Shared {
    fn secs(&self, wall_ms: i64) -> f64 {
        (wall_ms - self.started_ms) as f64 / 1000.0
    }
}

/// An acknowledged record; `user` is a keyed event's partition key.
struct Write {
    topic: &'static str,
    partition: u64,
    offset: u64,
    key: String,
    user: Option<String>,
    /// Who was acknowledged, through which node, when (seconds into the run).
    by: (usize, &'static str, f64),
}

impl Write {
    fn describe(&self) -> String {
        let (client, node, at) = self.by;
        format!(
            "{} (client {client}, through {node}, at {at:.1}s)",
            self.key
        )
    }
}

/// A commit's answer for one partition, and when it was sent and answered.
struct Commit {
    at: (&'static str, &'static str, u64),
    sent_offset: u64,
    cursor: u64,
    sent: i64,
    received: i64,
}

/// How a grant ended, as far as its holder knows.
#[derive(Clone, Copy, Debug)]
enum Ack {
    Never,
    /// Answered 200: held until then, and settled since.
    Acked,
    Refused,
    Uncertain,
}

struct Grant {
    at: (&'static str, u64),
    batch: String,
    first: u64,
    last: u64,
    expires_at: i64,
    ack: Ack,
    client: usize,
}

impl Grant {
    /// The server's time at the grant: the expiry is that plus the hold.
    fn start(&self) -> i64 {
        self.expires_at - LEASE_MS
    }
}

#[derive(Default)]
struct History {
    writes: Vec<Write>,
    commits: Vec<Commit>,
    grants: Vec<Grant>,
    /// Records never acknowledged: each may or may not be in the log.
    uncertain: usize,
    /// Answers that break the API contract whatever the faults.
    violations: Vec<String>,
    /// Definite refusals (4xx) of requests expected to succeed.
    notes: Vec<String>,
    /// Each record a poll or a grant showed (topic, partition, offset, key): who saw it first,
    /// and when.
    reads: HashMap<Read, (usize, f64)>,
}

type Read = (&'static str, u64, u64, String);

/// The request writing `records` (key, and a keyed event's partition key) to `topic`: keyed
/// events, or an append to `partition`.
fn write_request(
    topic: &str,
    partition: u64,
    records: &[(String, Option<String>)],
) -> (String, Value) {
    let body = records.iter().map(|(key, user)| match user {
        Some(user) => json!({"partitionKey": user, "payload": {"key": key}, "key": key}),
        None => json!({"payload": {"key": key}, "key": key}),
    });
    let path = if records.iter().any(|(_, user)| user.is_some()) {
        format!("/topics/{topic}/records")
    } else {
        format!("/topics/{topic}/partitions/{partition}/records")
    };
    (path, body.collect())
}

/// The partition and offset of each record in a write's answer.
fn places(answer: &Value, partition: u64) -> Option<Vec<(u64, u64)>> {
    if let Some(offsets) = answer["offsets"].as_array() {
        return offsets
            .iter()
            .map(|offset| Some((partition, offset.as_u64()?)))
            .collect();
    }
    let places = answer["records"].as_array()?.iter();
    places
        .map(|place| Some((place["partition"].as_u64()?, place["offset"].as_u64()?)))
        .collect()
}

struct Client {
    id: usize,
    rng: Rng,
    nodes: Vec<SocketAddr>,
    shared: Arc<Shared>,
    history: History,
    next_key: u64,
    /// The highest cursor its commits were answered, so that it only commits forward.
    committed: HashMap<(&'static str, &'static str, u64), u64>,
}

impl Client {
    fn run(mut self) -> History {
        while !self.shared.stop.load(Ordering::SeqCst) {
            let topic = TOPICS[self.rng.below(TOPICS.len() as u64) as usize];
            match self.rng.below(100) {
                0..50 => self.write(topic, false),
                50..70 => self.write(topic, true),
                70..85 => self.poll_and_commit(topic),
                _ => self.lease(topic),
            }
        }
        self.history
    }

    /// A random node among those up now (among all when none is), or now and then any node:
    /// a client cannot tell a stopped node, whose queue then holds its request.
    fn node(&mut self) -> usize {
        let any = self.rng.below(10) == 0;
        let live = (0..3).filter(|&n| any || self.shared.live[n].load(Ordering::SeqCst));
        let live: Vec<usize> = live.collect();
        let pick = self.rng.below(live.len().max(1) as u64) as usize;
        live.get(pick).copied().unwrap_or(pick)
    }

    fn addr(&mut self) -> SocketAddr {
        let node = self.node();
        self.nodes[node]
    }

    /// Appends one to three records with fresh keys, or produces as many keyed events, through
    /// random nodes until one answers 202. A 5xx, a 408 (a node that was stopped with the
    /// request queued) or a cut exchange is uncertain: the same records (same keys) are sent
    /// again.
    fn write(&mut self, topic: &'static str, keyed: bool) {
        let partition = self.rng.below(PARTITIONS);
        let records: Vec<(String, Option<String>)> = (0..1 + self.rng.below(3))
            .map(|_| {
                self.next_key += 1;
                let user = keyed.then(|| format!("user-{}", self.rng.below(1000)));
                (format!("c{}-{}", self.id, self.next_key), user)
            })
            .collect();
        let (path, body) = write_request(topic, partition, &records);
        let started = Instant::now();
        while started.elapsed() < PATIENCE {
            let node = self.node();
            match request(self.nodes[node], "POST", &path, Some(&body)) {
                Ok((202, answer)) => {
                    let placed = places(&answer, partition).filter(|p| p.len() == records.len());
                    let Some(placed) = placed else {
                        let why = format!("{path}: {} records answered {answer}", records.len());
                        return self.history.violations.push(why);
                    };
                    let by = (self.id, NAMES[node], self.shared.secs(now_ms()));
                    for ((key, user), (partition, offset)) in records.into_iter().zip(placed) {
                        let write = Write {
                            topic,
                            partition,
                            offset,
                            key,
                            user,
                            by,
                        };
                        self.history.writes.push(write);
                    }
                    return;
                }
                Ok((status, answer)) if status < 500 && status != 408 => {
                    return self
                        .history
                        .notes
                        .push(format!("{path}: {status} {answer}"));
                }
                _ => sleep(Duration::from_millis(100)),
            }
        }
        self.history.uncertain += records.len();
    }

    /// Polls a group and commits what it read, never below what its commits were answered
    /// before: a cursor going back is then the cluster's doing.
    fn poll_and_commit(&mut self, topic: &'static str) {
        let group = GROUPS[self.rng.below(GROUPS.len() as u64) as usize];
        let (poller, committer) = (self.addr(), self.addr());
        let path = format!("/topics/{topic}/groups/{group}/poll?limit=20");
        let Ok((200, page)) = request(poller, "GET", &path, None) else {
            return;
        };
        let mut offsets = serde_json::Map::new();
        for entry in page["partitions"].as_array().into_iter().flatten() {
            let (partition, next) = (entry["partition"].as_u64(), entry["nextOffset"].as_u64());
            if let (Some(partition), Some(next)) = (partition, next) {
                self.saw(topic, partition, &entry["records"]);
                let mine = self.committed.get(&(topic, group, partition)).copied();
                offsets.insert(partition.to_string(), json!(next.max(mine.unwrap_or(0))));
            }
        }
        let (path, sent) = (format!("/topics/{topic}/groups/{group}/commit"), now_ms());
        let answer = request(
            committer,
            "POST",
            &path,
            Some(&json!({ "offsets": offsets })),
        );
        let received = now_ms();
        let cursors = match answer {
            Ok((200, answer)) => answer["cursors"].as_object().cloned().unwrap_or_default(),
            Ok((status, answer)) if status < 500 => {
                return self
                    .history
                    .notes
                    .push(format!("{path}: {status} {answer}"));
            }
            _ => return,
        };
        for (partition, cursor) in cursors {
            let sent_offset = offsets.get(&partition).and_then(Value::as_u64).unwrap_or(0);
            let (Ok(partition), Some(cursor)) = (partition.parse::<u64>(), cursor.as_u64()) else {
                continue;
            };
            let at = (topic, group, partition);
            let mine = self.committed.entry(at).or_default();
            *mine = (*mine).max(cursor);
            let commit = Commit {
                at,
                sent_offset,
                cursor,
                sent,
                received,
            };
            self.history.commits.push(commit);
        }
    }

    /// Claims a range of one partition and mostly acks it: soon, after its hold expired, or
    /// never (so that it is granted again).
    fn lease(&mut self, topic: &'static str) {
        let partition = self.rng.below(PARTITIONS);
        let (how, late) = (self.rng.below(10), self.rng.below(1500));
        let base = format!("/topics/{topic}/partitions/{partition}/groups/{WORKERS}/leases");
        let node = self.addr();
        let Ok((200, lease)) = request(node, "POST", &format!("{base}?limit=5"), None) else {
            return;
        };
        let (batch, first) = (lease["batchId"].as_str(), lease["firstOffset"].as_u64());
        let (last, expires_at) = (lease["lastOffset"].as_u64(), lease["expiresAt"].as_i64());
        let fields = (batch, first, last, expires_at);
        let (Some(batch), Some(first), Some(last), Some(expires_at)) = fields else {
            let why = format!("{base}: a grant answered {lease}");
            return self.history.violations.push(why);
        };
        self.saw(topic, partition, &lease["records"]);
        let (at, batch, client, ack) = ((topic, partition), batch.to_owned(), self.id, Ack::Never);
        let mut grant = Grant {
            at,
            batch,
            first,
            last,
            expires_at,
            ack,
            client,
        };
        if how != 0 {
            // Mostly well within the hold; one time in ten past its end.
            let hold = if how == 1 {
                LEASE_MS as u64 + late
            } else {
                late / 4
            };
            sleep(Duration::from_millis(hold));
            grant.ack = self.ack(&format!("{base}/{}/ack", grant.batch));
        }
        self.history.grants.push(grant);
    }

    /// Notes the records a poll or a grant showed: readers only ever see what the bucket holds,
    /// so each stays in the log at its offset.
    fn saw(&mut self, topic: &'static str, partition: u64, records: &Value) {
        let first = (self.id, self.shared.secs(now_ms()));
        for record in records.as_array().into_iter().flatten() {
            if let (Some(offset), Some(key)) = (record["offset"].as_u64(), record["key"].as_str()) {
                let read = (topic, partition, offset, key.to_owned());
                self.history.reads.entry(read).or_insert(first);
            }
        }
    }

    /// Acks through random nodes, again while the answer is uncertain.
    fn ack(&mut self, path: &str) -> Ack {
        let mut uncertain = false;
        for _ in 0..3 {
            match request(self.addr(), "POST", path, None) {
                Ok((200, _)) => return Ack::Acked,
                Ok((status, _)) if status < 500 && uncertain => return Ack::Uncertain,
                Ok((status, _)) if status < 500 => return Ack::Refused,
                _ => uncertain = true,
            }
            sleep(Duration::from_millis(100));
        }
        Ack::Uncertain
    }
}

/// A node whose bucket is behind `bucket` (a proxy), with short lease holds; one of a secured
/// cluster when `secured` is given.
fn start_node(
    name: &str,
    etcd: &Etcd,
    s3: &S3Settings,
    bucket: &str,
    secured: Option<&Secured>,
) -> Node {
    let local = ("127.0.0.1", None);
    let mut node = Node::unstarted(name, &etcd.endpoint, s3, bucket, LEASE_TTL_MS, local);
    if let Some(secured) = secured {
        node.secure(secured, &format!("node-{name}"));
    }
    let log = std::env::var("CHAOS_LOG").unwrap_or_else(|_| "error".to_owned());
    node.set_env("DURABILITY__LEASES__LEASE_MS", &LEASE_MS.to_string());
    node.set_env("DURABILITY__LEASES__MAX_PARALLELISM", "2");
    node.set_env("RUST_LOG", &log);
    node.restart();
    node
}

/// One step of a fault, on node (or etcd member) `n`.
#[derive(Clone, Debug)]
enum Step {
    Kill(usize),
    Start(usize),
    Stop(usize),
    Cont(usize),
    Term(usize),
    KillEtcd(usize),
    StartEtcd(usize),
    /// The bucket away from these nodes, or back.
    Bucket(Vec<usize>, bool),
    Sleep(Duration),
    /// Until the node holds a volume in its own view.
    UntilHolding(usize),
}

/// The processes under test, and what the nemesis did to them.
struct Cluster {
    nodes: Vec<Node>,
    proxies: Vec<Proxy>,
    etcd: Etcd,
    shared: Arc<Shared>,
    faults: BTreeMap<&'static str, u32>,
    self_exits: u32,
}

impl Cluster {
    fn log(&self, what: &str) {
        eprintln!("[chaos {:7.1}s] {what}", self.shared.secs(now_ms()));
    }

    /// Draws a fault (or two close together) and injects it, healing it before it returns.
    /// Every draw comes first, so that the schedule depends on the seed alone.
    fn fault(&mut self, rng: &mut Rng) {
        use Step::*;
        let draw = rng.below(100);
        let kind = FAULTS
            .iter()
            .position(|&(_, below)| draw < below)
            .unwrap_or(0);
        let x = rng.below(3) as usize;
        let y = (x + 1 + rng.below(2) as usize) % 3;
        let (short, long) = (ms(rng, 200, 3000), ms(rng, 3500, 9000));
        let (gap, quiet) = (ms(rng, 0, 1500), ms(rng, 1000, 4000));
        let (coin, toss) = (rng.below(2) == 0, rng.below(2) == 0);
        let (pause, time) = (
            if coin { long } else { short },
            if toss { short } else { long },
        );
        let cut = if coin { vec![x] } else { vec![0, 1, 2] };
        let (first, second) = if toss { (x, y) } else { (y, x) };
        let again = [Kill(x), Sleep(short), Start(x)];
        let steps = match kind {
            0 => again.to_vec(),
            1 => vec![Stop(x), Sleep(pause), Cont(x)],
            2 => vec![Term(x), Sleep(short), Start(x)],
            3 => vec![KillEtcd(x), Sleep(long), StartEtcd(x)],
            4 => vec![Bucket(cut.clone(), true), Sleep(time), Bucket(cut, false)],
            5 => [&again[..], &[UntilHolding(x), Sleep(gap / 2)], &again[..]].concat(),
            6 => vec![
                Kill(x),
                Sleep(gap),
                Kill(y),
                Sleep(short),
                Start(first),
                Start(second),
            ],
            _ => vec![Stop(x), Sleep(gap), Kill(y), Sleep(long), Cont(x), Start(y)],
        };
        let name = FAULTS[kind].0;
        self.log(&format!("{name}: {steps:?}"));
        *self.faults.entry(name).or_default() += 1;
        steps.into_iter().for_each(|step| self.step(step));
        self.reap();
        sleep(quiet);
        self.reap();
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Kill(n) => self.kill(n),
            Step::Start(n) => self.start(n),
            Step::Stop(n) => self.signal(n, "STOP"),
            Step::Cont(n) => self.signal(n, "CONT"),
            Step::Term(n) => {
                self.signal(n, "TERM");
                let server = self.nodes[n].server.as_mut();
                let status =
                    server.and_then(|server| server.wait_for_exit(Duration::from_secs(30)));
                self.log(&format!("{} stopped on SIGTERM: {status:?}", NAMES[n]));
                self.kill(n);
            }
            Step::KillEtcd(n) => self.etcd.kill(n),
            Step::StartEtcd(n) => self.start_etcd(n),
            Step::Bucket(nodes, away) => nodes
                .into_iter()
                .for_each(|n| self.proxies[n].set_down(away)),
            Step::Sleep(time) => sleep(time),
            Step::UntilHolding(n) => {
                let started = Instant::now();
                let holds = |view: Value| owners(&view).values().any(|owner| owner == NAMES[n]);
                while !cluster_view(self.nodes[n].addr()).is_some_and(holds)
                    && started.elapsed().as_secs() < 30
                {
                    sleep(Duration::from_millis(20));
                }
                self.log(&format!(
                    "{} holds a volume {:?} after its start",
                    NAMES[n],
                    started.elapsed()
                ));
            }
        }
    }

    fn kill(&mut self, n: usize) {
        self.shared.live[n].store(false, Ordering::SeqCst);
        if let Some(mut server) = self.nodes[n].server.take()
            && server.wait_for_exit(Duration::from_millis(1)).is_none()
        {
            server.kill();
        }
    }

    /// Starts node `n` again, a few times if its process exits before it listens.
    fn start(&mut self, n: usize) {
        self.kill(n);
        for attempt in 1.. {
            let node = &mut self.nodes[n];
            if catch_unwind(AssertUnwindSafe(|| node.restart())).is_ok() {
                break;
            }
            assert!(attempt < 5, "node {} does not start again", NAMES[n]);
            sleep(Duration::from_secs(1));
        }
        self.shared.live[n].store(true, Ordering::SeqCst);
    }

    fn signal(&mut self, n: usize, signal: &str) {
        self.shared.live[n].store(signal == "CONT", Ordering::SeqCst);
        if let Some(server) = &self.nodes[n].server {
            server.signal(signal);
        }
    }

    /// Starts again every node that stopped by itself (having lost its lease: status 3).
    /// `wait_for_exit(ZERO)` would not look at all, hence a millisecond.
    fn reap(&mut self) {
        for (n, name) in NAMES.iter().enumerate() {
            let server = self.nodes[n].server.as_mut();
            let exited = server.and_then(|server| server.wait_for_exit(Duration::from_millis(1)));
            if let Some(status) = exited {
                self.self_exits += 1;
                self.log(&format!(
                    "{name} exited by itself ({status}); starting it again"
                ));
                self.start(n);
            }
        }
    }

    /// Starts etcd member `member` again over its data folder.
    fn start_etcd(&mut self, member: usize) {
        if !self.etcd.restart(member) {
            self.log(&format!(
                "etcd member {member} does not serve 30 s after its start"
            ));
        }
    }

    /// Everything back up, then the three nodes owning every volume for a lease's length in a
    /// row, starting again meanwhile the nodes that stop by themselves (a node whose stream a
    /// take sealed stops). Why not, after two minutes.
    fn settle(&mut self) -> Result<(), String> {
        self.proxies.iter().for_each(|proxy| proxy.set_down(false));
        let down: Vec<usize> = (0..3).filter(|&n| self.nodes[n].server.is_none()).collect();
        down.into_iter().for_each(|n| self.start(n));
        let (started, mut calm, mut view) = (Instant::now(), Instant::now(), None);
        while started.elapsed() < Duration::from_secs(120) {
            let exits = self.self_exits;
            self.reap();
            view = cluster_view(self.nodes[0].addr());
            let members = view
                .as_ref()
                .and_then(|view| view["members"].as_object().map(|m| m.len()));
            let owned = view
                .as_ref()
                .is_some_and(|view| view["unowned"] == json!([]));
            if members != Some(3) || !owned || exits != self.self_exits {
                calm = Instant::now();
            } else if calm.elapsed() >= Duration::from_millis(LEASE_TTL_MS) {
                return Ok(());
            }
            sleep(Duration::from_millis(200));
        }
        Err(format!(
            "the cluster did not settle within 120 s of healing: {view:?}"
        ))
    }
}

fn ms(rng: &mut Rng, low: u64, high: u64) -> Duration {
    Duration::from_millis(low + rng.below(high - low))
}

/// Every record of a partition through `node`, or why not.
fn read_all(node: SocketAddr, topic: &str, partition: u64) -> Result<Vec<Value>, String> {
    read_partition_within(node, topic, partition as u32, PATIENCE)
}

/// A partition and its volume, to match a violation with the faults of the volume's owners.
fn place(topic: &str, partition: u64) -> String {
    let volume = volume_holding(topic, partition as u32);
    format!("{topic}/{partition} (volume {volume})")
}

/// Invariants 1 to 3: no offset was acknowledged to two keys; each partition, read through a,
/// runs from 0 without a gap, holds each key once, each acknowledged record at its offset and
/// each record read (polled or leased) at the offset it was read at; b and c read the same.
fn check_log(nodes: &[SocketAddr], history: &History, violations: &mut Vec<String>) {
    let mut read: BTreeMap<(&str, u64), Vec<_>> = BTreeMap::new();
    for ((topic, partition, offset, key), first) in &history.reads {
        read.entry((*topic, *partition))
            .or_default()
            .push((*offset, key, *first));
    }
    let mut by_partition: BTreeMap<(&str, u64), Vec<&Write>> = BTreeMap::new();
    let mut by_offset: HashMap<(&str, u64, u64), &Write> = HashMap::new();
    let mut writes: Vec<&Write> = history.writes.iter().collect();
    writes.sort_by(|one, other| one.by.2.total_cmp(&other.by.2));
    for write in writes {
        by_partition
            .entry((write.topic, write.partition))
            .or_default()
            .push(write);
        let earlier = by_offset.insert((write.topic, write.partition, write.offset), write);
        if let Some(earlier) = earlier.filter(|earlier| earlier.key != write.key) {
            let (at, offset) = (place(write.topic, write.partition), write.offset);
            let (one, other) = (earlier.describe(), write.describe());
            violations.push(format!(
                "{at} offset {offset}: acknowledged to {one} and to {other}"
            ));
        }
    }
    for (topic, partition) in TOPICS
        .iter()
        .flat_map(|&topic| (0..PARTITIONS).map(move |p| (topic, p)))
    {
        let at = place(topic, partition);
        let reads: Vec<_> = nodes
            .iter()
            .map(|&node| read_all(node, topic, partition))
            .collect();
        for (name, read) in NAMES.iter().zip(&reads) {
            match (read, &reads[0]) {
                (Err(why), _) => violations.push(format!("{at}: unreadable through {name}: {why}")),
                (Ok(other), Ok(records)) if other != records => {
                    let (count, first) = (other.len(), records.len());
                    violations.push(format!(
                        "{at}: {count} records through {name}, {first} through a"
                    ));
                }
                _ => {}
            }
        }
        let Ok(records) = &reads[0] else { continue };
        let (mut seen, mut misplaced) = (BTreeMap::<&str, Vec<usize>>::new(), Vec::new());
        for (offset, record) in records.iter().enumerate() {
            let key = record["key"].as_str().unwrap_or("");
            seen.entry(key).or_default().push(offset);
            if record["offset"].as_u64() != Some(offset as u64) {
                misplaced.push(record);
            }
            if record["payload"] != json!({ "key": key }) {
                violations.push(format!("{at}: record {offset} is none written: {record}"));
            }
        }
        if let Some(first) = misplaced.first() {
            let count = misplaced.len();
            let gap = format!("offsets not contiguous from 0: {count} records out of place");
            violations.push(format!("{at}: {gap}, the first {first}"));
        }
        for (key, offsets) in seen.iter().filter(|(_, offsets)| offsets.len() > 1) {
            violations.push(format!(
                "{at}: {key} is in the log {} times: at {offsets:?}",
                offsets.len()
            ));
        }
        for write in by_partition.get(&(topic, partition)).into_iter().flatten() {
            let found = records
                .get(write.offset as usize)
                .and_then(|record| record["key"].as_str());
            if found != Some(write.key.as_str()) {
                let elsewhere = seen
                    .get(write.key.as_str())
                    .map_or("nowhere".to_owned(), |at| format!("at {at:?}"));
                let (what, offset, count) = (write.describe(), write.offset, records.len());
                let holds = format!("it holds {found:?} of {count} records");
                violations.push(format!(
                    "{at}: lost {what} at offset {offset}: {holds}; the key is {elsewhere}"
                ));
            }
        }
        let mut shown = read.remove(&(topic, partition)).unwrap_or_default();
        shown.sort_by_key(|(offset, key, _)| (*offset, *key));
        for (offset, key, (client, when)) in shown {
            let found = records
                .get(offset as usize)
                .and_then(|record| record["key"].as_str());
            if found != Some(key.as_str()) {
                let what =
                    format!("{key} read at offset {offset} (client {client}, at {when:.1}s)");
                violations.push(format!("{at}: {what} is gone: the offset holds {found:?}"));
            }
        }
    }
}

/// Invariant 4: a sample of acknowledged records, sent again, answer their first places.
fn check_resend(
    nodes: &[SocketAddr],
    writes: &[Write],
    rng: &mut Rng,
    violations: &mut Vec<String>,
) {
    for n in 0..writes.len().min(40) {
        let write = &writes[rng.below(writes.len() as u64) as usize];
        let records = [(write.key.clone(), write.user.clone())];
        let (path, body) = write_request(write.topic, write.partition, &records);
        let mut answer = request(nodes[n % 3], "POST", &path, Some(&body));
        for _ in 0..20 {
            if matches!(answer, Ok((status, _)) if status < 500) {
                break;
            }
            sleep(Duration::from_millis(500));
            answer = request(nodes[n % 3], "POST", &path, Some(&body));
        }
        let placed = match &answer {
            Ok((202, body)) => places(body, write.partition),
            _ => None,
        };
        if placed != Some(vec![(write.partition, write.offset)]) {
            let at = place(write.topic, write.partition);
            let (what, offset) = (write.describe(), write.offset);
            let answer = match answer {
                Ok((202, _)) => format!("(partition, offset) {placed:?}"),
                other => format!("{other:?}"),
            };
            violations.push(format!(
                "{at}: {what} sent again answers {answer}, not offset {offset}"
            ));
        }
    }
}

/// Invariant 5: no commit answers below what it committed, nor below a cursor answered before
/// it was sent; the cursors kept at the end are at least every cursor answered.
fn check_commits(
    node: SocketAddr,
    commits: &[Commit],
    shared: &Shared,
    violations: &mut Vec<String>,
) {
    let mut by_cursor: BTreeMap<(&str, &str, u64), Vec<&Commit>> = BTreeMap::new();
    for commit in commits {
        by_cursor.entry(commit.at).or_default().push(commit);
    }
    for ((topic, group, partition), mut sent) in by_cursor {
        let at = format!("{} group {group}", place(topic, partition));
        let mut answered = sent.clone();
        answered.sort_by_key(|commit| commit.received);
        sent.sort_by_key(|commit| commit.sent);
        let (mut before, mut highest): (usize, Option<&Commit>) = (0, None);
        for later in sent {
            if later.cursor < later.sent_offset {
                let (offset, cursor) = (later.sent_offset, later.cursor);
                violations.push(format!("{at}: a commit of {offset} answered {cursor}"));
            }
            for earlier in answered[before..]
                .iter()
                .take_while(|earlier| earlier.received < later.sent)
            {
                before += 1;
                highest = highest
                    .filter(|high| high.cursor >= earlier.cursor)
                    .or(Some(*earlier));
            }
            if let Some(high) = highest.filter(|high| later.cursor < high.cursor) {
                let (then, now) = (shared.secs(high.received), shared.secs(later.sent));
                let (was, is) = (high.cursor, later.cursor);
                let back = format!("cursor back from {was} (answered at {then:.1}s)");
                violations.push(format!("{at}: {back} to {is} (sent at {now:.1}s)"));
            }
        }
        let path = format!("/topics/{topic}/partitions/{partition}/cursors");
        let kept = match request(node, "GET", &path, None) {
            Ok((200, body)) => body["cursors"][group].as_u64(),
            _ => None,
        };
        let high = answered
            .iter()
            .map(|commit| commit.cursor)
            .max()
            .unwrap_or(0);
        // No cursor at all is 0: a commit of 0 to an empty partition stores none.
        if kept.unwrap_or(0) < high {
            let end = format!("{at}: the cursor reads {kept:?} at the end");
            violations.push(format!("{end}, after a commit answered {high}"));
        }
    }
}

/// Invariant 6: no two grants of overlapping ranges were held at once. A grant is held from its
/// start to its expiry; one acked (200) was held until the ack took effect, after which its
/// range is settled and never granted again.
fn check_leases(grants: &[Grant], shared: &Shared, violations: &mut Vec<String>) {
    let mut by_partition: BTreeMap<(&str, u64), Vec<&Grant>> = BTreeMap::new();
    for grant in grants {
        by_partition.entry(grant.at).or_default().push(grant);
    }
    let describe = |grant: &Grant| {
        let (start, end) = (shared.secs(grant.start()), shared.secs(grant.expires_at));
        let held = format!("client {}, held {start:.3}s..{end:.3}s", grant.client);
        let (batch, first, last) = (&grant.batch, grant.first, grant.last);
        format!("{batch} [{first}..={last}] ({held}, {:?})", grant.ack)
    };
    for ((topic, partition), mut list) in by_partition {
        list.sort_by_key(|grant| grant.start());
        for (n, earlier) in list.iter().enumerate() {
            let overlapping = list[n + 1..]
                .iter()
                .filter(|later| later.first <= earlier.last && earlier.first <= later.last);
            for later in overlapping {
                let why = match earlier.ack {
                    _ if later.start() < earlier.expires_at => "held twice at once",
                    Ack::Acked => "an acked range granted again",
                    _ => continue,
                };
                let (at, one, other) =
                    (place(topic, partition), describe(earlier), describe(later));
                violations.push(format!("{at} group {WORKERS}: {why}: {one} and {other}"));
            }
        }
    }
}

fn message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic.downcast_ref::<&str>().map(|text| (*text).to_owned());
    text.or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Sets `stop` when dropped, so that the clients end when the nemesis panics too.
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
    }
}

/// Runs the clients and the nemesis for `seconds`, heals, and checks: the violations, and a
/// summary line. A secured cluster (see [`Secured`]) when `secured`.
fn run(seed: u64, seconds: u64, secured: bool) -> (Vec<String>, String) {
    let _alone = one_cluster_at_a_time();
    let begun = Instant::now();
    let secured = secured.then(Secured::new);
    let etcd = match &secured {
        Some(secured) => secured.start_etcd(3),
        None => start_etcd(3),
    };
    let s3 = block_on(fresh_s3_bucket());
    let proxies: Vec<Proxy> = NAMES.iter().map(|_| Proxy::start(&s3.endpoint)).collect();
    let start = |(name, proxy): (&&str, &Proxy)| {
        start_node(name, &etcd, &s3, &proxy.url(), secured.as_ref())
    };
    let nodes: Vec<Node> = NAMES.iter().zip(&proxies).map(start).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::addr).collect();
    wait_for_owners(addrs[0], 3);
    let live = [(); 3].map(|()| AtomicBool::new(true));
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        live,
        started_ms: now_ms(),
    });
    let _stop = StopOnDrop(shared.clone());
    let mut rng = Rng::new(seed);
    let client_count = 2 + rng.below(3) as usize;
    let clients: Vec<_> = (0..client_count)
        .map(|id| {
            let rng = Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
            let (nodes, shared, history) = (addrs.clone(), shared.clone(), History::default());
            let client = Client {
                id,
                rng,
                nodes,
                shared,
                history,
                next_key: 0,
                committed: HashMap::new(),
            };
            std::thread::spawn(move || client.run())
        })
        .collect();
    let (faults, self_exits) = (BTreeMap::new(), 0);
    let mut cluster = Cluster {
        nodes,
        proxies,
        etcd,
        shared: shared.clone(),
        faults,
        self_exits,
    };
    cluster.log(&format!(
        "{client_count} clients; nodes 0, 1, 2 are a, b, c"
    ));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        cluster.fault(&mut rng);
    }
    cluster.log("healing");
    let mut violations: Vec<String> = cluster.settle().err().into_iter().collect();
    shared.stop.store(true, Ordering::SeqCst);
    let mut history = History::default();
    for client in clients {
        let mut part = client.join().expect("a client");
        history.writes.append(&mut part.writes);
        history.commits.append(&mut part.commits);
        history.grants.append(&mut part.grants);
        history.violations.append(&mut part.violations);
        history.notes.append(&mut part.notes);
        history.reads.extend(part.reads);
        history.uncertain += part.uncertain;
    }
    violations.extend(cluster.settle().err());
    violations.append(&mut history.violations);
    cluster.log("checking");
    check_log(&addrs, &history, &mut violations);
    check_resend(&addrs, &history.writes, &mut rng, &mut violations);
    check_commits(addrs[0], &history.commits, &shared, &mut violations);
    check_leases(&history.grants, &shared, &mut violations);
    if let Err(panic) = catch_unwind(|| audit(&s3)) {
        violations.push(format!("the bucket audit: {}", message(panic.as_ref())));
    }
    for note in history.notes.iter().take(20) {
        eprintln!("chaos: a definite refusal: {note}");
    }
    let grants = &history.grants;
    let acked = grants
        .iter()
        .filter(|grant| matches!(grant.ack, Ack::Acked));
    let summary = format!(
        "chaos summary: CHAOS_SEED={seed} seconds={seconds} tls={} run={:.0}s \
         clients={client_count} faults={:?} self-exits={} acknowledged-writes={} \
         uncertain-writes={} commits={} grants={} acked-grants={} refusals={} violations={}",
        secured.is_some(),
        begun.elapsed().as_secs_f64(),
        cluster.faults,
        cluster.self_exits,
        history.writes.len(),
        history.uncertain,
        history.commits.len(),
        grants.len(),
        acked.count(),
        history.notes.len(),
        violations.len(),
    );
    (violations, summary)
}

/// Acknowledged records, cursors and leases survive random faults (see the module's comment).
#[test]
fn acknowledged_work_survives_random_faults() {
    check_a_run("CHAOS_SECONDS", 120, false);
}

/// The same in a secured cluster: TLS everywhere, the nodes proving themselves to one another.
#[test]
fn acknowledged_work_survives_random_faults_over_tls() {
    check_a_run("CHAOS_TLS_SECONDS", 60, true);
}

/// Runs the test for the seconds in environment variable `variable` (`default` without it),
/// and fails with every violation it found.
fn check_a_run(variable: &str, default: u64, secured: bool) {
    let seed = seed("CHAOS_SEED");
    let seconds =
        std::env::var(variable).map_or(default, |s| s.trim().parse().expect("{variable}: seconds"));
    eprintln!("chaos: CHAOS_SEED={seed} {variable}={seconds}");
    let (violations, summary) = match catch_unwind(|| run(seed, seconds, secured)) {
        Ok(outcome) => outcome,
        Err(panic) => panic!("CHAOS_SEED={seed}: {}", message(panic.as_ref())),
    };
    for violation in &violations {
        eprintln!("chaos violation: {violation}");
    }
    eprintln!("{summary}");
    let first: Vec<&String> = violations.iter().take(20).collect();
    let count = violations.len();
    assert!(
        violations.is_empty(),
        "CHAOS_SEED={seed}: {count} violations, the first: {first:#?}\n{summary}"
    );
}
