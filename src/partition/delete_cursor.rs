//! `DeleteCursor`: forget a group's position and leases.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Deletes `group`'s cursor and leases, so it stops holding back the backlog. Answers whether
/// there was a cursor.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<bool, Error>")]
pub struct DeleteCursor {
    /// The consumer group.
    pub group: String,
}

impl Handler<DeleteCursor> for PartitionActor {
    type Result = ResponseFuture<Result<bool, Error>>;

    fn handle(&mut self, delete: DeleteCursor, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.delete_cursor(&delete.group)?)
        })
    }
}
