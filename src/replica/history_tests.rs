//! A property test of the volumes' histories in the bucket: random schedules of writes,
//! landings, takes (back to a node that released, or from a live owner), releases, kills,
//! snapshots, garbage collections and batches, with bucket faults injected (a failed request,
//! a lost answer, a crash before or after a request) and pairs of operations interleaved call
//! by call. The real `Node` (claim, take through `Taker`, release, snapshot and collection),
//! the stream's `store` and `store_batch` run over an in-memory bucket, each node with real
//! local copies (SQLite files) in a folder of its own that survives its kills; writes carry
//! real redo, committed to the writer's copy before their window lands, as a volume commits.
//!
//! A model tracks what the stream writer does (windows in seq order, a few stored at once,
//! answered in seq order, stopped by a fence) and which writes were acknowledged. After every
//! take, each copy taken holds every acknowledged write of its volume and every write an
//! earlier take served, nothing whose window never landed, and its last write last; after
//! every step the bucket is audited (fences never deleted, every window a closed segment
//! names is there, no gap before a stream's fence in what a history needs, manifests'
//! versions and epochs grow). At the end a fresh node takes every volume and the same checks
//! run.
//!
//! What a node's cluster does is modelled as far as the histories see it: a node takes only
//! volumes it does not serve, retries a failed take in the same incarnation, is stopped (a new
//! incarnation) when a release fails, and may still take volumes after its stream met a fence,
//! before its cluster stops it (see [`Sim::sealed_nodes_take`]). Collections run with no grace time, so two operations whose
//! safety rests on the grace are not drawn together (see [`Resolved::needs_the_grace`]). The
//! failures it found are kept as regression tests below.
//!
//! `DURABILITY_HISTORY_CASES` sets the number of schedules and `DURABILITY_HISTORY_SEED` the
//! seed, for a longer exploration. A schedule replays the same but where a crash cuts a
//! collection short: a collection deletes in no fixed order.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::Node;
use super::format::{Keys, Manifest, Window, is_fence};
use crate::cold::s3::Objects;
use crate::cold::s3::memory::{Answer, Call, Fault, Faults, MemoryBucket};
use crate::config::{ReplicationKind, ReplicationSettings};
use crate::store::{LocalCopy, Position, Volume};
use crate::sync::lock;

/// The nodes of a schedule; a fresh node of another name takes every volume at its end.
const NODES: [&str; 3] = ["a", "b", "c"];
const CHECKER: &str = "z";
const VOLUMES: usize = 3;
const PREFIX: &str = "replica";

/// What begins a window and a fence (see `format.rs`).
const WINDOW_MAGIC: &[u8] = b"DURABILITY-WINDOW-1\n";
const FENCE_MAGIC: &[u8] = b"DURABILITY-FENCE-1\n";

