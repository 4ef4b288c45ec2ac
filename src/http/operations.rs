//! Operations: bounds, load, trim, cold forget, topics, a topic's groups, health.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::ErrorBody;
use super::forward::forwarded;
use super::params;
use super::request::{Query, json_body, offset, partition};
use super::{ApiError, HttpState};
use crate::wire::{
    Bounds, ForgetBody, Forgotten, PartitionDetail, TopicDetail, TopicGroups, TopicSummary, Topics,
    Trimmed,
};

/// `200` of `GET /healthz`.
#[derive(Serialize, ToSchema)]
struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    status: &'static str,
}

/// `GET /cluster`: the members of this node's cluster, the volumes each owns, and what is
/// moving, as this node last read them from etcd.
#[utoipa::path(
    get,
    path = "/cluster",
    tag = "operations",
    operation_id = "getCluster",
    summary = "The cluster's members and who owns which volume",
    responses(
        (status = 200, description = "The cluster as this node sees it", body = crate::cluster::ClusterStatus),
        (status = 404, description = "`not_found`: this node is not in a cluster", body = ErrorBody),
    )
)]
pub async fn cluster(state: web::Data<HttpState>) -> Result<HttpResponse, ApiError> {
    let cluster = state.log.cluster().ok_or_else(|| {
        ApiError::new(
            crate::error::ErrorCode::NotFound,
            "this node is not in a cluster (cluster.etcd_endpoints is empty)",
        )
    })?;
    Ok(HttpResponse::Ok().json(cluster.status()))
}

/// `GET /healthz`: `{"status": "ok"}`, without auth.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    summary = "Health check (no token needed)",
    responses(
        (status = 200, description = "The server is up", body = Health),
    )
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health { status: "ok" })
}

/// `GET /topics/{topic}/partitions/{partition}/bounds`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/bounds",
    tag = "operations",
    operation_id = "getBounds",
    summary = "A partition's offsets",
    params(params::PartitionPath),
    responses(
        (status = 200, description = "The bounds", body = Bounds),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn bounds(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let bounds = state.log.bounds(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(Bounds::from(bounds)))
}

/// `GET /topics/{topic}/partitions/{partition}/load`.
#[utoipa::path(
    get,
    path = "/topics/{topic}/partitions/{partition}/load",
    tag = "operations",
    operation_id = "getLoad",
    summary = "A partition's load snapshot",
    params(params::PartitionPath),
    responses(
        (status = 200, description = "The load snapshot", body = crate::load::LoadSnapshot),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
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
    params(params::PartitionPath),
    responses(
        (status = 200, description = "How many records left the hot window", body = Trimmed),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the cold store failed; passes already completed stay done, the failed pass removed nothing", body = ErrorBody),
    )
)]
pub async fn trim(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let removed = state.log.trim(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(Trimmed { removed }))
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
    params(params::PartitionPath),
    responses(
        (status = 200, description = "How many segments were forgotten", body = Forgotten),
        (status = 400, description = "`invalid_request`, `invalid_name` or `invalid_offset`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
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
        .forget_cold_before(&topic, index, offset(body.before.0)?)
        .await?;
    Ok(HttpResponse::Ok().json(Forgotten { forgotten }))
}

/// `GET /topics?after=&limit=`: a page of the topics with at least one written partition, by
/// name.
#[utoipa::path(
    get,
    path = "/topics",
    tag = "operations",
    operation_id = "listTopics",
    summary = "The topics with data, a page at a time",
    description = "Topics with at least one written partition, sorted by name: the first `limit` \
        whose names sort after `after`. `next` is the last name of the page when more may follow \
        (pass it as `after`), `null` at the end. A topic created between two pages appears at \
        most once, and none that existed throughout is skipped.",
    params(params::TopicsQuery),
    responses(
        (status = 200, description = "A page of topics, sorted by name", body = Topics),
        (status = 400, description = "`invalid_request`: `limit` out of range, or `after` not a topic name", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn topics(
    state: web::Data<HttpState>,
    request: HttpRequest,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(request.query_string())?;
    let (after, limit) = (query.text("after"), query.limit()?);
    // A node of the cluster lists the topics of the volumes held here only.
    let page = if forwarded(&request) {
        state.log.topics_page_held(after, limit).await?
    } else {
        state.log.topics_page(after, limit).await?
    };
    // A page may hold fewer than `limit` topics once those hidden from the caller are left
    // out; `next` goes on from the last one listed or hidden.
    let topics = page
        .topics
        .into_iter()
        .filter(|topic| caller.sees(&topic.name))
        .map(|topic| TopicSummary {
            name: topic.name,
            partitions: topic.partitions,
        })
        .collect();
    Ok(HttpResponse::Ok().json(Topics {
        topics,
        next: page.next,
    }))
}

/// `GET /topics/{topic}`: every partition's bounds, cursors and backlog.
#[utoipa::path(
    get,
    path = "/topics/{topic}",
    tag = "operations",
    operation_id = "getTopic",
    summary = "A topic's partitions",
    params(params::TopicPath),
    responses(
        (status = 200, description = "Every partition's bounds, cursors and backlog, in order", body = TopicDetail),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn topic(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    // A node of the cluster describes the partitions held here only.
    let details = if forwarded(&request) {
        state.log.describe_held(&topic).await?
    } else {
        state.log.describe_topic(&topic).await?
    };
    Ok(HttpResponse::Ok().json(TopicDetail {
        name: topic.into_inner(),
        partitions: details.into_iter().map(PartitionDetail::from).collect(),
    }))
}

/// `GET /topics/{topic}/groups`: every group of the topic, per partition, with its lag history.
#[utoipa::path(
    get,
    path = "/topics/{topic}/groups",
    tag = "operations",
    operation_id = "getTopicGroups",
    summary = "A topic's groups: cursor, lag and lag history per partition",
    description = "Every group with a cursor or a lease on a partition of the topic, by name, \
        and for each partition its cursor, the partition's next offset, its lag and lease \
        counts, and its lag over time: one sample per `sampleIntervalMs` \
        (`metrics.lag_sample_ms`), the last 180 kept, for the groups of the first \
        `metrics.max_topics` topics sampled on the node holding the partition (others have no \
        `history`). A partition that closed keeps its last lag in each sample. \
        `deadLetterTopic` is where the topic's leases send the ranges past `maxAttempts`.",
    params(params::TopicPath),
    responses(
        (status = 200, description = "The topic's groups, by name", body = TopicGroups),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn groups(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    // A node of the cluster answers for the partitions held here only.
    let positions = if forwarded(&request) {
        state.log.group_summary_held(&topic).await?
    } else {
        state.log.group_summary(&topic).await?
    };
    let config = state.log.config();
    let leases = config.topic_leases(&topic);
    let dead_letter_topic = (leases.enabled && !leases.dead_letter_topic.is_empty())
        .then(|| leases.dead_letter_topic.clone());
    let interval = config.metrics.lag_sample_ms;
    let answer = TopicGroups::of(topic.into_inner(), dead_letter_topic, interval, &positions);
    Ok(HttpResponse::Ok().json(answer))
}
