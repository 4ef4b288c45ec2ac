//! Forwarding in a cluster: a request for a partition whose volume another node owns goes to
//! that node once, and its answer comes back as it is.
//!
//! A forwarded request carries [`FORWARDED`], so the node it reaches serves it or answers
//! `421 not_owner` (it does not own the volume any more), never forwards it again. The
//! forwarder then reads the owners again and retries once, as it does when the owner could not
//! be connected to; a volume with no owner (its node failed, and another is taking it) is
//! answered `503 unavailable` with `Retry-After`. A request that reached the owner but has no
//! answer yet when the owner loses the volume (its node is cut off, and its lease expired) is
//! answered `503` at once: it may have been applied, so the client, not the forwarder, sends it
//! again (with its deduplication key).

use std::sync::atomic::Ordering;

use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError, web};
use futures_util::StreamExt;

use super::HttpState;
use super::error::ApiError;
use crate::cluster::placement::volume_of;
use crate::cluster::{Cluster, Route};
use crate::error::ErrorCode;
use crate::names::PartitionId;

pub use crate::cluster::peer::FORWARDED;
use crate::cluster::peer::{NODE_SECRET, NodeClient};

/// Whether another node of the cluster sent `request`: it is served from what this node
/// holds, never passed on.
pub(crate) fn forwarded(request: &actix_web::HttpRequest) -> bool {
    request.headers().contains_key(FORWARDED)
}

/// Seconds a client is told to wait before retrying a request for a volume being taken.
const RETRY_AFTER_SECS: u32 = 1;

/// Serves a partition's request here when this node holds its volume, else forwards it to the
/// owner (see the module docs). Requests that name no partition are served here.
pub(crate) async fn to_owner(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody, BoxBody>>, actix_web::Error> {
    // Outside a cluster this is all the work a request sees here.
    let routed = request
        .app_data::<web::Data<HttpState>>()
        .and_then(|state| {
            let cluster = state.log.cluster()?;
            let forwarder = state.log.node_client()?.clone();
            let id = partition_of(request.path())?;
            let volume = volume_of(&id, cluster.volume_count());
            Some((cluster.clone(), forwarder, volume, state.max_body_bytes))
        });
    let Some((cluster, forwarder, volume, limit)) = routed else {
        return Ok(next.call(request).await?.map_into_left_body());
    };
    if cluster.route(volume) == Route::Local {
        return Ok(next.call(request).await?.map_into_left_body());
    }
    if request.headers().contains_key(FORWARDED) {
        let refused = ApiError::new(
            ErrorCode::NotOwner,
            format!("this node does not own volume {volume}"),
        )
        .error_response();
        return Ok(request.into_response(refused).map_into_right_body());
    }
    let (http_request, mut payload) = request.into_parts();
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > limit {
            let response = super::request::too_large(limit).error_response();
            return Ok(ServiceResponse::new(http_request, response).map_into_right_body());
        }
        body.extend_from_slice(&chunk);
    }
    let outgoing = Outgoing {
        method: http_request.method().clone(),
        path_and_query: http_request
            .uri()
            .path_and_query()
            .map_or_else(|| http_request.path().to_owned(), ToString::to_string),
        headers: http_request.headers().clone(),
        body: body.freeze(),
    };
    let response = forward(&cluster, &forwarder, &outgoing, volume)
        .await
        .into_response();
    Ok(ServiceResponse::new(http_request, response).map_into_right_body())
}

/// The partition a path names (`/topics/{topic}/partitions/{partition}/...`), if any.
fn partition_of(path: &str) -> Option<PartitionId> {
    let mut parts = path.strip_prefix("/topics/")?.split('/');
    let topic = parts.next()?;
    if parts.next()? != "partitions" {
        return None;
    }
    let index = parts.next()?.parse().ok()?;
    PartitionId::new(topic, index).ok()
}

/// A request to send to another node.
pub(crate) struct Outgoing {
    pub method: actix_web::http::Method,
    /// The path and query, as the client sent them.
    pub path_and_query: String,
    /// The client's headers (its token among them).
    pub headers: actix_web::http::header::HeaderMap,
    pub body: web::Bytes,
}

/// An answer of another node, passed back as it is.
pub(crate) struct Answer {
    pub status: u16,
    headers: Vec<(HeaderName, HeaderValue)>,
    pub body: web::Bytes,
}

impl Answer {
    pub(crate) fn into_response(self) -> HttpResponse {
        let status = actix_web::http::StatusCode::from_u16(self.status)
            .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
        let mut response = HttpResponse::build(status);
        for header in self.headers {
            response.append_header(header);
        }
        response.body(self.body)
    }

