//! `PartitionRegistry`: the supervisor that maps `{topic}:{partition}` to its running actor.
//!
//! Partitions live in a fixed set of volumes under `storage.data_dir`, and [`Volumes`] finds
//! the one holding a partition: each volume's `partitions` table says which it holds, and
//! nothing in memory grows with the partitions that are not open. Only a write adds a
//! partition; a read of a partition never written answers `None` and creates nothing. A known
//! partition is opened on its first message, or when the retention sweep finds its retention
//! due (see [`crate::sweep`]): an open partition runs its own retention when due, on its
//! tick's alarm, and the sweep covers the partitions that are not open. At most
//! `partitions.max_open` are open: opening one more first closes the least recently used one
//! with nothing in flight, or, when all are busy, answers [`Error::Overloaded`]. A partition
//! idle for `idle_stop_ms` is drained and stopped. A closing partition is not opened again
//! before its drain finished, so a partition never has two writers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, AtomicResponse, Context, Handler, Message,
    ResponseActFuture, SpawnHandle, WeakAddr, WrapFuture,
};
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::cold::ColdStore;
use crate::config::Config;
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::{
    DeadLetter, Drain, PartitionActor, PartitionIdle, PartitionSetup, RetentionRuns, RunRetention,
    Shortcut, Usage, Workers,
};
use crate::store::{ColdFlushCounters, ColdTier, LogStore, StoreError, StoreOptions, Volumes};
use crate::sweep::Sweep;
use crate::sync::{lock, read_lock, write_lock};

/// Wake-ups for readers waiting for new records: one per partition and one per topic.
#[derive(Debug, Default)]
pub(crate) struct Signals(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Notify>>>);

impl Signals {
    /// Woken when `id` committed new records.
    pub(crate) fn partition(&self, id: &PartitionId) -> Arc<tokio::sync::Notify> {
        self.get(id.to_string())
    }

    /// Woken when any partition of `topic` committed new records.
    pub(crate) fn topic(&self, topic: &str) -> Arc<tokio::sync::Notify> {
        self.get(topic.to_owned())
    }

    fn get(&self, key: String) -> Arc<tokio::sync::Notify> {
        let mut signals = lock(&self.0);
        signals.entry(key).or_default().clone()
    }

    /// Forgets the signals nobody holds any more (no running partition, no waiting reader),
    /// so their memory returns once partitions close.
    fn release_unused(&self) {
        let mut signals = lock(&self.0);
        signals.retain(|_, signal| Arc::strong_count(signal) > 1);
        signals.shrink_to_fit();
    }
}

/// Counters of partitions opened and closed, read by the server's metrics.
#[derive(Debug, Default)]
pub struct PartitionCounters {
    alive: Arc<AtomicUsize>,
    opened: AtomicU64,
    closed: AtomicU64,
    closed_for_room: AtomicU64,
    overloaded: AtomicU64,
    pub(crate) retention_runs: AtomicU64,
    /// Counted by the partitions: their alarms' runs, and the runs they skipped.
    retention: Arc<RetentionRuns>,
}

impl PartitionCounters {
    /// Partitions opened (an actor started) since the log opened.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Partitions closed (idle, to make room, or at shutdown) since the log opened.
    pub fn closed(&self) -> u64 {
        self.closed.load(Ordering::Relaxed)
    }

    /// Partitions closed to make room for another under `partitions.max_open`.
    pub fn closed_for_room(&self) -> u64 {
        self.closed_for_room.load(Ordering::Relaxed)
    }

    /// Requests refused with `overloaded`: every open partition was busy.
    pub fn overloaded(&self) -> u64 {
        self.overloaded.load(Ordering::Relaxed)
    }

    /// Retention runs of due partitions by the sweep since the log opened: mostly of
    /// partitions that were not open (an open partition's alarm usually runs its retention
    /// first, and a sweep's request while that run lasts is skipped), and retries of failed
    /// runs.
    pub fn retention_runs(&self) -> u64 {
        self.retention_runs.load(Ordering::Relaxed)
    }

