//! Leases: claim a range (per partition, or on any partition of a topic), ack, nack, extend,
//! list.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use super::error::ErrorBody;
use super::params;
use super::request::{Integer, Query, optional_json_body, partition};
use super::{ApiError, HttpState};
use crate::log::{self, LeaseState};
use crate::wire::Lease;

/// `200` of a topic-wide lease claim: a `Lease` plus its partition.
#[derive(Serialize, ToSchema)]
struct PartitionLease {
    /// The lease.
    #[serde(flatten)]
    lease: Lease,
    /// The partition the range belongs to.
    partition: u32,
}

/// `200` of an ack.
#[derive(Serialize, ToSchema)]
struct AckedCursor {
    /// The group's cursor after the ack, or `null` if it has none yet.
    #[schema(required = true)]
    cursor: Option<u64>,
}

/// `200` of an extend.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Extended {
    /// When the renewed hold ends, in ms since the Unix epoch.
    expires_at: i64,
}

/// One range in a group's lease list.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct LeaseRow {
    /// The current delivery's batch id.
    batch_id: String,
    /// The range's first offset.
    first_offset: u64,
    /// The range's last offset (inclusive).
    last_offset: u64,
    /// Where it stands.
    #[schema(schema_with = lease_state)]
    state: &'static str,
    /// Deliveries so far.
    attempt: u32,
    /// For an active range, when the hold ends. For a pending range, when it may be
    /// redelivered. In ms since the Unix epoch.
    expires_at: i64,
}

