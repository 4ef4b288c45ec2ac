//! `GetLoad`: the partition's load snapshot.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
use crate::load::LoadSnapshot;

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
