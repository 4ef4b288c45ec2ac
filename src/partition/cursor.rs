//! `GetCursor`: one group's committed position.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Asks for `group`'s committed position (`None` if it never committed).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<u64>, Error>")]
pub struct GetCursor {
    /// The consumer group.
    pub group: String,
}

impl Handler<GetCursor> for PartitionActor {
    type Result = ResponseFuture<Result<Option<u64>, Error>>;

    fn handle(&mut self, cursor: GetCursor, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(
            ctx,
            move |store| async move { Ok(store.cursor(&cursor.group)?) },
        )
    }
}
