//! `ClaimLease`: claim a range for a worker of a group; exhausted ranges go to the dead letters.

use std::sync::Arc;

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
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
        self.on_worker(ctx, move |store| async move {
            match store.lease(&lease.group, lease.limit).await? {
                LeaseOutcome::Leased(leased) => Ok(Some(leased)),
                LeaseOutcome::Idle => Ok(None),
                LeaseOutcome::Exhausted(exhausted) => {
                    // The store hands out exhausted ranges only when a destination exists.
                    let dead_letter = dead_letter.as_ref().map(Arc::as_ref).ok_or_else(|| Error::Unavailable {
                        partition: id.to_string(),
                        reason: "no dead-letter destination".into(),
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
