//! The JSON shapes nodes and clients exchange: the REST API's bodies that one node also reads
//! from another (`cluster::peer`), defined once for both sides. A leaf: it knows the log's
//! types, nothing of the HTTP layer or of the cluster.
//!
//! Bodies holding records are typed structs, never a `serde_json::Value`: payloads are written
//! verbatim, so any JSON text the server accepted (even one a `Value` cannot hold, such as a
//! lone surrogate escape) reads back, and a node reading another's page keeps them verbatim.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::error::ErrorCode;
use crate::load::LoadSnapshot;

/// Every error: `{"error": {"code", "message", ...details}}`. A 4xx is definite: nothing
/// changed; so is `503 overloaded`. Otherwise a 5xx is uncertain: the write may or may not have
/// happened.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The `error` object of an `ErrorBody`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// A stable snake_case code (the document lists every one, by status).
    #[schema(value_type = String, example = "invalid_request")]
    pub code: ErrorCode,
    /// Human-readable text.
    pub message: String,
    /// `log_truncated`: the first offset that was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub requested_offset: Option<u64>,
    /// `log_truncated`: the oldest readable offset, where reading can continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub oldest_offset: Option<u64>,
    /// `lease_not_held`: the batch id that is not held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub batch_id: Option<String>,
    /// `invalid_offset` (sometimes): the partition's next offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_offset: Option<u64>,
    /// `unknown_partition` (sometimes): the topic's partition count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub partitions: Option<u32>,
    /// `forbidden`: the permission the token lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<String>, example = "produce")]
    pub permission: Option<crate::auth::Permission>,
    /// Whether the answer says when to retry (`Retry-After`): `overloaded`, and `unavailable`
    /// while a volume is rebuilt.
    #[serde(skip)]
    pub retry_after: bool,
}

impl ErrorDetail {
    /// An error with `code` and `message`, and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            requested_offset: None,
            oldest_offset: None,
            batch_id: None,
            next_offset: None,
            partitions: None,
            permission: None,
            retry_after: code == ErrorCode::Overloaded,
        }
    }
}

/// A record as the API shows it: the payload is the stored JSON value itself.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Record)]
pub struct RecordJson {
    /// The record's offset in its partition.
    pub offset: u64,
    /// Its deduplication key, or `null` when it was appended without one.
    #[schema(required = true)]
    pub key: Option<String>,
    /// The JSON value it was appended with.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// When it was appended, in ms since the Unix epoch.
    pub appended_at: i64,
}

impl From<crate::log::Record> for RecordJson {
    fn from(record: crate::log::Record) -> Self {
        // Records appended through the library may hold text that is not JSON: show it as a
        // JSON string rather than fail the page.
        let payload = RawValue::from_string(record.payload).unwrap_or_else(|err| {
            let text = serde_json::to_string(&err.to_string()).expect("a string serializes");
            RawValue::from_string(text).expect("a JSON string is JSON")
        });
        Self {
            offset: record.offset,
            key: record.key,
            payload,
            appended_at: record.appended_at,
        }
    }
}

/// Records as the API shows them.
pub fn records_json(records: Vec<crate::log::Record>) -> Vec<RecordJson> {
    records.into_iter().map(RecordJson::from).collect()
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/records`: a page of records.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// The records, in offset order.
    pub records: Vec<RecordJson>,
    /// Where to read next: one past the last record, or the starting position when the page is
    /// empty.
    pub next_offset: u64,
    /// The log's `nextOffset` minus this page's `nextOffset`.
    pub lag: u64,
}

impl From<crate::log::Page> for Page {
    fn from(page: crate::log::Page) -> Self {
        Self {
            records: records_json(page.records),
            next_offset: page.next_offset,
            lag: page.lag,
        }
    }
}

/// One partition's page in a group poll.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(from = "PartitionPageFields")]
pub struct PartitionPage {
    /// The partition.
    pub partition: u32,
    /// Its page, read from the group's cursor.
    #[serde(flatten)]
    pub page: Page,
}

/// A [`PartitionPage`]'s fields as they are read: serde's `flatten` cannot read a payload
/// verbatim.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartitionPageFields {
    partition: u32,
    records: Vec<RecordJson>,
    next_offset: u64,
    lag: u64,
}

impl From<PartitionPageFields> for PartitionPage {
    fn from(fields: PartitionPageFields) -> Self {
        Self {
            partition: fields.partition,
            page: Page {
                records: fields.records,
                next_offset: fields.next_offset,
                lag: fields.lag,
            },
        }
    }
}

/// `200` of `GET /topics/{topic}/groups/{group}/poll`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupPoll {
    /// One page per partition, in partition order.
    pub partitions: Vec<PartitionPage>,
}

/// `200` of `POST /topics/{topic}/groups/{group}/commit`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommittedCursors {
    /// The cursor in effect for each partition of the request, by partition number.
    #[schema(value_type = BTreeMap<String, u64>)]
    pub cursors: BTreeMap<u32, u64>,
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/bounds`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    /// The oldest readable offset, counting cold segments.
    pub oldest_offset: u64,
    /// The oldest offset still in the hot window.
    pub hot_offset: u64,
    /// The offset the next appended record will get.
    pub next_offset: u64,
}

