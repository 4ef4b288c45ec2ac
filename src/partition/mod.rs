//! `PartitionActor`: one actor per partition, the single writer of its log in a shared volume.
//!
//! Each operation is a typed [`Message`] with its handler, in the file of its group (produce,
//! consume, leases, operations) as in [`crate::log`] and [`crate::http`]. The actor lives on
//! the arbiter that started the log (message passing with producers on that event loop costs
//! no thread switch) and owns no thread: appends go to its volume's committer, which
//! commits the appends of every partition of the volume in one transaction (group commit, see
//! `docs/append-pipeline.md`); other blocking work (cursor commits, leases, retention) runs on
//! one of a fixed set of worker threads shared by every partition (`[storage] workers`), so a
//! blocking fsync never stalls the event loop. Hot reads are the exception: one short query on
//! a pooled WAL reader, which never waits for a commit, they run on the event loop (see
//! [`Read`]). [`Log`](crate::Log)'s appends and hot reads skip the event loop altogether: its
//! `Shortcut`, which the actor opens and closes, runs them on the caller's thread. The actor
//! has one timer, a `run_interval` tick that checks for idleness and is also its retention
//! alarm: when the due time its store keeps in memory has passed, the tick sends the
//! partition a `RetentionAlarm`, which runs retention (no database read per tick, no second
//! timer). The registry's sweep covers the partitions that are not open, and retries failed
//! runs ([`RunRetention`]); one partition's retention never runs twice at once (a request
//! while it runs is skipped). A partition idle for `idle_stop` tells the registry, which
//! drains it; a drained partition cancels its timer and stops, and its actor is dropped. A
//! partition whose volume failed a commit stops at its next message and its supervisor
//! restarts it, reopening its store.

mod consume;
mod leases;
mod operations;
mod produce;
mod shortcut;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    ResponseActFuture, ResponseFuture, SpawnHandle, Supervised, WrapFuture,
};
use tokio::sync::oneshot;

pub use consume::{
    Commit, CommitWith, DeleteCursor, GetCommitted, GetCursor, ListCursors, ListGroups, Read, Seek,
};
pub use leases::{Ack, ClaimLease, Extend, ListLeases, Nack};
pub(crate) use operations::RetentionRuns;
pub use operations::{ForgetColdBefore, GetBounds, GetLoad, RunRetention, Trim};
pub use produce::{Append, Appended, Enqueue};
pub(crate) use shortcut::{GetShortcut, Shortcut};

use crate::error::Error;
use crate::load::LoadObserver;
use crate::names::PartitionId;
use crate::store::{LogStore, Record, StoreOptions, Volume};

/// Where exhausted lease ranges go (`[leases] max_attempts`): the server's dead-letter topic, or
/// an embedder's own callback.
pub trait DeadLetter: std::fmt::Debug + Send + Sync {
    /// Stores `records` of partition `origin` durably; each record keeps its payload and gets
    /// the deduplication key `{topic}:{partition}:{offset}`, so a retry never duplicates.
    fn store_exhausted<'a>(
        &'a self,
        origin: &'a PartitionId,
        records: &'a [Record],
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
}

/// Everything a partition needs to open (and reopen) its store and run.
#[derive(Debug, Clone)]
pub(crate) struct PartitionSetup {
    pub id: PartitionId,
    pub volume: Arc<Volume>,
    pub options: StoreOptions,
    pub idle_stop: Duration,
    pub dead_letter: Option<Arc<dyn DeadLetter>>,
    /// Told when the partition has been idle for `idle_stop`.
    pub on_idle: Option<Recipient<PartitionIdle>>,
    /// Distinguishes this start from earlier ones of the same partition.
    pub generation: u64,
    /// Woken after each commit that appended records (this partition's, then its topic's), so
    /// long-polling readers answer at once.
    pub appended: [Arc<tokio::sync::Notify>; 2],
    /// The threads that run blocking work.
    pub workers: Workers,
    /// What the registry reads to choose a partition to close.
    pub usage: Arc<Usage>,
    /// Partition actors alive in this log, counted up when one starts and down when it is
    /// dropped (a stopped actor must not linger).
    pub alive: Arc<AtomicUsize>,
    /// Where the partition counts its retention runs (the log's, shared by every partition).
    pub retention_runs: Arc<RetentionRuns>,
}

/// The fixed set of threads whose runtimes run partitions' work other than appends and reads
/// (on their blocking pools, driving the work's I/O themselves); a partition always uses the
/// same one.
#[derive(Debug, Clone)]
pub(crate) struct Workers(Arc<[actix::ArbiterHandle]>);

