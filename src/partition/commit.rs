//! `Commit`: move a group's cursor forward.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Commits `group`'s position: everything below `offset` is processed. Only moves forward;
/// answers the cursor in effect afterwards.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct Commit {
    /// The consumer group.
    pub group: String,
    /// The next offset to read (at most the log's next offset).
    pub offset: u64,
}

impl Handler<Commit> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, commit: Commit, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.commit(&commit.group, commit.offset)?)
        })
    }
}
