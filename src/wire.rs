//! The JSON shapes nodes and clients exchange: the REST API's bodies that one node also reads
//! from another (`cluster::peer`) and that the client (`client`, feature `client`) sends and
//! reads, defined once for both sides. A leaf: it knows the log's
//! types, nothing of the HTTP layer or of the cluster.
//!
//! Bodies holding records are typed structs, never a `serde_json::Value`: payloads are written
//! verbatim, so any JSON text the server accepted (even one a `Value` cannot hold, such as a
//! lone surrogate escape) reads back, and a node reading another's page keeps them verbatim.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa::openapi::schema::{KnownFormat, Object, ObjectBuilder, SchemaFormat, SchemaType, Type};

use crate::error::ErrorCode;
use crate::load::LoadSnapshot;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::log::{
    Header, LeaseState, MAX_CURSOR_METADATA_BYTES, MAX_KEY_BYTES, NewRecord, Payload,
};

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

/// A record as the API shows it: the payload is the stored JSON value itself, and the parts
/// a record may carry beside it (`../API.md`, "Records: headers, message keys, binary
/// payloads") appear only where the record has them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Record)]
pub struct RecordJson {
    /// The record's offset in its partition.
    pub offset: u64,
    /// Its deduplication key, or `null` when it was appended without one.
    #[schema(required = true)]
    pub key: Option<String>,
    /// The JSON value it was appended with; `null` for a tombstone; absent for a binary
    /// payload.
    #[schema(value_type = Option<serde_json::Value>)]
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload: Option<Box<RawValue>>,
    /// A binary payload, in standard base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    /// `true` for a record without a value (a Kafka tombstone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tombstone: bool,
    /// The message key, where its bytes are UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_key: Option<String>,
    /// The message key in standard base64, where its bytes are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_key_base64: Option<String>,
    /// Its headers, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Vec<HeaderJson>>,
    /// When it was appended, in ms since the Unix epoch.
    pub appended_at: i64,
}

/// One header of a record: a name and a value, as text where it is UTF-8, else in base64
/// (neither when the header has no value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderJson {
    /// The header's name; names may repeat.
    pub name: String,
    /// Its value, as text. Exclusive with `valueBase64`.
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub value: Option<String>,
    /// Its value, in standard base64.
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(schema_with = base64_bytes)]
    pub value_base64: Option<String>,
}

/// A field that, when present, holds a `T`, never `null`: the forms of a part are told apart
/// by which fields are present, so a `null` one would be neither absent nor given.
fn given<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A field that is `Some` whenever it is present, `null` included (serde reads a `null`
/// `Option` as absent).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

/// The schema of a field of bytes in standard base64, with padding: what the server decodes.
fn base64_bytes() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Byte)))
        .pattern(Some(
            r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        ))
        .description(Some("Bytes, in standard base64 with padding."))
        .build()
}

/// Bytes as text where they are UTF-8 (first), else in base64 (second).
pub fn text_or_base64(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(err) => (None, Some(BASE64.encode(err.as_bytes()))),
    }
}

/// Bytes from their text or base64 form (at most one of the two); `what` names the field in
/// the error.
///
/// # Errors
/// Both forms given, or base64 that does not decode.
pub fn bytes_of(
    text: Option<String>,
    base64: Option<&str>,
    what: &str,
) -> Result<Option<Vec<u8>>, String> {
    match (text, base64) {
        (Some(_), Some(_)) => Err(format!("{what} and {what}Base64 are exclusive")),
        (Some(text), None) => Ok(Some(text.into_bytes())),
        (None, Some(base64)) => BASE64
            .decode(base64)
            .map(Some)
            .map_err(|err| format!("{what}Base64 is not standard base64: {err}")),
        (None, None) => Ok(None),
    }
}

impl HeaderJson {
    /// A stored header as the API shows it.
    pub fn shown(header: Header) -> Self {
        let (value, value_base64) = header.value.map_or((None, None), text_or_base64);
        Self {
            name: header.name,
            value,
            value_base64,
        }
    }

    /// The header it describes.
    ///
    /// # Errors
    /// Both value forms, or base64 that does not decode.
    pub fn header(self) -> Result<Header, String> {
        let value = bytes_of(self.value, self.value_base64.as_deref(), "value")?;
        Ok(Header {
            name: self.name,
            value,
        })
    }
}

