//! Leases: claim, list, ack, nack and extend a group's leased ranges.
//!
//! - `ClaimLease`: claim a range for a worker of a group; exhausted ranges go to the dead letters.
//! - `ListLeases`: a group's lease rows.
//! - `Ack`: settle a leased range as processed.
//! - `Nack`: hand a leased range back for redelivery.
//! - `Extend`: renew a lease's hold.

use std::sync::Arc;

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
use crate::store::LeaseRow;
use crate::store::{self, LeaseOutcome};

/// Claims the next range for `group`: a due redelivery first, else up to `limit` fresh
/// records. Answers `None` when nothing is available now, including when this call sent an
/// exhausted range to the dead-letter destination (ask again).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<store::Lease>, Error>")]
pub struct ClaimLease {
    /// The consumer group.
    pub group: String,
    /// Most records in a fresh range; `None` is `max_batch_size`.
    pub limit: Option<usize>,
}

impl Handler<ClaimLease> for PartitionActor {
    type Result = ResponseFuture<Result<Option<store::Lease>, Error>>;

    fn handle(&mut self, lease: ClaimLease, ctx: &mut Context<Self>) -> Self::Result {
        let dead_letter = self.setup.dead_letter.clone();
        let id = self.setup.id.clone();
        let delivery = self.begin_delivery();
        self.on_worker(ctx, move |store| async move {
            let _delivery = delivery;
            match store.lease(&lease.group, lease.limit).await? {
                LeaseOutcome::Leased(leased) => Ok(Some(leased)),
                LeaseOutcome::Idle => Ok(None),
                LeaseOutcome::Exhausted(exhausted) => {
                    // The store hands out exhausted ranges only when a destination exists.
                    let dead_letter = dead_letter.as_ref().map(Arc::as_ref).ok_or_else(|| {
                        Error::unavailable(Some(&id), "no dead-letter destination", None)
                    })?;
                    // Copied first, then skipped: a failure here leaves the range held, and it
                    // is retried when the hold expires (the keys make the copy idempotent).
                    dead_letter.store_exhausted(&id, &exhausted.records).await?;
                    store.skip(&lease.group, &exhausted.batch_id)?;
                    log::warn!(
                        "partition {id}: group {} gave up offsets {}..={} after {} attempts; sent to the dead letters",
                        lease.group,
                        exhausted.first_offset,
                        exhausted.last_offset,
                        exhausted.attempt - 1
                    );
                    Ok(None)
                }
            }
        })
    }
}

/// Asks for `group`'s leases: held, awaiting redelivery, or settled but not yet committed over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<LeaseRow>, Error>")]
pub struct ListLeases {
    /// The consumer group.
    pub group: String,
}

impl Handler<ListLeases> for PartitionActor {
    type Result = ResponseFuture<Result<Vec<LeaseRow>, Error>>;

    fn handle(&mut self, leases: ListLeases, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(
            ctx,
            move |store| async move { Ok(store.leases(&leases.group)?) },
        )
    }
}

/// Settles the range `batch_id` of `group`; answers the group's cursor afterwards.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<u64>, Error>")]
pub struct Ack {
    /// The consumer group holding the range.
    pub group: String,
    /// The delivery to settle.
    pub batch_id: String,
}

impl Handler<Ack> for PartitionActor {
    type Result = ResponseFuture<Result<Option<u64>, Error>>;

    fn handle(&mut self, ack: Ack, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.ack(&ack.group, &ack.batch_id)?)
        })
    }
}

/// Returns the range `batch_id` of `group` for redelivery no sooner than `delay_ms` from now.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), Error>")]
pub struct Nack {
    /// The consumer group holding the range.
    pub group: String,
    /// The delivery to hand back.
    pub batch_id: String,
    /// How long to wait before redelivering (0: at once).
    pub delay_ms: u64,
}

impl Handler<Nack> for PartitionActor {
    type Result = ResponseFuture<Result<(), Error>>;

    fn handle(&mut self, nack: Nack, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.nack(&nack.group, &nack.batch_id, nack.delay_ms)?)
        })
    }
}

/// Renews the hold on `batch_id` for another lease period; answers the new expiry.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<i64, Error>")]
pub struct Extend {
    /// The consumer group holding the range.
    pub group: String,
    /// The delivery to extend.
    pub batch_id: String,
}

impl Handler<Extend> for PartitionActor {
    type Result = ResponseFuture<Result<i64, Error>>;

    fn handle(&mut self, extend: Extend, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.extend(&extend.group, &extend.batch_id)?)
        })
    }
}
