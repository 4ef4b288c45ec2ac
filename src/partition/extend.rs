//! `Extend`: renew a lease's hold.

use actix::{Context, Handler, Message};

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
    type Result = Result<i64, Error>;

    fn handle(&mut self, extend: Extend, ctx: &mut Context<Self>) -> Self::Result {
        let result = self.store()?.extend(&extend.group, &extend.batch_id);
        self.stop_if_poisoned(ctx);
        Ok(result?)
    }
}
