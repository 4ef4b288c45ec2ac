//! A partition's shortcut: [`Log`](crate::Log)'s appends and hot reads run on the caller's
//! thread instead of the partition actor's event loop, which saves two thread switches each
//! (`docs/append-pipeline.md` tells an append's whole path).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::{Context, Handler, Message};
use tokio::sync::{Notify, oneshot};

use super::{Appended, Delivery, PartitionActor, Usage};
use crate::error::Error;
use crate::load::LoadObserver;
use crate::store::{AppendOutcome, LogStore, NewRecord, Page, StoreError};
use crate::sync::lock;

/// A partition's way around its actor, from any thread: an append goes straight to the
/// volume's committer as a share of its own and is answered on the committer's thread; a read
/// runs its query on the caller's thread (a pooled WAL reader, which never waits for a
/// commit). Shared between the actor, which owns the store and opens the way only while it
/// may be used, and the [`Log`](crate::Log) handles that cache it.
///
/// Everything the actor does around an operation is done here instead, thread-safely: the use
/// and the in-flight hold the registry reads, the load, the counters, and the wake-up of
/// long-polling readers.
pub(crate) struct Shortcut {
    gate: Mutex<Gate>,
    load: Arc<LoadObserver>,
    usage: Arc<Usage>,
    /// Woken after each commit that appended records (the partition's, then its topic's).
    appended: [Arc<Notify>; 2],
    /// Batches answered, by either way in.
    appends: AtomicU64,
}

/// Whether the way is open.
#[derive(Default)]
struct Gate {
    /// The partition's store; `None` while the actor drains or has no store.
    store: Option<Arc<LogStore>>,
    /// Shares at the committer not answered yet: a drain waits for them, so that no share of
    /// this store is still queued when another store of the partition opens.
    in_flight: usize,
    /// Told once nothing is in flight after the gate closed.
    drained: Vec<oneshot::Sender<()>>,
}

impl Shortcut {
    pub(super) fn new(
        store: Option<Arc<LogStore>>,
        load: Arc<LoadObserver>,
        usage: Arc<Usage>,
        appended: [Arc<Notify>; 2],
    ) -> Self {
        Self {
            gate: Mutex::new(Gate {
                store,
                ..Gate::default()
            }),
            load,
            usage,
            appended,
            appends: AtomicU64::new(0),
        }
    }

    /// Appends `records` as one atomic batch and answers as the `Append` message does. The
    /// records come back when only the actor can take them: the partition drains, or its
    /// store failed and must be reopened (a message to the actor does that).
    pub(crate) fn append(
        self: &Arc<Self>,
        records: Vec<NewRecord>,
    ) -> Result<impl Future<Output = Result<Appended, Error>> + use<>, Vec<NewRecord>> {
        let store = {
            let mut gate = self.lock();
            let Some(store) = gate.store.clone().filter(|store| !store.is_poisoned()) else {
                return Err(records);
            };
            gate.in_flight += 1;
            store
        };
        self.usage.touch();
        let in_flight = self.usage.hold();
        let request = self.load.begin_inbound();
        let (answer, answered) = oneshot::channel();
        let shortcut = self.clone();
        // Runs on the committer's thread, where the records are already findable.
        let reply = Box::new(
            move |result: Result<(Vec<AppendOutcome>, u64), StoreError>| {
                let answered = result.map(|(mut outcomes, pending)| {
                    let outcome = outcomes.pop().expect("one outcome per batch");
                    if outcome.is_appended() {
                        shortcut.wake_readers();
                    }
                    // Taken while this append still counts as in flight.
                    (outcome, shortcut.load.snapshot(pending))
                });
                shortcut.load.finish(&request);
                shortcut.count_appends(1);
                let _ = answer.send(answered);
                drop(in_flight);
                shortcut.answered();
            },
        );
        store.submit_append(vec![records], reply, None);
        Ok(async move {
            let (outcome, load) = answered.await.unwrap_or(Err(StoreError::Poisoned))?;
            Ok(Appended { outcome, load })
        })
    }

    /// Reads a page as the `Read` message does; `None` when only the actor can (the partition
    /// drains, or its store must be reopened).
    pub(crate) fn read(
        &self,
        from: Option<u64>,
        limit: Option<usize>,
    ) -> Option<impl Future<Output = Result<Page, Error>> + use<>> {
        let store = self
            .lock()
            .store
            .clone()
            .filter(|store| !store.is_poisoned())?;
        self.usage.touch();
        let held = (self.usage.hold(), Delivery::begin(&self.load));
        Some(async move {
            let _held = held;
            Ok(store.read(from, limit).await?)
        })
    }

    /// The partition's bounds, read on the caller's thread (a pooled reader, as a read): never
    /// queued behind the partition's other work on its worker, such as a cursor commit waiting
    /// for its window to land. `None` when only the actor can answer.
    pub(crate) fn bounds(&self) -> Option<Result<crate::store::Bounds, Error>> {
        let store = self
            .lock()
            .store
            .clone()
            .filter(|store| !store.is_poisoned())?;
        Some(store.bounds().map_err(Error::from))
    }

    /// Sets the store the way uses (`None` closes it).
    pub(super) fn set_store(&self, store: Option<Arc<LogStore>>) {
        self.lock().store = store;
    }

    /// Closes the way and answers once every share that went through it is answered (reads
    /// write nothing, so they are not waited for).
    pub(super) fn close(&self) -> oneshot::Receiver<()> {
        let (done, drained) = oneshot::channel();
        let mut gate = self.lock();
        gate.store = None;
        if gate.in_flight == 0 {
            let _ = done.send(());
        } else {
            gate.drained.push(done);
        }
        drained
    }

    /// Batches answered, by either way in.
    pub(super) fn appends(&self) -> u64 {
        self.appends.load(Ordering::Relaxed)
    }

    pub(super) fn count_appends(&self, batches: usize) {
        self.appends.fetch_add(batches as u64, Ordering::Relaxed);
    }

    /// Wakes the partition's and the topic's long-polling readers.
    pub(super) fn wake_readers(&self) {
        for signal in &self.appended {
            signal.notify_waiters();
        }
    }

    /// One share answered.
    fn answered(&self) {
        let mut gate = self.lock();
        gate.in_flight -= 1;
        if gate.in_flight == 0 {
            for done in gate.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        lock(&self.gate)
    }
}

/// Asks a partition's actor for its [`Shortcut`].
#[derive(Message, Debug)]
#[rtype(result = "Arc<Shortcut>")]
pub(crate) struct GetShortcut;

impl Handler<GetShortcut> for PartitionActor {
    type Result = Arc<Shortcut>;

    fn handle(&mut self, _: GetShortcut, _: &mut Context<Self>) -> Self::Result {
        self.shortcut.clone()
    }
}
