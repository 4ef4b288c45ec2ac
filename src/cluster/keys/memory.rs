//! [`MemoryKeyStore`]: etcd's semantics that the cluster relies on, in memory, on a clock the
//! test moves ([`MemoryKeyStore::advance`]), so that lease expiry is deterministic.
//!
//! - The store's revision starts at 1 and each write (a put, a delete, a lease ending with all
//!   its keys) bumps it by one and stamps the keys it writes with it; a `create` or
//!   `delete_if` whose condition fails writes nothing.
//! - A lease lives for its TTL after its grant or its last keep-alive (exactly its TTL: etcd
//!   rounds it up to whole seconds). When it ends, expired or revoked, its keys are deleted.
//!   A put under a lease the store does not know fails as etcd's does (`lease not found`).
//! - A watch first delivers the history from its start revision, then each later write, one
//!   batch per revision, only the events under its prefix.
//! - [`MemoryKeyStore::set_reachable`] cuts the store off: every call answers
//!   [`EtcdError::Unreachable`], and every watch yields that error and ends.
//!
//! Clones, and [`KeyStore::client_of_its_own`], share one store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::cluster::etcd::{EtcdError, KeyValue, LeaseId, WatchEvent};
use crate::cluster::keys::{KeyFuture, KeyStore, WatchStream};
use crate::sync::lock;

/// An in-memory key store with etcd's semantics (see the module's docs).
#[derive(Clone, Default)]
pub(crate) struct MemoryKeyStore {
    state: Arc<Mutex<State>>,
}

/// What a watch is sent: a batch of events, or the error that ends it.
type WatchItem = Result<Vec<WatchEvent>, EtcdError>;

#[derive(Default)]
struct State {
    /// The test clock: how far it was moved since the store was made.
    now: Duration,
    /// The revision of the last write (0 before the first: etcd answers 1 for an empty
    /// store, see [`State::revision`]).
    writes: i64,
    keys: BTreeMap<String, KeyValue>,
    leases: BTreeMap<LeaseId, Lease>,
    /// The last lease granted.
    last_lease: LeaseId,
    /// Every write: its revision and its events.
    history: Vec<(i64, Vec<WatchEvent>)>,
    watches: Vec<Watch>,
    unreachable: bool,
}

struct Lease {
    ttl: Duration,
    /// When it expires on the test clock, unless kept alive before.
    until: Duration,
}

struct Watch {
    prefix: String,
    events: mpsc::UnboundedSender<WatchItem>,
}

impl MemoryKeyStore {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Moves the test clock on by `by`: every lease not kept alive within its TTL until then
    /// expires, deleting its keys (one write per lease, in the order they expire).
    pub(crate) fn advance(&self, by: Duration) {
        let mut state = lock(&self.state);
        state.now += by;
        let now = state.now;
        let mut expired: Vec<(Duration, LeaseId)> = state
            .leases
            .iter()
            .filter(|(_, lease)| lease.until <= now)
            .map(|(&id, lease)| (lease.until, id))
            .collect();
        expired.sort_unstable();
        for (_, lease) in expired {
            state.end_lease(lease);
        }
    }

    /// Cuts the store off (`false`): every call fails and every watch ends with
    /// [`EtcdError::Unreachable`]; or makes it answer again (`true`).
    pub(crate) fn set_reachable(&self, reachable: bool) {
        let mut state = lock(&self.state);
        state.unreachable = !reachable;
        if !reachable {
            for watch in state.watches.drain(..) {
                let _ = watch.events.send(Err(unreachable()));
            }
        }
    }

    /// How many watches are open.
    pub(crate) fn watches(&self) -> usize {
        let mut state = lock(&self.state);
        state.watches.retain(|watch| !watch.events.is_closed());
        state.watches.len()
    }

    /// Runs `call` on the state, unless the store is cut off.
    fn answer<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut State) -> Result<T, EtcdError>,
    ) -> KeyFuture<'static, T> {
        let mut state = lock(&self.state);
        let answer = if state.unreachable {
            Err(unreachable())
        } else {
            call(&mut state)
        };
        Box::pin(std::future::ready(answer))
    }
}

fn unreachable() -> EtcdError {
    EtcdError::Unreachable("the in-memory store is cut off".to_owned())
}

impl State {
    /// The store's revision, as a read answers it.
    fn revision(&self) -> i64 {
        self.writes.max(1)
    }

