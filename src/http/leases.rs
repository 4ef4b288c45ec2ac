//! Leases: claim a range (per partition, or on any partition of a topic), ack, nack, extend,
//! list.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::consume::records_json;
use super::request::{Integer, Query, optional_json_body, partition};
use super::schema;
use super::{ApiError, HttpState};
use crate::log::Lease;

/// A lease as the API shows it (typed, so payloads are written verbatim; see `PageJson`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct LeaseJson {
    batch_id: String,
    group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<u32>,
    first_offset: u64,
    last_offset: u64,
    attempt: u32,
    expires_at: i64,
    records: Vec<super::consume::RecordJson>,
}

fn lease_json(lease: Lease, partition: Option<u32>) -> LeaseJson {
    LeaseJson {
        batch_id: lease.batch_id,
        group: lease.group,
        partition,
        first_offset: lease.first_offset,
        last_offset: lease.last_offset,
        attempt: lease.attempt,
        expires_at: lease.expires_at,
        records: records_json(lease.records),
    }
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
    params(schema::PartitionGroupPath, schema::LimitQuery),
    responses(
        (status = 200, description = "The range, held until `expiresAt`", body = schema::Lease),
        (status = 204, description = "Nothing available now: the group is at `maxParallelism`, every record is leased, or a range past `maxAttempts` went to the dead-letter topic (ask again)"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 409, description = "`leases_disabled`", body = schema::ErrorBody),
        (status = 410, description = "`log_truncated`, once: records the group had not settled were removed by retention; the group continues at `oldestOffset`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
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
        Some(lease) => HttpResponse::Ok().json(lease_json(lease, None)),
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
    params(schema::GroupPath, schema::LimitQuery),
    responses(
        (status = 200, description = "The range and its partition, held until `expiresAt`", body = schema::PartitionLease),
        (status = 204, description = "Nothing available now: the group is at `maxParallelism`, every record is leased, or a range past `maxAttempts` went to the dead-letter topic (ask again)"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 409, description = "`leases_disabled`", body = schema::ErrorBody),
        (status = 410, description = "`log_truncated`, once: records the group had not settled were removed by retention; the group continues at `oldestOffset`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
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
        Some((index, lease)) => Ok(HttpResponse::Ok().json(lease_json(lease, Some(index)))),
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
    params(schema::BatchPath),
    responses(
        (status = 200, description = "Settled; the group's cursor after the ack", body = schema::AckedCursor),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
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
    Ok(HttpResponse::Ok().json(json!({ "cursor": cursor })))
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
    params(schema::BatchPath),
    responses(
        (status = 204, description = "The range will be redelivered under a new `batchId`"),
        (status = 400, description = "`invalid_request` or `invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = schema::ErrorBody),
        (status = 413, description = "`payload_too_large`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
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
    params(schema::BatchPath),
    responses(
        (status = 200, description = "The hold's new end", body = schema::Extended),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 409, description = "`lease_not_held` (unknown, expired and reclaimed, or already settled `batchId`) or `leases_disabled`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the change may or may not have happened; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
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
    Ok(HttpResponse::Ok().json(json!({ "expiresAt": expires_at })))
}

/// `GET /topics/{topic}/partitions/{partition}/groups/{group}/leases`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
    tag = "leases",
    operation_id = "listLeases",
    summary = "The group's leased ranges on a partition",
    description = "Settled ranges disappear once the cursor has moved past them.",
    params(schema::PartitionGroupPath),
    responses(
        (status = 200, description = "The ranges", body = schema::Leases),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 409, description = "`leases_disabled`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn list(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let rows = state.log.leases(&topic, partition(&index)?, &group).await?;
    let leases: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            json!({
                "batchId": row.batch_id,
                "firstOffset": row.first_offset,
                "lastOffset": row.last_offset,
                "state": row.state.as_str(),
                "attempt": row.attempt,
                "expiresAt": row.expires_at,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "leases": leases })))
}
