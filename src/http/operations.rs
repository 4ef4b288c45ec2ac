//! Operations: bounds, load, trim, cold forget, topics, health.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::request::{json_body, offset, partition};
use super::{ApiError, HttpState};

/// `GET /healthz`: `{"status": "ok"}`, without auth.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// `GET /topics/{topic}/partitions/{partition}/bounds`.
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
pub async fn load(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    Ok(HttpResponse::Ok().json(state.log.load(&topic, partition(&index)?).await?))
}

/// `POST /topics/{topic}/partitions/{partition}/trim`: `{"removed": n}`.
pub async fn trim(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let removed = state.log.trim(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(json!({ "removed": removed })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetBody {
    before: i64,
}

/// `POST /topics/{topic}/partitions/{partition}/cold/forget` with `{"before": n}`:
/// `{"forgotten": count}`.
pub async fn forget_cold(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let body: ForgetBody = json_body(body, state.max_body_bytes).await?;
    let forgotten = state
        .log
        .forget_cold_before(&topic, index, offset(body.before, "before")?)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "forgotten": forgotten })))
}

/// `GET /topics`: topics with at least one written partition, by name.
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
pub async fn topic(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let partitions = state.log.partitions(&topic)?;
    let mut details = Vec::with_capacity(partitions as usize);
    for index in 0..partitions {
        let bounds = state.log.bounds(&topic, index).await?;
        let cursors = state.log.cursors(&topic, index).await?;
        let pending = state
            .log
            .load(&topic, index)
            .await?
            .outbound
            .pending_deliveries;
        details.push(json!({
            "partition": index,
            "oldestOffset": bounds.oldest_offset,
            "hotOffset": bounds.hot_offset,
            "nextOffset": bounds.next_offset,
            "cursors": cursors,
            "pendingDeliveries": pending,
        }));
    }
    Ok(HttpResponse::Ok().json(json!({ "name": topic.as_str(), "partitions": details })))
}