    /// Retention runs that open partitions started on their own alarm (their tick found their
    /// retention due) since the log opened.
    pub fn alarm_retention_runs(&self) -> u64 {
        self.retention.by_alarm.load(Ordering::Relaxed)
    }

    /// Retention runs not started since the log opened because the partition's retention was
    /// running already: a sweep's request answered at once, or an alarm that rang meanwhile.
    /// The run in progress covers them; one partition's retention never runs twice at once.
    pub fn retention_runs_skipped(&self) -> u64 {
        self.retention.skipped.load(Ordering::Relaxed)
    }

    /// Partitions open now.
    pub fn open(&self) -> u64 {
        self.opened().saturating_sub(self.closed())
    }

    /// Partition actors alive now: open partitions, and closed ones whose actor has not been
    /// dropped yet (a caller still holds its address for a moment).
    pub fn actors(&self) -> u64 {
        self.alive.load(Ordering::SeqCst) as u64
    }
}

/// Partitions' actors as last located, and their [`Shortcut`]s, shared by the registry and
/// every [`Log`](crate::Log) handle so a call goes straight to its partition. Weak: a closed
/// partition's actor is dropped although its address may be remembered for a moment. The
/// registry forgets a partition's address (and shortcut) when it closes it; an address found
/// stopped (or gone) is located anew.
#[derive(Default)]
pub(crate) struct Addresses(std::sync::RwLock<AddressMap>);

#[derive(Default)]
struct AddressMap {
    addresses: HashMap<PartitionId, WeakAddr<PartitionActor>>,
    /// The shortcuts of remembered actors, asked for on a partition's first append.
    shortcuts: HashMap<PartitionId, Arc<Shortcut>>,
    /// Size at which the next insert sweeps out dead addresses (left by a close that raced
    /// with a caller's insert).
    sweep_at: usize,
}

impl Addresses {
    /// Fewest entries before a sweep.
    const MIN_SWEEP: usize = 1_024;

    fn read(&self) -> std::sync::RwLockReadGuard<'_, AddressMap> {
        read_lock(&self.0)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, AddressMap> {
        write_lock(&self.0)
    }

    /// The running actor of `id`, if one is remembered.
    pub fn get(&self, id: &PartitionId) -> Option<Addr<PartitionActor>> {
        self.read()
            .addresses
            .get(id)?
            .upgrade()
            .filter(Addr::connected)
    }

    pub fn insert(&self, id: PartitionId, addr: &Addr<PartitionActor>) {
        let mut map = self.write();
        map.addresses.insert(id, addr.downgrade());
        if map.addresses.len() >= map.sweep_at {
            map.addresses.retain(|_, addr| addr.upgrade().is_some());
            map.addresses.shrink_to_fit();
            let AddressMap {
                addresses,
                shortcuts,
                ..
            } = &mut *map;
            shortcuts.retain(|id, _| addresses.contains_key(id));
            shortcuts.shrink_to_fit();
            map.sweep_at = (map.addresses.len() * 2).max(Self::MIN_SWEEP);
        }
    }

    /// Forgets `id`'s address if it is `stopped` (or dead), not a newer actor's.
    pub fn forget(&self, id: &PartitionId, stopped: &Addr<PartitionActor>) {
        let mut map = self.write();
        let current = map.addresses.get(id).and_then(WeakAddr::upgrade);
        if current.is_none_or(|current| current == *stopped) {
            map.addresses.remove(id);
            map.shortcuts.remove(id);
        }
    }

    /// The [`Shortcut`] of `id`'s actor, if remembered (it may have closed since).
    pub fn shortcut(&self, id: &PartitionId) -> Option<Arc<Shortcut>> {
        self.read().shortcuts.get(id).cloned()
    }

    /// Remembers the shortcut of `id`'s actor, whose address is remembered.
    pub fn insert_shortcut(&self, id: PartitionId, shortcut: &Arc<Shortcut>) {
        self.write().shortcuts.insert(id, shortcut.clone());
    }