impl RecordJson {
    /// The JSON text of its payload; `None` for a binary payload or a tombstone.
    pub fn json(&self) -> Option<&str> {
        match &self.payload {
            Some(json) if !self.tombstone => Some(json.get()),
            _ => None,
        }
    }
}

impl From<crate::log::Record> for RecordJson {
    fn from(record: crate::log::Record) -> Self {
        let tombstone = record.payload == Payload::Null;
        let (payload, payload_base64) = match record.payload {
            // Records appended through the library may hold text that is not JSON: show it as
            // a JSON string rather than fail the page.
            Payload::Json(text) => {
                let shown = if serde_json::from_str::<&RawValue>(&text).is_ok() {
                    text
                } else {
                    serde_json::to_string(&text).expect("a string serializes")
                };
                let json = RawValue::from_string(shown).expect("checked, or a JSON string");
                (Some(json), None)
            }
            Payload::Binary(bytes) => (None, Some(BASE64.encode(bytes))),
            Payload::Null => (
                Some(RawValue::from_string("null".into()).expect("null is JSON")),
                None,
            ),
        };
        let (message_key, message_key_base64) =
            record.message_key.map_or((None, None), text_or_base64);
        let headers = (!record.headers.is_empty())
            .then(|| record.headers.into_iter().map(HeaderJson::shown).collect());
        Self {
            offset: record.offset,
            key: record.key,
            payload,
            payload_base64,
            tombstone,
            message_key,
            message_key_base64,
            headers,
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

impl TryFrom<RecordJson> for crate::log::Record {
    type Error = String;

    /// Reads back a record a node or the server showed (its JSON verbatim, not checked again).
    fn try_from(record: RecordJson) -> Result<Self, String> {
        let payload = match (record.payload, record.payload_base64, record.tombstone) {
            (_, None, true) => Payload::Null,
            (Some(json), None, false) => Payload::Json(json.get().to_owned()),
            (None, Some(base64), false) => {
                Payload::Binary(bytes_of(None, Some(&base64), "payload")?.unwrap_or_default())
            }
            _ => return Err(format!("record {}: not one payload", record.offset)),
        };
        Ok(Self {
            offset: record.offset,
            key: record.key,
            payload,
            message_key: bytes_of(
                record.message_key,
                record.message_key_base64.as_deref(),
                "messageKey",
            )?,
            headers: headers_of(record.headers)?,
            appended_at: record.appended_at,
        })
    }
}

/// Records read back (see [`RecordJson`]'s conversion).
fn records_of(records: Vec<RecordJson>) -> Result<Vec<crate::log::Record>, String> {
    records.into_iter().map(TryInto::try_into).collect()
}

impl TryFrom<Page> for crate::log::Page {
    type Error = String;

    fn try_from(page: Page) -> Result<Self, String> {
        Ok(Self {
            records: records_of(page.records)?,
            next_offset: page.next_offset,
            lag: page.lag,
        })
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

/// A record of `POST /topics/{topic}/partitions/{partition}/records`, as a node or the client
/// sends it: the payload verbatim, the other parts where the record has them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordOut<'a> {
    /// The record's JSON payload, verbatim (`null` for a tombstone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<&'a RawValue>,
    /// A binary payload, in base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    /// Set for a tombstone.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tombstone: bool,
    /// Its deduplication key, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
    /// Its message key, in base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_key_base64: Option<String>,
    /// Its headers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderJson>,
}

impl<'a> RecordOut<'a> {
    /// `record` as it is sent.
    ///
    /// # Errors
    /// A JSON payload that is not JSON text (possible for a record made by an embedding
    /// application: the body could not carry it).
    pub fn of(record: &'a NewRecord) -> Result<Self, String> {
        let (payload, payload_base64) = match &record.payload {
            Payload::Json(text) => (
                Some(
                    serde_json::from_str::<&RawValue>(text)
                        .map_err(|err| format!("a payload that is not JSON: {err}"))?,
                ),
                None,
            ),
            Payload::Binary(bytes) => (None, Some(BASE64.encode(bytes))),
            Payload::Null => (None, None),
        };
        Ok(Self {
            payload,
            payload_base64,
            tombstone: record.payload == Payload::Null,
            key: record.key.as_deref(),
            message_key_base64: record.message_key.as_ref().map(|key| BASE64.encode(key)),
            headers: record
                .headers
                .iter()
                .map(|header| HeaderJson {
                    name: header.name.clone(),
                    value: None,
                    value_base64: header.value.as_ref().map(|value| BASE64.encode(value)),
                })
                .collect(),
        })
    }
}

// How a client sends it: `RecordOut`.
/// One record of an append to a partition: a payload (JSON, or bytes in base64), and
/// optionally a deduplication key, a message key and headers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecordBody {
    /// Any JSON value; it reads back unchanged. Exclusive with `payloadBase64`.
    #[schema(value_type = Option<serde_json::Value>)]
    #[serde(default, deserialize_with = "present")]
    pub payload: Option<Box<RawValue>>,
    /// A binary payload (bytes, standard base64 with padding). Exclusive with `payload`.
    #[serde(default, deserialize_with = "given")]
    #[schema(schema_with = base64_bytes)]
    pub payload_base64: Option<String>,
    /// A record without a value (a Kafka tombstone), and then neither payload form.
    #[serde(default)]
    pub tombstone: bool,
    /// Optional deduplication key, 1 to [`MAX_KEY_BYTES`] bytes of UTF-8: a re-sent key
    /// returns the original offset.
    #[schema(schema_with = record_key)]
    #[serde(default)]
    pub key: Option<String>,
    /// The message key (Kafka's record key), as text. It may repeat and deduplicates nothing.
    /// Exclusive with `messageKeyBase64`.
    #[serde(default, deserialize_with = "given")]
    #[schema(nullable = false)]
    pub message_key: Option<String>,
    /// The message key, in standard base64.
    #[serde(default, deserialize_with = "given")]
    #[schema(schema_with = base64_bytes)]
    pub message_key_base64: Option<String>,
    /// Headers, in order (names may repeat).
    #[serde(default, deserialize_with = "given")]
    #[schema(nullable = false)]
    pub headers: Option<Vec<HeaderJson>>,
}

/// The schema of `RecordBody::key`.
fn record_key() -> Object {
    dedup_key("offset")
}

impl RecordBody {
    /// The record it describes.
    ///
    /// # Errors
    /// A payload in both forms or neither, a payload that is not portable JSON, a message key
    /// or header value in both forms, base64 that does not decode.
    pub fn record(self) -> Result<NewRecord, String> {
        Ok(NewRecord {
            payload: payload_of(self.payload, self.payload_base64, self.tombstone)?,
            key: self.key,
            message_key: bytes_of(
                self.message_key,
                self.message_key_base64.as_deref(),
                "messageKey",
            )?,
            headers: headers_of(self.headers)?,
        })
    }
}

/// A payload from the forms a body may give it in.
fn payload_of(
    payload: Option<Box<RawValue>>,
    base64: Option<String>,
    tombstone: bool,
) -> Result<Payload, String> {
    match (payload, base64, tombstone) {
        (Some(_), Some(_), _) => Err("payload and payloadBase64 are exclusive".into()),
        (None, None, false) => Err("a record needs a payload or a payloadBase64".into()),
        (Some(json), None, false) => {
            // JSON that common parsers cannot hold (a lone surrogate escape, a number beyond
            // the `f64` range) is refused, so every stored payload reads back as the same value
            // in any client.
            serde_json::from_str::<serde_json::Value>(json.get())
                .map_err(|err| format!("payload is not portable JSON: {err}"))?;
            Ok(Payload::Json(json.get().to_owned()))
        }
        (None, Some(base64), false) => Ok(Payload::Binary(
            bytes_of(None, Some(&base64), "payload")?.unwrap_or_default(),
        )),
        (None, None, true) => Ok(Payload::Null),
        (_, _, true) => Err("a tombstone has no payload".into()),
    }
}

/// Headers from a body's form.
fn headers_of(headers: Option<Vec<HeaderJson>>) -> Result<Vec<Header>, String> {
    headers
        .unwrap_or_default()
        .into_iter()
        .map(HeaderJson::header)
        .collect()
}

impl TryFrom<Lease> for crate::log::Lease {
    type Error = String;

    fn try_from(lease: Lease) -> Result<Self, String> {
        Ok(Self {
            batch_id: lease.batch_id,
            group: lease.group,
            first_offset: lease.first_offset,
            last_offset: lease.last_offset,
            attempt: lease.attempt,
            expires_at: lease.expires_at,
            records: records_of(lease.records)?,
        })
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

/// `200` of `GET /topics/{topic}/groups`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicGroups {
    /// The topic's name.
    pub topic: String,
    /// Where its leases send the ranges past `maxAttempts` (`leases.dead_letter_topic`), if
    /// anywhere.
    pub dead_letter_topic: Option<String>,
    /// The time between two samples of a `history`, in ms (`metrics.lag_sample_ms`; 0: no
    /// history is kept).
    pub sample_interval_ms: u64,
    /// Every group with a cursor or a lease on a partition of the topic, by name.
    pub groups: Vec<GroupSummary>,
}

/// One group in `GET /topics/{topic}/groups`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupSummary {
    /// The group's name.
    pub group: String,
    /// Its lag summed over its partitions.
    pub lag: u64,
    /// Each partition it has a cursor or a lease on, in order.
    pub partitions: Vec<GroupPartition>,
}

/// A group's position on one partition, in `GET /topics/{topic}/groups`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupPartition {
    /// The partition.
    pub partition: u32,
    /// The group's cursor; `null` for a group that leases without having committed.
    pub cursor: Option<u64>,
    /// The partition's next offset.
    pub next_offset: u64,
    /// Records between the group's position (its cursor, or else the first offset it leased)
    /// and `nextOffset`.
    pub lag: u64,
    /// Its lease rows per state; absent for a group with none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<BTreeMap<String, u64>>,
    /// Its lag over time; absent when the topic is past the history's bound
    /// (`metrics.max_topics`) or no sample was taken yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<LagHistoryJson>,
}

/// A group's lag on a partition over time.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LagHistoryJson {
    /// When the last sample was taken, in ms since the Unix epoch.
    pub until: i64,
    /// The samples, oldest first, one per `sampleIntervalMs`.
    pub lags: Vec<u64>,
}

impl GroupPartition {
    fn of(group: &crate::log::GroupOnPartition) -> Self {
        let position = &group.position;
        let leases = position.leases.map(|counts| {
            LeaseState::ALL
                .iter()
                .zip(counts)
                .map(|(state, count)| (state.as_str().to_owned(), count))
                .collect()
        });
        Self {
            partition: group.partition,
            cursor: position.cursor,
            next_offset: group.next_offset,
            lag: position.lag,
            leases,
            history: group.history.as_ref().map(|history| LagHistoryJson {
                until: history.until_ms,
                lags: history.lags.clone(),
            }),
        }
    }
}

impl TopicGroups {
    /// The answer for `topic` from its groups' positions, ordered by partition.
    pub fn of(
        topic: String,
        dead_letter_topic: Option<String>,
        sample_interval_ms: u64,
        positions: &[crate::log::GroupOnPartition],
    ) -> Self {
        let mut groups: BTreeMap<&str, GroupSummary> = BTreeMap::new();
        for position in positions {
            let name = position.position.group.as_str();
            let group = groups.entry(name).or_insert_with(|| GroupSummary {
                group: name.to_owned(),
                lag: 0,
                partitions: Vec::new(),
            });
            group.lag += position.position.lag;
            group.partitions.push(GroupPartition::of(position));
        }
        Self {
            topic,
            dead_letter_topic,
            sample_interval_ms,
            groups: groups.into_values().collect(),
        }
    }