impl Workers {
    /// `count` new worker threads (at least one), stopped when the system stops.
    pub fn start(count: usize) -> Self {
        Self(
            (0..count.max(1))
                .map(|_| actix::Arbiter::new().handle())
                .collect(),
        )
    }

    /// Runs blocking `work` on a worker thread and answers its result; `None` when the workers
    /// stopped.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (answer, answered) = oneshot::channel();
        let spawned = self.0[0].spawn_fn(move || {
            let _ = answer.send(work());
        });
        if !spawned {
            return None;
        }
        answered.await.ok()
    }

    fn for_partition(&self, id: &PartitionId) -> &actix::ArbiterHandle {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut hasher);
        &self.0[hasher.finish() as usize % self.0.len()]
    }
}

/// A running partition's use, shared with the registry: how much is in flight (a partition
/// with anything in flight is never closed to make room) and when it was last used.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    in_flight: AtomicUsize,
    /// Milliseconds since [`Usage::epoch`], at the last message.
    last_used: AtomicU64,
}

impl Usage {
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    /// Records a use now.
    pub(crate) fn touch(&self) {
        let now = Self::epoch().elapsed().as_millis() as u64;
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// When the partition was last used (larger is more recent; 0: never).
    pub fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// How long ago the partition was last used.
    fn idle_for(&self) -> Duration {
        let now = Self::epoch().elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_used()))
    }

    /// Counts something in flight until the returned guard is dropped: the partition is not
    /// closed for room meanwhile.
    pub(crate) fn hold(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Sets the last use back to `last_used`, after work that is not a use (retention).
    fn restore(&self, last_used: u64) {
        self.last_used.store(last_used, Ordering::Relaxed);
    }

    /// Whether anything is in flight: queued or committing appends, reads, trims, leases.
    pub fn is_busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

/// Sent to the registry by a partition idle for `idle_stop` with nothing in flight.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct PartitionIdle {
    pub id: PartitionId,
    pub generation: u64,
}

/// Sent by the registry before it stops an idle partition: commit what is queued and refuse
/// everything after (callers then locate the partition anew).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Drain;

/// Counters of one partition since its actor started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Appends answered (`Append` messages and [`Log`](crate::Log) appends alike).
    pub appends: u64,
    /// Transactions that committed them: fewer than `appends` when group commit grouped.
    pub commits: u64,
}

/// Asks a partition for its [`PartitionStats`].
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<PartitionStats, Error>")]
pub struct GetStats;

/// Makes the partition's next commit fail, as a failing disk would (tests of recovery).
#[cfg(any(test, feature = "test-util"))]
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), Error>")]
pub struct FailNextCommit;

/// One partition's actor. See the module docs.
pub struct PartitionActor {
    setup: PartitionSetup,
    /// `None` when reopening after a failure did not succeed: every operation is unavailable.
    store: Option<Arc<LogStore>>,
    load: Arc<LoadObserver>,
    queued: produce::AppendQueue,
    flush_scheduled: bool,
    /// The share (numbered by `shares`) at the volume's committer, not committed yet: the
    /// next one waits for it, so this partition's appends keep their order.
    committing: Option<u64>,
    /// Shares handed to the committer so far.
    shares: u64,
    /// Shares handed to the committer whose callers are not answered yet (on a replicated
    /// volume, a committed share waits for its landing while the next one commits).
    unanswered: usize,
    draining: bool,
    /// Told when a drain finished: nothing queued, nothing committing.
    drained: Vec<oneshot::Sender<()>>,
    timers: Vec<SpawnHandle>,
    last_activity: Instant,
    /// Retention is running (asked for by the alarm or a [`RunRetention`]); another request
    /// meanwhile is skipped.
    retention_running: Rc<Cell<bool>>,
    /// The due time whose retention run failed last, left to the sweep (the alarm does not
    /// ring for it); `None` after a run that succeeded.
    retention_failed: Rc<Cell<Option<i64>>>,
    /// The way [`Log`](crate::Log)'s appends take, around this event loop.
    shortcut: Arc<Shortcut>,
    /// Held by each operation run off the worker (see [`PartitionActor::on_worker`]) while it
    /// runs: first come, first served.
    turn: Arc<Turn>,
}

/// A partition's turn to run an operation (see [`PartitionActor::on_worker`]).
type Turn = tokio::sync::Mutex<()>;

