//! Unit tests of the take (`take.rs`) against the in-memory bucket.
//!
//! Each test builds a small history of one volume with the real pieces: previous owners are
//! real [`Node`]s (claimed, taking and releasing through the replica's own code) whose writes
//! carry real redo, committed to their local SQLite copy before their window is stored by the
//! stream's real `store`, as a volume commits. The take under test is a [`Taker`] of a new
//! incarnation, run on a folder of its own (or on the folder of an earlier incarnation of the
//! same node, whose copy it finds there). The tests then read what the taker's copy holds (the
//! ids of the partitions its writes added), what it replayed ([`Taker::replayed`]), and what
//! the bucket holds ([`MemoryBucket::dump`]).
//!
//! Where a test needs the history to change in the middle of a take, a [`Hook`] on the bucket
//! runs a rule on each call: the rule may change the bucket at once, before the call is
//! carried out (the bucket in memory answers without waiting, so the rule runs its own calls
//! to their end in place), and may make the call fail.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use futures_util::FutureExt;

use super::format::{Keys, Manifest, Owner, Segment, Window, is_fence};
use super::history_tests::settings;
use super::take::{MAX_TAKE_ATTEMPTS, Taker, claim};
use super::{Node, ReplicaError};
use crate::cold::s3::memory::{Answer, Call, Fault, Faults, MemoryBucket, Op};
use crate::cold::s3::{Objects, Put};
use crate::store::{Landed, LocalCopy, Position, StreamError, Volume};
use crate::sync::lock;

/// The volumes of the bucket; the tests take [`VOLUME`], and a node may hold the other one
/// besides.
const VOLUMES: usize = 2;
const VOLUME: usize = 0;
const OTHER_VOLUME: usize = 1;
const PREFIX: &str = "replica";

/// What the bucket holds, as [`MemoryBucket::dump`] answers it.
type Dump = BTreeMap<String, Arc<[u8]>>;

// ---------------------------------------------------------------------------------------------
// The bucket, and a hook that changes it at a chosen call
// ---------------------------------------------------------------------------------------------

