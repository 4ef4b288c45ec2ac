//! Placement and volume moves of several nodes over one in-memory key store
//! ([`MemoryKeyStore`]), without etcd, processes or a replica: each test drives the pieces
//! `Cluster::serve`'s loop is made of (join, rejoin, reading the view, the take and release
//! decisions, claims, routes) and moves the store's clock to expire leases. A node "takes" a
//! volume it claimed as `Shared::take` ends once the replica took it: by opening it in its own
//! data folder.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;

use super::etcd::{LeaseId, WatchEvent};
use super::keys::KeyStore;
use super::keys::memory::MemoryKeyStore;
use super::*;
use crate::store::{CommitterPool, SyncMode};

/// Volumes of every test cluster: enough that each of three nodes gets a share.
const VOLUMES: usize = 12;

const TTL: Duration = Duration::from_secs(3);

const PREFIX: &str = "/durability/test/";

/// One node of a test cluster: its part over the shared store, and the volumes it opens in a
/// data folder of its own.
struct Node {
    cluster: Cluster,
    keys: MemoryKeyStore,
    inc: u64,
    volumes: Arc<Volumes>,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Incarnation `inc` of node `name`, not joined yet, holding no volume.
    fn new(keys: &MemoryKeyStore, name: &str, inc: u64) -> Self {
        let shared = Shared::new(
            name,
            &format!("{}/", url(name)),
            PREFIX.to_owned(),
            Arc::new(keys.clone()),
            TTL,
            VOLUMES,
            tokio::runtime::Handle::current(),
        );
        let dir = tempfile::tempdir().unwrap();
        let volumes = Arc::new(Volumes::held_elsewhere(
            dir.path(),
            VOLUMES,
            SyncMode::Normal,
            None,
            CommitterPool::new(1),
        ));
        assert!(shared.volumes.set(volumes.clone()).is_ok());
        Self {
            cluster: Cluster {
                shared: Arc::new(shared),
            },
            keys: keys.clone(),
            inc,
            volumes,
            _dir: dir,
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.cluster.shared
    }

    fn name(&self) -> &str {
        &self.shared().node
    }

    fn owner(&self) -> Owner {
        Owner {
            node: self.name().to_owned(),
            inc: self.inc,
        }
    }

    fn lease(&self) -> LeaseId {
        self.shared().lease.load(Ordering::SeqCst)
    }

    /// Joins as `serve` does: registers this incarnation under a new lease.
    async fn join(&self) -> LeaseId {
        let lease = self.shared().join(self.inc).await.unwrap();
        self.shared().lease.store(lease, Ordering::SeqCst);
        lease
    }

    /// Renews this node's lease once, as its lease keeper does.
    async fn keep_alive(&self) {
        assert!(self.keys.keep_alive(self.lease()).await.unwrap());
    }

    /// Reads the view, then answers the volumes due to this node.
    async fn due_to_take(&self) -> Vec<usize> {
        self.shared().read_view().await.unwrap();
        self.shared().due_to_take(self.inc, &self.volumes)
    }

    /// Reads the view, then answers the volumes this node would hand over.
    async fn due_to_release(&self) -> Vec<usize> {
        self.shared().read_view().await.unwrap();
        self.shared().due_to_release(&self.volumes)
    }

    /// One round of `claim_forever`'s claims: the volumes due here whose owner key this
    /// incarnation holds now.
    async fn claim_due(&self) -> Vec<usize> {
        let mine = self.shared().owner_value(self.inc);
        let mut claimed = Vec::new();
        for volume in self.due_to_take().await {
            if self.shared().claim(volume, &mine, self.lease()).await {
                claimed.push(volume);
            }
        }
        claimed
    }

    /// Opens `volumes` here, as `Shared::take` does once the replica took them.
    fn open(&self, volumes: &[usize]) {
        for &volume in volumes {
            self.volumes.attach(volume).unwrap();
        }
    }

    /// Claims what is due here and takes it; answers what it took.
    async fn settle(&self) -> Vec<usize> {
        let claimed = self.claim_due().await;
        self.open(&claimed);
        claimed
    }
}

/// Every node of `nodes` joins, then each claims and opens the volumes due to it: a cluster
/// at rest.
async fn join_and_settle<'a>(nodes: impl IntoIterator<Item = &'a Node> + Clone) {
    for node in nodes.clone() {
        node.join().await;
    }
    for node in nodes {
        node.settle().await;
    }
}

fn url(node: &str) -> String {
    format!("http://{node}.test:7000")
}

