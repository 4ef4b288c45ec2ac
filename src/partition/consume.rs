//! Consuming: reads and committed cursors.
//!
//! - `Read`: a page of records, from the hot window or read back from cold segments.
//! - `GetCursor`: one group's committed position.
//! - `ListCursors`: every group's committed position.
//! - `ListGroups`: every group's position, lag and lease counts.
//! - `GetCommitted`: one group's committed position with its metadata.
//! - `Commit`: move a group's cursor forward (`CommitWith`: keeping metadata with it).
//! - `Seek`: set a group's cursor forward or back, keeping metadata with it.
//! - `DeleteCursor`: forget a group's position and leases.

use std::collections::BTreeMap;

use actix::{Context, Handler, Message, ResponseFuture};

use super::PartitionActor;
use crate::error::Error;
use crate::store::{Committed, GroupPosition, Page};

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

    /// Runs on the actor's own event loop, not a worker thread: a hot page is one short
    /// query on a pooled read connection (it never waits for a commit, since WAL readers do
    /// not block), so the two thread switches would cost more than the query. Cold read-back
    /// awaits the cold store without blocking.
    fn handle(&mut self, read: Read, ctx: &mut Context<Self>) -> Self::Result {
        let store = match self.store(ctx) {
            Ok(store) => store,
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        let (in_flight, delivery) = (self.begin_async(), self.begin_delivery());
        Box::pin(async move {
            let _timed = (in_flight, delivery);
            Ok(store.read(read.from, read.limit).await?)
        })
    }
}

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

/// Asks for `group`'s committed position with the metadata its commit carried (`None` if it
/// never committed).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Option<Committed>, Error>")]
pub struct GetCommitted {
    /// The consumer group.
    pub group: String,
}

impl Handler<GetCommitted> for PartitionActor {
    type Result = ResponseFuture<Result<Option<Committed>, Error>>;

    fn handle(&mut self, committed: GetCommitted, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.committed(&committed.group)?)
        })
    }
}

/// Asks for every group's committed position, by group name.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<BTreeMap<String, u64>, Error>")]
pub struct ListCursors;

impl Handler<ListCursors> for PartitionActor {
    type Result = ResponseFuture<Result<BTreeMap<String, u64>, Error>>;

    fn handle(&mut self, _: ListCursors, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, |store| async move { Ok(store.cursors()?) })
    }
}

/// Asks for every group's position: cursor, lag and lease counts (see
/// [`LogStore::group_positions`](crate::store::LogStore::group_positions)).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<Vec<GroupPosition>, Error>")]
pub struct ListGroups;

impl Handler<ListGroups> for PartitionActor {
    type Result = ResponseFuture<Result<Vec<GroupPosition>, Error>>;

    fn handle(&mut self, _: ListGroups, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, |store| async move { Ok(store.group_positions()?) })
    }
}

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

/// [`Commit`], keeping `metadata` with the cursor when the commit moves it (a commit that
/// does not move it changes nothing, its metadata included).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct CommitWith {
    /// The consumer group.
    pub group: String,
    /// The next offset to read (at most the log's next offset).
    pub offset: u64,
    /// What to keep with the cursor (at most `MAX_CURSOR_METADATA_BYTES` bytes); `None`:
    /// nothing.
    pub metadata: Option<String>,
}

impl Handler<CommitWith> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, commit: CommitWith, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            let metadata = commit.metadata.as_deref();
            Ok(store.commit_with(&commit.group, commit.offset, metadata)?)
        })
    }
}

/// Sets `group`'s position to `offset`, forward or back (a seek), keeping `metadata` with it;
/// answers the cursor, `offset`.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, Error>")]
pub struct Seek {
    /// The consumer group.
    pub group: String,
    /// The next offset to read (at most the log's next offset).
    pub offset: u64,
    /// What to keep with the cursor (at most `MAX_CURSOR_METADATA_BYTES` bytes); `None`:
    /// nothing.
    pub metadata: Option<String>,
}

impl Handler<Seek> for PartitionActor {
    type Result = ResponseFuture<Result<u64, Error>>;

    fn handle(&mut self, seek: Seek, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.seek(&seek.group, seek.offset, seek.metadata.as_deref())?)
        })
    }
}

/// Deletes `group`'s cursor and leases, so it stops holding back the backlog. Answers whether
/// there was a cursor.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<bool, Error>")]
pub struct DeleteCursor {
    /// The consumer group.
    pub group: String,
}

impl Handler<DeleteCursor> for PartitionActor {
    type Result = ResponseFuture<Result<bool, Error>>;

    fn handle(&mut self, delete: DeleteCursor, ctx: &mut Context<Self>) -> Self::Result {
        self.on_worker(ctx, move |store| async move {
            Ok(store.delete_cursor(&delete.group)?)
        })
    }
}