impl PartitionActor {
    /// Starts the actor of the partition `store` opened, on the current arbiter, under a
    /// supervisor.
    pub(crate) fn start(setup: PartitionSetup, store: Arc<LogStore>) -> actix::Addr<Self> {
        setup.alive.fetch_add(1, Ordering::SeqCst);
        actix::Supervisor::start(move |ctx: &mut Context<Self>| {
            // Producers wait for their answers, so this bounds memory, not throughput.
            ctx.set_mailbox_capacity(1024);
            let load = Arc::new(LoadObserver::new(setup.options.clock.clone()));
            let shortcut = Arc::new(Shortcut::new(
                Some(store.clone()),
                load.clone(),
                setup.usage.clone(),
                setup.appended.clone(),
            ));
            Self {
                setup,
                store: Some(store),
                load,
                queued: Default::default(),
                flush_scheduled: false,
                committing: None,
                shares: 0,
                unanswered: 0,
                draining: false,
                drained: Vec::new(),
                timers: Vec::new(),
                last_activity: Instant::now(),
                retention_running: Rc::default(),
                retention_failed: Rc::default(),
                shortcut,
                turn: Arc::default(),
            }
        })
    }

    /// The store, for a handler about to use it; also marks the partition as active. A store
    /// poisoned by a failed commit stops the actor here, so that its supervisor restarts it
    /// and reopens its store (which recovers the volume); the caller is told to retry.
    fn store(&mut self, ctx: &mut Context<Self>) -> Result<Arc<LogStore>, Error> {
        self.last_activity = Instant::now();
        self.setup.usage.touch();
        if self.draining {
            return Err(Error::PartitionStopped);
        }
        let store = self.store.clone().ok_or_else(|| {
            Error::unavailable(
                Some(&self.setup.id),
                "its store could not be reopened",
                None,
            )
        })?;
        if store.is_poisoned() {
            log::error!(
                "partition {}: restarting after a failed commit",
                self.setup.id
            );
            ctx.stop();
            return Err(Error::PartitionStopped);
        }
        Ok(store)
    }

    /// Runs `work` with the store in the partition's turn: once every operation of the
    /// partition that arrived before it ended, so that they take effect in the order they
    /// arrived. The answer comes back to the caller.
    fn on_worker<T, F>(
        &mut self,
        ctx: &mut Context<Self>,
        work: impl FnOnce(Arc<LogStore>) -> F,
    ) -> ResponseFuture<Result<T, Error>>
    where
        F: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        let turn = Some(self.turn.clone());
        self.off_worker(ctx, turn, work)
    }

    /// Runs `work` with the store on the partition's worker; a trim runs beside the other
    /// operations, with no `turn`, as its waits for the cold tier would otherwise hold them all.
    /// Where the store's writes wait for their window to land (see
    /// [`LogStore::waits_for_landings`]), `work` runs after `turn` if given, on a thread of the worker's blocking pool (the worker's own thread drives its
    /// I/O): a write waiting for its window keeps that thread only, never the worker that other
    /// partitions share. Else it runs on the worker's thread itself, one at a time, which
    /// costs no thread switch (about 50 µs a cursor commit, measured).
    pub(super) fn off_worker<T, F>(
        &mut self,
        ctx: &mut Context<Self>,
        turn: Option<Arc<Turn>>,
        work: impl FnOnce(Arc<LogStore>) -> F,
    ) -> ResponseFuture<Result<T, Error>>
    where
        F: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        let store = match self.store(ctx) {
            Ok(store) => store,
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        let off = store.waits_for_landings();
        let in_flight = self.begin_async();
        let (answer, answered) = oneshot::channel();
        let work = work(store);
        let spawned = self
            .setup
            .workers
            .for_partition(&self.setup.id)
            .spawn(async move {
                if !off {
                    let _ = answer.send(work.await);
                    return;
                }
                let _turn = match turn {
                    Some(turn) => Some(turn.lock_owned().await),
                    None => None,
                };
                let runtime = tokio::runtime::Handle::current();
                let done = tokio::task::spawn_blocking(move || runtime.block_on(work)).await;
                let _ = answer.send(done.unwrap_or(Err(Error::PartitionStopped)));
            });
        if !spawned {
            return Box::pin(async { Err(Error::PartitionStopped) });
        }
        Box::pin(async move {
            let _in_flight = in_flight;
            answered.await.unwrap_or(Err(Error::PartitionStopped))
        })
    }

    /// Counts an asynchronous operation as in flight until the returned guard is dropped.
    fn begin_async(&self) -> InFlight {
        self.setup.usage.hold()
    }

    /// Times a delivery (a read or a lease) as outbound load until the returned guard is
    /// dropped, however the delivery ends.
    fn begin_delivery(&self) -> Delivery {
        Delivery::begin(&self.load)
    }

    /// Starts the partition's one timer, its tick: the retention alarm (see
    /// [`PartitionActor::retention_alarm`]), and when it does not ring, the idleness check (a
    /// partition about to run its retention is not reported idle). Its handle is kept so that a
    /// drain cancels it. The alarm's resolution is the tick's interval; a partition that is not
    /// open is left to the registry's sweep.
    fn schedule_timers(&mut self, ctx: &mut Context<Self>) {
        let every =
            (self.setup.idle_stop / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
        let tick = ctx.run_interval(every, |act, ctx| {
            if !act.retention_alarm(ctx) {
                act.check_idle();
            }
        });
        self.timers = vec![tick];
    }

    fn check_idle(&mut self) {
        let busy =
            !self.queued.borrow().is_empty() || self.flush_scheduled || self.setup.usage.is_busy();
        // Appends through the `Shortcut` touch the usage, not this actor.
        let idle = self
            .last_activity
            .elapsed()
            .min(self.setup.usage.idle_for());
        if busy || self.draining || idle < self.setup.idle_stop {
            return;
        }
        let Some(on_idle) = &self.setup.on_idle else {
            return;
        };
        on_idle.do_send(PartitionIdle {
            id: self.setup.id.clone(),
            generation: self.setup.generation,
        });
        // Not asked again until the registry answers with `Drain` (or more work arrives).
        self.last_activity = Instant::now();
    }
}

