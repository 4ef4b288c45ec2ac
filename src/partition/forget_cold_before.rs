//! `ForgetColdBefore`: drop cold segments from the index.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Forgets the cold segments that end below `before`; answers how many.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct ForgetColdBefore {
    /// Segments whose last offset is below this are forgotten.
    pub before: u64,
}

impl Handler<ForgetColdBefore> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, forget: ForgetColdBefore, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.forget_cold_before(forget.before)?)
        })
    }
}
