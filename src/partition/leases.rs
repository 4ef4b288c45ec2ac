//! `ListLeases`: a group's lease rows.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
use crate::store::LeaseRow;

/// Asks for `group`'s leases: held, awaiting redelivery, or settled but not yet committed over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<LeaseRow>, Error>")]
pub struct ListLeases {
    /// The consumer group.
    pub group: String,
}

impl Handler<ListLeases> for PartitionActor {
    type Result = ResponseFuture<Result<Vec<LeaseRow>, Error>>;

    fn handle(&mut self, leases: ListLeases, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(
            ctx,
            move |store| async move { Ok(store.leases(&leases.group)?) },
        )
    }
}
