//! The REST server: every route of the API (the README's REST API section, and the document
//! served at `/openapi.json`) mapped onto [`Log`].
//!
//! Handlers parse and validate the request, call one `Log` method, and shape the answer;
//! [`error`] is the only place that knows status codes. Bodies are read with a size limit
//! (`413 payload_too_large`) and decoded here, so malformed JSON, wrong types and missing
//! fields all answer `400 invalid_request` in the contract's JSON error shape.

pub(crate) mod auth;
mod console;
mod consume;
pub mod error;
mod forward;
mod leases;
pub mod metrics;
pub mod openapi;
mod operations;
mod params;
mod produce;
pub(crate) mod request;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers, Next, from_fn};
use actix_web::{HttpResponse, ResponseError, web};

pub use error::ApiError;

/// Calls `$then!` with every route of the API but the two that are served apart (`/healthz`,
/// outside authentication and timing, and `/metrics`, which is Prometheus text): each path
/// with the method and handler (`module::function`, under `crate::http`) of every operation
/// on it. The one list: [`service_with_metrics`] registers these routes from it, and the
/// OpenAPI document lists the same handlers, whose `#[utoipa::path]` states each path again
/// for the document (a test checks that every documented route is served).
///
/// The router tries the paths in this order, each with a parameter costing a regular
/// expression's captures, so the busiest (appends and reads) come first.
macro_rules! api_routes {
    ($then:ident) => {
        $then! {
            "/topics/{topic}/partitions/{partition}/records" =>
                post produce::records as produce, get consume::read as consume;
            "/topics/{topic}/records" => post produce::events as produce;
            "/openapi.json" => get openapi::openapi as signed;
            "/topics" => get operations::topics as signed;
            "/topics/{topic}" => get operations::topic as consume;
            "/topics/{topic}/groups" => get operations::groups as consume;
            "/topics/{topic}/groups/{group}/poll" => get consume::poll as consume;
            "/topics/{topic}/groups/{group}/commit" => post consume::commit as consume;
            "/topics/{topic}/partitions/{partition}/cursors" => get consume::cursors as consume;
            "/topics/{topic}/partitions/{partition}/cursors/{group}" =>
                put consume::put_cursor as consume, get consume::get_cursor as consume,
                delete consume::delete_cursor as admin;
            "/topics/{topic}/groups/{group}/leases" => post leases::claim_any as consume;
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases" =>
                post leases::claim as consume, get leases::list as consume;
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack" =>
                post leases::ack as consume;
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack" =>
                post leases::nack as consume;
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/extend" =>
                post leases::extend as consume;
            "/topics/{topic}/partitions/{partition}/redrive" => post leases::redrive as consume;
            "/topics/{topic}/partitions/{partition}/bounds" => get operations::bounds as consume;
            "/topics/{topic}/partitions/{partition}/load" => get operations::load as consume;
            "/topics/{topic}/partitions/{partition}/trim" => post operations::trim as admin;
            "/topics/{topic}/partitions/{partition}/cold/forget" =>
                post operations::forget_cold as admin;
            "/cluster" => get operations::cluster as admin;
        }
    };
}
pub(crate) use api_routes;

/// Defines `register_routes`, which registers every route of [`api_routes`], one resource per
/// path.
macro_rules! register_routes {
    ($($path:literal => $($method:ident $module:ident :: $handler:ident as $need:ident),+;)*) => {
        fn register_routes(cfg: &mut web::ServiceConfig) {
            cfg$(.service(web::resource($path)$(.$method(crate::http::$module::$handler))+))*;
        }
    };
}
api_routes!(register_routes);

use crate::error::ErrorCode;
use crate::log::Log;
use metrics::Metrics;

/// What every handler shares.
#[derive(Clone)]
pub struct HttpState {
    log: Log,
    /// Whether `GET /metrics` answers without a token (`auth.metrics_public`).
    metrics_public: bool,
    max_body_bytes: usize,
    /// Longest wait for a request's body (`server.request_timeout_ms`).
    request_timeout: std::time::Duration,
    /// Longest long-poll wait (`server.max_wait_ms`).
    max_wait: std::time::Duration,
    metrics: Metrics,
    /// In a cluster with a secret: its hash, which another node's requests carry (see
    /// `auth.rs`).
    node_secret: Option<crate::auth::TokenHash>,
    /// `GET /openapi.json`'s answer, the document of this server's configuration, written on
    /// first request.
    openapi: std::sync::OnceLock<web::Bytes>,
}