    /// The positions it shows, ordered by partition (what a node reads of another's answer).
    pub fn positions(self) -> Vec<crate::log::GroupOnPartition> {
        let mut positions: Vec<crate::log::GroupOnPartition> = self
            .groups
            .into_iter()
            .flat_map(|group| {
                let name = group.group;
                group.partitions.into_iter().map(move |partition| {
                    let leases = partition.leases.map(|counts| {
                        LeaseState::ALL
                            .map(|state| counts.get(state.as_str()).copied().unwrap_or(0))
                    });
                    crate::log::GroupOnPartition {
                        partition: partition.partition,
                        next_offset: partition.next_offset,
                        position: crate::log::GroupPosition {
                            group: name.clone(),
                            cursor: partition.cursor,
                            lag: partition.lag,
                            leases,
                        },
                        history: partition.history.map(|history| crate::log::LagSamples {
                            until_ms: history.until,
                            lags: history.lags,
                        }),
                    }
                })
            })
            .collect();
        positions.sort_by(|a, b| {
            (a.partition, &a.position.group).cmp(&(b.partition, &b.position.group))
        });
        positions
    }
}

// ---------------------------------------------------------------------------------------------
// Request bodies the server reads and clients write, and answers only clients read
// (`crate::client`): defined here so that the two sides cannot drift.
// ---------------------------------------------------------------------------------------------

/// An integer in a JSON body: any JSON number whose value is a whole number that fits an `i64`,
/// however it is written (`12`, `12.0`, `1.2e1`), as JSON Schema's `integer` (and so the API
/// document) counts it. The number's text is read exactly, never through a float, so
/// `1.0000000000000001` stays a fraction and `9007199254740993` stays itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Integer(pub i64);

impl<'de> Deserialize<'de> for Integer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        whole_number(raw.get()).map(Integer).ok_or_else(|| {
            D::Error::custom(format!(
                "expected an integer that fits a signed 64-bit value, found {}",
                raw.get()
            ))
        })
    }
}

