//! Operations: bounds, load, retention and the cold index.
//!
//! - `GetBounds`: which offsets the partition can serve.
//! - `GetLoad`: the partition's load snapshot.
//! - `Trim` (on demand), and `RunRetention` (the registry's sweep) and `RetentionAlarm` (the
//!   partition's own alarm) when retention is due: enforce retention.
//! - `ForgetColdBefore`: drop cold segments from the index.

use std::sync::atomic::{AtomicU64, Ordering};

use actix::{AsyncContext, Context, Handler, Message, ResponseFuture};

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

/// Sent by the registry's sweep when the partition's retention is due; answers once it ran,
/// whether it ran. A partition whose retention is running already (its alarm's run, or an
/// earlier `RunRetention`) skips it and answers `false` at once: the run in progress covers it.
/// The outcome is logged: a failure leaves the partition due, for the next sweep.
#[derive(Message, Debug, Clone)]
#[rtype(result = "bool")]
pub struct RunRetention;

/// Sent by the partition to itself when its alarm, the idle-check tick, finds its retention
/// due (see [`PartitionActor::retention_alarm`]); runs it as [`RunRetention`] does.
#[derive(Message, Debug, Clone)]
#[rtype(result = "bool")]
pub(super) struct RetentionAlarm;

/// Retention runs of a log's partitions, counted by the partitions themselves and read through
/// [`PartitionCounters`](crate::PartitionCounters). Lock-free: counting never blocks.
#[derive(Debug, Default)]
pub(crate) struct RetentionRuns {
    /// Runs started by open partitions' own alarms.
    pub by_alarm: AtomicU64,
    /// Runs not started because the partition's retention was running already: a
    /// `RunRetention` answered `false`, or an alarm that found its retention due meanwhile.
    pub skipped: AtomicU64,
}

impl RetentionRuns {
    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Handler<Trim> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    /// Trims beside the partition's other operations; the store deletes hot rows only after their
    /// segment is stored in the cold tier. A trim while retention runs waits for it (the
    /// store's trim lock), so that when it answers the hot window is within its limits.
    fn handle(&mut self, _: Trim, ctx: &mut Context<Self>) -> Self::Result {
        self.off_worker(ctx, None, |store| async move { Ok(store.trim().await?) })
    }
}

impl Handler<RunRetention> for PartitionActor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, _: RunRetention, ctx: &mut Context<Self>) -> Self::Result {
        self.run_retention(ctx, false)
    }
}

impl Handler<RetentionAlarm> for PartitionActor {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, _: RetentionAlarm, ctx: &mut Context<Self>) -> Self::Result {
        self.run_retention(ctx, true)
    }
}

impl PartitionActor {
    /// The partition's retention alarm, rung by its idle-check tick (so the tick's interval is
    /// the alarm's resolution): once the due time that the store keeps in memory
    /// ([`LogStore::due_at`](crate::store::LogStore::due_at)) has passed, the partition sends
    /// itself a [`RetentionAlarm`]. It reads no database and sets no timer of its own; the due
    /// time it reads was loaded when the store opened and is moved by the partition's own work
    /// (a commit that makes retention due sooner, a run that settles the next due time).
    ///
    /// It stays quiet for a due time whose run failed: the partition stays due in the database
    /// and the sweep retries it, as it retries every failed run, at the sweep's pace rather
    /// than at every tick; once a run settles a new due time (or an append makes it sooner),
    /// the alarm follows it again. Answers whether it rang.
    pub(super) fn retention_alarm(&mut self, ctx: &mut Context<Self>) -> bool {
        let Some(due) = self.store.as_ref().and_then(|store| store.due_at()) else {
            return false;
        };
        if self.draining
            || self.retention_failed.get() == Some(due)
            || due > self.setup.options.clock.now_ms()
        {
            return false;
        }
        ctx.notify(RetentionAlarm);
        true
    }

    /// Runs retention on the partition's worker thread, unless it is running already: one run
    /// at a time, whoever asks (the alarm or a sweep), and a second request is skipped, not
    /// queued, because the run in progress leaves the hot window within its limits and runs
    /// queued behind a slow one (a cold flush) would keep the partition busy, and the workers
    /// occupied, for nothing. Answers whether it ran; a run started `by_alarm` is counted as
    /// the alarm's. Neither the run nor the request counts as a use: it neither keeps the
    /// partition from idling nor from closing for room.
    ///
    /// A run that fails leaves the partition due in the database, for the next sweep, and its
    /// due time to the sweep: the alarm does not ring again for it (see
    /// [`PartitionActor::retention_alarm`]).
    fn run_retention(&mut self, ctx: &mut Context<Self>, by_alarm: bool) -> ResponseFuture<bool> {
        if self.retention_running.get() {
            RetentionRuns::count(&self.setup.retention_runs.skipped);
            return Box::pin(async { false });
        }
        if by_alarm {
            RetentionRuns::count(&self.setup.retention_runs.by_alarm);
        }
        // The due time this run answers for, as the store holds it before the run.
        let due = self.store.as_ref().and_then(|store| store.due_at());
        let (last_activity, last_used) = (self.last_activity, self.setup.usage.last_used());
        let trimmed = self.off_worker(ctx, None, |store| async move { Ok(store.trim().await?) });
        self.last_activity = last_activity;
        self.setup.usage.restore(last_used);
        let id = self.setup.id.clone();
        let (running, failed) = (
            self.retention_running.clone(),
            self.retention_failed.clone(),
        );
        running.set(true);
        Box::pin(async move {
            let trimmed = trimmed.await;
            running.set(false);
            // A run that succeeded settled the next due time; one that failed left `due`.
            failed.set(if trimmed.is_err() { due } else { None });
            match trimmed {
                Ok(0) => {}
                Ok(removed) => log::debug!("partition {id}: retention removed {removed} records"),
                // Damage was logged once, when it was found; retention waits for the repair.
                Err(err) if err.code() == ErrorCode::Corrupted => {}
                Err(err) => log::warn!("partition {id}: retention failed, will retry: {err}"),
            }
            true
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