impl From<log::LeaseRow> for LeaseRow {
    fn from(row: log::LeaseRow) -> Self {
        Self {
            batch_id: row.batch_id,
            first_offset: row.first_offset,
            last_offset: row.last_offset,
            state: row.state.as_str(),
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
#[derive(Serialize, ToSchema)]
struct Leases {
    /// The group's ranges on the partition that the cursor has not moved past.
    leases: Vec<LeaseRow>,
}

/// `POST /topics/{topic}/partitions/{partition}/groups/{group}/leases?limit=`: `200` with the
/// range, or `204` when nothing is available now.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
    tag = "leases",
    operation_id = "claimLease",
    summary = "Lease the group's next range of a partition",
    description = "Claims a range durably before returning it. A group's first lease starts \
        at its cursor, or at the oldest readable offset when it has none.",
    params(params::PartitionGroupPath, params::LimitQuery),
    responses(
        (status = 200, description = "The range, held until `expiresAt`", body = Lease),
        (status = 204, description = "Nothing available now: the group is at `maxParallelism`, every record is leased, or a range past `maxAttempts` went to the dead-letter topic (ask again)"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 409, description = "`leases_disabled`", body = ErrorBody),
        (status = 410, description = "`log_truncated`, once: records the group had not settled were removed by retention; the group continues at `oldestOffset`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened", body = ErrorBody),
    )
)]
pub async fn claim(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let index = partition(&index)?;
    let limit = Query::parse(request.query_string())?.limit()?;
    Ok(match state.log.lease(&topic, index, &group, limit).await? {
        Some(lease) => HttpResponse::Ok().json(Lease::from(lease)),
        None => HttpResponse::NoContent().finish(),
    })
}

/// `POST /topics/{topic}/groups/{group}/leases?limit=`: the same on whichever partition has a
/// range available (tried in turn); the answer also carries `"partition"`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/groups/{group}/leases",
    tag = "leases",
    operation_id = "claimAnyLease",
    summary = "Lease the group's next range on any partition",
    description = "The same as a partition's lease claim, on whichever partition has a range \
        available (partitions tried in turn).",
    params(params::GroupPath, params::LimitQuery),
    responses(
        (status = 200, description = "The range and its partition, held until `expiresAt`", body = PartitionLease),
        (status = 204, description = "Nothing available now: the group is at `maxParallelism`, every record is leased, or a range past `maxAttempts` went to the dead-letter topic (ask again)"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = ErrorBody),
        (status = 409, description = "`leases_disabled`", body = ErrorBody),
        (status = 410, description = "`log_truncated`, once: records the group had not settled were removed by retention; the group continues at `oldestOffset`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened", body = ErrorBody),
    )
)]
pub async fn claim_any(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let limit = Query::parse(request.query_string())?.limit()?;
    match state.log.lease_any(&topic, &group, limit).await? {
        Some((partition, lease)) => Ok(HttpResponse::Ok().json(PartitionLease {
            lease: lease.into(),
            partition,
        })),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

/// `POST .../leases/{batchId}/ack`: `{"cursor": n}` (or `null` while the group has none).
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
    tag = "leases",
    operation_id = "ackLease",
    summary = "Settle a leased range",
    description = "The group's cursor advances over every contiguous settled range from the \
        cursor on. A range whose hold expired but that nobody reclaimed yet can still be acked.",
    params(params::BatchPath),
    responses(
        (status = 200, description = "Settled; the group's cursor after the ack", body = AckedCursor),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened", body = ErrorBody),
    )
)]
pub async fn ack(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group, batch_id) = path.into_inner();
    let cursor = state
        .log
        .ack(&topic, partition(&index)?, &group, &batch_id)
        .await?;
    Ok(HttpResponse::Ok().json(AckedCursor { cursor }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NackBody {
    /// Redeliver no sooner than this many ms from now (default 0).
    #[schema(value_type = Option<i64>, minimum = 0)]
    delay_ms: Option<Integer>,
}

/// `POST .../leases/{batchId}/nack` with an optional `{"delayMs": 1000}`: `204`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
    tag = "leases",
    operation_id = "nackLease",
    summary = "Give a leased range back for redelivery",
    description = "The range is redelivered (under a new `batchId`) no sooner than `delayMs`.",
    request_body(content = NackBody, description = "Optional: without a body, the range is redelivered at once"),
    params(params::BatchPath),
    responses(
        (status = 204, description = "The range will be redelivered under a new `batchId`"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened", body = ErrorBody),
    )
)]
pub async fn nack(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group, batch_id) = path.into_inner();
    let index = partition(&index)?;
    let body: Option<NackBody> = optional_json_body(body, state.body_limits()).await?;
    let delay_ms = match body.and_then(|body| body.delay_ms).map(|delay| delay.0) {
        Some(delay) if delay < 0 => {
            return Err(ApiError::invalid_request(format!(
                "delayMs {delay} is negative"
            )));
        }
        delay => delay.unwrap_or(0) as u64,
    };
    state
        .log
        .nack(&topic, index, &group, &batch_id, delay_ms)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `POST .../leases/{batchId}/extend`: `{"expiresAt": ...}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/extend",
    tag = "leases",
    operation_id = "extendLease",
    summary = "Renew the hold on a leased range",
    description = "Renews the hold for another `leaseMs`.",
    params(params::BatchPath),
    responses(
        (status = 200, description = "The hold's new end", body = Extended),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened", body = ErrorBody),
    )
)]
pub async fn extend(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group, batch_id) = path.into_inner();
    let expires_at = state
        .log
        .extend(&topic, partition(&index)?, &group, &batch_id)
        .await?;
    Ok(HttpResponse::Ok().json(Extended { expires_at }))
}

/// `GET /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
    tag = "leases",
    operation_id = "listLeases",
    summary = "The group's leased ranges on a partition",
    description = "Settled ranges disappear once the cursor has moved past them.",
    params(params::PartitionGroupPath),
    responses(
        (status = 200, description = "The ranges", body = Leases),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 409, description = "`leases_disabled`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn list(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let rows = state.log.leases(&topic, partition(&index)?, &group).await?;
    let leases = rows.into_iter().map(LeaseRow::from).collect();
    Ok(HttpResponse::Ok().json(Leases { leases }))
}
