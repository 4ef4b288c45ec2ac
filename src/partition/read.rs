//! `Read`: a page of records, from the hot window or read back from cold segments.

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
use crate::store::Page;

/// Reads up to `limit` records from `from` (default: the oldest readable offset).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Page, Error>")]
pub struct Read {
    /// First offset to read; `None` is the oldest readable offset.
    pub from: Option<u64>,
    /// Most records to return; `None` (or more than `max_batch_size`) is `max_batch_size`.
    pub limit: Option<usize>,
}

impl Handler<Read> for PartitionActor {
    type Result = ResponseFuture<Result<Page, Error>>;

    /// Runs on the actor's own event loop, not the writer thread: a hot page is one short
    /// query on a pooled read connection (it never waits for a commit, since WAL readers do
    /// not block), so the two thread switches would cost more than the query. Cold read-back
    /// awaits the cold store without blocking.
    fn handle(&mut self, read: Read, ctx: &mut Context<Self>) -> Self::Result {
        let store = match self.store(ctx) {
            Ok(store) => store,
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        let in_flight = self.begin_async();
        Box::pin(async move {
            let _in_flight = in_flight;
            Ok(store.read(read.from, read.limit).await?)
        })
    }
}