/// Decides how one call of the bucket is answered (`None`: as it should be), and may change
/// the bucket first.
type Rule = Box<dyn FnMut(&Call<'_>, &MemoryBucket) -> Option<Fault> + Send>;

/// Runs the rule armed (none: every call is answered as it should be).
#[derive(Default)]
struct Hook {
    bucket: OnceLock<Weak<MemoryBucket>>,
    rule: Mutex<Option<Rule>>,
}

/// The bucket's side of a [`Hook`] that the test keeps too.
struct Hooked(Arc<Hook>);

impl Faults for Hooked {
    fn answer(&self, call: &Call<'_>) -> Answer {
        // Taken out while it runs: the calls the rule makes itself are answered plainly.
        let Some(mut rule) = lock(&self.0.rule).take() else {
            return Answer::default();
        };
        let bucket = self.0.bucket.get().and_then(Weak::upgrade);
        let fault = bucket.and_then(|bucket| rule(call, &bucket));
        *lock(&self.0.rule) = Some(rule);
        Answer { yields: 0, fault }
    }
}

/// Runs a call of the bucket in memory to its end in place: answered plainly, it never waits.
fn at_once<T, E: std::fmt::Debug>(call: impl Future<Output = Result<T, E>>) -> T {
    call.now_or_never()
        .expect("the bucket in memory answers at once")
        .expect("the bucket answers")
}

/// Stores `bytes` at `key`, whatever is there.
fn put(bucket: &MemoryBucket, key: &str, bytes: &[u8]) {
    let stored = match at_once(bucket.get(key)) {
        Some((_, etag)) => at_once(bucket.replace(key, bytes, &etag)),
        None => at_once(bucket.create(key, bytes)),
    };
    assert!(matches!(stored, Put::Stored(_)), "{key} is stored");
}

/// Makes the bucket go from state `from` to state `to`: every object that differs is stored
/// as `to` has it, or deleted.
fn change(bucket: &MemoryBucket, from: &Dump, to: &Dump) {
    let keys: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    for key in keys {
        match (from.get(key), to.get(key)) {
            (before, Some(after)) if before != Some(after) => put(bucket, key, after),
            (Some(_), None) => at_once(bucket.delete(key)),
            _ => {}
        }
    }
}

/// Replaces volume [`VOLUME`]'s manifest by the same history one version on, as its owner
/// writing it again does (a snapshot, a release): a take that read it before has to read it
/// again.
fn replace_manifest(bucket: &MemoryBucket, keys: &Keys) {
    let key = keys.manifest(VOLUME);
    let (bytes, etag) = at_once(bucket.get(&key)).expect("a manifest");
    let mut manifest = Manifest::decode(&bytes).expect("a manifest");
    manifest.version += 1;
    let replaced = at_once(bucket.replace(&key, &manifest.encode(), &etag));
    assert!(
        matches!(replaced, Put::Stored(_)),
        "the manifest is replaced"
    );
}

// ---------------------------------------------------------------------------------------------
// Nodes writing the history, and the take under test
// ---------------------------------------------------------------------------------------------

/// A bucket with a [`Hook`], and a folder for the nodes' copies (one folder a node).
struct Setup {
    bucket: Arc<MemoryBucket>,
    hook: Arc<Hook>,
    keys: Keys,
    root: tempfile::TempDir,
}

/// How a take under test ended.
struct Take {
    /// The taker's incarnation.
    inc: u64,
    taken: Result<(Manifest, String), ReplicaError>,
    /// Windows its last attempt replayed.
    replayed: u64,
}

impl Take {
    fn manifest(&self) -> &Manifest {
        match &self.taken {
            Ok((manifest, _)) => manifest,
            Err(err) => panic!("the take failed: {err}"),
        }
    }
}

impl Setup {
    fn new() -> Self {
        let hook = Arc::new(Hook::default());
        let bucket = MemoryBucket::with_faults(Hooked(hook.clone()));
        hook.bucket
            .set(Arc::downgrade(&bucket))
            .unwrap_or_else(|_| unreachable!("a new hook"));
        Self {
            bucket,
            hook,
            keys: Keys::new(PREFIX),
            root: tempfile::tempdir().expect("a temp dir"),
        }
    }

    /// Node `name`'s folder.
    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.root.path().join(name);
        std::fs::create_dir_all(&dir).expect("a node's folder");
        dir
    }

    /// Where node `name`'s copy of [`VOLUME`] lies.
    fn copy(&self, name: &str) -> PathBuf {
        self.dir(name).join(Volume::file_name(VOLUME))
    }

    /// Answers every later call of the bucket as `rule` says.
    fn arm(&self, rule: impl FnMut(&Call<'_>, &MemoryBucket) -> Option<Fault> + Send + 'static) {
        *lock(&self.hook.rule) = Some(Box::new(rule));
    }

    fn objects(&self) -> Dump {
        self.bucket.dump()
    }

    /// Volume [`VOLUME`]'s manifest in the bucket.
    fn manifest(&self) -> Manifest {
        let objects = self.objects();
        let bytes = objects
            .get(&self.keys.manifest(VOLUME))
            .expect("a manifest");
        Manifest::decode(bytes).expect("a manifest")
    }

    /// A new incarnation of node `name`, on its folder, writing as a served volume does.
    /// A new incarnation of node `name` that has taken [`VOLUME`].
    async fn owner(&self, name: &'static str) -> Writer {
        let writer = self.writer(name).await;
        writer.take(&[VOLUME]).await;
        writer
    }

    async fn writer(&self, name: &'static str) -> Writer {
        let dir = self.dir(name);
        let node = Node::claim(
            Objects::memory(self.bucket.clone()),
            &settings(name),
            dir.clone(),
            VOLUMES,
            None,
            Arc::default(),
        )
        .await
        .expect("an incarnation is claimed");
        Writer {
            dir,
            node,
            next_seq: 1,
        }
    }

    /// A new incarnation of node `name` takes [`VOLUME`] into its folder: the take under test.
    async fn take(&self, name: &str) -> Take {
        let objects = Objects::memory(self.bucket.clone());
        let inc = claim(&objects, &self.keys, name)
            .await
            .expect("an incarnation is claimed");
        let mut taker = Taker::new(&objects, &self.keys, name, inc, 1);
        let taken = taker.take(&self.dir(name), VOLUME).await;
        Take {
            inc,
            taken,
            replayed: taker.replayed,
        }
    }
}

/// A node incarnation writing volumes: each write is committed to its copy in a window of its
/// own, then that window is stored (or not) as the test says.
struct Writer {
    dir: PathBuf,
    node: Arc<Node>,
    /// The seq of its next window.
    next_seq: u64,
}

/// A window committed to the writer's copy, not stored yet.
struct Unlanded {
    at: Position,
    bytes: Arc<[u8]>,
}

impl Writer {
    /// Takes `volumes` through the node's own take.
    async fn take(&self, volumes: &[usize]) {
        self.node
            .take(volumes, self.next_seq)
            .await
            .expect("the writer takes its volumes");
    }

    /// Commits write `id` (partition `id` added) to volume `volume`'s copy, in the next
    /// window, as a volume commits before its window lands.
    fn commit(&mut self, volume: usize, id: i64) -> Unlanded {
        let at = Position {
            node: self.node.node.clone(),
            inc: self.node.inc,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        let redo = LocalCopy::test_write(id);
        let path = self.dir.join(Volume::file_name(volume));
        let mut copy = LocalCopy::open(&path).expect("the writer's copy");
        copy.apply(&redo, &at).expect("the write commits");
        copy.close().expect("the copy closes");
        self.node.submitted[volume].store(at.seq, Ordering::SeqCst);
        let epoch = self.node.epochs[volume].load(Ordering::SeqCst);
        let bytes = Window::encode(&at, &[(volume, epoch, &redo)]).into();
        Unlanded { at, bytes }
    }

    /// Stores `window` as the stream's writer does.
    async fn land(&self, window: Unlanded) -> Landed {
        let seq = window.at.seq;
        let landed = super::store(self.node.clone(), window.at, window.bytes).await;
        if landed.is_ok() {
            self.node.landed.fetch_max(seq, Ordering::SeqCst);
        }
        landed
    }

    /// Commits write `id` to volume `volume` and lands its window: the write is acknowledged.
    async fn write(&mut self, volume: usize, id: i64) {
        let window = self.commit(volume, id);
        self.land(window).await.expect("the window lands");
    }

    /// Hands volume `volume` off: its history ends before the next window.
    async fn release(&self, volume: usize) {
        self.node
            .release(volume, self.next_seq)
            .await
            .expect("the volume is released");
    }

    /// Snapshots volume `volume` and collects what no history needs any more.
    async fn snapshot_and_collect(&self, volume: usize) {
        self.node.clone().snapshot_and_collect(volume).await;
    }

    /// The key of window `seq` of this incarnation's stream.
    fn window_key(&self, keys: &Keys, seq: u64) -> String {
        keys.window(&self.node.node, self.node.inc, seq)
    }

    /// This incarnation's stream as a segment of a history, from window `first` to `end`.
    fn segment(&self, first: u64, end: Option<u64>) -> Segment {
        Segment {
            node: self.node.node.clone(),
            inc: self.node.inc,
            first,
            end,
        }
    }
}

/// The writes (partition ids) the copy at `path` holds, in order.
fn writes_in(path: &Path) -> Vec<i64> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the copy opens");
    let mut rows = conn
        .prepare("SELECT id FROM partitions ORDER BY id")
        .expect("a query");
    rows.query_map([], |row| row.get(0))
        .expect("the partitions")
        .collect::<rusqlite::Result<Vec<i64>>>()
        .expect("the partitions")
}

/// The writes of the one copy set aside in `dir` (panics unless there is exactly one).
fn set_aside_writes(dir: &Path) -> Vec<i64> {
    let aside = set_aside_in(dir);
    assert_eq!(aside.len(), 1, "{aside:?}");
    writes_in(&aside[0])
}

/// The copies set aside in `dir` (not the files that describe them).
fn set_aside_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the folder")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.contains("-set-aside-")
                && !["-wal", "-shm", "-damaged"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix))
        })
        .collect();
    found.sort();
    found
}