impl Drop for PartitionActor {
    fn drop(&mut self) {
        self.setup.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decrements the in-flight count when an operation ends, however it ends.
pub(crate) struct InFlight(Arc<Usage>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A delivery counted in the partition's outbound load until dropped.
pub(super) struct Delivery {
    load: Arc<LoadObserver>,
    request: crate::load::Request,
}

impl Delivery {
    fn begin(load: &Arc<LoadObserver>) -> Self {
        Self {
            request: load.begin_outbound(),
            load: load.clone(),
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.load.finish(&self.request);
    }
}

impl Actor for PartitionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if !self.draining {
            self.schedule_timers(ctx);
        }
    }
}

impl Supervised for PartitionActor {
    /// A restart does not rebuild the actor: answer what the failed store left queued (the
    /// callers retry) and reopen the store. A drained partition stays closed: it only
    /// answers "stopped" until its last address is dropped.
    fn restarting(&mut self, _: &mut Self::Context) {
        self.timers.clear();
        self.flush_scheduled = false;
        // The answers' futures went with the old context.
        (self.committing, self.unanswered) = (None, 0);
        for queued in self.queued.borrow_mut().drain(..) {
            queued.refuse();
        }
        if self.draining {
            return;
        }
        self.store = None;
        // The reopened store's due time is read anew; a run in flight clears its own flag.
        self.retention_failed.set(None);
        let id = &self.setup.id;
        let reopened = LogStore::open_in(
            &self.setup.volume,
            id.topic(),
            id.index(),
            self.setup.options.clone(),
            false,
        );
        match reopened {
            Ok(store) => self.store = store.map(Arc::new),
            Err(err) => log::error!("partition {id}: cannot reopen its store: {err}"),
        }
        self.shortcut.set_store(self.store.clone());
    }
}

impl Handler<Drain> for PartitionActor {
    /// Answers once the queued appends are committed; from then on every message is refused
    /// with [`Error::PartitionStopped`], the timers are off, the store is closed and the actor
    /// stops (it is dropped once no caller holds its address).
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) -> Self::Result {
        self.draining = true;
        for timer in self.timers.drain(..) {
            ctx.cancel_future(timer);
        }
        let shortcut_closed = self.shortcut.close();
        self.flush(ctx);
        let (done, drained) = oneshot::channel();
        self.drained.push(done);
        self.notify_drained();
        Box::pin(
            async move {
                let _ = drained.await;
                let _ = shortcut_closed.await;
            }
            .into_actor(self)
            .map(|(), act, ctx| {
                act.store = None;
                ctx.stop();
            }),
        )
    }
}

impl PartitionActor {
    /// Completes pending drains once nothing is queued or unanswered.
    fn notify_drained(&mut self) {
        if self.draining && self.unanswered == 0 && self.queued.borrow().is_empty() {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

impl Handler<GetStats> for PartitionActor {
    type Result = Result<PartitionStats, Error>;

    fn handle(&mut self, _: GetStats, ctx: &mut Self::Context) -> Self::Result {
        let store = self.store(ctx)?;
        Ok(PartitionStats {
            appends: self.shortcut.appends(),
            commits: store.commits(),
        })
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Handler<FailNextCommit> for PartitionActor {
    type Result = Result<(), Error>;

    fn handle(&mut self, _: FailNextCommit, ctx: &mut Self::Context) -> Self::Result {
        self.store(ctx)?.fail_next_commit();
        Ok(())
    }
}
