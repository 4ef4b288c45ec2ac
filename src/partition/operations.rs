//! Operations: bounds, load, retention and the cold index.
//!
//! - `GetBounds`: which offsets the partition can serve.
//! - `GetLoad`: the partition's load snapshot.
//! - `Trim` (on demand) and `RunRetention` (the registry's sweep, when due): enforce retention.
//! - `ForgetColdBefore`: drop cold segments from the index.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::{Error, ErrorCode};
use crate::load::LoadSnapshot;
use crate::store;

/// Asks for the partition's oldest readable, oldest hot and next offsets.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<store::Bounds, Error>")]
pub struct GetBounds;

impl Handler<GetBounds> for PartitionActor {
    type Result = ResponseFuture<Result<store::Bounds, Error>>;

    fn handle(&mut self, _: GetBounds, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, |store| async move { Ok(store.bounds()?) })
    }
}

/// Asks for the partition's load: appends in flight and completed over the last minute, and
/// the backlog of its slowest group (`pendingDeliveries`).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<LoadSnapshot, Error>")]
pub struct GetLoad;

impl Handler<GetLoad> for PartitionActor {
    type Result = ResponseFuture<Result<LoadSnapshot, Error>>;

    fn handle(&mut self, _: GetLoad, ctx: &mut Context<Self>) -> Self::Result {
        let load = self.load.clone();
        self.on_worker(ctx, move |store| async move {
            Ok(load.snapshot(store.pending_deliveries()?))
        })
    }
}

/// Runs retention now; answers how many records left the hot window.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct Trim;

/// Sent by the registry's sweep when the partition's retention is due; answers once it ran.
/// The outcome is logged: a failure leaves the partition due, for the next sweep.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunRetention;

impl Handler<Trim> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    /// Trims on the partition's worker thread; the store deletes hot rows only after their
    /// segment is stored in the cold tier.
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
        // The sweep's work is not a use: it neither keeps the partition from idling nor from
        // closing for room.
        let (last_activity, last_used) = (self.last_activity, self.setup.usage.last_used());
        let trimmed = self.on_worker(ctx, |store| async move { Ok(store.trim().await?) });
        self.last_activity = last_activity;
        self.setup.usage.restore(last_used);
        let id = self.setup.id.clone();
        let running = self.retention_running.clone();
        running.set(true);
        Box::pin(async move {
            let trimmed = trimmed.await;
            running.set(false);
            match trimmed {
                Ok(0) => {}
                Ok(removed) => log::debug!("partition {id}: retention removed {removed} records"),
                // Damage was logged once, when it was found; retention waits for the repair.
                Err(err) if err.code() == ErrorCode::Corrupted => {}
                Err(err) => log::warn!("partition {id}: retention failed, will retry: {err}"),
            }
        })
    }
}

/// Forgets the cold segments that end below `before`; answers how many.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct ForgetColdBefore {
    /// Segments whose last offset is below this are forgotten.
    pub before: u64,
}

impl Handler<ForgetColdBefore> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, forget: ForgetColdBefore, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.forget_cold_before(forget.before)?)
        })
    }
}