impl HttpState {
    /// The state for serving `log` with its configuration's `[server]` settings, counting into
    /// fresh [`Metrics`].
    pub fn new(log: Log) -> Self {
        let metrics = Metrics::for_log(&log);
        Self::with_metrics(log, metrics)
    }

    /// What a request body may take: its largest size and the longest wait for it.
    fn body_limits(&self) -> (usize, std::time::Duration) {
        (self.max_body_bytes, self.request_timeout)
    }

    /// The same, counting into `metrics` (shared by every worker of one server).
    pub fn with_metrics(log: Log, metrics: Metrics) -> Self {
        let config = log.config();
        let server = &config.server;
        let metrics_public = config.auth.metrics_public;
        let max_body_bytes = server.max_body_bytes;
        let request_timeout = std::time::Duration::from_millis(server.request_timeout_ms);
        let max_wait = std::time::Duration::from_millis(server.max_wait_ms);
        let node_secret = Some(config.cluster.node_secret(&server.auth_token))
            .filter(|secret| config.cluster.enabled() && !secret.is_empty())
            .map(crate::auth::token_hash);
        Self {
            metrics_public,
            log,
            max_body_bytes,
            request_timeout,
            max_wait,
            metrics,
            node_secret,
            openapi: std::sync::OnceLock::new(),
        }
    }
}

/// Registers every route, the shared state, bearer-token auth and the JSON 404 on an
/// actix-web `App`: `App::new().configure(http::service(log))`.
///
/// Each call counts into its own [`Metrics`]; an `HttpServer`, which calls its app factory
/// once per worker, shares one through [`service_with_metrics`].
pub fn service(log: Log) -> impl FnOnce(&mut web::ServiceConfig) {
    let metrics = Metrics::for_log(&log);
    service_with_metrics(log, metrics)
}

/// [`service`], counting into `metrics`. Every request but `/healthz` is timed, rejected
/// ones included.
pub fn service_with_metrics(log: Log, metrics: Metrics) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(HttpState::with_metrics(log, metrics)));
        // Outside the scope below: no token, no timing. Its other methods are 405 too.
        cfg.service(
            web::resource("/healthz")
                .wrap(
                    ErrorHandlers::new()
                        .handler(StatusCode::METHOD_NOT_ALLOWED, method_not_allowed),
                )
                .get(operations::healthz)
                .head(operations::healthz),
        );
        // The console's static files: no token (the page asks for one), no timing.
        cfg.configure(console::register);
        cfg.service(
            web::scope("")
                .wrap(from_fn(forward::to_owner))
                .wrap(from_fn(refuse_declared_oversize))
                .wrap(
                    ErrorHandlers::new()
                        .handler(StatusCode::METHOD_NOT_ALLOWED, method_not_allowed),
                )
                .wrap(from_fn(auth::authenticate))
                .wrap(from_fn(metrics::observe))
                // One resource per path, so a known path with a method it does not serve is
                // answered 405 with `Allow` (a route per method would answer 404).
                .service(web::resource("/metrics").get(metrics::metrics))
                .configure(register_routes)
                .default_service(web::to(not_found)),
        );
    }
}

/// A body whose declared `Content-Length` exceeds `server.max_body_bytes` is refused with
/// `413` before any of it is read.
async fn refuse_declared_oversize(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let limit = request
        .app_data::<web::Data<HttpState>>()
        .map_or(usize::MAX, |state| state.max_body_bytes);
    let declared = request
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|declared| declared > limit as u64) {
        let response = request::too_large(limit).error_response();
        return Ok(request.into_response(response).map_into_right_body());
    }
    Ok(next.call(request).await?.map_into_left_body())
}

/// actix-web answers a known path's unserved method `405` with `Allow` and no body: give it
/// the contract's error shape, keeping `Allow`.
fn method_not_allowed<B>(
    response: ServiceResponse<B>,
) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let (request, answered) = response.into_parts();
    let mut shaped = ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("{} is not served on this path", request.method()),
    )
    .error_response();
    if let Some(allow) = answered.headers().get(actix_web::http::header::ALLOW) {
        shaped
            .headers_mut()
            .insert(actix_web::http::header::ALLOW, allow.clone());
    }
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(request, shaped).map_into_right_body(),
    ))
}

async fn not_found() -> HttpResponse {
    ApiError::new(ErrorCode::NotFound, "no such route").error_response()
}