/// The value of a JSON text when it is a number whose value is a whole number that fits an
/// `i64`; `None` for anything else (a fraction, out of range, not a number).
fn whole_number(text: &str) -> Option<i64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(unsigned) => (true, unsigned),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        // An exponent too large for an `i64` still says which side of the point it moves to.
        Some((mantissa, exponent)) => (
            mantissa,
            exponent
                .parse::<i64>()
                .unwrap_or(if exponent.starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                }),
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || whole.bytes().chain(fraction.bytes());
    if whole.is_empty() || !digits().all(|digit| digit.is_ascii_digit()) {
        return None;
    }
    // The value is `digits` with the decimal point after the first `point` of them.
    let point = (whole.len() as i64).saturating_add(exponent);
    let mut value: i128 = 0;
    for (index, digit) in digits().enumerate() {
        if (index as i64) < point {
            value = value
                .checked_mul(10)?
                .checked_add(i128::from(digit - b'0'))?;
        } else if digit != b'0' {
            return None;
        }
    }
    if value != 0 {
        for _ in (whole.len() + fraction.len()) as i64..point {
            value = value.checked_mul(10)?;
        }
    }
    i64::try_from(if negative { -value } else { value }).ok()
}

/// Written as the plain JSON integer it holds (a client's side of the body).
impl Serialize for Integer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.0)
    }
}

