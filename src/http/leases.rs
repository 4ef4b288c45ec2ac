//! Leases: claim a range (per partition, or on any partition of a topic), ack, nack, extend,
//! list.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::consume::records_json;
use super::request::{Query, optional_json_body, partition};
use super::{ApiError, HttpState};
use crate::store::Lease;

fn lease_json(lease: Lease) -> Value {
    json!({
        "batchId": lease.batch_id,
        "group": lease.group,
        "firstOffset": lease.first_offset,
        "lastOffset": lease.last_offset,
        "attempt": lease.attempt,
        "expiresAt": lease.expires_at,
        "records": records_json(lease.records),
    })
}

/// `POST /topics/{topic}/partitions/{partition}/groups/{group}/leases?limit=`: `200` with the
/// range, or `204` when nothing is available now.
pub async fn claim(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let index = partition(&index)?;
    let limit = Query::parse(request.query_string())?.limit()?;
    Ok(match state.log.lease(&topic, index, &group, limit).await? {
        Some(lease) => HttpResponse::Ok().json(lease_json(lease)),
        None => HttpResponse::NoContent().finish(),
    })
}

/// `POST /topics/{topic}/groups/{group}/leases?limit=`: the same on whichever partition has a
/// range available (tried in turn); the answer also carries `"partition"`.
pub async fn claim_any(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let limit = Query::parse(request.query_string())?.limit()?;
    let partitions = state.log.partitions(&topic)?;
    for index in 0..partitions {
        if let Some(lease) = state.log.lease(&topic, index, &group, limit).await? {
            let mut body = lease_json(lease);
            body["partition"] = json!(index);
            return Ok(HttpResponse::Ok().json(body));
        }
    }
    Ok(HttpResponse::NoContent().finish())
}

/// `POST .../leases/{batchId}/ack`: `{"cursor": n}` (or `null` while the group has none).
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NackBody {
    delay_ms: Option<i64>,
}

/// `POST .../leases/{batchId}/nack` with an optional `{"delayMs": 1000}`: `204`.
pub async fn nack(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group, batch_id) = path.into_inner();
    let index = partition(&index)?;
    let body: Option<NackBody> = optional_json_body(body, state.max_body_bytes).await?;
    let delay_ms = match body.and_then(|body| body.delay_ms) {
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
