//! `Cursor`: one group's committed position.

use actix::{Context, Handler, Message};

use super::PartitionActor;
use crate::error::Error;

/// Asks for `group`'s committed position (`None` if it never committed).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<u64>, Error>")]
pub struct Cursor {
    /// The consumer group.
    pub group: String,
}

impl Handler<Cursor> for PartitionActor {
    type Result = Result<Option<u64>, Error>;

    fn handle(&mut self, cursor: Cursor, _: &mut Context<Self>) -> Self::Result {
        Ok(self.store()?.cursor(&cursor.group)?)
    }
}
