//! `PartitionActor`: one actor per partition, the single writer of its SQLite database.
//!
//! Each operation is a typed [`Message`] in its own file with its handler. The
//! actor lives on the arbiter that started the log (message passing with producers on that
//! event loop costs no thread switch), and every write and every cold-store call runs on the
//! partition's own writer thread (an [`Arbiter`](actix::Arbiter)), so a blocking fsync never
//! stalls the event loop or another partition. Hot reads are the exception: one short query on
//! a pooled WAL reader, which never waits for a commit, they run on the event loop (see
//! [`Read`]). Appends that arrive while a commit runs are committed together in the next
//! transaction (group commit, see [`Append`]). A timer only
//! enqueues [`RunRetention`]; the handler trims on the writer thread. A partition idle for
//! `idle_stop` tells the registry, which drains it; a partition whose store failed a commit
//! stops at its next message and its supervisor restarts it, reopening the database.

mod ack;
mod append;
mod bounds;
mod commit;
mod cursor;
mod cursors;
mod delete_cursor;
mod extend;
mod forget_cold_before;
mod lease;
mod leases;
mod load;
mod nack;
mod read;
mod trim;

use std::cell::Cell;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    ResponseActFuture, ResponseFuture, SpawnHandle, Supervised, WrapFuture,
};
use tokio::sync::oneshot;

pub use ack::Ack;
pub use append::{Append, Appended, Enqueue};
pub use bounds::Bounds;
pub use commit::Commit;
pub use cursor::Cursor;
pub use cursors::Cursors;
pub use delete_cursor::DeleteCursor;
pub use extend::Extend;
pub use forget_cold_before::ForgetColdBefore;
pub use lease::Lease;
pub use leases::Leases;
pub use load::Load;
pub use nack::Nack;
pub use read::Read;
pub use trim::{RunRetention, Trim};

use crate::error::Error;
use crate::load::LoadObserver;
use crate::names::PartitionId;
use crate::store::{LogStore, Record, StoreOptions};

/// Where exhausted lease ranges go (SEMANTICS Part A 18): the server's dead-letter topic, or
/// an embedder's own callback.
pub trait DeadLetter: std::fmt::Debug + Send + Sync {
    /// Stores `records` of partition `origin` durably; each record keeps its payload and gets
    /// the deduplication key `{topic}:{partition}:{offset}`, so a retry never duplicates.
    fn send<'a>(
        &'a self,
        origin: &'a PartitionId,
        records: &'a [Record],
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
}

/// Everything a partition needs to open (and reopen) its store and run.
#[derive(Debug, Clone)]
pub(crate) struct PartitionSetup {
    pub id: PartitionId,
    pub path: PathBuf,
    pub options: StoreOptions,
    pub sweep_interval: Duration,
    pub idle_stop: Duration,
    pub dead_letter: Option<Arc<dyn DeadLetter>>,
    /// Told when the partition has been idle for `idle_stop`.
    pub on_idle: Option<Recipient<PartitionIdle>>,
    /// Distinguishes this start from earlier ones of the same partition.
    pub generation: u64,
    /// Woken after each commit that appended records (this partition's, then its topic's), so
    /// long-polling readers answer at once.
    pub appended: [Arc<tokio::sync::Notify>; 2],
}

/// Sent to the registry by a partition idle for `idle_stop` with nothing in flight.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct PartitionIdle {
    pub id: PartitionId,
    pub generation: u64,
    /// When the oldest hot record becomes due for age retention, if ever.
    pub wake_at: Option<i64>,
}

/// Sent by the registry before it stops an idle partition: commit what is queued and refuse
/// everything after (callers then locate the partition anew).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Drain;

/// Counters of one partition's actor since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Append messages answered.
    pub appends: u64,
    /// Transactions that committed them: fewer than `appends` when group commit grouped.
    pub commits: u64,
}

/// Asks a partition for its [`PartitionStats`].
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<PartitionStats, Error>")]
pub struct Stats;

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
    /// The thread that does this partition's blocking work.
    writer: actix::Arbiter,
    load: Arc<LoadObserver>,
    queued: append::AppendQueue,
    flush_scheduled: bool,
    /// A group commit is running on the writer thread.
    committing: bool,
    draining: bool,
    /// Told when a drain finished: nothing queued, nothing committing.
    drained: Vec<oneshot::Sender<()>>,
    timers: Vec<SpawnHandle>,
    last_activity: Instant,
    /// Asynchronous operations (reads, trims, leases) not finished yet.
    in_flight: Rc<Cell<usize>>,
    stats: PartitionStats,
}

impl PartitionActor {
    /// Opens the store and starts the actor on the current arbiter, under a supervisor, with
    /// a new writer thread.
    pub(crate) fn start(setup: PartitionSetup) -> Result<actix::Addr<Self>, Error> {
        let store = Arc::new(LogStore::open(&setup.path, setup.options.clone())?);
        Ok(actix::Supervisor::start(move |ctx: &mut Context<Self>| {
            // Producers wait for their answers, so this bounds memory, not throughput.
            ctx.set_mailbox_capacity(1024);
            let load = Arc::new(LoadObserver::new(setup.options.clock.clone()));
            Self {
                setup,
                store: Some(store),
                writer: actix::Arbiter::new(),
                load,
                queued: Default::default(),
                flush_scheduled: false,
                committing: false,
                draining: false,
                drained: Vec::new(),
                timers: Vec::new(),
                last_activity: Instant::now(),
                in_flight: Rc::new(Cell::new(0)),
                stats: PartitionStats::default(),
            }
        }))
    }

