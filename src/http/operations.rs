//! Operations: bounds, load, trim, cold forget, topics, health.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use super::request::{Integer, json_body, offset, partition};
use super::schema;
use super::{ApiError, HttpState};

/// `GET /healthz`: `{"status": "ok"}`, without auth.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    summary = "Health check (no token needed)",
    responses(
        (status = 200, description = "The server is up", body = schema::Health),
    )
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// `GET /topics/{topic}/partitions/{partition}/bounds`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/bounds",
    tag = "operations",
    operation_id = "getBounds",
    summary = "A partition's offsets",
    params(schema::PartitionPath),
    responses(
        (status = 200, description = "The bounds", body = schema::Bounds),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn bounds(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let bounds = state.log.bounds(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(json!({
        "oldestOffset": bounds.oldest_offset,
        "hotOffset": bounds.hot_offset,
        "nextOffset": bounds.next_offset,
    })))
}

/// `GET /topics/{topic}/partitions/{partition}/load`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/load",
    tag = "operations",
    operation_id = "getLoad",
    summary = "A partition's load snapshot",
    params(schema::PartitionPath),
    responses(
        (status = 200, description = "The load snapshot", body = crate::load::LoadSnapshot),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn load(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    Ok(HttpResponse::Ok().json(state.log.load(&topic, partition(&index)?).await?))
}

/// `POST /topics/{topic}/partitions/{partition}/trim`: `{"removed": n}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/trim",
    tag = "operations",
    operation_id = "trimPartition",
    summary = "Run retention now",
    description = "Runs retention on the partition now: records leave the hot window, flushed \
        to the cold tier or deleted.",
    params(schema::PartitionPath),
    responses(
        (status = 200, description = "How many records left the hot window", body = schema::Trimmed),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`: the cold store failed; passes already completed stay done, the failed pass removed nothing; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn trim(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let removed = state.log.trim(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(json!({ "removed": removed })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ForgetBody {
    /// Forget the cold segments that end below this offset.
    #[schema(value_type = i64, minimum = 0)]
    before: Integer,
}

/// `POST /topics/{topic}/partitions/{partition}/cold/forget` with `{"before": n}`:
/// `{"forgotten": count}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/cold/forget",
    tag = "operations",
    operation_id = "forgetCold",
    summary = "Forget old cold segments",
    request_body = ForgetBody,
    params(schema::PartitionPath),
    responses(
        (status = 200, description = "How many segments were forgotten", body = schema::Forgotten),
        (status = 400, description = "`invalid_request`, `invalid_name` or `invalid_offset`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 404, description = "`unknown_partition`", body = schema::ErrorBody),
        (status = 413, description = "`payload_too_large`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn forget_cold(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let body: ForgetBody = json_body(body, state.body_limits()).await?;
    let forgotten = state
        .log
        .forget_cold_before(&topic, index, offset(body.before.0, "before")?)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "forgotten": forgotten })))
}

/// `GET /topics`: topics with at least one written partition, by name.
#[utoipa::path(
    get,
    path = "/topics",
    tag = "operations",
    operation_id = "listTopics",
    summary = "Every topic with data",
    responses(
        (status = 200, description = "Topics with at least one written partition, sorted by name", body = schema::Topics),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn topics(state: web::Data<HttpState>) -> Result<HttpResponse, ApiError> {
    let topics: Vec<_> = state
        .log
        .topics()
        .await?
        .into_iter()
        .map(|topic| json!({ "name": topic.name, "partitions": topic.partitions }))
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "topics": topics })))
}

/// `GET /topics/{topic}`: every partition's bounds, cursors and backlog.
#[utoipa::path(
    get,
    path = "/topics/{topic}",
    tag = "operations",
    operation_id = "getTopic",
    summary = "A topic's partitions",
    params(schema::TopicPath),
    responses(
        (status = 200, description = "Every partition's bounds, cursors and backlog, in order", body = schema::TopicDetail),
        (status = 400, description = "`invalid_name`", body = schema::ErrorBody),
        (status = 401, description = "`unauthorized`", body = schema::ErrorBody),
        (status = 503, description = "`unavailable`; or `overloaded`: every open partition is busy, nothing changed, retry after `Retry-After` seconds", body = schema::ErrorBody, headers(("Retry-After" = u32, description = "With `overloaded`: seconds to wait before retrying"))),
    )
)]
pub async fn topic(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let details: Vec<_> = state
        .log
        .describe_topic(&topic)
        .await?
        .into_iter()
        .map(|detail| {
            json!({
                "partition": detail.partition,
                "oldestOffset": detail.bounds.oldest_offset,
                "hotOffset": detail.bounds.hot_offset,
                "nextOffset": detail.bounds.next_offset,
                "cursors": detail.cursors,
                "pendingDeliveries": detail.pending_deliveries,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "name": topic.as_str(), "partitions": details })))
}
