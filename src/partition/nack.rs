//! `Nack`: hand a leased range back for redelivery.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

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