fn run(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
        .block_on(test);
}

// ---------------------------------------------------------------------------------------------
// The history chosen
// ---------------------------------------------------------------------------------------------

/// A take starts from the snapshot the manifest names and replays only the windows its chain
/// names after it: the windows before the snapshot are gone from the bucket, and the copy
/// still holds their writes.
#[test]
fn a_take_rebuilds_the_copy_from_the_snapshot_and_the_windows_after_it() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        a.write(VOLUME, 2).await;
        a.snapshot_and_collect(VOLUME).await;
        a.write(VOLUME, 3).await;
        let before = setup.manifest();
        let snapshot = before.snapshot.clone().expect("the volume was snapshotted");
        assert_eq!(before.chain, [a.segment(3, None)]);
        let objects = setup.objects();
        assert!(!objects.contains_key(&a.window_key(&setup.keys, 1)));
        assert!(!objects.contains_key(&a.window_key(&setup.keys, 2)));

        let b = setup.take("b").await;

        assert_eq!(writes_in(&setup.copy("b")), [1, 2, 3]);
        assert_eq!(b.replayed, 1, "only window 3 follows the snapshot");
        assert_eq!(b.manifest().snapshot, Some(snapshot));
    });
}

/// A take replays every segment of the chain in order: one a previous owner released, then
/// the open one of the owner that took it next.
#[test]
fn a_take_replays_every_segment_of_the_chain() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        a.release(VOLUME).await;
        let mut b = setup.owner("b").await;
        b.write(VOLUME, 2).await;

        let c = setup.take("c").await;

        assert_eq!(writes_in(&setup.copy("c")), [1, 2]);
        assert_eq!(c.replayed, 2);
        let own = Segment {
            node: "c".to_owned(),
            inc: c.inc,
            first: 1,
            end: None,
        };
        assert_eq!(
            c.manifest().chain,
            [a.segment(1, Some(2)), b.segment(1, Some(2)), own]
        );
    });
}