    /// Forgets `id`'s shortcut if it is `closed`, not a newer actor's.
    pub fn forget_shortcut(&self, id: &PartitionId, closed: &Arc<Shortcut>) {
        let mut map = self.write();
        if map
            .shortcuts
            .get(id)
            .is_some_and(|current| Arc::ptr_eq(current, closed))
        {
            map.shortcuts.remove(id);
        }
    }

    /// Gives back the room of forgotten addresses once most are gone.
    fn shrink(&self) {
        let mut map = self.write();
        if map.addresses.capacity() > (map.addresses.len() * 4).max(Self::MIN_SWEEP) {
            map.addresses.shrink_to_fit();
        }
        if map.shortcuts.capacity() > (map.shortcuts.len() * 4).max(Self::MIN_SWEEP) {
            map.shortcuts.shrink_to_fit();
        }
    }
}

/// Gives back a map's room once most of its entries are gone.
fn shrink_map<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > (map.len() * 4).max(1_024) {
        map.shrink_to_fit();
    }
}

/// Builds the dead-letter destination of a topic, if it has one.
pub(crate) type DeadLetterFor = Arc<dyn Fn(&str) -> Option<Arc<dyn DeadLetter>> + Send + Sync>;

/// The registry's actor state.
pub(crate) struct PartitionRegistry {
    config: Arc<Config>,
    cold: Option<Arc<dyn ColdStore>>,
    clock: Arc<dyn Clock>,
    dead_letter_for: DeadLetterFor,
    signals: Arc<Signals>,
    /// Every partition's store counts its cold flushes here.
    flush_counters: Arc<ColdFlushCounters>,
    counters: Arc<PartitionCounters>,
    volumes: Arc<Volumes>,
    addresses: Arc<Addresses>,
    workers: Workers,
    max_open: usize,
    running: HashMap<PartitionId, Running>,
    /// The open partitions by their last use as the registry last saw it, oldest first (see
    /// [`PartitionRegistry::least_recently_used`]). Entries of partitions closed since, or
    /// used since, are stale and set right when they come up.
    by_use: BinaryHeap<Reverse<(u64, u64, PartitionId)>>,
    /// Partitions draining, and who waits to open them again.
    closing: HashMap<PartitionId, Vec<oneshot::Sender<()>>>,
    generations: u64,
    /// When [`PartitionRegistry::return_memory`] last returned memory.
    memory_returned: std::time::Instant,
    /// Whether a return of memory is scheduled.
    memory_return_due: bool,
    /// The sweep timer, and the sweep running if one is; cancelled by [`Shutdown`].
    sweeps: Option<SpawnHandle>,
    sweep_running: Option<SpawnHandle>,
}

/// Least time between two returns of freed memory to the operating system.
const RETURN_MEMORY_EVERY: Duration = Duration::from_secs(1);

struct Running {
    addr: Addr<PartitionActor>,
    generation: u64,
    usage: Arc<Usage>,
    /// The partition's store, for reads that must not count as its activity (metrics).
    store: Arc<LogStore>,
}

/// What the registry is built from (see [`PartitionRegistry::new`]).
pub(crate) struct RegistryParts {
    pub config: Arc<Config>,
    pub volumes: Arc<Volumes>,
    pub cold: Option<Arc<dyn ColdStore>>,
    pub clock: Arc<dyn Clock>,
    pub dead_letter_for: DeadLetterFor,
    pub signals: Arc<Signals>,
    pub flush_counters: Arc<ColdFlushCounters>,
    pub counters: Arc<PartitionCounters>,
    pub addresses: Arc<Addresses>,
}

