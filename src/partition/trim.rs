//! `Trim` (on demand) and `RunRetention` (the timer's message): enforce retention.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Runs retention now; answers how many records left the hot window.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct Trim;

/// Sent by the partition's retention timer (and once at start); the outcome is logged.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunRetention;

impl Handler<Trim> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    /// Trims on the writer thread; the store deletes hot rows only after their segment is
    /// stored in the cold tier.
    fn handle(&mut self, _: Trim, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, |store| async move { Ok(store.trim().await?) })
    }
}

impl Handler<RunRetention> for PartitionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: RunRetention, ctx: &mut Context<Self>) -> Self::Result {
        // One run at a time: runs that queue up behind a slow one would keep the partition busy
        // (and the workers occupied) for nothing.
        if self.retention_running.get() {
            return Box::pin(async {});
        }
        // The timer's work is not the activity that keeps a partition from idling.
        let last_activity = self.last_activity;
        let trimmed = self.on_worker(ctx, |store| async move { Ok(store.trim().await?) });
        self.last_activity = last_activity;
        let id = self.setup.id.clone();
        let running = self.retention_running.clone();
        running.set(true);
        Box::pin(async move {
            let trimmed = trimmed.await;
            running.set(false);
            match trimmed {
                Ok(0) => {}
                Ok(removed) => log::debug!("partition {id}: retention removed {removed} records"),
                Err(err) => log::warn!("partition {id}: retention failed, will retry: {err}"),
            }
        })
    }
}
