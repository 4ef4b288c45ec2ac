//! Read and consume: pages of records (with long-poll), group polls and commits, cursors.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa::openapi::schema::{KnownFormat, Object, ObjectBuilder, SchemaFormat, Type};

use super::error::ErrorBody;
use super::forward::forwarded;
use super::params;
use super::request::{Query, json_body, offset, partition, partition_key};
use super::{ApiError, HttpState};
use crate::cluster::peer::CURSOR_DELETED;
use crate::log;
use crate::wire::{
    CommittedCursors, Cursor, CursorBody, GroupCursor, GroupCursors, GroupPoll, Integer, Page,
    PartitionPage,
};

/// `GET /topics/{topic}/partitions/{partition}/records?from=&limit=&waitMs=`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/records",
    tag = "consume",
    operation_id = "readRecords",
    summary = "Read a page of records",
    description = "Reads from `from` (cold storage included), waiting up to `waitMs` for a first \
        record when there is none yet. A partition never written answers an empty page.",
    params(params::PartitionPath, params::ReadQuery),
    responses(
        (status = 200, description = "The page", body = Page),
        (status = 400, description = "`invalid_request`, `invalid_name` or `invalid_offset` (negative, or beyond `nextOffset`)", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 410, description = "`log_truncated`: records below the position were removed by retention", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn read(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    let query = Query::parse(request.query_string())?;
    let (from, limit, wait) = (query.from()?, query.limit()?, query.wait(state.max_wait)?);
    let page = state
        .log
        .read_wait(&topic, index, from, limit, wait)
        .await?;
    let read = page.records.len() as u64;
    state.metrics.records_read(&topic, read);
    Ok(HttpResponse::Ok().json(Page::from(page)))
}

/// `GET /topics/{topic}/groups/{group}/poll?limit=&waitMs=`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/groups/{group}/poll",
    tag = "consume",
    operation_id = "pollGroup",
    summary = "Read every partition from the group's cursors",
    description = "Reads every partition of the topic from the group's committed cursor (or the \
        oldest readable offset when it has none), without committing. With `waitMs`, answers as \
        soon as any partition has records, or when the wait ends.",
    params(params::GroupPath, params::PollQuery),
    responses(
        (status = 200, description = "One page per partition, in partition order", body = GroupPoll),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = ErrorBody),
        (status = 410, description = "`log_truncated`: records below the position were removed by retention", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn poll(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let query = Query::parse(request.query_string())?;
    let (limit, wait) = (query.limit()?, query.wait(state.max_wait)?);
    // A node of the cluster asks for the partitions held here only.
    let pages: Vec<(u32, log::Page)> = if forwarded(&request) {
        state.log.poll_held(&topic, &group, limit, wait).await?
    } else {
        (0..)
            .zip(state.log.poll(&topic, &group, limit, wait).await?)
            .collect()
    };
    let read = pages
        .iter()
        .map(|(_, page)| page.records.len() as u64)
        .sum();
    state.metrics.records_read(&topic, read);
    let partitions = pages
        .into_iter()
        .map(|(partition, page)| PartitionPage {
            partition,
            page: page.into(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(GroupPoll { partitions }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    /// Partition number → the next offset to read.
    #[schema(schema_with = commit_offsets)]
    offsets: BTreeMap<String, Integer>,
}

/// The schema of `CommitBody::offsets`: what the derive writes for a map, plus the rules the
/// handler checks. A key is a partition number (digits without a leading zero, so no two keys
/// name one partition: `400 invalid_name` otherwise) and a value an offset (negative:
/// `400 invalid_offset`).
fn commit_offsets() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("Partition number → the next offset to read."))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^(0|[1-9][0-9]*)$")),
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(0)),
        ))
        .build()
}

/// `POST /topics/{topic}/groups/{group}/commit` with `{"offsets": {"0": 12}}`: every
/// partition and offset is checked before any is committed.
#[utoipa::path(
    post,
    path = "/topics/{topic}/groups/{group}/commit",
    tag = "consume",
    operation_id = "commitGroup",
    summary = "Commit the group's cursors on several partitions",
    description = "Commits only move forward: a lower or equal offset changes nothing. Every \
        partition and offset is checked before any is committed.",
    params(params::GroupPath),
    request_body = CommitBody,
    responses(
        (status = 200, description = "The cursor in effect for each named partition", body = CommittedCursors),
        (status = 400, description = "`invalid_request`, `invalid_name` or `invalid_offset`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the commit may or may not have happened", body = ErrorBody),
    )
)]
pub async fn commit(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let body: CommitBody = json_body(body, state.body_limits()).await?;
    let mut offsets = BTreeMap::new();
    for (index, value) in &body.offsets {
        offsets.insert(partition_key(index)?, offset(value.0)?);
    }
    // A node of the cluster commits partitions held here only.
    let cursors = if forwarded(&request) {
        state.log.commit_held(&topic, &group, &offsets).await?
    } else {
        state.log.commit_many(&topic, &group, &offsets).await?
    };
    Ok(HttpResponse::Ok().json(CommittedCursors { cursors }))
}