/// The owner of each owned volume, as the store holds it now.
async fn owners(keys: &MemoryKeyStore) -> BTreeMap<usize, Owner> {
    let owners = format!("{PREFIX}owners/");
    let (kvs, _) = keys.prefix(&owners).await.unwrap();
    kvs.iter()
        .map(|kv| {
            let volume = kv.key.strip_prefix(&owners).unwrap().parse().unwrap();
            (volume, serde_json::from_slice(&kv.value).unwrap())
        })
        .collect()
}

/// The next batch of `watch`; fails the test when none comes.
async fn next(watch: &mut super::keys::WatchStream) -> Vec<WatchEvent> {
    tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("a batch of events")
        .expect("the watch goes on")
        .expect("events")
}

/// The volumes rendezvous hashing gives `node` among `members`.
fn share(node: &str, members: &[&str]) -> Vec<usize> {
    (0..VOLUMES)
        .filter(|&volume| placement::owner_of(volume, members.iter().copied()) == Some(node))
        .collect()
}

/// Joining puts this incarnation's member key (its URL and incarnation) under the lease
/// joining granted, so the key goes when the lease is not renewed.
#[tokio::test]
async fn join_registers_this_incarnation_under_its_lease() {
    let keys = MemoryKeyStore::new();
    let a = Node::new(&keys, "a", 7);
    let lease = a.join().await;

    let key = a.shared().member_key("a");
    let (kvs, _) = keys.prefix(&key).await.unwrap();
    let [kv] = kvs.as_slice() else {
        panic!("{kvs:?}")
    };
    assert_eq!(kv.lease, lease);
    let member: Member = serde_json::from_slice(&kv.value).unwrap();
    assert_eq!(
        member,
        Member {
            url: url("a"),
            inc: 7,
            kafka: None,
        }
    );
    a.shared().read_view().await.unwrap();
    assert_eq!(a.cluster.status().members.len(), 1);

    keys.advance(TTL);
    assert!(keys.prefix(&key).await.unwrap().0.is_empty());
}

/// A new incarnation of a node revokes the lease of the one still registered: its owner keys
/// go at once, so its volumes are due again, to the new incarnation among others.
#[tokio::test]
async fn a_new_incarnation_revokes_the_earlier_ones_lease_and_frees_its_volumes() {
    let keys = MemoryKeyStore::new();
    let earlier = Node::new(&keys, "a", 1);
    let earlier_lease = earlier.join().await;
    assert_eq!(earlier.settle().await.len(), VOLUMES);
    assert_eq!(owners(&keys).await.len(), VOLUMES);

    let later = Node::new(&keys, "a", 2);
    let lease = later.join().await;

    assert_ne!(lease, earlier_lease);
    assert!(!keys.keep_alive(earlier_lease).await.unwrap());
    assert!(owners(&keys).await.is_empty());
    later.shared().read_view().await.unwrap();
    assert_eq!(read_lock(&later.shared().view).members["a"].inc, 2);
    assert_eq!(
        later.claim_due().await,
        (0..VOLUMES).collect::<Vec<_>>(),
        "the new incarnation claims the volumes its earlier one owned"
    );
}

/// A node whose name a live node registered under another URL cannot join; under the same
/// URL (a restart) it can.
#[tokio::test]
async fn a_name_registered_at_another_url_is_refused() {
    let keys = MemoryKeyStore::new();
    let a = Node::new(&keys, "a", 1);
    a.join().await;
    let key = a.shared().member_key("a");

    assert!(node_is_free(&keys, &key, &url("a")).await.is_ok());
    let refused = node_is_free(&keys, &key, "http://elsewhere.test:7000").await;
    assert!(matches!(
        refused,
        Err(ClusterError::NameTaken { url: taken, .. }) if taken == url("a")
    ));

    keys.advance(TTL);
    assert!(
        node_is_free(&keys, &key, "http://elsewhere.test:7000")
            .await
            .is_ok()
    );
}

/// The first node records its volume count; a later node asking for another count gets the
/// recorded one.
#[tokio::test]
async fn the_first_node_records_the_volume_count_and_later_ones_keep_it() {
    let keys = MemoryKeyStore::new();
    let key = format!("{PREFIX}config");

    assert_eq!(volume_count(&keys, &key, 12).await.unwrap(), 12);
    assert_eq!(volume_count(&keys, &key, 64).await.unwrap(), 12);
}