/// One event of `POST /topics/{topic}/records`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventBody {
    /// Chooses the partition: the key's 32-bit FNV-1a hash over its UTF-16 code units, modulo
    /// the topic's partition count, so one key always goes to one partition.
    /// Stored as the record's message key, so Kafka consumers see it.
    pub partition_key: String,
    /// Any JSON value; it reads back unchanged. Exclusive with `payloadBase64`.
    #[schema(value_type = Option<serde_json::Value>)]
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload: Option<Box<RawValue>>,
    /// A binary payload (bytes, standard base64 with padding). Exclusive with `payload`.
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(schema_with = base64_bytes)]
    pub payload_base64: Option<String>,
    /// Optional deduplication key, 1 to [`MAX_KEY_BYTES`] bytes of UTF-8: a re-sent key
    /// returns the original place.
    #[schema(schema_with = event_key)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Headers, in order (names may repeat).
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub headers: Option<Vec<HeaderJson>>,
}

impl EventBody {
    /// The event it describes.
    ///
    /// # Errors
    /// As [`RecordBody::record`].
    pub fn event(self) -> Result<crate::log::Event, String> {
        Ok(crate::log::Event {
            partition_key: self.partition_key,
            key: self.key,
            payload: payload_of(self.payload, self.payload_base64, false)?,
            headers: headers_of(self.headers)?,
        })
    }
}

/// The schema of `EventBody::key`.
fn event_key() -> Object {
    dedup_key("place")
}

/// The schema of an optional deduplication key, whose re-sending returns the original
/// `returns`: a string of 1 to [`MAX_KEY_BYTES`] bytes of UTF-8, or `null`. The line breaks
/// of the description are part of the published document.
pub(crate) fn dedup_key(returns: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .description(Some(format!(
            "Optional deduplication key, 1 to {MAX_KEY_BYTES} bytes of UTF-8 (`maxLength` counts \
             characters, so\na key of fewer characters but more bytes is refused too): a re-sent \
             key returns the\noriginal {returns}."
        )))
        .min_length(Some(1))
        .max_length(Some(MAX_KEY_BYTES))
        .build()
}