    /// `503 unavailable` with `Retry-After`: volume `volume` has no owner that answers now.
    pub(crate) fn no_owner(volume: usize) -> Self {
        Self::unavailable(&format!(
            "volume {volume}, which holds this partition, has no reachable owner now"
        ))
    }

    /// `503 unavailable` with `Retry-After`, saying `why`.
    pub(crate) fn unavailable(why: &str) -> Self {
        let error = ApiError::new(ErrorCode::Unavailable, why);
        let body = serde_json::to_vec(&error.body()).expect("an error serializes");
        Self {
            status: ErrorCode::Unavailable.status(),
            headers: vec![
                (header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS)),
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
            ],
            body: body.into(),
        }
    }
}

/// Sends `outgoing` to volume `volume`'s owner; reads the owners again and retries once when
/// it is not there.
pub(crate) async fn forward(
    cluster: &Cluster,
    forwarder: &NodeClient,
    outgoing: &Outgoing,
    volume: usize,
) -> Answer {
    let counters = cluster.counters();
    for attempt in 0..2 {
        if attempt > 0 && cluster.refresh().await.is_err() {
            break;
        }
        let url = match cluster.route(volume) {
            Route::Remote(url) => url,
            // Taken by this node meanwhile: the client retries here.
            Route::Local | Route::Unowned => continue,
        };
        counters.forwards.fetch_add(1, Ordering::Relaxed);
        let sent = tokio::select! {
            sent = send(forwarder, &url, outgoing) => Some(sent),
            () = cluster.until_moved_from(volume, &url) => None,
        };
        match sent {
            Some(Ok(Some(answer))) => return answer,
            // Not applied there: the next attempt goes where the volume is now.
            Some(Ok(None)) => {}
            Some(Err(err)) if err.is_connect() => {
                log::debug!("cluster: cannot connect to {url}: {err}");
            }
            Some(Err(err)) => {
                log::debug!("cluster: forwarding to {url} failed: {err}");
                break;
            }
            None => {
                log::debug!("cluster: volume {volume} moved from {url} while a request waited");
                break;
            }
        }
    }
    counters.forward_failures.fetch_add(1, Ordering::Relaxed);
    Answer::no_owner(volume)
}

/// Headers that belong to one connection, not to the request or answer (RFC 9110, 7.6.1).
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "trailer"
            | "host"
            | "content-length"
    )
}

/// Sends `outgoing` to the node at `url`: its answer, or `None` when that node does not own the
/// volume (`421`).
pub(crate) async fn send(
    forwarder: &NodeClient,
    url: &str,
    outgoing: &Outgoing,
) -> Result<Option<Answer>, reqwest::Error> {
    let method = reqwest::Method::from_bytes(outgoing.method.as_str().as_bytes())
        .unwrap_or(reqwest::Method::GET);
    let target = format!("{url}{}", outgoing.path_and_query);
    let mut request = forwarder
        .request(method, &target)
        .body(outgoing.body.clone());
    for (name, value) in &outgoing.headers {
        // The node's own marks are the forwarder's to set, never a client's to pass on.
        let marks = [FORWARDED, NODE_SECRET].contains(&name.as_str());
        if !hop_by_hop(name.as_str()) && !marks {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = request.send().await?;
    let status = answer.status().as_u16();
    if status == ErrorCode::NotOwner.status() {
        return Ok(None);
    }
    let headers = answer
        .headers()
        .iter()
        .filter(|(name, _)| !hop_by_hop(name.as_str()))
        .filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_str().as_bytes()).ok()?;
            Some((name, HeaderValue::from_bytes(value.as_bytes()).ok()?))
        })
        .collect();
    let body = answer.bytes().await?;
    Ok(Some(Answer {
        status,
        headers,
        body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the paths of one partition are routed; topic-wide ones are served where they
    /// arrive.
    #[test]
    fn partition_paths_are_recognised() {
        let id = partition_of("/topics/orders/partitions/3/records").unwrap();
        assert_eq!(id.to_string(), "orders:3");
        assert!(partition_of("/topics/orders/partitions/3").is_some());
        assert!(partition_of("/topics/orders/records").is_none());
        assert!(partition_of("/topics/orders/groups/g/poll").is_none());
        assert!(partition_of("/topics/orders/partitions/x/records").is_none());
        assert!(partition_of("/cluster").is_none());
    }
}