/// `PUT /topics/{topic}/partitions/{partition}/cursors/{group}` with `{"offset": 12}`, and
/// optionally `"seek": true` and `"metadata"`.
#[utoipa::path(
    put,
    path = "/topics/{topic}/partitions/{partition}/cursors/{group}",
    tag = "consume",
    operation_id = "putCursor",
    summary = "Commit the group's cursor on one partition",
    description = "Commits only move forward: a lower or equal offset changes nothing. With \
        `\"seek\": true` the cursor moves to `offset` even below where it is (the group reads \
        those records again). `metadata` is kept with the cursor when the request moves it.",
    params(params::PartitionGroupPath),
    request_body = CursorBody,
    responses(
        (status = 200, description = "The cursor in effect", body = Cursor),
        (status = 400, description = "`invalid_request` (metadata over 4096 bytes too), `invalid_name` or `invalid_offset`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the commit may or may not have happened", body = ErrorBody),
    )
)]
pub async fn put_cursor(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let body: CursorBody = json_body(body, state.body_limits()).await?;
    let (log, offset, metadata) = (&state.log, offset(body.offset.0)?, body.metadata.as_deref());
    let cursor = if body.seek {
        log.seek(&topic, index, &group, offset, metadata).await?
    } else if metadata.is_some() {
        log.commit_with(&topic, index, &group, offset, metadata)
            .await?
    } else {
        log.commit(&topic, index, &group, offset).await?
    };
    Ok(HttpResponse::Ok().json(Cursor { cursor }))
}

/// `GET /topics/{topic}/partitions/{partition}/cursors/{group}`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/cursors/{group}",
    tag = "consume",
    operation_id = "getCursor",
    summary = "A consumer group's cursor on a partition",
    description = "The group's committed cursor with the metadata kept with it; `cursor` is \
        `null` when the group has none on the partition.",
    params(params::PartitionGroupPath),
    responses(
        (status = 200, description = "The cursor", body = GroupCursor),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn get_cursor(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let committed = state
        .log
        .committed(&topic, partition(&index)?, &group)
        .await?;
    let answer = match committed {
        Some(committed) => GroupCursor {
            cursor: Some(committed.offset),
            metadata: committed.metadata,
        },
        None => GroupCursor {
            cursor: None,
            metadata: None,
        },
    };
    Ok(HttpResponse::Ok().json(answer))
}

/// `GET /topics/{topic}/partitions/{partition}/cursors`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/cursors",
    tag = "consume",
    operation_id = "listCursors",
    summary = "Every consumer group's cursor on a partition",
    params(params::PartitionPath),
    responses(
        (status = 200, description = "The cursors, by group", body = GroupCursors),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn cursors(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let cursors = state.log.cursors(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(GroupCursors { cursors }))
}

/// `DELETE /topics/{topic}/partitions/{partition}/cursors/{group}`: `204`, also when there
/// was no such cursor.
#[utoipa::path(
    delete,
    path = "/topics/{topic}/partitions/{partition}/cursors/{group}",
    tag = "consume",
    operation_id = "deleteCursor",
    summary = "Remove a consumer group's cursor",
    description = "Removes the group's cursor and its leases on the partition, so that it no \
        longer holds back `load` and a later commit may start lower.",
    params(params::PartitionGroupPath),
    responses(
        (status = 204, description = "Removed, or there was no such cursor"),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn delete_cursor(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let deleted = state
        .log
        .delete_cursor(&topic, partition(&index)?, &group)
        .await?;
    let mut answer = HttpResponse::NoContent();
    // Another node's typed call learns whether there was a cursor (a client's request that a
    // node passed on gets it too, unasked: the documented 204 says nothing of it).
    if forwarded(&request) {
        answer.insert_header((CURSOR_DELETED, if deleted { "1" } else { "0" }));
    }
    Ok(answer.finish())
}
