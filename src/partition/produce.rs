//! Producing: `Append`, one batch, atomically, with group commit.
//!
//! Two ways in, both ending at the volume's committer, which commits the shares of every
//! partition of the volume together:
//! - [`Shortcut::append`](super::Shortcut::append), what [`Log`](crate::Log) uses: the
//!   caller's thread hands its batch to the committer as a share of its own, and the
//!   committer's answer goes straight back to it. The actor's event loop is not on the way
//!   (two thread switches fewer per append).
//! - The `Append` message, for applications that send typed messages: the handler queues the
//!   batch with the caller's reply channel and schedules a [`Flush`], which hands everything
//!   queued to the committer as one share and answers each caller once it is committed.
//!
//! `docs/append-pipeline.md` tells an append's whole path.

use std::cell::RefCell;
use std::rc::Rc;

use actix::dev::MessageResponse;
use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use tokio::sync::oneshot;

use super::{InFlight, PartitionActor};
use crate::error::Error;
use crate::load::{LoadSnapshot, Request};
use crate::store::{AppendOutcome, NewRecord, StoreError};

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
        self.shortcut.count_appends(replies.len());
        match result {
            Ok((outcomes, pending)) => {
                if outcomes.iter().any(AppendOutcome::is_appended) {
                    self.shortcut.wake_readers();
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
