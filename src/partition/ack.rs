//! `Ack`: settle a leased range as processed.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

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
