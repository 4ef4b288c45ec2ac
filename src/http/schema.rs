//! Schemas for the OpenAPI document ([`super::openapi`]): the JSON bodies that handlers build
//! with `json!`, and the path and query parameters that they parse by hand.
//!
//! Nothing constructs these types. They exist so that `utoipa` can describe the wire format.
//! Each one mirrors a `json!` body field by field. The `openapi` integration test sends real
//! requests and checks every answer against these schemas, so a handler that changes a shape
//! without changing its schema fails that test. Request bodies, records and load snapshots
//! are documented by the handlers' own types instead (`EventBody`, `RecordJson`,
//! `LoadSnapshot`, ...).

#![expect(
    dead_code,
    reason = "schema-only types: read by the OpenAPI derive, never constructed"
)]

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use super::consume::RecordJson;
use crate::load::LoadSnapshot;

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------

/// `{topic}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TopicPath {
    /// The topic: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (`400 invalid_name` otherwise).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    topic: String,
}

/// `{topic}` and `{partition}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PartitionPath {
    /// The topic: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (`400 invalid_name` otherwise).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    topic: String,
    /// The partition: `0 .. partitionCount-1` (`404 unknown_partition` past the count,
    /// `400 invalid_name` when it is not a non-negative integer).
    partition: u32,
}

/// `{topic}` and `{group}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct GroupPath {
    /// The topic: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (`400 invalid_name` otherwise).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    topic: String,
    /// The consumer group: 1 to 256 characters of `A-Z a-z 0-9 . _ - :`
    /// (`400 invalid_name` otherwise).
    #[param(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9._:-]+$")]
    group: String,
}

/// `{topic}`, `{partition}` and `{group}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PartitionGroupPath {
    /// The topic: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (`400 invalid_name` otherwise).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    topic: String,
    /// The partition: `0 .. partitionCount-1` (`404 unknown_partition` past the count,
    /// `400 invalid_name` when it is not a non-negative integer).
    partition: u32,
    /// The consumer group: 1 to 256 characters of `A-Z a-z 0-9 . _ - :`
    /// (`400 invalid_name` otherwise).
    #[param(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9._:-]+$")]
    group: String,
}

/// `{topic}`, `{partition}`, `{group}` and `{batchId}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct BatchPath {
    /// The topic: 1 to 128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`
    /// (`400 invalid_name` otherwise).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    topic: String,
    /// The partition: `0 .. partitionCount-1` (`404 unknown_partition` past the count,
    /// `400 invalid_name` when it is not a non-negative integer).
    partition: u32,
    /// The consumer group: 1 to 256 characters of `A-Z a-z 0-9 . _ - :`
    /// (`400 invalid_name` otherwise).
    #[param(min_length = 1, max_length = 256, pattern = r"^[A-Za-z0-9._:-]+$")]
    group: String,
    /// The `batchId` of the lease.
    #[param(rename = "batchId")]
    batch_id: String,
}

/// Query of `GET /topics/{topic}/partitions/{partition}/records`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// The first offset to read. Defaults to the oldest readable offset. Below it:
    /// `410 log_truncated`. Beyond `nextOffset` or negative: `400 invalid_offset`.
    from: Option<u64>,
    /// The most records to return. Defaults to `maxBatchSize`; larger values are capped to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
    // The document adds this server's `server.max_wait_ms`, which cuts longer waits.
    /// How long to wait, in ms, for a first record when there is none at `from`. Defaults to 0.
    #[param(rename = "waitMs", minimum = 0)]
    wait_ms: Option<u64>,
}

/// Query of `GET /topics/{topic}/groups/{group}/poll`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PollQuery {
    /// The most records per partition. Defaults to `maxBatchSize`; larger values are capped
    /// to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
    // The document adds this server's `server.max_wait_ms`, which cuts longer waits.
    /// How long to wait, in ms, for any partition to have records. Defaults to 0.
    #[param(rename = "waitMs", minimum = 0)]
    wait_ms: Option<u64>,
}

/// Query of the lease claims.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LimitQuery {
    /// The most records in a fresh range. Defaults to `maxBatchSize`; larger values are
    /// capped to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Produce
// ---------------------------------------------------------------------------------------------