impl From<crate::log::Bounds> for Bounds {
    fn from(bounds: crate::log::Bounds) -> Self {
        Self {
            oldest_offset: bounds.oldest_offset,
            hot_offset: bounds.hot_offset,
            next_offset: bounds.next_offset,
        }
    }
}

/// A topic in `GET /topics`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicSummary {
    /// The topic's name.
    pub name: String,
    /// Its partition count.
    pub partitions: u32,
}

/// `200` of `GET /topics`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Topics {
    /// Topics that have at least one written partition, sorted by name: the page.
    pub topics: Vec<TopicSummary>,
    /// The last name of the page when more topics may follow (pass it as `after`); `null` at
    /// the end.
    pub next: Option<String>,
}

/// `202` of `POST /topics/{topic}/partitions/{partition}/records`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AppendedOffsets {
    /// The offset of each record, in input order.
    pub offsets: Vec<u64>,
    /// The partition's load after the append.
    pub load: LoadSnapshot,
}

/// `200` of a partition's lease claim: a range held by the caller until `expiresAt`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Identifies this delivery: ack, nack or extend with it.
    pub batch_id: String,
    /// The consumer group.
    pub group: String,
    /// The range's first offset.
    pub first_offset: u64,
    /// The range's last offset (inclusive).
    pub last_offset: u64,
    /// Deliveries of this range so far, this one included.
    pub attempt: u32,
    /// When the hold ends, in ms since the Unix epoch.
    pub expires_at: i64,
    /// The range's records, in offset order.
    pub records: Vec<RecordJson>,
}

impl From<crate::log::Lease> for Lease {
    fn from(lease: crate::log::Lease) -> Self {
        Self {
            batch_id: lease.batch_id,
            group: lease.group,
            first_offset: lease.first_offset,
            last_offset: lease.last_offset,
            attempt: lease.attempt,
            expires_at: lease.expires_at,
            records: records_json(lease.records),
        }
    }
}

/// One partition in `GET /topics/{topic}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionDetail {
    /// The partition.
    pub partition: u32,
    /// Its offsets.
    #[serde(flatten)]
    pub bounds: Bounds,
    /// Every consumer group's cursor, by group name.
    pub cursors: BTreeMap<String, u64>,
    /// `nextOffset` minus the slowest cursor (0 with no cursors).
    pub pending_deliveries: u64,
}

/// `200` of `GET /topics/{topic}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicDetail {
    /// The topic's name.
    pub name: String,
    /// Every partition `0..partitionCount-1`, in order. Partitions never written show zeros.
    pub partitions: Vec<PartitionDetail>,
}

impl From<RecordJson> for crate::log::Record {
    fn from(record: RecordJson) -> Self {
        Self {
            offset: record.offset,
            key: record.key,
            payload: record.payload.get().to_owned(),
            appended_at: record.appended_at,
        }
    }
}

impl From<Page> for crate::log::Page {
    fn from(page: Page) -> Self {
        Self {
            records: page
                .records
                .into_iter()
                .map(crate::log::Record::from)
                .collect(),
            next_offset: page.next_offset,
            lag: page.lag,
        }
    }
}

impl From<Bounds> for crate::log::Bounds {
    fn from(bounds: Bounds) -> Self {
        Self {
            oldest_offset: bounds.oldest_offset,
            hot_offset: bounds.hot_offset,
            next_offset: bounds.next_offset,
        }
    }
}

/// The body of `POST /topics/{topic}/groups/{group}/commit`, as a node sends it to another.
#[derive(Debug, Serialize)]
pub struct CommitOffsets {
    /// The offset to commit for each partition, by partition number.
    pub offsets: BTreeMap<u32, u64>,
}

/// A record of `POST /topics/{topic}/partitions/{partition}/records`, as a node sends it to
/// another: the payload verbatim.
#[derive(Debug, Serialize)]
pub struct RecordOut<'a> {
    /// The record's JSON payload, verbatim.
    pub payload: &'a RawValue,
    /// Its deduplication key, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
}

impl From<Lease> for crate::log::Lease {
    fn from(lease: Lease) -> Self {
        Self {
            batch_id: lease.batch_id,
            group: lease.group,
            first_offset: lease.first_offset,
            last_offset: lease.last_offset,
            attempt: lease.attempt,
            expires_at: lease.expires_at,
            records: lease
                .records
                .into_iter()
                .map(crate::log::Record::from)
                .collect(),
        }
    }
}

impl From<crate::log::PartitionDetail> for PartitionDetail {
    fn from(detail: crate::log::PartitionDetail) -> Self {
        Self {
            partition: detail.partition,
            bounds: detail.bounds.into(),
            cursors: detail.cursors,
            pending_deliveries: detail.pending_deliveries,
        }
    }
}

impl From<PartitionDetail> for crate::log::PartitionDetail {
    fn from(detail: PartitionDetail) -> Self {
        Self {
            partition: detail.partition,
            bounds: detail.bounds.into(),
            cursors: detail.cursors,
            pending_deliveries: detail.pending_deliveries,
        }
    }
}
