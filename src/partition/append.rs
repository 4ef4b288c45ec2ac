//! `Append`: one batch, atomically, with group commit.
//!
//! The handler only queues the batch and, if none is scheduled, schedules a [`Flush`] to
//! itself. Actix drains the mailbox before it runs notified messages, so every append that
//! arrived while the previous commit ran is committed by one `append_batches` transaction (one
//! fsync), each batch keeping its own offsets and rejection.

use actix::{AsyncContext, Context, Handler, Message, ResponseFuture};
use tokio::sync::oneshot;

use super::PartitionActor;
use crate::error::Error;
use crate::load::LoadSnapshot;
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

/// A batch waiting for the next group commit, and where its answer goes.
pub(super) struct Queued {
    records: Vec<NewRecord>,
    pub(super) reply: oneshot::Sender<Result<(AppendOutcome, u64), Error>>,
}

/// Commits every queued batch in one transaction.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

impl Handler<Append> for PartitionActor {
    type Result = ResponseFuture<Result<Appended, Error>>;

    fn handle(&mut self, append: Append, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(err) = self.store() {
            return Box::pin(async move { Err(err) });
        }
        let request = self.load.begin_inbound();
        let (reply, answer) = oneshot::channel();
        self.queued.push(Queued {
            records: append.records,
            reply,
        });
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            ctx.notify(Flush);
        }
        let load = self.load.clone();
        Box::pin(async move {
            let answer = answer.await.unwrap_or(Err(Error::PartitionStopped));
            let result = answer.map(|(outcome, pending_deliveries)| Appended {
                outcome,
                load: load.snapshot(pending_deliveries),
            });
            load.finish(&request);
            result
        })
    }
}

impl Handler<Flush> for PartitionActor {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
        self.flush(ctx);
    }
}

impl PartitionActor {
    /// Commits the queued batches together and answers each caller.
    pub(super) fn flush(&mut self, ctx: &mut Context<Self>) {
        self.flush_scheduled = false;
        let queued = std::mem::take(&mut self.queued);
        let Some(store) = self.store.clone() else {
            for batch in queued {
                let _ = batch.reply.send(Err(Error::PartitionStopped));
            }
            return;
        };
        let batches: Vec<&[NewRecord]> = queued
            .iter()
            .map(|batch| batch.records.as_slice())
            .collect();
        let result = store.append_batches(&batches);
        self.stats.appends += queued.len() as u64;
        match result {
            Ok(outcomes) => {
                if outcomes
                    .iter()
                    .any(|outcome| matches!(outcome, AppendOutcome::Appended { .. }))
                {
                    self.stats.commits += 1;
                }
                let pending = store.pending_deliveries().unwrap_or(0);
                for (batch, outcome) in queued.into_iter().zip(outcomes) {
                    let _ = batch.reply.send(Ok((outcome, pending)));
                }
            }
            Err(err) => {
                let err = Error::from(err);
                for batch in queued {
                    let _ = batch
                        .reply
                        .send(Err(err.for_another_caller(&self.setup.id)));
                }
                self.stop_if_poisoned(ctx);
            }
        }
    }
}
