//! Repeated failovers of one cluster: three nodes of the default 256 volumes, one etcd member
//! and the S3 test server on this machine. Each round loads every node for [`LOAD`], kills
//! (`kill -9`) the node holding the most volumes, times the next acknowledged append on one of
//! its volumes and the survivors' view of the move, then starts the node again on its data
//! folder and times the balance. Whether a failover grows with what the cluster went through.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster::{self, DEFAULT_VOLUMES, Node};

/// Load spread over 2,048 partitions through every node before each kill.
const LOAD: Duration = Duration::from_secs(10);
/// How often the append on a moved volume, and a survivor's view, are tried after the kill.
pub(crate) const RETRY: Duration = Duration::from_millis(20);
/// Longest a failover or a move may take before the run is given up.
const PATIENCE: Duration = Duration::from_secs(120);

/// What the rounds measured.
pub struct Failovers {
    /// Volumes of the cluster.
    pub volumes: usize,
    /// Seconds of load before each kill.
    pub load_seconds: f64,
    pub rounds: Vec<Round>,
}

impl Failovers {
    /// The median (p50) and the largest of one figure of the rounds, in seconds.
    pub fn p50_max(&self, figure: fn(&Round) -> f64) -> Option<(f64, f64)> {
        let values: Vec<f64> = self.rounds.iter().map(figure).collect();
        let max = values.iter().copied().reduce(f64::max)?;
        Some((crate::report::median(values), max))
    }
}

/// One round: a spell of load, a kill, the failover, the restart.
pub struct Round {
    /// The killed node.
    pub killed: String,
    /// From the kill to the next acknowledged append on one of its volumes through a survivor.
    pub failover: f64,
    /// From the kill until a survivor's `GET /cluster` shows the two survivors alone and no
    /// volume unowned.
    pub moved: f64,
    /// From the restart of the killed node until every node sees the volumes balanced over
    /// the three.
    pub balanced: f64,
    /// Windows in the killed node's stream before the kill (its process's window PUTs).
    pub windows: f64,
    /// Answers during the load, and those that were not `2xx` (by status).
    pub answers: u64,
    pub refused: BTreeMap<u16, u64>,
}

/// Runs the section (see the module docs) with `kills` rounds.
pub fn run(binary: &Path, dir: &Path, payload: &str, kills: usize) -> Failovers {
    std::fs::create_dir_all(dir).unwrap();
    let (_s3, s3) = crate::replication::s3_server(&dir.join("s3"));
    let (_etcd, etcd) = cluster::etcd(dir);
    let name = "failovers";
    let mut nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|node| {
            Node::start(
                binary,
                &dir.join(name),
                node,
                name,
                etcd,
                s3,
                DEFAULT_VOLUMES,
            )
        })
        .collect();
    let script = cluster::loaded_script(dir, payload);
    let rounds = (0..kills)
        .map(|round| one_round(binary, &mut nodes, &script, payload, round))
        .collect();
    Failovers {
        volumes: DEFAULT_VOLUMES,
        load_seconds: LOAD.as_secs_f64(),
        rounds,
    }
}

/// Loads the balanced cluster `nodes`, kills the node holding the most volumes, waits for the
/// failover and the move, then starts it again and waits for the balance.
fn one_round(
    binary: &Path,
    nodes: &mut [Node],
    script: &Path,
    payload: &str,
    round: usize,
) -> Round {
    let owners = cluster::settled(nodes[0].address, nodes.len(), DEFAULT_VOLUMES);
    let (answers, refused) = cluster::spread_load(nodes, script, LOAD);
    eprintln!(
        "  round {}: {answers} answers, not 2xx: {refused:?}",
        round + 1
    );
    let at = cluster::most_volumes(nodes, &owners);
    let (topic, partition) = cluster::loaded_partition_of(&owners, &nodes[at].name);
    let survivor = nodes[(at + 1) % nodes.len()].address;
    let survivors = nodes.len() - 1;
    let windows = cluster::windows(nodes[at].address);
    nodes[at].kill();
    let killed = Instant::now();
    // The move is watched on a thread of its own, so that neither wait delays the other.
    let (failover, moved) = std::thread::scope(|scope| {
        let moved = scope.spawn(|| {
            while !has_moved(&cluster::view(survivor), survivors) {
                assert!(killed.elapsed() < PATIENCE, "the volumes did not move");
                std::thread::sleep(RETRY);
            }
            killed.elapsed().as_secs_f64()
        });
        while !cluster::append(survivor, &topic, partition, payload) {
            assert!(killed.elapsed() < PATIENCE, "no failover");
            std::thread::sleep(RETRY);
        }
        let failover = killed.elapsed().as_secs_f64();
        (failover, moved.join().unwrap())
    });
    let restarted = Instant::now();
    nodes[at].restart(binary);
    for node in nodes.iter() {
        cluster::settled(node.address, nodes.len(), DEFAULT_VOLUMES);
    }
    let balanced = restarted.elapsed().as_secs_f64();
    eprintln!(
        "  round {}: killed {} ({windows:.0} windows): failover {failover:.2} s, moved \
         {moved:.2} s, balanced {balanced:.2} s",
        round + 1,
        nodes[at].name
    );
    Round {
        killed: nodes[at].name.clone(),
        failover,
        moved,
        balanced,
        windows,
        answers,
        refused,
    }
}

/// Whether `view` (a node's `GET /cluster`) shows `members` members and no volume unowned: a
/// volume whose owner is not a member counts as unowned there.
fn has_moved(view: &serde_json::Value, members: usize) -> bool {
    view["members"]
        .as_object()
        .is_some_and(|found| found.len() == members)
        && view["unowned"].as_array().is_some_and(Vec::is_empty)
}