/// `202` of `POST /topics/{topic}/records`.
#[derive(Serialize, ToSchema)]
pub struct ProducedRecords {
    /// Where each event was stored: one entry per input event, in input order. A re-sent
    /// deduplication key gives its original place back.
    records: Vec<PlacedRecord>,
}

/// Where one event was stored.
#[derive(Serialize, ToSchema)]
pub struct PlacedRecord {
    /// The partition that `partitionKey` routed it to.
    partition: u32,
    /// Its offset in that partition.
    offset: u64,
}

/// `202` of `POST /topics/{topic}/partitions/{partition}/records`.
#[derive(Serialize, ToSchema)]
pub struct AppendedOffsets {
    /// The offset of each record, in input order.
    pub offsets: Vec<u64>,
    /// The partition's load after the append.
    pub load: LoadSnapshot,
}

// ---------------------------------------------------------------------------------------------
// Read and consume
// ---------------------------------------------------------------------------------------------

/// `200` of `GET /topics/{topic}/partitions/{partition}/records`: a page of records.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// The records, in offset order.
    records: Vec<RecordJson>,
    /// Where to read next: one past the last record, or `from` when the page is empty.
    next_offset: u64,
    /// The log's `nextOffset` minus this page's `nextOffset`.
    lag: u64,
}

/// One partition's page in a group poll.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionPage {
    /// The partition.
    partition: u32,
    /// The records, in offset order.
    records: Vec<RecordJson>,
    /// Where to read next: one past the last record, or the cursor when the page is empty.
    next_offset: u64,
    /// The log's `nextOffset` minus this page's `nextOffset`.
    lag: u64,
}

/// `200` of `GET /topics/{topic}/groups/{group}/poll`.
#[derive(Serialize, ToSchema)]
pub struct GroupPoll {
    /// One page per partition, in partition order.
    partitions: Vec<PartitionPage>,
}

/// `200` of `POST /topics/{topic}/groups/{group}/commit`.
#[derive(Serialize, ToSchema)]
pub struct CommittedCursors {
    /// The cursor in effect for each partition of the request, by partition number.
    cursors: BTreeMap<String, u64>,
}