impl PartitionRegistry {
    /// A registry over `parts`; starts the worker threads. Must run inside an actix `System`.
    pub(crate) fn new(parts: RegistryParts) -> Self {
        let RegistryParts {
            config,
            volumes,
            cold,
            clock,
            dead_letter_for,
            signals,
            flush_counters,
            counters,
            addresses,
        } = parts;
        let max_open = config.partitions.max_open();
        log::info!(
            "partitions: {} volumes, at most {max_open} open at once",
            volumes.count()
        );
        Self {
            workers: Workers::start(config.storage.workers),
            max_open,
            signals,
            flush_counters,
            counters,
            volumes,
            addresses,
            config,
            cold,
            clock,
            dead_letter_for,
            running: HashMap::new(),
            by_use: BinaryHeap::new(),
            closing: HashMap::new(),
            generations: 0,
            memory_returned: std::time::Instant::now(),
            memory_return_due: false,
            sweeps: None,
            sweep_running: None,
        }
    }

    fn store_options(&self, id: &PartitionId, dead_letter: bool) -> StoreOptions {
        let topic = self.config.topic(id.topic());
        let mut leases = topic.leases.options();
        leases.dead_letter = dead_letter;
        StoreOptions {
            sync: self.config.storage.sync,
            max_batch_size: topic.log.max_batch_size,
            max_record_bytes: topic.log.max_record_bytes,
            clock: self.clock.clone(),
            retention: topic.retention.limits(),
            cold: self.cold.clone().map(|store| ColdTier {
                store,
                prefix: self.config.cold.prefix.clone(),
                topic: id.topic().to_owned(),
                partition: id.index(),
            }),
            leases,
            flush_counters: Some(self.flush_counters.clone()),
        }
    }

    /// The running actor of `id`, opening the partition if it is known, or if `create` (a
    /// write); opening it counts as a use if `is_use`. Must not be called while `id` is
    /// closing.
    fn locate(
        &mut self,
        id: &PartitionId,
        create: bool,
        is_use: bool,
        ctx: &mut Context<Self>,
    ) -> Result<Option<Addr<PartitionActor>>, Error> {
        if let Some(running) = self.running.get(id) {
            return Ok(Some(running.addr.clone()));
        }
        let unavailable = |err: StoreError| match err {
            StoreError::Corrupted { .. } | StoreError::Healing { .. } => Error::Store(err),
            err => Error::unavailable(Some(id), "cannot open its store", Some(err.into())),
        };
        let dead_letter = (self.dead_letter_for)(id.topic());
        let options = self.store_options(id, dead_letter.is_some());
        // With room to spare a write adds the partition in the same lookup; when room must be
        // made first, it looks without adding, so a write refused for want of room adds nothing.
        let full = self.running.len() >= self.max_open;
        let mut found = self
            .volumes
            .open_store(id, &options, create && !full)
            .map_err(unavailable)?;
        if found.is_none() && !create {
            return Ok(None);
        }
        if full {
            self.make_room(id, ctx)?;
        }
        if found.is_none() {
            found = self
                .volumes
                .open_store(id, &options, true)
                .map_err(unavailable)?;
        }
        let Some((volume, store)) = found else {
            return Ok(None);
        };
        let store = Arc::new(store);
        self.generations += 1;
        let usage = Arc::new(Usage::default());
        if is_use {
            usage.touch();
        }
        let setup = PartitionSetup {
            id: id.clone(),
            volume,
            options,
            idle_stop: Duration::from_millis(self.config.partitions.idle_stop_ms),
            dead_letter,
            on_idle: Some(ctx.address().recipient()),
            generation: self.generations,
            appended: [self.signals.partition(id), self.signals.topic(id.topic())],
            workers: self.workers.clone(),
            usage: usage.clone(),
            alive: self.counters.alive.clone(),
            retention_runs: self.counters.retention.clone(),
        };
        let addr = PartitionActor::start(setup, store.clone());
        self.counters.opened.fetch_add(1, Ordering::Relaxed);
        log::debug!("partition {id} opened");
        // Opened without a use (for retention), its last use is 0: the first to close.
        self.remember_use(id.clone(), self.generations, usage.last_used());
        self.running.insert(
            id.clone(),
            Running {
                addr: addr.clone(),
                generation: self.generations,
                usage,
                store,
            },
        );
        Ok(Some(addr))
    }

