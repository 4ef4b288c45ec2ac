//! Producing: `Append`, one batch, atomically, with group commit.
//!
//! Two ways in, both ending at the volume's committer, which commits the shares of every
//! partition of the volume together:
//! - [`Appender`], what [`Log`](crate::Log) uses: the caller's thread hands its batch to the
//!   committer as a share of its own, and the committer's answer goes straight back to it. The
//!   actor's event loop is not on the way (two thread switches fewer per append).
//! - The `Append` message, for applications that send typed messages: the handler queues the
//!   batch with the caller's reply channel and schedules a [`Flush`], which hands everything
//!   queued to the committer as one share and answers each caller once it is committed.
//!
//! `docs/append-pipeline.md` tells an append's whole path.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix::dev::MessageResponse;
use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use tokio::sync::{Notify, oneshot};

use super::{InFlight, PartitionActor, Usage};
use crate::error::Error;
use crate::load::{LoadObserver, LoadSnapshot, Request};
use crate::store::{AppendOutcome, LogStore, NewRecord, StoreError};

/// Appends `records` to the partition as one atomic batch.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Appended, Error>")]
pub struct Append {
    /// The batch, in order.
    pub records: Vec<NewRecord>,
}

/// The answer to an [`Append`].
#[derive(Debug, Clone)]
pub struct Appended {
    /// Offsets, or a definite rejection (nothing written).
    pub outcome: AppendOutcome,
    /// The partition's load after the commit (this append still counted as in flight).
    pub load: LoadSnapshot,
}

type Reply = oneshot::Sender<Result<Appended, Error>>;

/// The batches waiting for the next group commit, shared with [`Enqueue`], which fills in the
/// callers' reply channels.
pub(super) type AppendQueue = Rc<RefCell<Vec<Queued>>>;

/// A batch waiting for the next group commit, and where its answer goes.
pub(super) struct Queued {
    records: Vec<NewRecord>,
    request: Request,
    reply: Option<Reply>,
    /// Keeps the partition open until the caller is answered.
    _in_flight: InFlight,
}

/// What the `Append` handler answers with: the batch joins the queue along with the caller's
/// reply channel (or the caller is answered at once with an error).
pub struct Enqueue(Result<(AppendQueue, Queued), Error>);

impl MessageResponse<PartitionActor, Append> for Enqueue {
    fn handle(self, _: &mut Context<PartitionActor>, reply: Option<Reply>) {
        match self.0 {
            Ok((queue, mut queued)) => {
                queued.reply = reply;
                queue.borrow_mut().push(queued);
            }
            Err(err) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(err));
                }
            }
        }
    }
}

/// Commits every queued batch in one transaction.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

impl Queued {
    /// Answers a batch that will not be committed here (the caller retries).
    pub(super) fn refuse(self) {
        if let Some(reply) = self.reply {
            let _ = reply.send(Err(Error::PartitionStopped));
        }
    }
}

impl Handler<Append> for PartitionActor {
    type Result = Enqueue;

    fn handle(&mut self, append: Append, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(err) = self.store(ctx) {
            return Enqueue(Err(err));
        }
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            ctx.notify(Flush);
        }
        let queued = Queued {
            records: append.records,
            request: self.load.begin_inbound(),
            reply: None,
            _in_flight: self.begin_async(),
        };
        Enqueue(Ok((self.queued.clone(), queued)))
    }
}

impl Handler<Flush> for PartitionActor {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
        self.flush(ctx);
    }
}