/// A copy taken holds the acknowledged writes only: the previous owner's window 2 never
/// landed, so its window 3, which did land, was never acknowledged (a window is answered only
/// once every window before it landed), and the take seals the stream at 2 without it.
#[test]
fn a_take_leaves_out_the_windows_from_one_that_never_landed() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        let _never_landed = a.commit(VOLUME, 2);
        let unacknowledged = a.commit(VOLUME, 3);
        a.land(unacknowledged).await.expect("window 3 lands");

        let b = setup.take("b").await;

        assert_eq!(writes_in(&setup.copy("b")), [1]);
        assert_eq!(b.replayed, 1);
        assert_eq!(b.manifest().chain[0], a.segment(1, Some(2)));
    });
}

// ---------------------------------------------------------------------------------------------
// The local copy: kept or set aside
// ---------------------------------------------------------------------------------------------

/// A node taking back a volume it released finds its copy on the volume's history: the copy
/// is kept, and only the windows the next owner wrote after it are replayed.
#[test]
fn a_copy_on_the_history_is_kept_and_only_the_windows_after_it_replayed() {
    run(async {
        let setup = Setup::new();
        let mut b = setup.owner("b").await;
        b.write(VOLUME, 1).await;
        b.write(VOLUME, 2).await;
        b.release(VOLUME).await;
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 3).await;
        a.write(VOLUME, 4).await;

        let b_again = setup.take("b").await;

        assert!(b_again.taken.is_ok());
        assert_eq!(b_again.replayed, 2, "windows 1 and 2 of a's stream only");
        assert_eq!(writes_in(&setup.copy("b")), [1, 2, 3, 4]);
        assert_eq!(set_aside_in(&setup.dir("b")), Vec::<PathBuf>::new());
    });
}

/// A copy whose position no segment of the history holds (here one from another history) is
/// moved aside, untouched, and the volume is rebuilt from the bucket without its writes.
#[test]
fn a_copy_off_the_history_is_set_aside_and_the_volume_rebuilt() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        a.write(VOLUME, 2).await;
        let foreign = Position {
            node: "x".to_owned(),
            inc: 7,
            seq: 3,
        };
        let mut copy = LocalCopy::open(&setup.copy("b")).expect("a copy");
        copy.apply(&LocalCopy::test_write(99), &foreign)
            .expect("a foreign write");
        copy.close().expect("the copy closes");

        let b = setup.take("b").await;

        assert!(b.taken.is_ok());
        assert_eq!(set_aside_writes(&setup.dir("b")), [99]);
        assert_eq!(writes_in(&setup.copy("b")), [1, 2]);
        assert_eq!(b.replayed, 2);
    });
}