    /// Closes the least recently used open partition with nothing in flight, or answers
    /// [`Error::Overloaded`] when every open partition is busy.
    fn make_room(&mut self, wanted: &PartitionId, ctx: &mut Context<Self>) -> Result<(), Error> {
        let Some(victim) = self.least_recently_used() else {
            self.counters.overloaded.fetch_add(1, Ordering::Relaxed);
            return Err(Error::Overloaded {
                partition: wanted.to_string(),
                open: self.running.len(),
            });
        };
        self.counters
            .closed_for_room
            .fetch_add(1, Ordering::Relaxed);
        self.close(&victim, ctx);
        Ok(())
    }

    /// The open partition with nothing in flight whose last use is the oldest. Partitions are
    /// used without the registry hearing of it (messages go to their actors), so `by_use`
    /// learns late: an entry that comes up older than its partition's last use goes back in
    /// with that use, one closed or reopened since is dropped. Each re-entry follows a use or
    /// an open, so a choice costs O(log n) amortized, whatever the number open, plus one step
    /// for each busy partition passed over; only when every open partition is busy does it
    /// look at them all.
    ///
    /// An ordered map moving each entry to its end when a use is found would choose in O(1),
    /// but wrongly: it learns of a use only when the entry comes up, so the entry would go
    /// behind partitions used after it.
    fn least_recently_used(&mut self) -> Option<PartitionId> {
        let mut busy = Vec::new();
        let victim = loop {
            let Some(Reverse((seen, generation, id))) = self.by_use.pop() else {
                break None;
            };
            let Some(running) = self.running.get(&id) else {
                continue;
            };
            let used = running.usage.last_used();
            if running.generation != generation {
                continue;
            } else if used > seen {
                self.by_use.push(Reverse((used, generation, id)));
            } else if running.usage.is_busy() {
                busy.push(Reverse((seen, generation, id)));
            } else {
                break Some(id);
            }
        };
        self.by_use.extend(busy);
        victim
    }

    /// Notes that `id` (opened as `generation`) was last used at `used`, and drops the stale
    /// entries once they outnumber the open partitions.
    fn remember_use(&mut self, id: PartitionId, generation: u64, used: u64) {
        self.by_use.push(Reverse((used, generation, id)));
        if self.by_use.len() > 2 * self.running.len() + 1_024 {
            self.by_use = self
                .running
                .iter()
                .map(|(id, running)| {
                    Reverse((running.usage.last_used(), running.generation, id.clone()))
                })
                .collect();
        }
    }

    /// Drains and stops a running partition; it may open again once the drain finished.
    fn close(&mut self, id: &PartitionId, ctx: &mut Context<Self>) {
        let Some(running) = self.running.remove(id) else {
            return;
        };
        self.closing.insert(id.clone(), Vec::new());
        self.addresses.forget(id, &running.addr);
        let id = id.clone();
        ctx.spawn(
            async move {
                let _ = running.addr.send(Drain).await;
            }
            .into_actor(self)
            .map(move |(), registry, ctx| {
                registry.counters.closed.fetch_add(1, Ordering::Relaxed);
                for waiter in registry.closing.remove(&id).unwrap_or_default() {
                    let _ = waiter.send(());
                }
                registry.return_memory(ctx);
                log::debug!("partition {id} closed");
            }),
        );
    }

    /// Forgets what closed partitions left (their signals) and hands the memory they freed back
    /// to the operating system, at most once a second; closes within that second are covered
    /// by one more return at its end.
    fn return_memory(&mut self, ctx: &mut Context<Self>) {
        if self.memory_return_due {
            return;
        }
        let wait = RETURN_MEMORY_EVERY.saturating_sub(self.memory_returned.elapsed());
        self.memory_return_due = true;
        ctx.run_later(wait, |registry, _| {
            registry.memory_return_due = false;
            registry.memory_returned = std::time::Instant::now();
            registry.signals.release_unused();
            registry.addresses.shrink();
            shrink_map(&mut registry.running);
            shrink_map(&mut registry.closing);
            crate::memory::return_freed();
        });
    }