/// `202` of `POST /topics/{topic}/records`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProducedRecords {
    /// Where each event was stored: one entry per input event, in input order. A re-sent
    /// deduplication key gives its original place back.
    pub records: Vec<PlacedRecord>,
}

/// Where one event was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlacedRecord {
    /// The partition that `partitionKey` routed it to.
    pub partition: u32,
    /// Its offset in that partition.
    pub offset: u64,
}

/// The body of `PUT /topics/{topic}/partitions/{partition}/cursors/{group}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CursorBody {
    /// The next offset to read.
    #[schema(value_type = i64, minimum = 0)]
    pub offset: Integer,
    /// Whether the cursor moves to `offset` even below where it is (a seek: the group reads
    /// those records again). Default false: a commit, which only moves forward.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seek: bool,
    /// Text kept with the cursor (a Kafka offset commit's metadata), when this request moves
    /// it; a commit that moves it without any clears what an earlier one kept.
    #[serde(
        default,
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(schema_with = cursor_metadata)]
    pub metadata: Option<String>,
}

/// The schema of `CursorBody::metadata`: at most [`MAX_CURSOR_METADATA_BYTES`] bytes of UTF-8.
/// The line break of the description is part of the published document.
fn cursor_metadata() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(format!(
            "Text kept with the cursor, at most {MAX_CURSOR_METADATA_BYTES} bytes of UTF-8 \
             (`maxLength` counts characters, so\na text of fewer characters but more bytes is \
             refused too)."
        )))
        .max_length(Some(MAX_CURSOR_METADATA_BYTES))
        .build()
}

/// `200` of `PUT /topics/{topic}/partitions/{partition}/cursors/{group}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Cursor {
    /// The cursor in effect: the next offset the group will read.
    pub cursor: u64,
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/cursors/{group}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupCursor {
    /// The group's cursor: the next offset it will read; `null` when it has none.
    #[schema(required = true)]
    pub cursor: Option<u64>,
    /// What the commit that set the cursor kept with it; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub metadata: Option<String>,
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/cursors`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupCursors {
    /// Every consumer group's cursor on the partition, by group name.
    pub cursors: BTreeMap<String, u64>,
}

/// `200` of a topic-wide lease claim: a `Lease` plus its partition.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(from = "PartitionLeaseFields")]
pub struct PartitionLease {
    /// The lease.
    #[serde(flatten)]
    pub lease: Lease,
    /// The partition the range belongs to.
    pub partition: u32,
}

/// A [`PartitionLease`]'s fields as they are read: serde's `flatten` cannot read a payload
/// verbatim.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartitionLeaseFields {
    partition: u32,
    batch_id: String,
    group: String,
    first_offset: u64,
    last_offset: u64,
    attempt: u32,
    expires_at: i64,
    records: Vec<RecordJson>,
}

impl From<PartitionLeaseFields> for PartitionLease {
    fn from(fields: PartitionLeaseFields) -> Self {
        Self {
            partition: fields.partition,
            lease: Lease {
                batch_id: fields.batch_id,
                group: fields.group,
                first_offset: fields.first_offset,
                last_offset: fields.last_offset,
                attempt: fields.attempt,
                expires_at: fields.expires_at,
                records: fields.records,
            },
        }
    }
}

/// `200` of an ack.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AckedCursor {
    /// The group's cursor after the ack, or `null` if it has none yet.
    #[schema(required = true)]
    pub cursor: Option<u64>,
}

/// The body of `POST .../leases/{batchId}/nack` (optional).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NackBody {
    /// Redeliver no sooner than this many ms from now (default 0).
    #[schema(value_type = Option<i64>, minimum = 0)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<Integer>,
}

/// `200` of an extend.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Extended {
    /// When the renewed hold ends, in ms since the Unix epoch.
    pub expires_at: i64,
}

/// One range in a group's lease list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRow {
    /// The current delivery's batch id.
    pub batch_id: String,
    /// The range's first offset.
    pub first_offset: u64,
    /// The range's last offset (inclusive).
    pub last_offset: u64,
    /// Where it stands.
    #[schema(schema_with = lease_state)]
    pub state: Cow<'static, str>,
    /// Deliveries so far.
    pub attempt: u32,
    /// For an active range, when the hold ends. For a pending range, when it may be
    /// redelivered. In ms since the Unix epoch.
    pub expires_at: i64,
}

impl From<crate::log::LeaseRow> for LeaseRow {
    fn from(row: crate::log::LeaseRow) -> Self {
        Self {
            batch_id: row.batch_id,
            first_offset: row.first_offset,
            last_offset: row.last_offset,
            state: Cow::Borrowed(row.state.as_str()),
            attempt: row.attempt,
            expires_at: row.expires_at,
        }
    }
}

/// The schema of `LeaseRow::state`: the names of [`LeaseState::ALL`].
fn lease_state() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "Where the range stands. `active`: held by a worker until it settles the range or \
             the hold expires. `pending`: nacked, waiting to be redelivered after its delay. \
             `acked`: processed; the cursor moves past it once it is contiguous with the \
             cursor. `skipped`: given up (dead-lettered, or its records were lost); the cursor \
             moves past it like an acked range.",
        ))
        .enum_values(Some(LeaseState::ALL.map(LeaseState::as_str)))
        .build()
}

/// `200` of `GET /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Leases {
    /// The group's ranges on the partition that the cursor has not moved past.
    pub leases: Vec<LeaseRow>,
}

/// `200` of `POST /topics/{topic}/partitions/{partition}/trim`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Trimmed {
    /// How many records left the hot window (flushed to the cold tier, or deleted).
    pub removed: u64,
}

