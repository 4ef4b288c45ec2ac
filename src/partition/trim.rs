//! `Trim` (on demand) and `RunRetention` (the timer's message): enforce retention.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;

/// Runs retention now; answers how many records left the hot window.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct Trim;

/// Sent by the partition's retention timer (and once at start); the outcome is logged.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunRetention;

impl Handler<Trim> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, _: Trim, _: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        let in_flight = self.begin_async();
        // Cold-store I/O is awaited here while the actor keeps serving other messages; the
        // store deletes hot rows only after their segment is stored.
        Box::pin(async move {
            let _in_flight = in_flight;
            Ok(store?.trim().await?)
        })
    }
}

impl Handler<RunRetention> for PartitionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: RunRetention, _: &mut Context<Self>) -> Self::Result {
        let Some(store) = self.store.clone() else {
            return Box::pin(async {});
        };
        let in_flight = self.begin_async();
        let id = self.setup.id.clone();
        Box::pin(async move {
            let _in_flight = in_flight;
            match store.trim().await {
                Ok(0) => {}
                Ok(removed) => log::debug!("partition {id}: retention removed {removed} records"),
                Err(err) => log::warn!("partition {id}: retention failed, will retry: {err}"),
            }
        })
    }
}