/// With every member seen, each volume is due to exactly one node, the one rendezvous
/// hashing picks.
#[tokio::test]
async fn each_volume_is_due_to_the_one_node_placement_picks() {
    let keys = MemoryKeyStore::new();
    let nodes = [
        Node::new(&keys, "a", 1),
        Node::new(&keys, "b", 1),
        Node::new(&keys, "c", 1),
    ];
    for node in &nodes {
        node.join().await;
    }

    let mut seen = BTreeSet::new();
    for node in &nodes {
        let due = node.due_to_take().await;
        assert_eq!(due, share(node.name(), &["a", "b", "c"]));
        assert!(!due.is_empty(), "{} has no share", node.name());
        for volume in due {
            assert!(seen.insert(volume), "volume {volume} is due to two nodes");
        }
    }
    assert_eq!(seen.len(), VOLUMES);
}

/// Owner keys are created only where absent: a node that has not seen another yet wants
/// every volume, but gets only those the other did not claim first, and then wants none of
/// the other's while that one lives.
#[tokio::test]
async fn a_claimed_volume_is_never_claimed_by_a_second_node() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    a.join().await;
    // `a` reads its view alone: every volume is due to it.
    assert_eq!(a.due_to_take().await.len(), VOLUMES);
    b.join().await;
    let b_share = share("b", &["a", "b"]);
    assert_eq!(b.settle().await, b_share);

    // `a` claims on its stale view.
    let mine = a.shared().owner_value(1);
    let mut claimed = Vec::new();
    for volume in 0..VOLUMES {
        if a.shared().claim(volume, &mine, a.lease()).await {
            claimed.push(volume);
        }
    }

    assert_eq!(claimed, share("a", &["a", "b"]));
    let owners = owners(&keys).await;
    assert_eq!(owners.len(), VOLUMES);
    for volume in b_share {
        assert_eq!(owners[&volume], b.owner());
    }
    assert_eq!(a.due_to_take().await, claimed);
}

/// A volume this incarnation claimed and has not taken yet is still its own at the next
/// round; another incarnation of the same node cannot claim it.
#[tokio::test]
async fn a_claim_made_earlier_by_this_incarnation_is_still_its_own() {
    let keys = MemoryKeyStore::new();
    let a = Node::new(&keys, "a", 1);
    a.join().await;
    let claimed = a.claim_due().await;
    assert_eq!(claimed.len(), VOLUMES);

    assert_eq!(a.due_to_take().await, claimed, "claimed, not taken: due");
    assert_eq!(a.claim_due().await, claimed);
    let other = a.shared().owner_value(2);
    assert!(!a.shared().claim(0, &other, a.lease()).await);

    a.open(&claimed);
    assert!(a.due_to_take().await.is_empty());
}

/// A node whose lease expires loses its member key and its owner keys; the others' views
/// then make its volumes due to them, each to the node placement picks among the living,
/// while they keep their own.
#[tokio::test]
async fn a_node_whose_lease_expires_has_its_volumes_taken_by_the_others() {
    let keys = MemoryKeyStore::new();
    let nodes = [
        Node::new(&keys, "a", 1),
        Node::new(&keys, "b", 1),
        Node::new(&keys, "c", 1),
    ];
    join_and_settle(&nodes).await;
    let [a, b, c] = &nodes;
    let c_share = share("c", &["a", "b", "c"]);
    assert_eq!(c.shared().held(), c_share);

    keys.advance(TTL / 2);
    a.keep_alive().await;
    b.keep_alive().await;
    keys.advance(TTL / 2);

    let owners_left = owners(&keys).await;
    assert!(
        c_share
            .iter()
            .all(|volume| !owners_left.contains_key(volume))
    );
    assert_eq!(owners_left.len(), VOLUMES - c_share.len());
    let (members, _) = keys.prefix(&format!("{PREFIX}members/")).await.unwrap();
    assert_eq!(members.len(), 2);

    let mut taken = Vec::new();
    for node in [a, b] {
        let due = node.due_to_take().await;
        for &volume in &due {
            assert!(c_share.contains(&volume), "{} takes {volume}", node.name());
            assert_eq!(
                placement::owner_of(volume, ["a", "b"]),
                Some(node.name()),
                "volume {volume}"
            );
        }
        assert!(node.due_to_release().await.is_empty());
        taken.extend(node.settle().await);
    }
    taken.sort_unstable();
    assert_eq!(taken, c_share);
    assert_eq!(owners(&keys).await.len(), VOLUMES);
}