/// A node that stopped with a window committed to its copy and never landed finds, at its
/// next start, a copy past what the bucket holds: it is set aside, and the copy rebuilt holds
/// the landed writes only.
#[test]
fn a_copy_holding_a_window_that_never_landed_is_set_aside() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        let _never_landed = a.commit(VOLUME, 2);

        let restarted = setup.take("a").await;

        assert!(restarted.taken.is_ok());
        assert_eq!(set_aside_writes(&setup.dir("a")), [1, 2]);
        assert_eq!(writes_in(&setup.copy("a")), [1]);
        assert_eq!(restarted.replayed, 1);
    });
}

// ---------------------------------------------------------------------------------------------
// The seal
// ---------------------------------------------------------------------------------------------

/// Taking a volume from a live owner writes a fence at its stream's first absent window and
/// ends its segment there; the owner's next window meets the fence and is refused as sealed.
#[test]
fn a_take_from_a_live_owner_seals_its_stream_and_its_next_window_is_refused() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;

        let b = setup.take("b").await;

        let fence = a.window_key(&setup.keys, 2);
        assert!(
            setup
                .objects()
                .get(&fence)
                .is_some_and(|bytes| is_fence(bytes))
        );
        assert_eq!(b.manifest().chain[0], a.segment(1, Some(2)));
        let next = a.commit(VOLUME, 2);
        let landed = a.land(next).await;
        assert!(
            matches!(&landed, Err(StreamError::Sealed { key }) if *key == fence),
            "{landed:?}"
        );
        assert!(
            setup
                .objects()
                .get(&fence)
                .is_some_and(|bytes| is_fence(bytes))
        );
        assert_eq!(writes_in(&setup.copy("b")), [1]);
    });
}

/// A volume its owner released ends where the release says: its taker writes no fence, and
/// the owner's stream goes on landing the windows of the volumes it still holds.
#[test]
fn a_take_after_a_release_writes_no_fence() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.writer("a").await;
        a.take(&[VOLUME, OTHER_VOLUME]).await;
        a.write(VOLUME, 1).await;
        a.release(VOLUME).await;

        let b = setup.take("b").await;

        assert_eq!(writes_in(&setup.copy("b")), [1]);
        assert_eq!(b.manifest().chain[0], a.segment(1, Some(2)));
        let stream = setup.keys.stream("a", a.node.inc);
        let fences: Vec<String> = setup
            .objects()
            .into_iter()
            .filter(|(key, bytes)| key.starts_with(&stream) && is_fence(bytes))
            .map(|(key, _)| key)
            .collect();
        assert_eq!(fences, Vec::<String>::new());
        let other = a.commit(OTHER_VOLUME, 2);
        assert!(a.land(other).await.is_ok());
    });
}

// ---------------------------------------------------------------------------------------------
// The manifest's versions
// ---------------------------------------------------------------------------------------------

/// Each take writes the manifest its answer names, of a version past the one it replaced,
/// with the taker as owner and the next epoch; the first take of a volume writes version 1.
#[test]
fn each_take_writes_a_manifest_of_a_greater_version_naming_the_new_owner_and_epoch() {
    run(async {
        let setup = Setup::new();
        let mut previous: Option<Manifest> = None;
        for name in ["a", "b", "c", "a"] {
            let take = setup.take(name).await;
            let (manifest, etag) = take.taken.expect("the take succeeds");
            let (bytes, stored_etag) =
                at_once(setup.bucket.get(&setup.keys.manifest(VOLUME))).expect("a manifest");
            assert_eq!(Manifest::decode(&bytes), Ok(manifest.clone()));
            assert_eq!(etag, stored_etag);
            let owner = Owner {
                node: name.to_owned(),
                inc: take.inc,
            };
            assert_eq!(manifest.owner, owner);
            let (version, epoch) = previous
                .as_ref()
                .map_or((1, 1), |before| (before.version + 1, before.epoch + 1));
            assert_eq!((manifest.version, manifest.epoch), (version, epoch));
            previous = Some(manifest);
        }
    });
}