    /// Starts a retention sweep (see [`crate::sweep`]) unless one is still running. Retention
    /// runs a few partitions at a time: as many as the worker threads can keep busy while
    /// flushes wait on the cold store, and never more than half of `max_open`, so that sweeps
    /// leave room for the partitions in use.
    fn sweep(&mut self, ctx: &mut Context<Self>) {
        if self.sweep_running.is_some() {
            return;
        }
        let concurrency = (self.config.storage.workers.max(1) * 4).min(self.max_open / 2);
        let sweep = Sweep {
            registry: ctx.address().downgrade(),
            volumes: self.volumes.clone(),
            clock: self.clock.clone(),
            workers: self.workers.clone(),
            counters: self.counters.clone(),
            concurrency: concurrency.max(1),
        };
        let running = ctx.spawn(
            sweep
                .run()
                .into_actor(self)
                .map(|(), registry, _| registry.sweep_running = None),
        );
        self.sweep_running = Some(running);
    }
}

impl Actor for PartitionRegistry {
    type Context = Context<Self>;

    /// Sweeps for due retention every sweep interval: the one timer, whatever the partitions.
    fn started(&mut self, ctx: &mut Self::Context) {
        let sweeps = ctx.run_interval(self.config.sweep_interval(), |registry, ctx| {
            registry.sweep(ctx);
        });
        self.sweeps = Some(sweeps);
    }
}

/// Finds a partition's actor, opening it if it is known, or if `create` (a write).
#[derive(Message, Debug)]
#[rtype(result = "Result<Option<Addr<PartitionActor>>, Error>")]
pub(crate) struct Locate {
    pub id: PartitionId,
    pub create: bool,
}

impl Handler<Locate> for PartitionRegistry {
    type Result = ResponseActFuture<Self, Result<Option<Addr<PartitionActor>>, Error>>;

    /// A partition that is closing opens again once its drain finished.
    fn handle(&mut self, locate: Locate, ctx: &mut Self::Context) -> Self::Result {
        let Some(waiters) = self.closing.get_mut(&locate.id) else {
            return Box::pin(actix::fut::ready(self.locate(
                &locate.id,
                locate.create,
                true,
                ctx,
            )));
        };
        let (closed, on_closed) = oneshot::channel();
        waiters.push(closed);
        Box::pin(
            async move {
                let _ = on_closed.await;
            }
            .into_actor(self)
            .map(move |(), registry, ctx| {
                if registry.closing.contains_key(&locate.id) {
                    return Err(Error::PartitionStopped);
                }
                registry.locate(&locate.id, locate.create, true, ctx)
            }),
        )
    }
}

impl Handler<PartitionIdle> for PartitionRegistry {
    type Result = ();

    fn handle(&mut self, idle: PartitionIdle, ctx: &mut Self::Context) {
        let current = self
            .running
            .get(&idle.id)
            .is_some_and(|running| running.generation == idle.generation);
        if !current {
            return;
        }
        self.close(&idle.id, ctx);
    }
}

/// Runs the retention of a stored partition the sweep found due, opening it if needed
/// (see [`crate::sweep`]); answers whether it ran: not when its retention was running already
/// (its own alarm's run, which covers it). Neither the opening nor the run counts as a use, so
/// a partition opened only for its retention is the first to close for room, before the
/// partitions in use; it is held open until its run ends. A partition that is closing is left
/// for the next sweep.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct RunDueRetention {
    pub id: PartitionId,
}

impl Handler<RunDueRetention> for PartitionRegistry {
    type Result = ResponseActFuture<Self, bool>;