impl PartitionActor {
    /// Hands everything queued to the volume's committer, unless a commit of this partition is
    /// running: then its completion (its local commit, or its answer) starts the next one, so
    /// this partition's appends keep their order and commits follow each other without a gap
    /// while appends keep queueing.
    pub(super) fn flush(&mut self, ctx: &mut Context<Self>) {
        self.flush_scheduled = false;
        if self.committing.is_some() || self.queued.borrow().is_empty() {
            return;
        }
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        let Some(store) = self.store.clone() else {
            queued.into_iter().for_each(Queued::refuse);
            return;
        };
        let share = self.shares;
        self.shares += 1;
        self.committing = Some(share);
        self.unanswered += 1;
        let (replies, batches): (Vec<_>, Vec<_>) = queued
            .into_iter()
            .map(|queued| {
                (
                    (queued.request, queued.reply, queued._in_flight),
                    queued.records,
                )
            })
            .unzip();
        let (answer, answered) = oneshot::channel();
        let (committed, committed_here) = oneshot::channel();
        store.submit_append(
            batches,
            Box::new(move |result| {
                let _ = answer.send(result);
            }),
            Some(Box::new(move || {
                let _ = committed.send(());
            })),
        );
        ctx.spawn(
            async move { committed_here.await.is_ok() }
                .into_actor(self)
                .map(move |committed, act, ctx| {
                    if committed {
                        act.share_committed(share, ctx);
                    }
                }),
        );
        let id = self.setup.id.clone();
        ctx.spawn(
            async move { answered.await.unwrap_or(Err(StoreError::Poisoned)) }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    act.unanswered -= 1;
                    act.answer(&id, replies, result);
                    act.share_committed(share, ctx);
                    act.notify_drained();
                }),
        );
    }

    /// The committer is done with `share` (committed locally, or answered): the next share
    /// may go.
    fn share_committed(&mut self, share: u64, ctx: &mut Context<Self>) {
        if self.committing == Some(share) {
            self.committing = None;
        }
        self.flush_after_callers(ctx);
    }

    /// Starts the next group commit once the callers just answered have had their turn on this
    /// event loop: those who append again right away join the group. Without this, a closed
    /// loop of producers splits into groups that alternate, each paying its own fsync, and
    /// the stragglers of one commit make the next one small.
    fn flush_after_callers(&mut self, ctx: &mut Context<Self>) {
        if self.flush_scheduled || self.queued.borrow().is_empty() {
            return;
        }
        self.flush_scheduled = true;
        ctx.spawn(
            tokio::task::yield_now()
                .into_actor(self)
                .map(|(), act, ctx| act.flush(ctx)),
        );
    }

    /// Answers each caller of a group commit.
    fn answer(
        &mut self,
        id: &crate::names::PartitionId,
        replies: Vec<(Request, Option<Reply>, InFlight)>,
        result: Result<(Vec<AppendOutcome>, u64), StoreError>,
    ) {
        self.appender.count_appends(replies.len());
        match result {
            Ok((outcomes, pending)) => {
                if outcomes.iter().any(AppendOutcome::is_appended) {
                    self.appender.wake_readers();
                }
                // One snapshot for the group, taken while all of its appends are in flight.
                let load = self.load.snapshot(pending);
                for ((request, reply, _in_flight), outcome) in replies.into_iter().zip(outcomes) {
                    self.load.finish(&request);
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(Appended {
                            outcome,
                            load: load.clone(),
                        }));
                    }
                }
            }
            Err(err) => {
                let err = Error::from(err);
                for (request, reply, _in_flight) in replies {
                    self.load.finish(&request);
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(err.for_another_caller(id)));
                    }
                }
            }
        }
    }
}

/// A partition's way for appends from any thread, straight to its volume's committer: each
/// batch is a share of its own, and the committer answers it on its own thread, so neither the
/// call nor its answer passes through the partition actor's event loop. Shared between the
/// actor, which owns the store and opens the way only while it may be written through, and
/// the [`Log`](crate::Log) handles that cache it.
///
/// Everything the actor does around an append is done here instead, thread-safely: the use
/// and the in-flight hold the registry reads, the inbound load, the counters, and the wake-up
/// of long-polling readers.
pub(crate) struct Appender {
    gate: Mutex<Gate>,
    load: Arc<LoadObserver>,
    usage: Arc<Usage>,
    /// Woken after each commit that appended records (the partition's, then its topic's).
    appended: [Arc<Notify>; 2],
    /// Batches answered, by either way in.
    appends: AtomicU64,
}

/// Whether appends may go to the committer without the actor.
#[derive(Default)]
struct Gate {
    /// The store to append to; `None` while the actor drains or has no store.
    store: Option<Arc<LogStore>>,
    /// Shares at the committer not answered yet: a drain waits for them, so that no share of
    /// this store is still queued when another store of the partition opens.
    in_flight: usize,
    /// Told once nothing is in flight after the gate closed.
    drained: Vec<oneshot::Sender<()>>,
}

impl Appender {
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
        let appender = self.clone();
        // Runs on the committer thread, where the records are already findable.
        let reply = Box::new(
            move |result: Result<(Vec<AppendOutcome>, u64), StoreError>| {
                let answered = result.map(|(mut outcomes, pending)| {
                    let outcome = outcomes.pop().expect("one outcome per batch");
                    if outcome.is_appended() {
                        appender.wake_readers();
                    }
                    // Taken while this append still counts as in flight.
                    (outcome, appender.load.snapshot(pending))
                });
                appender.load.finish(&request);
                appender.count_appends(1);
                let _ = answer.send(answered);
                drop(in_flight);
                appender.answered();
            },
        );
        store.submit_append(vec![records], reply, None);
        Ok(async move {
            let (outcome, load) = answered.await.unwrap_or(Err(StoreError::Poisoned))?;
            Ok(Appended { outcome, load })
        })
    }

    /// Sets the store appends go to (`None` closes the way).
    pub(super) fn set_store(&self, store: Option<Arc<LogStore>>) {
        self.lock().store = store;
    }

    /// Closes the way and answers once every share that went through it is answered.
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
        self.gate
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Asks a partition's actor for its [`Appender`].
#[derive(Message, Debug)]
#[rtype(result = "Arc<Appender>")]
pub(crate) struct GetAppender;

impl Handler<GetAppender> for PartitionActor {
    type Result = Arc<Appender>;

    fn handle(&mut self, _: GetAppender, _: &mut Context<Self>) -> Self::Result {
        self.appender.clone()
    }
}