/// `200` of `PUT /topics/{topic}/partitions/{partition}/cursors/{group}`.
#[derive(Serialize, ToSchema)]
pub struct Cursor {
    /// The cursor in effect: the next offset the group will read.
    cursor: u64,
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/cursors`.
#[derive(Serialize, ToSchema)]
pub struct GroupCursors {
    /// Every consumer group's cursor on the partition, by group name.
    cursors: BTreeMap<String, u64>,
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// `200` of a partition's lease claim: a range held by the caller until `expiresAt`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Identifies this delivery: ack, nack or extend with it.
    batch_id: String,
    /// The consumer group.
    group: String,
    /// The range's first offset.
    first_offset: u64,
    /// The range's last offset (inclusive).
    last_offset: u64,
    /// Deliveries of this range so far, this one included.
    attempt: u32,
    /// When the hold ends, in ms since the Unix epoch.
    expires_at: i64,
    /// The range's records, in offset order.
    records: Vec<RecordJson>,
}

/// `200` of a topic-wide lease claim: a `Lease` plus its partition.
#[derive(Serialize, ToSchema)]
pub struct PartitionLease {
    /// The lease.
    #[serde(flatten)]
    lease: Lease,
    /// The partition the range belongs to.
    partition: u32,
}

/// `200` of an ack.
#[derive(Serialize, ToSchema)]
pub struct AckedCursor {
    /// The group's cursor after the ack, or `null` if it has none yet.
    #[schema(required = true)]
    cursor: Option<u64>,
}

/// `200` of an extend.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Extended {
    /// When the renewed hold ends, in ms since the Unix epoch.
    expires_at: i64,
}

/// Where a leased range stands.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LeaseState {
    /// Held by a worker until it settles the range or the hold expires.
    Active,
    /// Nacked: waiting to be redelivered after its delay.
    Pending,
    /// Processed. The cursor moves past it once it is contiguous with the cursor.
    Acked,
    /// Given up (dead-lettered, or its records were lost). The cursor moves past it like an
    /// acked range.
    Skipped,
}

/// One range in a group's lease list.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRow {
    /// The current delivery's batch id.
    batch_id: String,
    /// The range's first offset.
    first_offset: u64,
    /// The range's last offset (inclusive).
    last_offset: u64,
    /// Where it stands.
    state: LeaseState,
    /// Deliveries so far.
    attempt: u32,
    /// For an active range, when the hold ends. For a pending range, when it may be
    /// redelivered. In ms since the Unix epoch.
    expires_at: i64,
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
#[derive(Serialize, ToSchema)]
pub struct Leases {
    /// The group's ranges on the partition that the cursor has not moved past.
    leases: Vec<LeaseRow>,
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

/// `200` of `GET /topics/{topic}/partitions/{partition}/bounds`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    /// The oldest readable offset, counting cold segments.
    oldest_offset: u64,
    /// The oldest offset still in the hot window.
    hot_offset: u64,
    /// The offset the next appended record will get.
    next_offset: u64,
}

/// `200` of `POST /topics/{topic}/partitions/{partition}/trim`.
#[derive(Serialize, ToSchema)]
pub struct Trimmed {
    /// How many records left the hot window (flushed to the cold tier, or deleted).
    removed: u64,
}

/// `200` of `POST /topics/{topic}/partitions/{partition}/cold/forget`.
#[derive(Serialize, ToSchema)]
pub struct Forgotten {
    /// How many cold segments were forgotten.
    forgotten: u64,
}

/// A topic in `GET /topics`.
#[derive(Serialize, ToSchema)]
pub struct TopicSummary {
    /// The topic's name.
    name: String,
    /// Its partition count.
    partitions: u32,
}

/// `200` of `GET /topics`.
#[derive(Serialize, ToSchema)]
pub struct Topics {
    /// Topics that have at least one written partition, sorted by name.
    topics: Vec<TopicSummary>,
}

/// One partition in `GET /topics/{topic}`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionDetail {
    /// The partition.
    partition: u32,
    /// The oldest readable offset, counting cold segments.
    oldest_offset: u64,
    /// The oldest offset still in the hot window.
    hot_offset: u64,
    /// The offset the next appended record will get.
    next_offset: u64,
    /// Every consumer group's cursor, by group name.
    cursors: BTreeMap<String, u64>,
    /// `nextOffset` minus the slowest cursor (0 with no cursors).
    pending_deliveries: u64,
}

/// `200` of `GET /topics/{topic}`.
#[derive(Serialize, ToSchema)]
pub struct TopicDetail {
    /// The topic's name.
    name: String,
    /// Every partition `0..partitionCount-1`, in order. Partitions never written show zeros.
    partitions: Vec<PartitionDetail>,
}

/// `200` of `GET /healthz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    status: String,
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Every error: `{"error": {"code", "message", ...details}}`. A 4xx is definite: nothing
/// changed; so is `503 overloaded`. Otherwise a 5xx is uncertain: the write may or may not have
/// happened.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    error: ErrorDetail,
}

/// The `error` object of an `ErrorBody`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// A stable snake_case code. `400`: `invalid_request`, `invalid_name`,
    /// `batch_too_large`, `record_too_large`, `invalid_offset`. `401`: `unauthorized`. `404`:
    /// `unknown_partition`, `not_found`. `405`: `method_not_allowed` (with `Allow`). `409`:
    /// `lease_not_held`, `leases_disabled`. `410`: `log_truncated`. `413`: `payload_too_large`.
    /// `500`: `corrupted` (the partition's files are damaged: it refuses writes; retrying does
    /// not help). `503`: `overloaded` (definite: nothing changed, retry after `Retry-After`),
    /// `unavailable`.
    #[schema(example = "invalid_request")]
    code: String,
    /// Human-readable text.
    message: String,
    /// `log_truncated`: the first offset that was lost.
    #[schema(nullable = false)]
    requested_offset: Option<u64>,
    /// `log_truncated`: the oldest readable offset, where reading can continue.
    #[schema(nullable = false)]
    oldest_offset: Option<u64>,
    /// `lease_not_held`: the batch id that is not held.
    #[schema(nullable = false)]
    batch_id: Option<String>,
    /// `invalid_offset` (sometimes): the partition's next offset.
    #[schema(nullable = false)]
    next_offset: Option<u64>,
    /// `unknown_partition` (sometimes): the topic's partition count.
    #[schema(nullable = false)]
    partitions: Option<u32>,
}
