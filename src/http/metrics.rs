//! Metrics: the `GET /metrics` scrape, the middleware that times every request, and
//! [`Metrics`], the server's counts (`families.rs`).

mod families;

pub use families::Metrics;

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use super::{ApiError, HttpState};
use crate::error::Error;

/// The media type of the Prometheus text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`: every metric in the Prometheus text format, with the consumer-lag and lease
/// gauges refreshed from the log first. Rendered on the blocking pool, so a scrape never holds
/// an HTTP worker (and the `/healthz` behind it) for its length.
pub async fn metrics(state: web::Data<HttpState>) -> Result<HttpResponse, ApiError> {
    state.metrics.refresh(&state.log).await;
    let metrics = state.metrics.clone();
    let text = web::block(move || metrics.render()).await.map_err(|err| {
        Error::unavailable(None, "the metrics cannot be rendered", Some(err.into()))
    })?;
    Ok(HttpResponse::Ok().content_type(TEXT_FORMAT).body(text))
}

/// Times every request it wraps, rejected ones included, into
/// `durability_http_request_duration_seconds`. The route label is the matched pattern, which
/// is the path the OpenAPI document writes (`/topics/{topic}`), or `unmatched`, and the method
/// label one of the standard methods or `other`, so neither topic names nor invented methods
/// multiply the series.
pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let metrics = request
        .app_data::<web::Data<HttpState>>()
        .map(|state| state.metrics.clone());
    let method = method_label(request.method());
    let result = next.call(request).await;
    if let Some(metrics) = metrics {
        // Asked once routing is done: the request then knows its resource, so the pattern is
        // read back rather than matched again (which was a tenth of a small append's CPU).
        let (route, status) = match &result {
            Ok(response) => (response.request().match_pattern(), response.status()),
            Err(err) => (None, err.as_response_error().status_code()),
        };
        let route = route.as_deref().unwrap_or("unmatched");
        metrics.request(method, route, status, started.elapsed());
    }
    result
}

/// The `method` label of a request: its method when it is one of HTTP's standard ones, else
/// `other` (any token is a valid method, and each label value is a series kept forever).
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
    ];
    STANDARD
        .into_iter()
        .find(|standard| *standard == method.as_str())
        .unwrap_or("other")
}
