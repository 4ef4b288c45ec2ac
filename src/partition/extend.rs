//! `Extend`: renew a lease's hold.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

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
