//! `Leases`: a group's lease rows.

use actix::{Context, Handler, Message};

use super::PartitionActor;
use crate::error::Error;
use crate::store::LeaseRow;

/// Asks for `group`'s leases: held, awaiting redelivery, or settled but not yet committed over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<LeaseRow>, Error>")]
pub struct Leases {
    /// The consumer group.
    pub group: String,
}

impl Handler<Leases> for PartitionActor {
    type Result = Result<Vec<LeaseRow>, Error>;

    fn handle(&mut self, leases: Leases, _: &mut Context<Self>) -> Self::Result {
        Ok(self.store()?.leases(&leases.group)?)
    }
}
