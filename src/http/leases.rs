//! Leases: claim a range (per partition, or on any partition of a topic), ack, nack, extend,
//! list; and the redrive of dead letters back to their sources.

use actix_web::{HttpRequest, HttpResponse, web};

use super::auth::Caller;
use super::error::ErrorBody;
use super::params;
use super::request::{Query, json_body, offset, optional_json_body, partition};
use super::{ApiError, HttpState};
use crate::auth::Permission;
use crate::wire::{
    AckedCursor, Extended, Lease, LeaseRow, Leases, NackBody, PartitionLease, RedriveAnswer,
    RedriveBody, RedrivenLetter,
};

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

/// `POST /topics/{topic}/partitions/{partition}/redrive` with `{"offsets": [...]}`: the letters
/// at those offsets of a dead-letter partition appended back to their sources.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/redrive",
    tag = "leases",
    operation_id = "redriveLetters",
    summary = "Append dead letters back to their sources",
    description = "`topic` is a dead-letter topic. Each letter (a record there, whose \
        deduplication key `{topic}:{partition}:{offset}` names where it came from) has its \
        payload and headers appended to its source partition with the \
        deduplication key `redrive:{dead-letter topic}:{partition}:{offset}`, so redriving a \
        letter again appends nothing while the first copy is in the source's hot window (the \
        answer repeats its offset). Every letter is read and checked, and the caller's \
        `produce` permission on each source (`403 forbidden` without it), before anything is \
        appended; the letters of one source partition are one atomic batch.",
    request_body = RedriveBody,
    params(params::PartitionPath),
    responses(
        (status = 200, description = "Each letter and where it is in its source now, in the order asked", body = RedriveAnswer),
        (status = 400, description = "`invalid_request` (no offsets or more than 1000, an offset that holds no letter, a source that refused the records), `invalid_offset` (past the partition's end) or `invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the letters may or may not have been appended (a retry appends each once)", body = ErrorBody),
    )
)]
pub async fn redrive(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let body: RedriveBody = json_body(body, state.body_limits()).await?;
    let offsets = body
        .offsets
        .iter()
        .map(|asked| offset(asked.0))
        .collect::<Result<Vec<u64>, ApiError>>()?;
    let letters = state.log.letters(&topic, index, &offsets).await?;
    for letter in &letters {
        caller.check(Permission::Produce, letter.source.topic())?;
    }
    let redriven = state.log.redrive(letters).await?;
    Ok(HttpResponse::Ok().json(RedriveAnswer {
        redriven: redriven.into_iter().map(RedrivenLetter::from).collect(),
    }))
}