    /// Writes `events` as one revision: stamps and stores the puts, removes the deleted keys,
    /// records the write and sends it to the watches it concerns.
    fn write(&mut self, mut events: Vec<WatchEvent>) {
        let revision = self.revision() + 1;
        self.writes = revision;
        for event in &mut events {
            match event {
                WatchEvent::Put(kv) => {
                    kv.mod_revision = revision;
                    self.keys.insert(kv.key.clone(), kv.clone());
                }
                WatchEvent::Delete(key) => {
                    self.keys.remove(key);
                }
            }
        }
        self.watches.retain(|watch| {
            let seen = under(&watch.prefix, &events);
            seen.is_empty() || watch.events.send(Ok(seen)).is_ok()
        });
        self.history.push((revision, events));
    }

    /// Puts `key` = `value` under `lease` (none when 0), which the store must know.
    fn put(&mut self, key: &str, value: &[u8], lease: LeaseId) -> Result<(), EtcdError> {
        if lease != 0 && !self.leases.contains_key(&lease) {
            return Err(EtcdError::Failed(
                "etcdserver: requested lease not found".to_owned(),
            ));
        }
        self.write(vec![WatchEvent::Put(KeyValue {
            key: key.to_owned(),
            value: value.to_vec(),
            lease,
            mod_revision: 0,
        })]);
        Ok(())
    }

    /// Ends `lease`, deleting its keys in one write; nothing when the store does not know it.
    fn end_lease(&mut self, lease: LeaseId) {
        if self.leases.remove(&lease).is_none() {
            return;
        }
        let deleted: Vec<WatchEvent> = self
            .keys
            .values()
            .filter(|kv| kv.lease == lease)
            .map(|kv| WatchEvent::Delete(kv.key.clone()))
            .collect();
        if !deleted.is_empty() {
            self.write(deleted);
        }
    }
}

/// The events of `events` whose key starts with `prefix`.
fn under(prefix: &str, events: &[WatchEvent]) -> Vec<WatchEvent> {
    events
        .iter()
        .filter(|event| match event {
            WatchEvent::Put(kv) => kv.key.starts_with(prefix),
            WatchEvent::Delete(key) => key.starts_with(prefix),
        })
        .cloned()
        .collect()
}

impl KeyStore for MemoryKeyStore {
    fn grant(&self, ttl: Duration) -> KeyFuture<'_, LeaseId> {
        self.answer(|state| {
            state.last_lease += 1;
            let until = state.now + ttl;
            state.leases.insert(state.last_lease, Lease { ttl, until });
            Ok(state.last_lease)
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> KeyFuture<'_, bool> {
        self.answer(|state| {
            let now = state.now;
            Ok(state
                .leases
                .get_mut(&lease)
                .map(|lease| lease.until = now + lease.ttl)
                .is_some())
        })
    }

    fn revoke(&self, lease: LeaseId) -> KeyFuture<'_, ()> {
        self.answer(|state| {
            state.end_lease(lease);
            Ok(())
        })
    }

    fn create<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, bool> {
        self.answer(|state| {
            if state.keys.contains_key(key) {
                return Ok(false);
            }
            state.put(key, value, lease).map(|()| true)
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, ()> {
        self.answer(|state| state.put(key, value, lease))
    }

    fn delete_if<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KeyFuture<'a, bool> {
        self.answer(|state| {
            if state.keys.get(key).is_none_or(|kv| kv.value != value) {
                return Ok(false);
            }
            state.write(vec![WatchEvent::Delete(key.to_owned())]);
            Ok(true)
        })
    }

    fn prefix<'a>(&'a self, prefix: &'a str) -> KeyFuture<'a, (Vec<KeyValue>, i64)> {
        self.answer(|state| {
            let kvs = state
                .keys
                .range(prefix.to_owned()..)
                .take_while(|(key, _)| key.starts_with(prefix))
                .map(|(_, kv)| kv.clone())
                .collect();
            Ok((kvs, state.revision()))
        })
    }

    fn watch(&self, prefix: &str, start_revision: i64) -> WatchStream {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut state = lock(&self.state);
        if state.unreachable {
            let _ = sender.send(Err(unreachable()));
        } else {
            for (_, events) in state
                .history
                .iter()
                .filter(|(revision, _)| *revision >= start_revision)
            {
                let seen = under(prefix, events);
                if !seen.is_empty() {
                    let _ = sender.send(Ok(seen));
                }
            }
            state.watches.push(Watch {
                prefix: prefix.to_owned(),
                events: sender,
            });
        }
        Box::pin(futures_util::stream::unfold(
            receiver,
            |mut receiver| async move { receiver.recv().await.map(|item| (item, receiver)) },
        ))
    }

    fn client_of_its_own(&self) -> Arc<dyn KeyStore> {
        Arc::new(self.clone())
    }
}