    /// The store, for a handler about to use it; also marks the partition as active. A store
    /// poisoned by a failed commit stops the actor here, so that its supervisor restarts it
    /// and reopens the database; the caller is told to retry.
    fn store(&mut self, ctx: &mut Context<Self>) -> Result<Arc<LogStore>, Error> {
        self.last_activity = Instant::now();
        if self.draining {
            return Err(Error::PartitionStopped);
        }
        let store = self.store.clone().ok_or_else(|| Error::Unavailable {
            partition: self.setup.id.to_string(),
            reason: "the database could not be reopened".into(),
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

    /// Runs `work` with the store on the writer thread; the answer comes back to the caller.
    fn on_writer<T, F>(
        &mut self,
        ctx: &mut Context<Self>,
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
        let in_flight = self.begin_async();
        let (answer, answered) = oneshot::channel();
        let work = work(store);
        self.writer.spawn(async move {
            let _ = answer.send(work.await);
        });
        Box::pin(async move {
            let _in_flight = in_flight;
            answered.await.unwrap_or(Err(Error::PartitionStopped))
        })
    }

    /// Counts an asynchronous operation as in flight until the returned guard is dropped.
    fn begin_async(&self) -> InFlight {
        self.in_flight.set(self.in_flight.get() + 1);
        InFlight(self.in_flight.clone())
    }

    fn schedule_retention(&self, ctx: &mut Context<Self>) {
        ctx.notify(RunRetention);
        ctx.run_interval(self.setup.sweep_interval, |_, ctx| ctx.notify(RunRetention));
    }

    fn schedule_idle_check(&self, ctx: &mut Context<Self>) {
        let every =
            (self.setup.idle_stop / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
        ctx.run_interval(every, |act, _| act.check_idle());
    }

    fn check_idle(&mut self) {
        let busy =
            !self.queued.borrow().is_empty() || self.flush_scheduled || self.in_flight.get() > 0;
        if busy || self.draining || self.last_activity.elapsed() < self.setup.idle_stop {
            return;
        }
        let Some(on_idle) = &self.setup.on_idle else {
            return;
        };
        let wake_at = self
            .store
            .as_ref()
            .and_then(|store| store.retention_due_at().ok().flatten());
        on_idle.do_send(PartitionIdle {
            id: self.setup.id.clone(),
            generation: self.setup.generation,
            wake_at,
        });
        // Not asked again until the registry answers with `Drain` (or more work arrives).
        self.last_activity = Instant::now();
    }
}

/// Decrements the in-flight count when an asynchronous operation ends, however it ends.
struct InFlight(Rc<Cell<usize>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Actor for PartitionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if !self.draining {
            self.schedule_retention(ctx);
            self.schedule_idle_check(ctx);
        }
    }
}

impl Supervised for PartitionActor {
    /// A restart does not rebuild the actor: answer what the failed store left queued (the
    /// callers retry) and reopen the database. A drained partition stays closed: it only
    /// answers "stopped" until its last address is dropped.
    fn restarting(&mut self, _: &mut Self::Context) {
        self.timers.clear();
        self.flush_scheduled = false;
        self.committing = false;
        for queued in self.queued.borrow_mut().drain(..) {
            queued.refuse();
        }
        if self.draining {
            return;
        }
        self.store = None;
        match LogStore::open(&self.setup.path, self.setup.options.clone()) {
            Ok(store) => self.store = Some(Arc::new(store)),
            Err(err) => log::error!(
                "partition {}: cannot reopen its database: {err}",
                self.setup.id
            ),
        }
    }
}

impl Handler<Drain> for PartitionActor {
    /// Answers once the queued appends are committed; from then on every message is refused
    /// with [`Error::PartitionStopped`], the timers are off, the writer thread is stopped and
    /// the database is closed.
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) -> Self::Result {
        self.draining = true;
        for timer in self.timers.drain(..) {
            ctx.cancel_future(timer);
        }
        self.flush(ctx);
        let (done, drained) = oneshot::channel();
        self.drained.push(done);
        self.notify_drained();
        Box::pin(
            async move {
                let _ = drained.await;
            }
            .into_actor(self)
            .map(|(), act, _| {
                act.writer.stop();
                act.store = None;
            }),
        )
    }
}

impl PartitionActor {
    /// Completes pending drains once nothing is queued or committing.
    fn notify_drained(&mut self) {
        if self.draining && !self.committing && self.queued.borrow().is_empty() {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

impl Handler<Stats> for PartitionActor {
    type Result = Result<PartitionStats, Error>;

    fn handle(&mut self, _: Stats, ctx: &mut Self::Context) -> Self::Result {
        self.store(ctx)?;
        Ok(self.stats)
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