    fn handle(&mut self, due: RunDueRetention, ctx: &mut Self::Context) -> Self::Result {
        if self.closing.contains_key(&due.id) {
            return Box::pin(actix::fut::ready(false));
        }
        let partition = match self.locate(&due.id, false, false, ctx) {
            Ok(Some(partition)) => partition,
            Ok(None) => return Box::pin(actix::fut::ready(false)),
            Err(err) => {
                log::warn!(
                    "partition {}: cannot open it to run its retention: {err}",
                    due.id
                );
                return Box::pin(actix::fut::ready(false));
            }
        };
        // Taken before any other message reaches the registry: nothing closes it for room
        // before its retention ran.
        let held = self
            .running
            .get(&due.id)
            .map(|running| running.usage.hold());
        Box::pin(
            async move {
                let ran = partition.send(RunRetention).await.unwrap_or(false);
                drop(held);
                ran
            }
            .into_actor(self),
        )
    }
}

/// Stops every partition after committing what each has queued.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

impl Handler<Shutdown> for PartitionRegistry {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) -> Self::Result {
        for sweep in [self.sweeps.take(), self.sweep_running.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(sweep);
        }
        let running: Vec<Running> = self.running.drain().map(|(_, running)| running).collect();
        let counters = self.counters.clone();
        let volumes = self.volumes.clone();
        AtomicResponse::new(Box::pin(
            async move {
                for running in running {
                    let _ = running.addr.send(Drain).await;
                    counters.closed.fetch_add(1, Ordering::Relaxed);
                }
                volumes.close();
            }
            .into_actor(self),
        ))
    }
}

/// Hands volume `volume` to another node of the cluster, or, when `healing`, to its rebuild
/// from the replica's bucket: no partition of it opens here from now on (until it is attached
/// again), each running one stops after committing what it has queued, and the volume is
/// closed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ReleaseVolume {
    pub volume: usize,
    /// How many volumes a partition's name is spread over.
    pub volume_count: usize,
    pub healing: bool,
}

impl Handler<ReleaseVolume> for PartitionRegistry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, release: ReleaseVolume, ctx: &mut Self::Context) -> Self::Result {
        let detached = self.volumes.detach(release.volume, release.healing);
        let leaving: Vec<PartitionId> = self
            .running
            .keys()
            .filter(|id| {
                crate::cluster::placement::volume_of(id, release.volume_count) == release.volume
            })
            .cloned()
            .collect();
        let mut drained = Vec::with_capacity(leaving.len());
        for id in &leaving {
            let (done, waiting) = oneshot::channel();
            self.close(id, ctx);
            if let Some(waiters) = self.closing.get_mut(id) {
                waiters.push(done);
            }
            drained.push(waiting);
        }
        Box::pin(
            async move {
                for waiting in drained {
                    let _ = waiting.await;
                }
                if let Some(volume) = detached {
                    let closed = actix_web::rt::task::spawn_blocking(move || volume.close()).await;
                    if let Ok(Err(err)) = closed {
                        log::error!("closing a released volume: {err}");
                    }
                }
            }
            .into_actor(self),
        )
    }
}

/// Lists the partitions whose actors are running (for tests and operators).
#[derive(Message, Debug)]
#[rtype(result = "Vec<PartitionId>")]
pub(crate) struct RunningPartitions;

impl Handler<RunningPartitions> for PartitionRegistry {
    type Result = Vec<PartitionId>;

    fn handle(&mut self, _: RunningPartitions, _: &mut Self::Context) -> Self::Result {
        let mut running: Vec<PartitionId> = self.running.keys().cloned().collect();
        running.sort();
        running
    }
}

/// The stores of the open partitions, by partition (for reads that must not keep a partition
/// open, such as a metrics scrape).
#[derive(Message, Debug)]
#[rtype(result = "Vec<(PartitionId, Arc<LogStore>)>")]
pub(crate) struct OpenStores;

impl Handler<OpenStores> for PartitionRegistry {
    type Result = Vec<(PartitionId, Arc<LogStore>)>;

    fn handle(&mut self, _: OpenStores, _: &mut Self::Context) -> Self::Result {
        self.running
            .iter()
            .map(|(id, running)| (id.clone(), running.store.clone()))
            .collect()
    }
}
