//! `Append`: one batch, atomically, with group commit.
//!
//! The handler does not commit: it queues the batch together with the caller's reply channel
//! and, if none is scheduled, schedules a [`Flush`] to itself. Actix drains the mailbox before
//! it runs notified messages, so every append that arrived while the previous commit ran is
//! committed by one `append_batches` transaction (one fsync), each batch keeping its own
//! offsets and rejection, and each caller answered straight from the flush.

use std::cell::RefCell;
use std::rc::Rc;

use actix::dev::MessageResponse;
use actix::{AsyncContext, Context, Handler, Message};
use tokio::sync::oneshot;

use super::PartitionActor;
use crate::error::Error;
use crate::load::{LoadSnapshot, Request};
use crate::store::{AppendOutcome, NewRecord};

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

impl Handler<Append> for PartitionActor {
    type Result = Enqueue;

    fn handle(&mut self, append: Append, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(err) = self.store() {
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
        };
        Enqueue(Ok((self.queued.clone(), queued)))
    }
}

impl Handler<Flush> for PartitionActor {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
        let waiting = self.queued.borrow().len();
        let first_try = *self
            .flush_started
            .get_or_insert_with(std::time::Instant::now);
        if waiting < self.last_batch && first_try.elapsed() < std::time::Duration::from_micros(100)
        {
            ctx.notify(Flush);
            return;
        }
        self.flush_started = None;
        self.last_batch = waiting;
        self.flush(ctx);
    }
}

impl PartitionActor {
    /// Commits the queued batches together and answers each caller.
    pub(super) fn flush(&mut self, ctx: &mut Context<Self>) {
        self.flush_scheduled = false;
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        if queued.is_empty() {
            return;
        }
        let answers = match self.store.clone() {
            None => Err(Error::PartitionStopped),
            Some(store) => {
                let batches: Vec<&[NewRecord]> = queued
                    .iter()
                    .map(|batch| batch.records.as_slice())
                    .collect();
                self.stats.appends += queued.len() as u64;
                store
                    .append_batches(&batches)
                    .map_err(Error::from)
                    .map(|outcomes| {
                        if outcomes
                            .iter()
                            .any(|outcome| matches!(outcome, AppendOutcome::Appended { .. }))
                        {
                            self.stats.commits += 1;
                        }
                        (outcomes, store.pending_deliveries().unwrap_or(0))
                    })
            }
        };
        match answers {
            Ok((outcomes, pending)) => {
                // One snapshot for the group, taken while all of its appends are in flight.
                let load = self.load.snapshot(pending);
                for (batch, outcome) in queued.into_iter().zip(outcomes) {
                    self.load.finish(&batch.request);
                    let load = load.clone();
                    if let Some(reply) = batch.reply {
                        let _ = reply.send(Ok(Appended { outcome, load }));
                    }
                }
            }
            Err(err) => {
                for batch in queued {
                    self.load.finish(&batch.request);
                    if let Some(reply) = batch.reply {
                        let _ = reply.send(Err(err.for_another_caller(&self.setup.id)));
                    }
                }
                self.stop_if_poisoned(ctx);
            }
        }
    }
}