/// A take whose manifest write finds the manifest replaced meanwhile (here its owner released
/// the volume) stores nothing over it: the replacement is still there at the take's next
/// write, which builds on it, one version past.
#[test]
fn a_take_whose_manifest_write_loses_a_race_does_not_overwrite_the_winner() {
    run(async {
        let setup = Setup::new();
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 1).await;
        let manifest_key = setup.keys.manifest(VOLUME);
        let owner = a.node.clone();
        let end = a.next_seq;
        let writes: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let seen = writes.clone();
        setup.arm(move |call, bucket| {
            if call.op != Op::Replace || call.key != manifest_key {
                return None;
            }
            let mut seen = lock(&seen);
            if seen.is_empty() {
                // The owner releases the volume just before the take's write.
                owner
                    .release(VOLUME, end)
                    .now_or_never()
                    .expect("a release in memory answers at once")
                    .expect("the release");
            }
            seen.push(bucket.dump()[&manifest_key].to_vec());
            None
        });

        let b = setup.take("b").await;

        let writes = lock(&writes).clone();
        assert_eq!(writes.len(), 2, "the take wrote its manifest twice");
        assert_eq!(writes[0], writes[1], "the refused write changed nothing");
        let winner = Manifest::decode(&writes[0]).expect("the release's manifest");
        assert_eq!(winner.chain[0], a.segment(1, Some(end)));
        let taken = b.manifest();
        assert_eq!(taken.version, winner.version + 1);
        assert_eq!(taken.chain[0], winner.chain[0]);
        assert_eq!(setup.manifest(), *taken);
        assert_eq!(writes_in(&setup.copy("b")), [1]);
    });
}

// ---------------------------------------------------------------------------------------------
// A history that moves while it is taken
// ---------------------------------------------------------------------------------------------

/// The previous owner snapshots the volume and collects the windows its history named while
/// the take replays them: the take finds a window gone, sees the manifest replaced, and takes
/// the volume again from the new snapshot, ending with every write.
///
/// The snapshot and collection are run for real first, to learn what they change in the
/// bucket; the bucket is put back as it was, and the hook makes the same changes at the take's
/// first read of a window.
#[test]
fn a_take_whose_history_is_snapshotted_and_collected_during_its_replay_is_taken_again() {
    run(async {
        let setup = Setup::new();
        let mut b = setup.owner("b").await;
        b.write(VOLUME, 1).await;
        b.write(VOLUME, 2).await;
        b.release(VOLUME).await;
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 3).await;
        let before = setup.objects();
        a.snapshot_and_collect(VOLUME).await;
        let after = setup.objects();
        let moved = setup.manifest();
        let snapshot = moved.snapshot.clone().expect("the volume was snapshotted");
        assert!(!after.contains_key(&b.window_key(&setup.keys, 1)));
        change(&setup.bucket, &after, &before);
        let b_stream = setup.keys.stream("b", b.node.inc);
        let reads = Arc::new(AtomicU32::new(0));
        let counted = reads.clone();
        setup.arm(move |call, bucket| {
            if call.op == Op::Get
                && call.key.starts_with(&b_stream)
                && counted.fetch_add(1, Ordering::SeqCst) == 0
            {
                change(bucket, &before, &after);
            }
            None
        });

        let c = setup.take("c").await;

        assert!(
            reads.load(Ordering::SeqCst) > 0,
            "the take read b's windows, which only the history before the move names"
        );
        let taken = c.manifest();
        assert_eq!(taken.snapshot, Some(snapshot));
        assert_eq!(taken.version, moved.version + 1);
        assert_eq!(writes_in(&setup.copy("c")), [1, 2, 3]);
    });
}

/// Volume [`VOLUME`]'s history, written by `a`, moves `during_replay` times while a take
/// replays it (the manifest replaced, and the take's read of a window failing, as one of a
/// collected window would), then `at_write` times just before the take writes its manifest.
/// Answers how the take ended, and the manifest version before it.
async fn take_while_moving(during_replay: u32, at_write: u32) -> (Setup, Take, u64) {
    let setup = Setup::new();
    let mut a = setup.owner("a").await;
    a.write(VOLUME, 1).await;
    a.write(VOLUME, 2).await;
    let version = setup.manifest().version;
    let keys = setup.keys.clone();
    // An attempt reads the stream's windows at once, and stops at its first read that fails.
    let first_window = a.window_key(&keys, 1);
    let manifest_key = keys.manifest(VOLUME);
    let (mut during_replay, mut at_write) = (during_replay, at_write);
    setup.arm(move |call, bucket| {
        if during_replay > 0 && call.op == Op::Get && call.key == first_window {
            during_replay -= 1;
            replace_manifest(bucket, &keys);
            return Some(Fault::Fail);
        }
        if at_write > 0 && call.op == Op::Replace && call.key == manifest_key {
            at_write -= 1;
            replace_manifest(bucket, &keys);
        }
        None
    });
    let take = setup.take("b").await;
    (setup, take, version)
}

