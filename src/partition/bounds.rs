//! `GetBounds`: which offsets the partition can serve.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
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
