//! `ListCursors`: every group's committed position.

use std::collections::BTreeMap;

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Asks for every group's committed position, by group name.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<BTreeMap<String, u64>, Error>")]
pub struct ListCursors;

impl Handler<ListCursors> for PartitionActor {
    type Result = ResponseFuture<Result<BTreeMap<String, u64>, Error>>;

    fn handle(&mut self, _: ListCursors, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, |store| async move { Ok(store.cursors()?) })
    }
}