/// A take retries its whole take each time the history moves, during the replay or at the
/// manifest's write, up to [`MAX_TAKE_ATTEMPTS`] moves in all, and ends with every write.
#[test]
fn a_take_survives_max_take_attempts_moves_of_its_history_whichever_way_it_moved() {
    for during_replay in [0, 2, MAX_TAKE_ATTEMPTS] {
        let at_write = MAX_TAKE_ATTEMPTS - during_replay;
        run(async {
            let (setup, take, version) = take_while_moving(during_replay, at_write).await;

            let why = format!("{during_replay} moves during the replay, {at_write} at the write");
            assert!(take.taken.is_ok(), "{why}: {:?}", take.taken.as_ref().err());
            let moves = u64::from(MAX_TAKE_ATTEMPTS);
            assert_eq!(take.manifest().version, version + moves + 1, "{why}");
            assert_eq!(setup.manifest(), *take.manifest(), "{why}");
            assert_eq!(writes_in(&setup.copy("b")), [1, 2], "{why}");
        });
    }
}

/// One move more than [`MAX_TAKE_ATTEMPTS`], whether during the replay, at the manifest's
/// write or both, and the take gives up with [`ReplicaError::HistoryMoved`]: the retries of
/// both kinds share one bound, and the manifest the last move wrote stays as it is.
#[test]
fn a_take_gives_up_after_more_moves_than_max_take_attempts_whichever_way_it_moved() {
    for during_replay in [0, 3, MAX_TAKE_ATTEMPTS + 1] {
        let at_write = MAX_TAKE_ATTEMPTS + 1 - during_replay;
        run(async {
            let (setup, take, version) = take_while_moving(during_replay, at_write).await;

            let why = format!("{during_replay} moves during the replay, {at_write} at the write");
            assert!(
                matches!(take.taken, Err(ReplicaError::HistoryMoved { .. })),
                "{why}: {:?}",
                take.taken.as_ref().map(|(manifest, _)| manifest)
            );
            let manifest = setup.manifest();
            assert_eq!(manifest.owner.node, "a", "{why}");
            let moves = u64::from(MAX_TAKE_ATTEMPTS) + 1;
            assert_eq!(manifest.version, version + moves, "{why}");
        });
    }
}

/// A take whose history moves while it replays a live owner's stream (the owner snapshots and
/// collects the windows the take was reading) may find one of them absent, and fence there: a
/// fence over a collected window, which the owner passed long ago, seals nothing. The take,
/// taken again on the moved history, must not trust it: it fences the owner where its stream
/// really ends, and the owner's next window is refused. Before, the retry ended the owner's
/// segment at that fence, and the owner's next window landed and was acknowledged, a write
/// the volume's next taker lacked.
#[test]
fn a_fence_over_a_window_collected_meanwhile_is_not_taken_for_a_seal() {
    run(async {
        let setup = Setup::new();
        let mut b = setup.owner("b").await;
        b.write(VOLUME, 1).await;
        b.write(VOLUME, 2).await;
        b.release(VOLUME).await;
        let mut a = setup.owner("a").await;
        a.write(VOLUME, 3).await;
        a.write(VOLUME, 4).await;
        let before = setup.objects();
        a.snapshot_and_collect(VOLUME).await;
        let after = setup.objects();
        let collected = a.window_key(&setup.keys, 1);
        assert!(before.contains_key(&collected) && !after.contains_key(&collected));
        change(&setup.bucket, &after, &before);
        let moved = Arc::new(AtomicU32::new(0));
        let moves = moved.clone();
        setup.arm(move |call, bucket| {
            if call.key == collected && moves.fetch_add(1, Ordering::SeqCst) == 0 {
                change(bucket, &before, &after);
            }
            None
        });

        let c = setup.take("c").await;

        assert!(
            moved.load(Ordering::SeqCst) > 0,
            "the take read a's window 1"
        );
        assert_eq!(writes_in(&setup.copy("c")), [1, 2, 3, 4]);
        let next = a.commit(VOLUME, 5);
        let landed = a.land(next).await;
        assert!(
            matches!(&landed, Err(StreamError::Sealed { .. })),
            "a's window after c's take: {landed:?}; c's history: {:?}",
            c.manifest().chain
        );
    });
}
