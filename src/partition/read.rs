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

    fn handle(&mut self, read: Read, ctx: &mut Context<Self>) -> Self::Result {
        self.on_writer(ctx, move |store| async move {
            Ok(store.read(read.from, read.limit).await?)
        })
    }
}