/// A node joining gets its share handed over, but only once every volume has an owner: while
/// one is unowned (a failure being taken care of), nothing moves.
#[tokio::test]
async fn volumes_move_to_a_joining_node_once_every_volume_has_an_owner() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    join_and_settle([&a, &b]).await;
    let c = Node::new(&keys, "c", 1);
    c.join().await;
    let c_share = share("c", &["a", "b", "c"]);
    assert!(c.due_to_take().await.is_empty(), "every volume is owned");

    // One volume of `a` is unowned: nothing is handed over meanwhile.
    let unowned = *share("a", &["a", "b", "c"]).first().unwrap();
    let a_mine = a.shared().owner_value(1);
    assert!(
        keys.delete_if(&a.shared().owner_key(unowned), &a_mine)
            .await
            .unwrap()
    );
    assert!(a.due_to_release().await.is_empty());
    assert!(b.due_to_release().await.is_empty());
    assert!(a.shared().claim(unowned, &a_mine, a.lease()).await);

    let mut released = Vec::new();
    for node in [&a, &b] {
        let due = node.due_to_release().await;
        let mine = node.shared().owner_value(1);
        for &volume in &due {
            assert_eq!(placement::owner_of(volume, ["a", "b", "c"]), Some("c"));
            // What `release` does once the replica ended this node's segment.
            assert!(node.volumes.detach(volume, false).is_some());
            let key = node.shared().owner_key(volume);
            assert!(!keys.delete_if(&key, b"someone else").await.unwrap());
            assert!(keys.delete_if(&key, &mine).await.unwrap());
        }
        released.extend(due);
    }
    released.sort_unstable();
    assert_eq!(released, c_share);
    assert_eq!(c.settle().await, c_share);
    assert!(a.due_to_release().await.is_empty());
    assert!(b.due_to_release().await.is_empty());
}

/// `route` answers `Local` for a volume held here, the owner's URL for a volume a live node
/// owns (even one held here, once another node claimed it), and `Unowned` for a volume whose
/// owner is gone or that this node is handing over.
#[tokio::test]
async fn route_follows_the_owners_as_this_node_last_read_them() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    join_and_settle([&a, &b]).await;
    let (mine, theirs) = (share("a", &["a", "b"])[0], share("b", &["a", "b"])[0]);
    a.shared().read_view().await.unwrap();
    assert_eq!(a.cluster.route(mine), Route::Local);
    assert_eq!(a.cluster.route(theirs), Route::Remote(url("b")));

    a.shared().releasing.write().unwrap().push(mine);
    assert_eq!(a.cluster.route(mine), Route::Unowned);
    a.shared().releasing.write().unwrap().clear();

    // `a` is cut off past its lease; `b` claims everything, `a`'s volumes too.
    keys.revoke(a.lease()).await.unwrap();
    a.shared().read_view().await.unwrap();
    assert_eq!(a.cluster.route(mine), Route::Local, "unowned, still held");
    b.settle().await;
    a.shared().read_view().await.unwrap();
    assert_eq!(a.cluster.route(mine), Route::Remote(url("b")));

    keys.revoke(b.lease()).await.unwrap();
    a.shared().read_view().await.unwrap();
    assert_eq!(a.cluster.route(theirs), Route::Unowned);
}

/// Joining again after a detach keeps the lease when the store still knows it; when it
/// expired meanwhile, a new lease carries the member key and the owner keys of the volumes
/// held here again.
#[tokio::test]
async fn rejoining_keeps_a_known_lease_or_claims_the_held_volumes_again() {
    let keys = MemoryKeyStore::new();
    let a = Node::new(&keys, "a", 1);
    let lease = a.join().await;
    let held = a.settle().await;

    let kept = a.shared().rejoin(&keys, 1, lease).await.unwrap();
    assert!(matches!(kept, Rejoined::Lease(again) if again == lease));

    keys.advance(TTL);
    assert!(owners(&keys).await.is_empty());
    let Rejoined::Lease(new) = a.shared().rejoin(&keys, 1, lease).await.unwrap() else {
        panic!("nothing was claimed meanwhile")
    };
    assert_ne!(new, lease);
    let owners = owners(&keys).await;
    assert_eq!(owners.keys().copied().collect::<Vec<_>>(), held);
    assert!(owners.values().all(|owner| *owner == a.owner()));
    let (kvs, _) = keys.prefix(PREFIX).await.unwrap();
    assert!(kvs.iter().all(|kv| kv.lease == new), "{kvs:?}");
}