/// The body of `POST /topics/{topic}/partitions/{partition}/cold/forget`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    /// Forget the cold segments that end below this offset.
    #[schema(value_type = i64, minimum = 0)]
    pub before: Integer,
}

/// The body of `POST /topics/{topic}/partitions/{partition}/redrive`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// The offsets of the letters to redrive, 1 to 1000, in the dead-letter partition.
    #[schema(value_type = Vec<i64>, min_items = 1, max_items = 1000)]
    pub offsets: Vec<Integer>,
}

/// `200` of `POST /topics/{topic}/partitions/{partition}/redrive`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RedriveAnswer {
    /// One entry per offset asked, in order.
    pub redriven: Vec<RedrivenLetter>,
}

/// A letter appended back to its source partition.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedrivenLetter {
    /// The letter's offset in the dead-letter partition.
    pub offset: u64,
    /// Its source topic.
    pub topic: String,
    /// Its source partition.
    pub partition: u32,
    /// The offset it had in its source partition when it was sent to the dead-letter topic.
    pub source_offset: u64,
    /// Its offset in its source partition now: the same for every redrive of the letter
    /// while the first copy is in the source's hot window (it is appended once).
    pub appended_offset: u64,
}

impl From<crate::log::Redriven> for RedrivenLetter {
    fn from(redriven: crate::log::Redriven) -> Self {
        let letter = redriven.letter;
        Self {
            offset: letter.offset,
            topic: letter.source.topic().to_owned(),
            partition: letter.source.index(),
            source_offset: letter.source_offset,
            appended_offset: redriven.appended_offset,
        }
    }
}

/// `200` of `POST /topics/{topic}/partitions/{partition}/cold/forget`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Forgotten {
    /// How many cold segments were forgotten.
    pub forgotten: u64,
}

#[cfg(test)]
mod tests {
    use super::{Integer, whole_number};

    /// A JSON number is an integer when its value is whole, however it is written, and only
    /// when it fits an `i64`; strings, fractions and `null` are not integers.
    #[test]
    fn whole_numbers_in_any_notation() {
        for (text, value) in [
            ("12", 12),
            ("12.0", 12),
            ("1.2e1", 12),
            ("1.2E+1", 12),
            ("120e-1", 12),
            ("0", 0),
            ("-0", 0),
            ("0.000e5", 0),
            ("0e99999999999999999999", 0),
            ("-7.00", -7),
            ("9007199254740993", 9_007_199_254_740_993),
            ("9223372036854775807", i64::MAX),
            ("9223372036854775807.0", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(whole_number(text), Some(value), "{text}");
        }
        for text in [
            "1.5",
            "1.0000000000000001",
            "1e-1",
            "9223372036854775808",
            "-9223372036854775809",
            "1e19",
            "1e99999999999999999999",
            "99999999999999999999999999999999999999999999",
            "\"12\"",
            "null",
            "true",
            "[1]",
        ] {
            assert_eq!(whole_number(text), None, "{text}");
        }
        assert_eq!(serde_json::from_str::<Integer>("8.0").unwrap(), Integer(8));
        assert!(serde_json::from_str::<Integer>("8.5").is_err());
    }
}