/// A node's replication settings for the tests of histories: snapshots and collections run
/// when a test says so, and delete at once.
pub(super) fn settings(node: &str) -> ReplicationSettings {
    ReplicationSettings {
        kind: ReplicationKind::S3,
        prefix: PREFIX.to_owned(),
        node_id: node.to_owned(),
        commit_linger_ms: 0,
        max_window_bytes: 1 << 20,
        max_puts_in_flight: super::MAX_PUTS_IN_FLIGHT,
        put_retry_ms: 10_000,
        // Snapshots and collections run when a schedule says so, never by themselves.
        snapshot_bytes: u64::MAX,
        snapshot_interval_ms: u64::MAX,
        snapshot_windows: u64::MAX,
        gc_grace_ms: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------------

/// A fault injected at one call of an operation (its `at`-th, from 1).
#[derive(Debug, Clone, Copy)]
struct Injected {
    at: u32,
    fault: Fault,
}

/// An operation that may run alone or together with another one. `volume` and `node` name
/// where the search for one it applies to starts (the first volume some node serves, the first
/// node with a window to store); `holder` and `pick` choose among those that fit.
#[derive(Debug, Clone)]
enum Act {
    /// Node `node` takes the volumes of bitmask `volumes` it does not serve.
    Take {
        node: usize,
        volumes: u8,
    },
    /// A node serving `volume` hands it off, once its windows landed.
    Release {
        volume: usize,
        holder: usize,
    },
    /// A node serving `volume` snapshots it, then collects garbage.
    Snapshot {
        volume: usize,
        holder: usize,
    },
    Collect {
        node: usize,
    },
    /// Node `node` stores one of its windows that may be stored now.
    Land {
        node: usize,
        pick: usize,
    },
}

/// One step of a schedule (`volume` and `holder` as in [`Act`]).
#[derive(Debug, Clone)]
enum Step {
    /// A node serving `volume` commits a write to it (and to `also` when it serves that too),
    /// in a new window or in its newest one not being stored (`join`).
    Write {
        volume: usize,
        holder: usize,
        also: Option<usize>,
        join: bool,
    },
    /// Node `node`'s windows all land, in order.
    Flush {
        node: usize,
    },
    /// A window that was in flight when its writer stopped lands now.
    Zombie {
        pick: usize,
    },
    /// Node `node` stops and starts again as a new incarnation, with its disk (`wipe`: on an
    /// empty one). Windows not landed are lost, those in flight may land later.
    Kill {
        node: usize,
        wipe: bool,
    },
    /// Node `node` stores up to `len` of its acknowledged windows again as a batch.
    Batch {
        node: usize,
        len: usize,
    },
    One(Act, Option<Injected>),
    /// Two operations at once, their calls interleaved as `seed` draws.
    Pair(Act, Option<Injected>, Act, Option<Injected>, u64),
}

fn act() -> impl Strategy<Value = Act> {
    let node = 0..NODES.len();
    let volume = 0..VOLUMES;
    prop_oneof![
        3 => (node.clone(), 1u8..(1 << VOLUMES))
            .prop_map(|(node, volumes)| Act::Take { node, volumes }),
        2 => (volume.clone(), 0..NODES.len())
            .prop_map(|(volume, holder)| Act::Release { volume, holder }),
        2 => (volume, 0..NODES.len())
            .prop_map(|(volume, holder)| Act::Snapshot { volume, holder }),
        1 => node.clone().prop_map(|node| Act::Collect { node }),
        3 => (node, 0..16usize).prop_map(|(node, pick)| Act::Land { node, pick }),
    ]
}

fn injected() -> impl Strategy<Value = Option<Injected>> {
    let fault = prop_oneof![
        Just(Fault::Fail),
        Just(Fault::LoseAnswer),
        Just(Fault::Hang),
        Just(Fault::HangAfter),
    ];
    prop_oneof![
        8 => Just(None),
        1 => (1u32..12, fault).prop_map(|(at, fault)| Some(Injected { at, fault })),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let node = 0..NODES.len();
    let volume = 0..VOLUMES;
    prop_oneof![
        9 => (volume.clone(), 0..NODES.len(), proptest::option::weighted(0.3, volume), any::<bool>())
            .prop_map(|(volume, holder, also, join)| Step::Write { volume, holder, also, join }),
        3 => node.clone().prop_map(|node| Step::Flush { node }),
        1 => (0..8usize).prop_map(|pick| Step::Zombie { pick }),
        1 => (node.clone(), proptest::bool::weighted(0.2))
            .prop_map(|(node, wipe)| Step::Kill { node, wipe }),
        1 => (node, 1..8usize).prop_map(|(node, len)| Step::Batch { node, len }),
        6 => (act(), injected()).prop_map(|(act, fault)| Step::One(act, fault)),
        3 => (act(), injected(), act(), injected(), any::<u64>())
            .prop_map(|(a, fa, b, fb, seed)| Step::Pair(a, fa, b, fb, seed)),
    ]
}

/// A schedule: how many windows a stream stores at once, and its steps.
fn schedule() -> impl Strategy<Value = (u64, Vec<Step>)> {
    (
        prop_oneof![Just(1u64), Just(2), Just(4), Just(16)],
        proptest::collection::vec(step(), 1..64),
    )
}

// ---------------------------------------------------------------------------------------------
// Faults: which call of which running operation fails, and how calls interleave
// ---------------------------------------------------------------------------------------------

tokio::task_local! {
    /// The slot (0 or 1) of the running operation a bucket call comes from.
    static SLOT: usize;
}

#[derive(Default)]
struct Plan(Mutex<PlanState>);

#[derive(Default)]
struct PlanState {
    slots: [Slot; 2],
    /// Nodes stopped by a hang: every later call of theirs hangs too.
    crashed: BTreeSet<usize>,
    /// The calls that hung, for the trace.
    hung: Vec<String>,
}

#[derive(Default, Clone, Copy)]
struct Slot {
    node: usize,
    calls: u32,
    fault: Option<Injected>,
    /// Xorshift state drawing the yields before each call (0: none).
    rng: u64,
    injected: bool,
}

impl Plan {
    fn state(&self) -> MutexGuard<'_, PlanState> {
        lock(&self.0)
    }

    fn arm(&self, slot: usize, node: usize, fault: Option<Injected>, seed: u64) {
        self.state().slots[slot] = Slot {
            node,
            calls: 0,
            fault,
            rng: seed,
            injected: false,
        };
    }

    fn crashed(&self, node: usize) -> bool {
        self.state().crashed.contains(&node)
    }

    /// The nodes that crashed, and the calls they crashed at.
    fn take_crashed(&self) -> (BTreeSet<usize>, Vec<String>) {
        let mut state = self.state();
        (
            std::mem::take(&mut state.crashed),
            std::mem::take(&mut state.hung),
        )
    }

    /// Whether slot `slot`'s fault was injected since it was armed.
    fn injected(&self, slot: usize) -> bool {
        self.state().slots[slot].injected
    }
}

struct Hook(Arc<Plan>);

impl Faults for Hook {
    fn answer(&self, _call: &Call<'_>) -> Answer {
        let Ok(slot) = SLOT.try_with(|slot| *slot) else {
            return Answer::default();
        };
        let mut state = self.0.state();
        if state.crashed.contains(&state.slots[slot].node) {
            return Answer {
                yields: 0,
                fault: Some(Fault::Hang),
            };
        }
        let slot = &mut state.slots[slot];
        slot.calls += 1;
        let fault = slot
            .fault
            .filter(|injected| injected.at == slot.calls)
            .map(|injected| injected.fault);
        slot.injected |= fault.is_some();
        let yields = if slot.rng == 0 {
            0
        } else {
            slot.rng ^= slot.rng << 13;
            slot.rng ^= slot.rng >> 7;
            slot.rng ^= slot.rng << 17;
            (slot.rng % 3) as u32
        };
        Answer { yields, fault }
    }

    fn hangs(&self, call: &Call<'_>) {
        if let Ok(slot) = SLOT.try_with(|slot| *slot) {
            let mut state = self.0.state();
            let node = state.slots[slot].node;
            if state.crashed.insert(node) {
                state.hung.push(format!(
                    "  {} crashed at {:?} {}",
                    NODES[node], call.op, call.key
                ));
            }
        }
    }
}

/// Runs `op` as slot `slot`'s operation, on node `node`: `None` when the node crashed (a call
/// hung), which drops the operation where it stood.
async fn in_slot<T>(
    plan: &Plan,
    slot: usize,
    node: usize,
    op: impl Future<Output = T>,
) -> Option<T> {
    SLOT.scope(slot, async move {
        let mut op = std::pin::pin!(op);
        std::future::poll_fn(|cx| match op.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if plan.crashed(node) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        })
        .await
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Landing {
    Waiting,
    Storing,
    Landed,
    /// Its key held a fence: the stream stops.
    Refused,
}

/// A window of a node's stream not answered yet.
struct Pending {
    /// Each write: its volume, its id and its redo.
    changes: Vec<(usize, i64, Arc<[u8]>)>,
    /// As stored (encoded when its storing starts, with the volumes' epochs then).
    bytes: Option<Arc<[u8]>>,
    landing: Landing,
}

impl Pending {
    fn encode(&mut self, node: &Node, at: &Position) -> Arc<[u8]> {
        self.bytes
            .get_or_insert_with(|| {
                let changes: Vec<(usize, u64, &[u8])> = self
                    .changes
                    .iter()
                    .map(|(volume, _, redo)| {
                        (
                            *volume,
                            node.epochs[*volume].load(Ordering::SeqCst),
                            &redo[..],
                        )
                    })
                    .collect();
                Window::encode(at, &changes).into()
            })
            .clone()
    }

    fn writes(&self) -> Vec<(usize, i64)> {
        self.changes
            .iter()
            .map(|(volume, id, _)| (*volume, *id))
            .collect()
    }
}

/// A node's current incarnation, as the model sees it.
struct NodeSim {
    name: &'static str,
    dir: PathBuf,
    node: Arc<Node>,
    next_seq: u64,
    pending: BTreeMap<u64, Pending>,
    /// Its stream met a fence: it lands nothing more.
    stopped: bool,
    /// The volumes it serves (taken, not released).
    attached: BTreeSet<usize>,
    /// The files of those it wrote, open as a served volume's is.
    open: BTreeMap<usize, LocalCopy>,
    /// Acknowledged windows not in a batch yet, consecutive.
    unbatched: Vec<(u64, Arc<[u8]>)>,
}

impl NodeSim {
    /// The oldest window not answered: where its stream's windows in flight start.
    fn front(&self) -> u64 {
        self.pending.keys().next().copied().unwrap_or(self.next_seq)
    }
}

/// A window that was in flight when its writer stopped, and may still land.
struct Zombie {
    key: String,
    bytes: Arc<[u8]>,
    writes: Vec<(usize, i64)>,
}

#[derive(Default)]
struct VolumeModel {
    /// Writes answered to their callers.
    acked: BTreeSet<i64>,
    /// Writes whose window is (or was) in the bucket.
    landed: BTreeSet<i64>,
    /// Writes a take's copy held: readers may have seen them.
    served: BTreeSet<i64>,
}

/// What the schedules did, summed.
#[derive(Debug, Default, Clone)]
struct Stats {
    schedules: u64,
    steps: u64,
    takes: u64,
    /// Takes of a volume the taker's incarnation released before.
    take_backs: u64,
    /// Takes of a volume a live incarnation still served.
    steals: u64,
    failed_takes: u64,
    releases: u64,
    failed_releases: u64,
    kills: u64,
    crashes: u64,
    faults: u64,
    pairs: u64,
    writes: u64,
    windows: u64,
    acked: u64,
    zombies: u64,
    batches: u64,
    fences: u64,
    /// Fences a stream's own incarnation wrote (it sealed itself).
    self_fences: u64,
    snapshots: u64,
    deleted: u64,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.schedules += other.schedules;
        self.steps += other.steps;
        self.takes += other.takes;
        self.take_backs += other.take_backs;
        self.steals += other.steals;
        self.failed_takes += other.failed_takes;
        self.releases += other.releases;
        self.failed_releases += other.failed_releases;
        self.kills += other.kills;
        self.crashes += other.crashes;
        self.faults += other.faults;
        self.pairs += other.pairs;
        self.writes += other.writes;
        self.windows += other.windows;
        self.acked += other.acked;
        self.zombies += other.zombies;
        self.batches += other.batches;
        self.fences += other.fences;
        self.self_fences += other.self_fences;
        self.snapshots += other.snapshots;
        self.deleted += other.deleted;
    }

    fn count_node(&mut self, node: &Node) {
        self.snapshots += node.counters.snapshots();
        self.deleted += node.counters.deleted();
    }
}

struct State {
    nodes: Vec<NodeSim>,
    volumes: Vec<VolumeModel>,
    zombies: Vec<Zombie>,
    next_write: i64,
    /// Every fence seen in the bucket.
    fences: BTreeSet<String>,
    /// Each volume's manifest as last seen.
    manifests: BTreeMap<usize, Manifest>,
    /// Nodes whose cluster would stop them (a failed release).
    to_kill: BTreeSet<usize>,
    trace: Vec<String>,
    stats: Stats,
}

/// An operation bound to the model's state.
#[derive(Debug)]
enum Resolved {
    Take { node: usize, volumes: Vec<usize> },
    Release { node: usize, volume: usize },
    Snapshot { node: usize, volume: usize },
    Collect { node: usize },
    Land { node: usize, seq: u64 },
}

impl Resolved {
    fn node(&self) -> usize {
        match self {
            Self::Take { node, .. }
            | Self::Release { node, .. }
            | Self::Snapshot { node, .. }
            | Self::Collect { node }
            | Self::Land { node, .. } => *node,
        }
    }

    /// A take or a release: a node does one at a time.
    fn moves(&self) -> bool {
        matches!(self, Self::Take { .. } | Self::Release { .. })
    }

    /// Whether `self` and `other` together may have a collection delete what a manifest
    /// written meanwhile names, which only the grace time (zero here) prevents: a snapshot
    /// that another node's collection deletes before the manifest names it, or the windows of
    /// a taker's own stream from where its new segment starts, answered meanwhile, that its
    /// own snapshot of another volume leaves unneeded (its collection reads the manifests
    /// before the take writes its own).
    fn needs_the_grace(&self, other: &Self) -> bool {
        let collects = |op: &Self| matches!(op, Self::Collect { .. } | Self::Snapshot { .. });
        let snapshots = |op: &Self| matches!(op, Self::Snapshot { .. });
        let takes = |op: &Self| matches!(op, Self::Take { .. });
        let either = |first: &dyn Fn(&Self) -> bool, second: &dyn Fn(&Self) -> bool| {
            (first(self) && second(other)) || (first(other) && second(self))
        };
        match self.node() == other.node() {
            true => either(&takes, &collects),
            false => either(&snapshots, &collects),
        }
    }
}

struct Sim {
    bucket: Arc<MemoryBucket>,
    plan: Arc<Plan>,
    keys: Keys,
    root: tempfile::TempDir,
    /// Windows a stream stores at once (`replication.max_puts_in_flight`).
    in_flight: u64,
    /// Whether a node whose stream met a fence still takes volumes (as a cluster's node may
    /// until its lease thread stops it). Off in the random schedules: such a take makes a
    /// later take of its volumes with others of its stream fail, see
    /// [`a_take_by_a_sealed_node_does_not_block_later_takes`].
    sealed_nodes_take: bool,
    st: RefCell<State>,
}

type Checked = Result<(), String>;

impl Sim {
    async fn new(in_flight: u64, sealed_nodes_take: bool) -> Self {
        let plan = Arc::new(Plan::default());
        let bucket = MemoryBucket::with_faults(Hook(plan.clone()));
        let root = scratch_dir();
        let mut sim = Self {
            bucket,
            plan,
            keys: Keys::new(PREFIX),
            root,
            in_flight,
            sealed_nodes_take,
            st: RefCell::new(State {
                nodes: Vec::new(),
                volumes: (0..VOLUMES).map(|_| VolumeModel::default()).collect(),
                zombies: Vec::new(),
                next_write: 1,
                fences: BTreeSet::new(),
                manifests: BTreeMap::new(),
                to_kill: BTreeSet::new(),
                trace: Vec::new(),
                stats: Stats {
                    schedules: 1,
                    ..Stats::default()
                },
            }),
        };
        let mut nodes = Vec::new();
        for name in NODES {
            let dir = sim.root.path().join(name);
            std::fs::create_dir_all(&dir).expect("a node's folder");
            let node = sim.start(name, &dir).await;
            nodes.push(NodeSim {
                name,
                dir,
                node,
                next_seq: 1,
                pending: BTreeMap::new(),
                stopped: false,
                attached: BTreeSet::new(),
                open: BTreeMap::new(),
                unbatched: Vec::new(),
            });
        }
        sim.st.get_mut().nodes = nodes;
        sim
    }

    /// A new incarnation of node `name` on its folder `dir`.
    async fn start(&self, name: &str, dir: &Path) -> Arc<Node> {
        Node::claim(
            Objects::memory(self.bucket.clone()),
            &settings(name),
            dir.to_owned(),
            VOLUMES,
            None,
            Arc::default(),
        )
        .await
        .expect("an incarnation is claimed")
    }

    fn trace(&self, line: String) {
        self.st.borrow_mut().trace.push(line);
    }

    /// `why`, with the steps that led there.
    fn failure(&self, why: &str) -> String {
        let st = self.st.borrow();
        format!(
            "{why}\nwith {} windows in flight, after:\n  {}",
            self.in_flight,
            st.trace.join("\n  ")
        )
    }

    async fn step(&self, step: &Step) -> Checked {
        self.st.borrow_mut().stats.steps += 1;
        match step {
            Step::Write {
                volume,
                holder,
                also,
                join,
            } => self.write(*volume, *holder, *also, *join)?,
            Step::Flush { node } => {
                self.trace(format!("flush {}", NODES[*node]));
                self.flush(*node).await;
            }
            Step::Zombie { pick } => self.zombie(*pick).await,
            Step::Kill { node, wipe } => self.kill(*node, *wipe).await,
            Step::Batch { node, len } => self.batch(*node, *len).await,
            Step::One(act, fault) => self.acts(&[(act, *fault)], 0).await?,
            Step::Pair(a, fault_a, b, fault_b, seed) => {
                self.acts(&[(a, *fault_a), (b, *fault_b)], *seed).await?;
            }
        }
        let (crashed, hung) = self.plan.take_crashed();
        let failed = {
            let mut st = self.st.borrow_mut();
            st.stats.crashes += crashed.len() as u64;
            st.trace.extend(hung);
            std::mem::take(&mut st.to_kill)
        };
        for node in crashed.union(&failed) {
            self.kill(*node, false).await;
        }
        self.audit()
    }

    fn write(&self, volume: usize, holder: usize, also: Option<usize>, join: bool) -> Checked {
        let mut st = self.st.borrow_mut();
        let Some((volume, n)) = served(&st, volume, holder) else {
            return Ok(());
        };
        if st.nodes[n].stopped {
            // The stream refuses submissions: the write fails before it commits.
            return Ok(());
        }
        let mut volumes = vec![volume];
        if let Some(also) = also
            && also != volume
            && st.nodes[n].attached.contains(&also)
        {
            volumes.push(also);
        }
        let ids: Vec<i64> = volumes
            .iter()
            .map(|_| {
                st.next_write += 1;
                st.next_write - 1
            })
            .collect();
        let ns = &mut st.nodes[n];
        let joins = ns
            .pending
            .last_key_value()
            .is_some_and(|(_, window)| window.landing == Landing::Waiting);
        let seq = if join && joins {
            *ns.pending.last_key_value().expect("a window").0
        } else {
            let seq = ns.next_seq;
            ns.next_seq += 1;
            ns.pending.insert(
                seq,
                Pending {
                    changes: Vec::new(),
                    bytes: None,
                    landing: Landing::Waiting,
                },
            );
            seq
        };
        let at = Position {
            node: ns.name.to_owned(),
            inc: ns.node.inc,
            seq,
        };
        for (&volume, &id) in volumes.iter().zip(&ids) {
            let redo: Arc<[u8]> = LocalCopy::test_write(id).into();
            let path = ns.dir.join(Volume::file_name(volume));
            let copy = match ns.open.entry(volume) {
                std::collections::btree_map::Entry::Occupied(open) => open.into_mut(),
                std::collections::btree_map::Entry::Vacant(closed) => closed.insert(
                    LocalCopy::open(&path)
                        .map_err(|err| format!("opening {}: {err}", path.display()))?,
                ),
            };
            copy.apply(&redo, &at)
                .map_err(|err| format!("committing write {id} to {}: {err}", path.display()))?;
            // What the replicator's `submit` records of a submission.
            ns.node.submitted[volume].store(seq, Ordering::SeqCst);
            ns.pending
                .get_mut(&seq)
                .expect("the window")
                .changes
                .push((volume, id, redo));
        }
        let line = format!(
            "write {ids:?} to volumes {volumes:?} at {}/{} window {seq}",
            ns.name, ns.node.inc
        );
        st.stats.writes += ids.len() as u64;
        st.trace.push(line);
        Ok(())
    }

    /// Stores window `seq` of node `n`, as the stream's writer does (the real `store`).
    async fn land(&self, n: usize, seq: u64) {
        let (node, at, bytes, writes) = {
            let mut st = self.st.borrow_mut();
            let ns = &mut st.nodes[n];
            if ns.stopped {
                return;
            }
            let node = ns.node.clone();
            let at = Position {
                node: ns.name.to_owned(),
                inc: node.inc,
                seq,
            };
            let Some(window) = ns.pending.get_mut(&seq) else {
                return;
            };
            if window.landing != Landing::Waiting {
                return;
            }
            window.landing = Landing::Storing;
            let bytes = window.encode(&node, &at);
            (node, at, bytes, window.writes())
        };
        let landed = super::store(node, at, bytes).await;
        let mut st = self.st.borrow_mut();
        if landed.is_ok() {
            st.stats.windows += 1;
            for &(volume, id) in &writes {
                st.volumes[volume].landed.insert(id);
            }
        }
        if let Some(window) = st.nodes[n].pending.get_mut(&seq) {
            window.landing = if landed.is_ok() {
                Landing::Landed
            } else {
                Landing::Refused
            };
        }
        self.settle(&mut st, n);
    }

    /// Answers node `n`'s windows in seq order, as the stream's writer does: a landed one
    /// acknowledges its writes; a refused one stops the stream.
    fn settle(&self, st: &mut State, n: usize) {
        let State {
            nodes,
            volumes,
            zombies,
            stats,
            ..
        } = st;
        let ns = &mut nodes[n];
        while let Some(entry) = ns.pending.first_entry() {
            match entry.get().landing {
                Landing::Landed => {
                    let (seq, window) = entry.remove_entry();
                    for (volume, id) in window.writes() {
                        volumes[volume].acked.insert(id);
                        stats.acked += 1;
                    }
                    ns.node.landed.store(seq, Ordering::SeqCst);
                    if ns.unbatched.last().is_some_and(|(last, _)| last + 1 != seq) {
                        ns.unbatched.clear();
                    }
                    ns.unbatched
                        .push((seq, window.bytes.expect("a landed window is encoded")));
                }
                Landing::Refused => {
                    ns.stopped = true;
                    let front = *entry.key();
                    for (seq, mut window) in std::mem::take(&mut ns.pending) {
                        if matches!(window.landing, Landing::Waiting | Landing::Storing)
                            && seq < front + self.in_flight
                        {
                            let at = Position {
                                node: ns.name.to_owned(),
                                inc: ns.node.inc,
                                seq,
                            };
                            zombies.push(Zombie {
                                key: self.keys.window(ns.name, ns.node.inc, seq),
                                bytes: window.encode(&ns.node, &at),
                                writes: window.writes(),
                            });
                        }
                    }
                    break;
                }
                Landing::Waiting | Landing::Storing => break,
            }
        }
    }

    /// Lands node `n`'s windows in order until none is left or its stream stops.
    async fn flush(&self, n: usize) {
        loop {
            let next = {
                let st = self.st.borrow();
                let ns = &st.nodes[n];
                if ns.stopped || ns.pending.is_empty() {
                    return;
                }
                let limit = ns.front() + self.in_flight;
                ns.pending
                    .iter()
                    .find(|(seq, window)| window.landing == Landing::Waiting && **seq < limit)
                    .map(|(seq, _)| *seq)
            };
            match next {
                Some(seq) => self.land(n, seq).await,
                // Another operation is storing the next one.
                None => tokio::task::yield_now().await,
            }
        }
    }

    async fn zombie(&self, pick: usize) {
        let zombie = {
            let mut st = self.st.borrow_mut();
            if st.zombies.is_empty() {
                return;
            }
            let at = pick % st.zombies.len();
            st.zombies.remove(at)
        };
        let stored = self.bucket.create(&zombie.key, &zombie.bytes).await;
        let mut st = self.st.borrow_mut();
        let landed = matches!(stored, Ok(crate::cold::s3::Put::Stored(_)));
        st.trace
            .push(format!("zombie {} (landed: {landed})", zombie.key));
        if landed {
            st.stats.zombies += 1;
            for &(volume, id) in &zombie.writes {
                st.volumes[volume].landed.insert(id);
            }
        }
    }

    /// Node `n` stops and starts again as a new incarnation.
    async fn kill(&self, n: usize, wipe: bool) {
        let (name, dir) = {
            let mut st = self.st.borrow_mut();
            let objects = self.bucket.dump();
            let State {
                nodes,
                volumes,
                zombies,
                stats,
                trace,
                ..
            } = &mut *st;
            let ns = &mut nodes[n];
            let front = ns.front();
            for (seq, mut window) in std::mem::take(&mut ns.pending) {
                let key = self.keys.window(ns.name, ns.node.inc, seq);
                let landed = match (&window.bytes, objects.get(&key)) {
                    (Some(bytes), Some(found)) => found[..] == bytes[..],
                    _ => false,
                };
                if landed {
                    // Landed as the node stopped, never answered.
                    for (volume, id) in window.writes() {
                        volumes[volume].landed.insert(id);
                    }
                } else if window.landing != Landing::Refused && seq < front + self.in_flight {
                    let at = Position {
                        node: ns.name.to_owned(),
                        inc: ns.node.inc,
                        seq,
                    };
                    zombies.push(Zombie {
                        key,
                        bytes: window.encode(&ns.node, &at),
                        writes: window.writes(),
                    });
                }
            }
            // Stopped where it stood: no checkpoint.
            ns.open.clear();
            stats.kills += 1;
            stats.count_node(&ns.node);
            trace.push(format!(
                "kill {}/{}{}",
                ns.name,
                ns.node.inc,
                if wipe { " (disk wiped)" } else { "" }
            ));
            (ns.name, ns.dir.clone())
        };
        if wipe {
            std::fs::remove_dir_all(&dir).expect("wipe a node's folder");
            std::fs::create_dir_all(&dir).expect("a node's folder");
        }
        let node = self.start(name, &dir).await;
        let mut st = self.st.borrow_mut();
        let ns = &mut st.nodes[n];
        ns.node = node;
        ns.next_seq = 1;
        ns.stopped = false;
        ns.attached.clear();
        ns.unbatched.clear();
    }

    async fn batch(&self, n: usize, len: usize) {
        let (node, windows) = {
            let mut st = self.st.borrow_mut();
            let ns = &mut st.nodes[n];
            let len = len.min(ns.unbatched.len());
            let windows: Vec<(u64, Arc<[u8]>)> = ns.unbatched.drain(..len).collect();
            (ns.node.clone(), windows)
        };
        if windows.is_empty() {
            return;
        }
        let line = format!(
            "batch {}/{} windows {}..={}",
            NODES[n],
            node.inc,
            windows[0].0,
            windows[windows.len() - 1].0
        );
        self.trace(line);
        super::store_batch(node, windows).await;
        self.st.borrow_mut().stats.batches += 1;
    }

    /// Binds `act` to the model's state: `None` when it applies to nothing now.
    fn resolve(&self, act: &Act) -> Option<Resolved> {
        let st = self.st.borrow();
        let holder_of = |volume: usize, holder: usize| served(&st, volume, holder);
        match *act {
            Act::Take { node, volumes } => {
                if st.nodes[node].stopped && !self.sealed_nodes_take {
                    return None;
                }
                let volumes: Vec<usize> = (0..VOLUMES)
                    .filter(|v| volumes & (1 << v) != 0 && !st.nodes[node].attached.contains(v))
                    .collect();
                (!volumes.is_empty()).then_some(Resolved::Take { node, volumes })
            }
            Act::Release { volume, holder } => {
                holder_of(volume, holder).map(|(volume, node)| Resolved::Release { node, volume })
            }
            Act::Snapshot { volume, holder } => {
                holder_of(volume, holder).map(|(volume, node)| Resolved::Snapshot { node, volume })
            }
            Act::Collect { node } => Some(Resolved::Collect { node }),
            Act::Land { node, pick } => {
                // The first node from `node` on with a window to store.
                (0..NODES.len()).find_map(|next| {
                    let node = (node + next) % NODES.len();
                    let ns = &st.nodes[node];
                    if ns.stopped {
                        return None;
                    }
                    let limit = ns.front() + self.in_flight;
                    let waiting: Vec<u64> = ns
                        .pending
                        .iter()
                        .filter(|(seq, window)| window.landing == Landing::Waiting && **seq < limit)
                        .map(|(seq, _)| *seq)
                        .collect();
                    waiting
                        .get(pick % waiting.len().max(1))
                        .map(|&seq| Resolved::Land { node, seq })
                })
            }
        }
    }

    /// Runs one operation, or two at once (their calls interleaved as `seed` draws).
    async fn acts(&self, acts: &[(&Act, Option<Injected>)], seed: u64) -> Checked {
        let mut resolved: Vec<(Resolved, Option<Injected>)> = Vec::new();
        for (act, fault) in acts {
            let Some(bound) = self.resolve(act) else {
                continue;
            };
            // A node takes and releases one volume set at a time.
            if resolved.iter().any(|(other, _)| {
                (other.moves() && bound.moves() && other.node() == bound.node())
                    || other.needs_the_grace(&bound)
            }) {
                continue;
            }
            resolved.push((bound, *fault));
        }
        let line = match resolved.as_slice() {
            [] => return Ok(()),
            [(one, fault)] => format!("{one:?}{}", faulted(fault)),
            [(a, fault_a), (b, fault_b)] => format!(
                "together (seed {seed}): {a:?}{} | {b:?}{}",
                faulted(fault_a),
                faulted(fault_b)
            ),
            _ => unreachable!("at most two operations"),
        };
        self.trace(line);
        let strict = resolved.len() == 1 && resolved[0].1.is_none();
        for (slot, (bound, fault)) in resolved.iter().enumerate() {
            let seed = if resolved.len() == 2 {
                seed | 1 << slot
            } else {
                0
            };
            self.plan.arm(slot, bound.node(), *fault, seed);
        }
        let outcomes = match resolved.as_slice() {
            [(one, _)] => vec![in_slot(&self.plan, 0, one.node(), self.run(one, strict)).await],
            [(a, _), (b, _)] => {
                self.st.borrow_mut().stats.pairs += 1;
                let (a, b) = futures_util::future::join(
                    in_slot(&self.plan, 0, a.node(), self.run(a, false)),
                    in_slot(&self.plan, 1, b.node(), self.run(b, false)),
                )
                .await;
                vec![a, b]
            }
            _ => unreachable!("at most two operations"),
        };
        let injected = (0..resolved.len())
            .filter(|&slot| self.plan.injected(slot))
            .count();
        for slot in 0..2 {
            self.plan.arm(slot, 0, None, 0);
        }
        self.st.borrow_mut().stats.faults += injected as u64;
        for outcome in outcomes {
            let Some(checked) = outcome else {
                self.trace("  (its node crashed)".to_owned());
                continue;
            };
            checked?;
        }
        Ok(())
    }

    /// Runs one bound operation; `strict`: it ran alone, without a fault, and a take must
    /// then succeed.
    async fn run(&self, op: &Resolved, strict: bool) -> Checked {
        match op {
            Resolved::Take { node: n, volumes } => {
                let (node, first) = {
                    let st = self.st.borrow();
                    let ns = &st.nodes[*n];
                    (ns.node.clone(), ns.front())
                };
                let (take_backs, steals) = self.kinds_of_take(&node, volumes);
                let taken = node.take(volumes, first).await;
                let mut st = self.st.borrow_mut();
                match taken {
                    Ok(_) => {
                        st.stats.takes += 1;
                        st.stats.take_backs += take_backs;
                        st.stats.steals += steals;
                        st.nodes[*n].attached.extend(volumes.iter().copied());
                        let dir = st.nodes[*n].dir.clone();
                        let what = format!("{}/{} took volumes {volumes:?}", NODES[*n], node.inc);
                        self.check_copies(&mut st, &dir, volumes, &what)
                    }
                    Err(err) => {
                        st.stats.failed_takes += 1;
                        st.trace.push(format!("  take failed: {err}"));
                        if strict {
                            return Err(format!(
                                "{}/{} failed to take volumes {volumes:?} alone and without a \
                                 fault: {err}",
                                NODES[*n], node.inc
                            ));
                        }
                        Ok(())
                    }
                }
            }
            Resolved::Release { node: n, volume } => {
                // The volume closes, then the replicator waits for every window submitted so
                // far to land.
                let closed = self.st.borrow_mut().nodes[*n].open.remove(volume);
                if let Some(copy) = closed {
                    copy.close()
                        .map_err(|err| format!("closing volume {volume}: {err}"))?;
                }
                self.flush(*n).await;
                let (node, end, stopped) = {
                    let mut st = self.st.borrow_mut();
                    let ns = &mut st.nodes[*n];
                    // The volume closes first, whatever follows.
                    ns.attached.remove(volume);
                    (ns.node.clone(), ns.next_seq, ns.stopped)
                };
                let released = if stopped {
                    Err("the stream is sealed".to_owned())
                } else {
                    node.release(*volume, end)
                        .await
                        .map_err(|err| err.to_string())
                };
                let mut st = self.st.borrow_mut();
                match released {
                    Ok(()) => st.stats.releases += 1,
                    Err(err) => {
                        // The cluster stops a node whose release failed.
                        st.stats.failed_releases += 1;
                        st.trace.push(format!("  release failed: {err}"));
                        st.to_kill.insert(*n);
                    }
                }
                Ok(())
            }
            Resolved::Snapshot { node: n, volume } => {
                // A snapshot waits for its copy's windows to land; the writer goes on meanwhile.
                self.flush(*n).await;
                let node = self.st.borrow().nodes[*n].node.clone();
                node.snapshot_and_collect(*volume).await;
                Ok(())
            }
            Resolved::Collect { node: n } => {
                let node = self.st.borrow().nodes[*n].node.clone();
                node.collect_garbage().await;
                Ok(())
            }
            Resolved::Land { node: n, seq } => {
                self.land(*n, *seq).await;
                Ok(())
            }
        }
    }

    /// How many of `volumes` `node` takes back after releasing them, and how many it takes from
    /// a live incarnation that serves them.
    fn kinds_of_take(&self, node: &Node, volumes: &[usize]) -> (u64, u64) {
        let st = self.st.borrow();
        let (mut back, mut steals) = (0, 0);
        for volume in volumes {
            let Some(manifest) = st.manifests.get(volume) else {
                continue;
            };
            back += u64::from(manifest.chain.iter().any(|segment| {
                segment.node == node.node && segment.inc == node.inc && segment.end.is_some()
            }));
            steals += u64::from(st.nodes.iter().any(|ns| {
                ns.name == manifest.owner.node
                    && ns.node.inc == manifest.owner.inc
                    && ns.attached.contains(volume)
                    && !ns.stopped
            }));
        }
        (back, steals)
    }

    /// Checks the copies of `volumes` in `dir` just taken (see the module docs), and records
    /// what they hold as served.
    fn check_copies(&self, st: &mut State, dir: &Path, volumes: &[usize], what: &str) -> Checked {
        self.note_landed(st);
        let mut failures = Vec::new();
        for &volume in volumes {
            let path = dir.join(Volume::file_name(volume));
            let (rows, through) = read_copy(&path)?;
            let model = &mut st.volumes[volume];
            let lost: Vec<&i64> = model.acked.difference(&rows).collect();
            if !lost.is_empty() {
                failures.push(format!(
                    "volume {volume} lost acknowledged writes {lost:?} (its copy holds {rows:?})"
                ));
            }
            let unserved: Vec<&i64> = model.served.difference(&rows).collect();
            if !unserved.is_empty() {
                failures.push(format!(
                    "volume {volume} lost writes {unserved:?} that an earlier take served (its \
                     copy holds {rows:?})"
                ));
            }
            let never_landed: Vec<&i64> = rows.difference(&model.landed).collect();
            if !never_landed.is_empty() {
                failures.push(format!(
                    "volume {volume} holds writes {never_landed:?} whose window never landed"
                ));
            }
            let last = rows.last().copied().unwrap_or(0);
            if through != last {
                failures.push(format!(
                    "volume {volume} applied write {through} last, and holds {last} (replayed \
                     out of order)"
                ));
            }
            model.served.extend(rows);
        }
        match failures.is_empty() {
            true => Ok(()),
            false => Err(format!("{what}: {}", failures.join("; "))),
        }
    }

    /// Records as landed the writes of windows being stored that are in the bucket already:
    /// a call that crashed after it stored its object, or one still waiting for its answer.
    fn note_landed(&self, st: &mut State) {
        let objects = self.bucket.dump();
        let State { nodes, volumes, .. } = st;
        for ns in nodes.iter() {
            for (seq, window) in &ns.pending {
                let Some(bytes) = &window.bytes else {
                    continue;
                };
                let key = self.keys.window(ns.name, ns.node.inc, *seq);
                if objects
                    .get(&key)
                    .is_some_and(|found| found[..] == bytes[..])
                {
                    for (volume, id) in window.writes() {
                        volumes[volume].landed.insert(id);
                    }
                }
            }
        }
    }

    /// Checks the bucket as a whole (see the module docs).
    fn audit(&self) -> Checked {
        let objects = self.bucket.dump();
        let mut st = self.st.borrow_mut();
        for fence in &st.fences {
            if !objects.contains_key(fence) {
                return Err(format!("the fence {fence} was deleted"));
            }
        }
        // Each stream's objects: seq, and whether a fence.
        let mut streams: BTreeMap<(String, u64), BTreeMap<u64, bool>> = BTreeMap::new();
        let mut window_epochs: BTreeMap<usize, (u64, String)> = BTreeMap::new();
        for (key, bytes) in &objects {
            let Some((node, inc, seq)) = self.keys.parse_window(key) else {
                continue;
            };
            let fenced = is_fence(bytes);
            streams
                .entry((node.to_owned(), inc))
                .or_default()
                .insert(seq, fenced);
            if fenced {
                if st.fences.insert(key.clone()) {
                    st.stats.fences += 1;
                    let by: Position = serde_json::from_slice(&bytes[FENCE_MAGIC.len()..])
                        .map_err(|err| format!("{key}: a fence's writer: {err}"))?;
                    if by.node == node && by.inc == inc {
                        st.stats.self_fences += 1;
                        st.trace
                            .push(format!("  {key}: sealed by its own incarnation"));
                    }
                }
                continue;
            }
            for (volume, epoch) in sections(key, bytes)? {
                let largest = window_epochs.entry(volume).or_insert((0, String::new()));
                if epoch > largest.0 {
                    *largest = (epoch, key.clone());
                }
            }
        }
        // Where each stream is needed from: what collections keep.
        let mut needed_from: BTreeMap<(String, u64), u64> = BTreeMap::new();
        for volume in 0..VOLUMES {
            let Some(bytes) = objects.get(&self.keys.manifest(volume)) else {
                continue;
            };
            for segment in Manifest::decode(bytes)?.chain {
                let from = needed_from
                    .entry((segment.node, segment.inc))
                    .or_insert(segment.first);
                *from = (*from).min(segment.first);
            }
        }
        for ((node, inc), seqs) in &streams {
            let Some((&fence, _)) = seqs.iter().find(|(_, fenced)| **fenced) else {
                continue;
            };
            // A collection cut short leaves gaps in what no history needs.
            if let Some(&from) = needed_from.get(&(node.clone(), *inc))
                && let Some(absent) = (from..fence).find(|seq| !seqs.contains_key(seq))
            {
                return Err(format!(
                    "stream {node}/{inc}: window {absent} is missing before its fence at \
                     {fence}, and a history needs the stream from {from}"
                ));
            }
            if let Some((seq, _)) = seqs
                .range(fence + 1..)
                .find(|(seq, fenced)| !**fenced && **seq >= fence + self.in_flight)
            {
                return Err(format!(
                    "stream {node}/{inc}: window {seq} lies beyond what was in flight at its \
                     fence {fence}"
                ));
            }
        }
        for volume in 0..VOLUMES {
            let key = self.keys.manifest(volume);
            let Some(bytes) = objects.get(&key) else {
                if st.manifests.contains_key(&volume) {
                    return Err(format!("{key} vanished"));
                }
                if let Some((epoch, window)) = window_epochs.get(&volume) {
                    return Err(format!(
                        "volume {volume} has no manifest, and {window} has epoch {epoch} for it"
                    ));
                }
                continue;
            };
            let manifest = Manifest::decode(bytes)?;
            if let Some(before) = st.manifests.get(&volume) {
                let grew = manifest.version > before.version
                    || (manifest.version == before.version && manifest == *before);
                if !grew || manifest.epoch < before.epoch {
                    return Err(format!(
                        "volume {volume}'s manifest went from {before:?} to {manifest:?}"
                    ));
                }
                if manifest.owner != before.owner && manifest.epoch <= before.epoch {
                    return Err(format!(
                        "volume {volume}'s owner changed without a new epoch: {before:?} to \
                         {manifest:?}"
                    ));
                }
            }
            if let Some((epoch, window)) = window_epochs.get(&volume)
                && *epoch > manifest.epoch
            {
                return Err(format!(
                    "volume {volume}: {window} has epoch {epoch}, beyond its manifest's: \
                     {manifest:?}"
                ));
            }
            if let Some(snapshot) = &manifest.snapshot
                && !objects.contains_key(&snapshot.key)
            {
                return Err(format!(
                    "volume {volume}'s snapshot {} is missing: {manifest:?}",
                    snapshot.key
                ));
            }
            for (at, segment) in manifest.chain.iter().enumerate() {
                let last = at + 1 == manifest.chain.len();
                match segment.end {
                    None if !last
                        || segment.node != manifest.owner.node
                        || segment.inc != manifest.owner.inc =>
                    {
                        return Err(format!(
                            "volume {volume}: an open segment other than its owner's last: \
                             {manifest:?}"
                        ));
                    }
                    None => {}
                    Some(end) => {
                        for seq in segment.first..end {
                            let key = self.keys.window(&segment.node, segment.inc, seq);
                            if objects.get(&key).is_none_or(|bytes| is_fence(bytes)) {
                                return Err(format!(
                                    "volume {volume}'s history names window {key}, which is \
                                     not there: {manifest:?}"
                                ));
                            }
                        }
                    }
                }
                let overlaps = manifest.chain[..at].iter().any(|other| {
                    other.node == segment.node
                        && other.inc == segment.inc
                        && other.first < segment.end.unwrap_or(u64::MAX)
                        && segment.first < other.end.unwrap_or(u64::MAX)
                });
                if overlaps {
                    return Err(format!(
                        "volume {volume}: two segments of one stream overlap: {manifest:?}"
                    ));
                }
            }
            st.manifests.insert(volume, manifest);
        }
        Ok(())
    }

    /// A fresh node takes every volume at once: the same checks as any take.
    async fn finish(&self) -> Checked {
        let dir = self.root.path().join(CHECKER);
        std::fs::create_dir_all(&dir).expect("the checker's folder");
        let node = self.start(CHECKER, &dir).await;
        let volumes: Vec<usize> = (0..VOLUMES).collect();
        self.trace(format!("{CHECKER}/{} takes every volume", node.inc));
        node.take(&volumes, 1)
            .await
            .map_err(|err| format!("the final take failed: {err}"))?;
        {
            let mut st = self.st.borrow_mut();
            self.check_copies(&mut st, &dir, &volumes, "the final take")?;
            let State { nodes, stats, .. } = &mut *st;
            for ns in nodes.iter() {
                stats.count_node(&ns.node);
            }
            stats.count_node(&node);
        }
        self.audit()
    }

    fn stats(&self) -> Stats {
        self.st.borrow().stats.clone()
    }
}

/// The first volume from `volume` on that a node serves, and the `holder`-th node serving it.
fn served(st: &State, volume: usize, holder: usize) -> Option<(usize, usize)> {
    (0..VOLUMES).find_map(|next| {
        let volume = (volume + next) % VOLUMES;
        let holders: Vec<usize> = (0..NODES.len())
            .filter(|&n| st.nodes[n].attached.contains(&volume))
            .collect();
        holders
            .get(holder % holders.len().max(1))
            .map(|&node| (volume, node))
    })
}

fn faulted(fault: &Option<Injected>) -> String {
    fault.map_or(String::new(), |injected| {
        format!(" [{:?} at call {}]", injected.fault, injected.at)
    })
}

/// The writes a copy holds, and the last one it applied (none where there is no copy: a
/// volume taken at its first use starts from a new file, made when it opens).
fn read_copy(path: &Path) -> Result<(BTreeSet<i64>, i64), String> {
    if !path.exists() {
        return Ok((BTreeSet::new(), 0));
    }
    let read = || -> rusqlite::Result<(BTreeSet<i64>, i64)> {
        let conn = rusqlite::Connection::open(path)?;
        let rows = conn
            .prepare("SELECT id FROM partitions")?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<BTreeSet<i64>>>()?;
        let through = conn.query_row("SELECT through_seq FROM indexed", [], |row| row.get(0))?;
        Ok((rows, through))
    };
    read().map_err(|err| format!("reading {}: {err}", path.display()))
}

/// Each section's volume and epoch in the window `bytes` at `key`.
fn sections(key: &str, bytes: &[u8]) -> Result<Vec<(usize, u64)>, String> {
    let rest = bytes
        .strip_prefix(WINDOW_MAGIC)
        .ok_or_else(|| format!("{key}: neither a window nor a fence"))?;
    let end = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("{key}: a window without a header"))?;
    let header: serde_json::Value =
        serde_json::from_slice(&rest[..end]).map_err(|err| format!("{key}: {err}"))?;
    Ok(header["sections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|section| {
            Some((
                usize::try_from(section["volume"].as_u64()?).ok()?,
                section["epoch"].as_u64()?,
            ))
        })
        .collect())
}

/// A folder for the nodes' files: in memory where the system has one (`/dev/shm`), as the
/// copies' SQLite files would cost most of the run on a disk.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new();
    match shm.is_dir() {
        true => builder.tempdir_in(shm),
        false => builder.tempdir(),
    }
    .or_else(|_| tempfile::tempdir())
    .expect("a temp dir")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// Runs one schedule and its final check; adds what it did to `totals`.
fn run_schedule(
    in_flight: u64,
    steps: &[Step],
    sealed_nodes_take: bool,
    totals: &RefCell<Stats>,
) -> Checked {
    runtime().block_on(async {
        let sim = Sim::new(in_flight, sealed_nodes_take).await;
        for step in steps {
            sim.step(step).await.map_err(|why| sim.failure(&why))?;
        }
        sim.finish().await.map_err(|why| sim.failure(&why))?;
        totals.borrow_mut().add(&sim.stats());
        Ok(())
    })
}

fn from_env(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Random schedules of moves, kills, faults and maintenance keep every acknowledged write.
#[test]
fn histories_keep_every_acknowledged_write() {
    let cases = from_env("DURABILITY_HISTORY_CASES").map_or(200, |cases| cases as u32);
    let seed = from_env("DURABILITY_HISTORY_SEED").unwrap_or(20_250_101);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let totals = RefCell::new(Stats::default());
    let started = Instant::now();
    let outcome = runner.run(&schedule(), |(in_flight, steps)| {
        run_schedule(in_flight, &steps, true, &totals).map_err(TestCaseError::fail)
    });
    let elapsed = started.elapsed();
    let totals = totals.into_inner();
    println!(
        "history schedules: {} in {elapsed:.2?} ({:.0} a second, seed {seed}): {totals:?}",
        totals.schedules,
        totals.schedules as f64 / elapsed.as_secs_f64()
    );
    if let Err(err) = outcome {
        panic!("{err}");
    }
}

/// Runs `steps` from a fresh bucket and checks them; the failure, with its steps, as a panic.
fn replay(in_flight: u64, steps: &[Step], sealed_nodes_take: bool) {
    let totals = RefCell::new(Stats::default());
    if let Err(why) = run_schedule(in_flight, steps, sealed_nodes_take, &totals) {
        panic!("{why}");
    }
}

fn take(node: usize, volumes: &[usize]) -> Step {
    let volumes = volumes.iter().fold(0, |mask, volume| mask | 1 << volume);
    Step::One(Act::Take { node, volumes }, None)
}

fn write(volume: usize) -> Step {
    Step::Write {
        volume,
        holder: 0,
        also: None,
        join: false,
    }
}

/// A node takes a volume back after releasing it, in the same incarnation, while a second
/// volume it never gave up shares its stream: a later taker replays both to the stream's
/// fence, not to the release (which once sealed the stream there and lost the writes after).
#[test]
fn a_volume_taken_back_by_the_node_that_released_it_keeps_its_later_writes() {
    let (a, b, c) = (0, 1, 2);
    replay(
        2,
        &[
            take(a, &[0, 1]),
            write(0),
            write(1),
            Step::Flush { node: a },
            Step::One(
                Act::Release {
                    volume: 0,
                    holder: 0,
                },
                None,
            ),
            take(c, &[0]),
            Step::Kill {
                node: c,
                wipe: false,
            },
            take(a, &[0]),
            write(0),
            write(1),
            Step::Flush { node: a },
            Step::Kill {
                node: a,
                wipe: false,
            },
            take(b, &[0, 1]),
        ],
        false,
    );
}

/// A node whose stream another node sealed (at window 1, taking volume 1) learns it when its
/// next window (1) is refused, and takes volume 0 before its cluster stops it: volume 0's
/// history gets a segment of the sealed stream from window 2, past the fence. A node taking
/// volumes 0 and 2 at once then replays volume 0 first and seals the stream again at window
/// 2, and the taker's cache of seals ends volume 2's open segment of the same stream there
/// too: its replay reads window 1, the first fence, where its history says a window is, and
/// the take fails; every retry of the same volumes fails the same way. (A take of volume 2
/// alone would succeed.) Nothing acknowledged is lost: the volumes cannot be taken.
#[test]
fn a_take_by_a_sealed_node_does_not_block_later_takes() {
    let (a, b, c) = (0, 1, 2);
    replay(
        1,
        &[
            take(a, &[1, 2]),
            take(b, &[1]),
            Step::Write {
                volume: 2,
                holder: 0,
                also: None,
                join: false,
            },
            Step::One(Act::Land { node: a, pick: 0 }, None),
            take(a, &[0]),
            take(c, &[0, 2]),
        ],
        true,
    );
}

/// A take whose manifest was stored but whose answer was lost fails, and the cluster retries
/// it in the same incarnation (a take of several volumes that fails on one leaves the others
/// so too): the manifest now names the taker's own open segment, which the retry replays as
/// another incarnation's and seals with a fence at its first absent window. The node's next
/// window meets its own fence: it refuses every write from then on and its cluster stops it.
/// Nothing acknowledged is lost.
#[test]
fn a_take_retried_after_a_lost_answer_does_not_seal_the_takers_own_stream() {
    let a = 0;
    let totals = RefCell::new(Stats::default());
    let lost_answer = Injected {
        // The manifest's read, then its create (the volume's first use).
        at: 2,
        fault: Fault::LoseAnswer,
    };
    let steps = [
        Step::One(
            Act::Take {
                node: a,
                volumes: 1,
            },
            Some(lost_answer),
        ),
        take(a, &[0]),
        write(0),
        Step::Flush { node: a },
    ];
    if let Err(why) = run_schedule(1, &steps, false, &totals) {
        panic!("{why}");
    }
    let totals = totals.into_inner();
    assert_eq!(totals.failed_takes, 1, "{totals:?}");
    assert_eq!(
        totals.self_fences, 0,
        "a node sealed its own stream: {totals:?}"
    );
    assert_eq!(
        totals.acked, 1,
        "the write after the take is acknowledged: {totals:?}"
    );
}