/// A node joining again that finds a volume it holds claimed by another node answers that
/// volume (it must stop) and revokes the lease it just got, so it leaves no key behind.
#[tokio::test]
async fn rejoining_after_another_node_claimed_a_held_volume_gives_up() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    let lease = a.join().await;
    a.settle().await;
    b.join().await;
    keys.revoke(lease).await.unwrap();
    let claimed = b.settle().await;
    assert_eq!(claimed.len(), VOLUMES);

    let rejoined = a.shared().rejoin(&keys, 1, lease).await.unwrap();

    assert!(matches!(rejoined, Rejoined::Claimed(0)));
    let (members, _) = keys.prefix(&format!("{PREFIX}members/")).await.unwrap();
    assert_eq!(members.len(), 1, "the new lease took its member key along");
    assert!(
        owners(&keys)
            .await
            .values()
            .all(|owner| *owner == b.owner())
    );
}

/// The watch a node keeps wakes its claims when a member's lease expires, without waiting for
/// the next tick.
#[tokio::test]
async fn a_lease_expiring_wakes_the_watching_node() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    a.join().await;
    b.join().await;
    let watching = tokio::spawn(a.shared().clone().watch_changes());
    while keys.watches() == 0 {
        tokio::task::yield_now().await;
    }

    a.keep_alive().await;
    keys.advance(TTL);

    let woken = tokio::time::timeout(Duration::from_secs(5), a.shared().changed.notified());
    assert!(woken.await.is_ok());
    a.shared().leaving.store(true, Ordering::SeqCst);
    watching.abort();
}

/// The store's watch delivers a lease's expiry as deletes of its keys, after the writes before
/// it and in one batch, the way the cluster's watch sees a node fail.
#[tokio::test]
async fn a_watch_sees_a_members_expiry_as_deletes_of_its_keys() {
    let keys = MemoryKeyStore::new();
    let a = Node::new(&keys, "a", 1);
    let (_, revision) = keys.prefix(PREFIX).await.unwrap();
    let mut watch = keys.watch(PREFIX, revision + 1);
    a.join().await;
    let claimed = a.claim_due().await;

    keys.advance(TTL);

    let mut events = Vec::new();
    while events.len() < 1 + claimed.len() {
        events.extend(next(&mut watch).await);
    }
    assert!(matches!(&events[0], WatchEvent::Put(kv) if kv.key == a.shared().member_key("a")));
    let deletes = next(&mut watch).await;
    assert_eq!(deletes.len(), 1 + claimed.len());
    assert!(
        deletes
            .iter()
            .all(|event| matches!(event, WatchEvent::Delete(_)))
    );
}

/// An owner key naming an incarnation that is not the registered one (or a node that is not
/// registered) counts as unowned: the volume is due to the node placement picks, and no
/// request is sent to that incarnation.
#[tokio::test]
async fn an_owner_that_is_not_a_live_incarnation_counts_as_unowned() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 2), Node::new(&keys, "b", 1));
    a.join().await;
    b.join().await;
    let stale = serde_json::to_vec(&Owner {
        node: "a".to_owned(),
        inc: 1,
    })
    .unwrap();
    for volume in 0..VOLUMES {
        keys.put(&a.shared().owner_key(volume), &stale, 0)
            .await
            .unwrap();
    }

    assert_eq!(a.due_to_take().await, share("a", &["a", "b"]));
    assert_eq!(b.due_to_take().await, share("b", &["a", "b"]));
    let theirs = share("a", &["a", "b"])[0];
    assert_eq!(b.cluster.route(theirs), Route::Unowned);
}

/// While the store is out of reach a node claims nothing, and keeps routing by the owners it
/// last read: it serves what it holds and forwards the rest as before.
#[tokio::test]
async fn a_node_cut_off_from_the_store_claims_nothing_and_routes_as_last_read() {
    let keys = MemoryKeyStore::new();
    let (a, b) = (Node::new(&keys, "a", 1), Node::new(&keys, "b", 1));
    join_and_settle([&a, &b]).await;
    let (mine, theirs) = (share("a", &["a", "b"])[0], share("b", &["a", "b"])[0]);
    a.shared().read_view().await.unwrap();
    let mine_value = a.shared().owner_value(1);
    assert!(a.shared().claim(mine, &mine_value, a.lease()).await);

    keys.set_reachable(false);
    assert!(!a.shared().claim(mine, &mine_value, a.lease()).await);
    assert!(a.shared().read_view().await.is_err());
    assert_eq!(a.cluster.route(mine), Route::Local);
    assert_eq!(a.cluster.route(theirs), Route::Remote(url("b")));
    let mut watch = keys.watch(PREFIX, 1);
    assert!(matches!(
        watch.next().await,
        Some(Err(EtcdError::Unreachable(_)))
    ));
    assert!(watch.next().await.is_none());

    keys.set_reachable(true);
    assert!(a.shared().claim(mine, &mine_value, a.lease()).await);
    assert!(!a.shared().claim(theirs, &mine_value, a.lease()).await);
}
